"""Routes: the newest first, or those of one chat, person or topic (the indexes a run writes as it takes events);
one route's policy, session chain, last turns with what they fetched, included and left pending, its pending
and in-turn messages, timers, memory and item."""

from __future__ import annotations

import json
from typing import Any

from flask import abort, request

from console.web import bp, event_view, page, rt, window
from routing.keys import kind_of
from timers import timers_of

RECENT_TURNS = 10
SHOWN_MESSAGES = 20


@bp.get("/routes")
def routes() -> str:
    r, keys = rt().state, rt().keys
    q = request.args.get("q", "").strip()
    if q.startswith("feishu:"):
        found = [q] if r.exists(keys.route_state(q), keys.inbox(q), keys.sessions(q)) else []
        return page("routes.html", q=q, rows=_rows(found), win=window(total=len(found)))
    index = keys.routes_of(q) if q else keys.routes
    rt().inbox.trim_index(index)  # routes past their retention leave the index when it is read, not per event
    win = window(total=r.zcard(index))
    found = [str(rk) for rk in r.zrevrange(index, win.offset, win.offset + win.limit - 1)]
    return page("routes.html", q=q, rows=_rows(found), win=win)


def _rows(route_keys: list[str]) -> list[dict[str, Any]]:
    r, keys = rt().state, rt().keys
    pipe = r.pipeline(transaction=False)
    for rk in route_keys:
        pipe.zscore(keys.routes, rk)
        pipe.llen(keys.inbox(rk))
        pipe.llen(keys.proc(rk))
        pipe.get(keys.lease(rk))
        pipe.hget(keys.route_state(rk), "sid")
    got = pipe.execute()
    return [{"route_key": rk, "kind": _kind(rk), "last": got[i * 5], "pending": got[i * 5 + 1],
             "in_turn": got[i * 5 + 2], "lease": lease_state(got[i * 5 + 3]), "session_id": got[i * 5 + 4] or ""}
            for i, rk in enumerate(route_keys)]


def _kind(rk: str) -> str:
    try:
        return kind_of(rk)
    except (ValueError, IndexError):
        return "?"


def lease_state(value: str | None) -> str:
    if not value:
        return "free"
    return {"k:": "queued", "d:": "backoff"}.get(value[:2], "running")


@bp.get("/routes/<path:route_key>")
def route(route_key: str) -> str:
    if not route_key.startswith("feishu:") or _kind(route_key) == "?":
        abort(404)
    r, keys, x = rt().state, rt().keys, rt()
    state = x.sessions.state(route_key)
    sessions = [s.public() for s in x.sessions.all(route_key)]
    pipe = r.pipeline(transaction=False)
    pipe.lrange(keys.inbox(route_key), 0, SHOWN_MESSAGES - 1)
    pipe.llen(keys.inbox(route_key))
    pipe.lrange(keys.proc(route_key), 0, SHOWN_MESSAGES - 1)
    pipe.get(keys.lease(route_key))
    pipe.hgetall(keys.fails(route_key))
    pipe.lrange(keys.session_log(route_key, state.session_id or "-"), -RECENT_TURNS * 2, -1)
    inbox, pending_n, proc, lease, fails, log = pipe.execute()
    item = x.items.of_route(route_key)
    return page("route.html", rk=route_key, kind=_kind(route_key), state=state, sessions=sessions[::-1],
                pending=[event_view(raw) for raw in inbox], pending_n=pending_n,
                in_turn=[event_view(raw) for raw in proc],
                lease=lease_state(lease), fails=fails, turns=[_turn(raw) for raw in log][::-1],
                timers=[t.public() for t in timers_of(x).pending_of(route_key, kind=None)],
                item=item.item_id if item else None, scopes=_scopes(route_key, item.item_id if item else None),
                rules=_rules(route_key), queue=x.queue_of(route_key))


def _turn(raw: str) -> dict[str, Any]:
    e = json.loads(raw)
    recall = e.get("recall") or {}
    return {"role": e.get("role"), "kind": e.get("kind"), "at": e.get("at"), "text": str(e.get("text", ""))[:1500],
            "batch_id": e.get("batch_id"), "senders": e.get("senders") or [], "tokens": e.get("tokens"),
            "fetched": recall.get("fetched") or [], "included": recall.get("included") or [],
            "pending": recall.get("pending") or []}


def _scopes(rk: str, item_id: str | None) -> list[str]:
    """The memory scopes a turn of this route reads: its chat's, the route's person (per-sender and p2p routes),
    its item's. A shared topic's people are whoever sends the batch, so they are not listed here."""
    parts = rk.split(":")
    kind, chat = parts[2], parts[3] if len(parts) > 3 else ""
    found = [f"chats/{chat}"] if kind in ("p2p", "group", "topic") and chat else []
    person = parts[4] if kind == "group" and len(parts) > 4 else (parts[5] if kind == "topic" and len(parts) > 5
                                                                  else "")
    found += [f"people/{person}"] if person else []
    return found + ([f"items/{item_id}"] if item_id else [])


def _rules(rk: str) -> dict[str, Any]:
    parts = rk.split(":")
    if len(parts) < 4 or parts[2] not in ("p2p", "group", "topic"):
        return {}
    rules = rt().policy.for_chat(parts[3])
    return {"group_scope": rules.group_scope, "topic_scope": rules.topic_scope,
            "require_mention": rules.require_mention, "override": parts[3] in rt().policy.overrides}
