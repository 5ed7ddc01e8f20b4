"""The overview: status and its reasons, preflight rows with their fixes, capabilities off, queues, worker pools,
runs in flight, recent dead letters, Redis HA — all read from Redis in a few pipelined round trips."""

from __future__ import annotations

import json
import time
from typing import Any

from flask import redirect, url_for
from werkzeug.wrappers import Response

from console.web import bp, page, rt
from jobs import readiness
from runs.queues import rq_queue_name


@bp.get("/")
def overview() -> str | tuple[str, int]:
    r, keys, s = rt().state, rt().keys, rt().settings
    try:
        snap = readiness.snapshot(s, r, keys)
    except readiness.Unavailable:
        return page("overview.html", snap=None, reasons=["Redis 不可用（Redis does not answer）"], rows=[],
                    queues=[], pools=[], runs=[], dead=[]), 503
    rows = (snap.get("preflight") or {}).get("rows") or []
    return page("overview.html", snap=snap, reasons=readiness.reasons(snap), rows=rows, queues=_queues(),
                pools=_pools(), runs=_runs(), dead=_recent_dead())


@bp.get("/overview")
def overview_alias() -> Response:
    return redirect(url_for("console.overview"))


def _queues() -> list[dict[str, Any]]:
    names = rt().policy.queue_names
    pipe = rt().rq.pipeline(transaction=False)
    for q in names:
        pipe.llen(f"rq:queue:{rq_queue_name(rt().settings.bot_profile, q)}")
    state = rt().state.pipeline(transaction=False)
    state.llen(rt().keys.kicks)
    state.zcard(rt().keys.delayed)
    state.zcard(rt().keys.dirty)
    kicks, delayed, dirty = state.execute()
    rows = [{"name": q, "jobs": n} for q, n in zip(names, pipe.execute(), strict=True)]
    return [*rows, {"name": "kicks waiting (sweeper)", "jobs": kicks}, {"name": "retries in backoff", "jobs": delayed},
            {"name": "routes with work", "jobs": dirty}]


def _pools() -> list[dict[str, str]]:
    keys, r = rt().keys, rt().state
    hosts = [str(h) for h in r.zrangebyscore(keys.pools, time.time() - 30, "+inf")][:50]
    pipe = r.pipeline(transaction=False)
    for h in hosts:
        pipe.hgetall(keys.pool(h))
    return [{"host": h, **status} for h, status in zip(hosts, pipe.execute(), strict=True) if status]


def _runs() -> list[dict[str, Any]]:
    """Runs working on a batch now (the watchdog's registry), longest first, at most 50."""
    keys, r = rt().keys, rt().state
    ranked: list[Any] = r.zrange(keys.running, 0, 49, withscores=True)
    routes = [(str(rk), float(deadline)) for rk, deadline in ranked]
    infos = r.hmget(keys.runinfo, [rk for rk, _ in routes]) if routes else []
    out = []
    for (rk, deadline), raw in zip(routes, infos, strict=True):
        info = json.loads(raw) if raw else {}
        out.append({"route_key": rk, "started": info.get("started"), "deadline": deadline,
                    "job_id": info.get("job_id", "")})
    return out


def _recent_dead() -> list[dict[str, Any]]:
    keys, r = rt().keys, rt().state
    ids = [str(i) for i in r.zrevrange(keys.dead_order, 0, 4)]
    raws = r.hmget(keys.dead, ids) if ids else []
    return [json.loads(raw) for raw in raws if raw]
