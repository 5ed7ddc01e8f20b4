"""Memory scopes: every scope ever written (newest change first); one scope's files, changelog and undo depth;
delete a file or the whole scope, undo the newest change — each like the admin API, and audited."""

from __future__ import annotations

from flask import abort, request
from werkzeug.wrappers import Response

from console.web import bp, done, operator, page, record, rt, window
from memory.scopes import keys as scope_keys
from memory.scopes.part import store_of
from memory.scopes.paths import PathError, Scope


def _scope(kind: str, ident: str) -> Scope:
    try:
        return Scope.parse(f"{kind}/{ident}")
    except PathError:
        abort(404)


@bp.get("/memory")
def memory() -> str:
    x = rt()
    win = window(total=x.state.zcard(scope_keys.memory_scopes(x.keys)))
    rows = store_of(x).scopes(win.offset, win.limit)
    return page("memory.html", rows=rows, win=win)


@bp.get("/memory/<kind>/<ident>")
def scope(kind: str, ident: str) -> str:
    where = _scope(kind, ident)
    store = store_of(rt())
    files = sorted(store.files(where).values(), key=lambda f: f.path)
    return page("scope.html", scope=where, files=files, version=store.version(where), log=store.log(where),
                undoable=store.undoable(where))


@bp.post("/memory/<kind>/<ident>/delete")
def delete(kind: str, ident: str) -> Response:
    where = _scope(kind, ident)
    path = request.form.get("path", "")
    gone = store_of(rt()).delete(where, f"console:{operator().who}", path)
    target = f"{where.name}{'/' + path if path else ''}"
    record("delete", target, "ok" if gone else "nothing")
    message = f"已删除 {', '.join(gone)}（可撤销）" if gone else "没有可删除的内容"
    return done("console.scope", message, ok=bool(gone), kind=kind, ident=ident)


@bp.post("/memory/<kind>/<ident>/undo")
def undo(kind: str, ident: str) -> Response:
    where = _scope(kind, ident)
    what = store_of(rt()).undo(where, f"console:{operator().who}")
    record("undo", where.name, "ok" if what is not None else "nothing")
    message = f"已撤销：{what}" if what is not None else "没有可撤销的改动"
    return done("console.scope", message, ok=what is not None, kind=kind, ident=ident)
