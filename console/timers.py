"""Timers: pending follow-ups, digests and triage runs by due time; Cancel ends one that has not fired (once)."""

from __future__ import annotations

from werkzeug.wrappers import Response

from console.web import bp, done, page, record, rt, window
from timers import timers_of


@bp.get("/timers")
def timers() -> str:
    x = rt()
    win = window(total=timers_of(x).pending_count())
    rows = [t.public() for t in timers_of(x).page(win.offset, win.limit)]
    return page("timers.html", rows=rows, win=win, now=x.clock.now())


@bp.post("/timers/<timer_id>/cancel")
def cancel_timer(timer_id: str) -> Response:
    """The admin API's rule: only a pending timer is cancelled; a fired or cancelled one is left as it is."""
    x = rt()
    t = timers_of(x).get(timer_id)
    if t is None:
        record("cancel", timer_id, "unknown")
        return done("console.timers", f"没有这个提醒：{timer_id}", ok=False)
    if t.state != "pending" or not timers_of(x).end(t, "cancelled", "console", x.clock.now()):
        state = (timers_of(x).get(timer_id) or t).state
        record("cancel", timer_id, f"not-pending ({state})")
        return done("console.timers", f"{timer_id} 已不在等待中（{state}），没有改动", ok=False)
    x.state.hincrby(x.keys.metrics, "timers_cancelled|console", 1)
    record("cancel", timer_id, "ok")
    return done("console.timers", f"已取消 {timer_id}")
