"""Dead letters: each batch with its error, route, messages and attempts; Replay puts it back once, Discard drops
it once (a second of either, or one after the other, is refused and changes nothing)."""

from __future__ import annotations

from typing import Any

from werkzeug.wrappers import Response

from console.web import bp, done, event_view, page, record, rt, window
from jobs import deadletter

SAID = {"replayed": "已重放，会照常回复", "already-replayed": "已经处理过了（重放或丢弃），没有再次重放",
        "unknown": "没有这条死信", "discarded": "已丢弃（保留 7 天可查）",
        "already-handled": "已经处理过了（重放或丢弃），没有改动"}


@bp.get("/deadletters")
def deadletters() -> str:
    x = rt()
    win = window(total=x.state.zcard(x.keys.dead_order))
    rows = [_row(rec) for rec in deadletter.records(x, limit=win.limit, offset=win.offset)]
    return page("deadletters.html", rows=rows, win=win)


def _row(rec: dict[str, Any]) -> dict[str, Any]:
    events = [event_view(raw) for raw in rec.get("events", [])[:5]]
    return {**deadletter.summary(rec), "shown": events}


@bp.post("/deadletters/<dead_id>/replay")
def replay(dead_id: str) -> Response:
    result = deadletter.replay(rt(), dead_id)
    record("replay", dead_id, result if result != "replayed" else "ok")
    return done("console.deadletters", f"{dead_id}：{SAID[result]}", ok=result == "replayed")


@bp.post("/deadletters/<dead_id>/discard")
def discard(dead_id: str) -> Response:
    result = deadletter.discard(rt(), dead_id)
    record("discard", dead_id, result if result != "discarded" else "ok")
    return done("console.deadletters", f"{dead_id}：{SAID[result]}", ok=result == "discarded")
