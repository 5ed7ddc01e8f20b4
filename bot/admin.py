"""The admin API (`/admin/api/*`, Bearer ADMIN_TOKEN): dead letters, route state, items, timers, memory scopes. Redis
only, as all web code.

Without ADMIN_TOKEN every admin path answers 404, as if it did not exist. The token is compared in
constant time; a missing or wrong one gets 401, and the 11th wrong one from a client within ten minutes 429 (one
limit with the console's token form: console/lockout.py). The right token is never locked out.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from functools import wraps
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request

from console import audit, lockout
from jobs import deadletter
from memory.scopes.part import store_of
from memory.scopes.paths import PathError, Scope
from memory.sessions import Sessions
from runs.runtime import Runtime
from timers import timers_of

bp = Blueprint("admin", __name__, url_prefix="/admin/api")
RESULT_STATUS = {"replayed": 200, "already-replayed": 409, "unknown": 404}


def _runtime() -> Runtime:
    return current_app.extensions["admin_runtime"]


def _token_ok() -> bool:
    expected = _runtime().settings.secret("admin_token").encode()
    given = request.headers.get("Authorization", "")
    scheme, _, token = given.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), expected)


def guarded(view: Callable[..., tuple[Response, int]]) -> Callable[..., tuple[Response, int]]:
    @wraps(view)
    def wrapper(*args: Any, **kwargs: Any) -> tuple[Response, int]:
        if not _runtime().settings.secret("admin_token"):
            return jsonify(error="not found"), 404
        right = _token_ok()
        wait = lockout.refusal(_runtime(), right)
        if wait:
            response = jsonify(error=f"too many wrong admin tokens: try again in {wait} s", retry_after=wait)
            response.headers["Retry-After"] = str(wait)
            return response, 429
        if not right:
            response = jsonify(error="missing or wrong admin token")
            response.headers["WWW-Authenticate"] = "Bearer"
            return response, 401
        return view(*args, **kwargs)

    return wrapper


@bp.get("/deadletters")
@guarded
def list_dead_letters() -> tuple[Response, int]:
    items = [deadletter.summary(r) for r in deadletter.records(_runtime())]
    return jsonify(count=len(items), deadletters=items, replay="POST /admin/api/deadletters/<id>/replay"), 200


@bp.get("/deadletters/<dead_id>")
@guarded
def show_dead_letter(dead_id: str) -> tuple[Response, int]:
    record = deadletter.get(_runtime(), dead_id)
    return (jsonify(record), 200) if record else (jsonify(error=f"no dead letter {dead_id}"), 404)


@bp.post("/deadletters/<dead_id>/replay")
@guarded
def replay_dead_letter(dead_id: str) -> tuple[Response, int]:
    result = deadletter.replay(_runtime(), dead_id)
    _audit("replay", dead_id, "ok" if result == "replayed" else result)
    return jsonify(id=dead_id, result=result), RESULT_STATUS[result]


@bp.get("/routes/<path:route_key>")
@guarded
def route_state(route_key: str) -> tuple[Response, int]:
    rt = _runtime()
    k = rt.keys
    pipe = rt.state.pipeline(transaction=False)
    pipe.llen(k.inbox(route_key))
    pipe.llen(k.proc(route_key))
    pipe.get(k.lease(route_key))
    pipe.zscore(k.dirty, route_key)
    pending, in_turn, lease, dirty = pipe.execute()
    sessions = Sessions(rt.state, k)
    state = sessions.state(route_key)
    entries = rt.state.llen(k.session_log(route_key, state.session_id)) if state.session_id else 0
    return jsonify(
        route_key=route_key, pending=pending, in_turn=in_turn, lease=_lease_state(lease), dirty=dirty is not None,
        session_id=state.session_id, generation=state.generation,
        sessions=[s.public() for s in sessions.all(route_key)], session_entries=entries,
        item_id=item.item_id if (item := rt.items.of_route(route_key)) else None,
    ), 200


@bp.get("/items/<item_id>")
@guarded
def item_view(item_id: str) -> tuple[Response, int]:
    rt = _runtime()
    item = rt.items.get(item_id)
    return (jsonify(rt.items.public(item)), 200) if item else (jsonify(error=f"no item {item_id}"), 404)


@bp.get("/timers")
@guarded
def list_timers() -> tuple[Response, int]:
    """Pending timers by due time (`?route=<route key>` for one route's; `?offset=&limit=` to page)."""
    rt = _runtime()
    route = request.args.get("route", "")
    try:
        offset = max(0, int(request.args.get("offset", 0)))
        limit = min(500, max(1, int(request.args.get("limit", 100))))
    except ValueError:
        return jsonify(error="offset and limit must be whole numbers"), 400
    timers = timers_of(rt).pending_of(route, kind=None) if route else timers_of(rt).page(offset, limit)
    return jsonify(count=len(timers), pending_total=timers_of(rt).pending_count(), now=rt.clock.now(),
                   timers=[t.public() for t in timers], cancel="DELETE /admin/api/timers/<id>"), 200


@bp.get("/timers/<timer_id>")
@guarded
def show_timer(timer_id: str) -> tuple[Response, int]:
    t = timers_of(_runtime()).get(timer_id)
    return (jsonify(t.public()), 200) if t else (jsonify(error=f"no timer {timer_id}"), 404)


@bp.delete("/timers/<timer_id>")
@bp.post("/timers/<timer_id>/cancel")
@guarded
def cancel_timer(timer_id: str) -> tuple[Response, int]:
    """200 cancelled, 404 unknown, 409 no longer pending (fired or cancelled already: nothing changed)."""
    rt = _runtime()
    t = timers_of(rt).get(timer_id)
    if t is None:
        _audit("cancel", timer_id, "unknown")
        return jsonify(error=f"no timer {timer_id}"), 404
    if t.state != "pending" or not timers_of(rt).end(t, "cancelled", "admin", rt.clock.now()):
        _audit("cancel", timer_id, "not-pending")
        return jsonify(id=timer_id, result="not-pending", state=(timers_of(rt).get(timer_id) or t).state), 409
    rt.state.hincrby(rt.keys.metrics, "timers_cancelled|admin", 1)
    _audit("cancel", timer_id, "ok")
    return jsonify(id=timer_id, result="cancelled"), 200


@bp.get("/memory")
@guarded
def list_memory_scopes() -> tuple[Response, int]:
    """Every scope ever written, newest change first (`?offset=&limit=` to page)."""
    try:
        offset = max(0, int(request.args.get("offset", 0)))
        limit = min(500, max(1, int(request.args.get("limit", 100))))
    except ValueError:
        return jsonify(error="offset and limit must be whole numbers"), 400
    scopes = store_of(_runtime()).scopes(offset, limit)
    return jsonify(count=len(scopes), scopes=[{"scope": name, "changed_at": at} for name, at in scopes],
                   show="GET /admin/api/memory/<kind>/<id>"), 200


@bp.get("/memory/<kind>/<ident>")
@guarded
def show_memory(kind: str, ident: str) -> tuple[Response, int]:
    """A scope's files (path, text, author, at, version), its version, changelog and how many undos it holds."""
    scope, error = _scope(kind, ident)
    if scope is None:
        return error
    store = store_of(_runtime())
    version = store.version(scope)
    if not version:
        return jsonify(error=f"nothing was ever remembered in {scope.name}"), 404
    files = [{"path": f.path, "text": f.text, "author": f.author, "at": f.at, "version": f.version}
             for f in sorted(store.files(scope).values(), key=lambda f: f.path)]
    return jsonify(scope=scope.name, version=version, files=files, log=store.log(scope),
                   undoable=store.undoable(scope),
                   delete=f"DELETE /admin/api/memory/{scope.name}[?path=<file>]",
                   undo=f"POST /admin/api/memory/{scope.name}/undo"), 200


@bp.delete("/memory/<kind>/<ident>")
@guarded
def delete_memory(kind: str, ident: str) -> tuple[Response, int]:
    """Every file of the scope, or the one `?path=` names; undoable like any change. 404 when there was nothing."""
    scope, error = _scope(kind, ident)
    if scope is None:
        return error
    path = request.args.get("path", "")
    store = store_of(_runtime())
    gone = store.delete(scope, "admin", path)
    _audit("delete", f"{scope.name}{'/' + path if path else ''}", "ok" if gone else "nothing")
    if not gone:
        return jsonify(error=f"no {path or 'files'} in {scope.name}"), 404
    return jsonify(scope=scope.name, deleted=gone, version=store.version(scope)), 200


@bp.post("/memory/<kind>/<ident>/undo")
@guarded
def undo_memory(kind: str, ident: str) -> tuple[Response, int]:
    """Restores the files the scope's newest change touched; 409 when there is nothing to undo."""
    scope, error = _scope(kind, ident)
    if scope is None:
        return error
    what = store_of(_runtime()).undo(scope, "admin")
    _audit("undo", scope.name, "ok" if what is not None else "nothing")
    if what is None:
        return jsonify(error=f"nothing to undo in {scope.name}"), 409
    return jsonify(scope=scope.name, undone=what), 200


def _audit(what: str, target: str, outcome: str) -> None:
    """Admin API actions go to the operators' audit log beside the console's (who: the token's holder)."""
    rt = _runtime()
    audit.write(rt.state, rt.keys, audit.Done("admin-token", "api", what, target, outcome))


def _scope(kind: str, ident: str) -> tuple[Scope | None, tuple[Response, int]]:
    try:
        return Scope.parse(f"{kind}/{ident}"), (jsonify(), 200)
    except PathError as exc:
        return None, (jsonify(error=f"{exc} (kinds: people/<open_id>, chats/<chat_id>, items/<item_id>)"), 400)


def _lease_state(value: str | None) -> str:
    if not value:
        return "free"
    return {"k:": "queued", "d:": "backoff"}.get(value[:2], "running")


def init_app(app: Any, runtime: Runtime) -> None:
    app.extensions["admin_runtime"] = runtime
    app.register_blueprint(bp)
