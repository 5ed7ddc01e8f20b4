"""The watchdog: runs stuck past their budget (lease kept alive, model call hanging) are broken and retried.

Breaking a run moves the route's lease to a successor (so the stuck run is fenced out of every side
effect), charges its batch one failure (a batch that keeps hanging is dead-lettered like any other
failing batch), asks RQ to kill the stuck work-horse, and tells the admins.
"""

from __future__ import annotations

import json
import logging
import time

from rq.command import send_stop_job_command

from jobs.batches import batch_id_of
from runs.alerts import alert
from runs.runtime import Runtime

log = logging.getLogger(__name__)


def check(rt: Runtime) -> int:
    """Break every run past its deadline; returns how many were broken."""
    broken = 0
    for rk, raw_info in rt.inbox.overdue_runs(time.time()):
        info = json.loads(raw_info) if raw_info else {}
        exec_id = info.get("exec_id", "")
        if not exec_id or rt.state.get(rt.keys.lease(rk)) != exec_id:
            rt.inbox.forget_run(rk, raw_info)  # that run is gone; its registration is stale
            continue
        if _break(rt, rk, info):
            broken += 1
    return broken


def _break(rt: Runtime, rk: str, info: dict[str, str]) -> bool:
    # The batch the stuck run works on: its segment (a command or message behind it is not part of it).
    batch_id = rt.inbox.current_batch(rk) or batch_id_of([str(e) for e in rt.state.lrange(rt.keys.proc(rk), 0, -1)])
    delay = float(rt.settings.retry_delays[0])
    fails = rt.inbox.break_run(rk, info["exec_id"], batch_id, rt.queue_of(rk), delay)
    if fails < 0:
        return False  # it finished or lost the lease in the meantime
    budget = rt.settings.run_budget_seconds
    log.error("run exceeded its budget; broken and retried",
              extra={"route_key": rk, "exec_id": info["exec_id"], "job_id": info.get("job_id"),
                     "batch": batch_id, "attempt": fails, "duration_ms": int(budget * 1000)})
    _stop_job(rt, info.get("job_id", ""))
    alert(rt, f"⚠️ 一次处理超过 {budget:g} 秒未完成，已中断并重试（{rk}，第 {fails} 次）。")
    return True


def _stop_job(rt: Runtime, job_id: str) -> None:
    if not job_id:
        return
    try:
        send_stop_job_command(rt.rq, job_id)
    except Exception as exc:  # the job may have ended meanwhile; fencing already keeps it out
        log.info("stuck job not stopped", extra={"job_id": job_id, "error": exc.__class__.__name__})
