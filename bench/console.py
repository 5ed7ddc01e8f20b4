"""The operator console at scale: server time of every page with 10,000 routes, 1,000 timers and 500 dead letters
(plus 1,000 items, 1,000 memory scopes and 5,000 audit entries), against the same pages of an empty deployment.

The real app (`create_app`) on an embedded Redis of its own, signed in with ADMIN_TOKEN, pages fetched through
Flask's test client, so the time is the server's own: routing, the Redis round trips, rendering. State is written
with the service's own stores (Inbox.push with the route indexes, Timers.add, Items.claim, Memories.change,
audit.write); dead letters as the give-up path records them. First pages and last pages of each list (offset
paging reads only the window from its index), a search by chat, one route, one item, the routing simulator.

Target (issue 26): every page within 300 ms of server time, paginated. Reported per page: p50, p95 and max over
`--runs` fetches, the empty-deployment p50 and the ratio; exit 1 when a page's p95 passes the target.

    python -m bench.console               # 10,000 routes, 1,000 timers, 500 dead letters, 25 fetches a page (~1 min)
    python -m bench.console --quick       # a tenth of it
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from flask.testing import FlaskClient

from app import create_app
from bitable.index import Items
from console import audit
from core.keys import Keys
from core.settings import Settings
from memory.scopes.paths import Scope
from memory.scopes.store import Caps, Memories
from runs.inbox import Inbox
from state.embedded import ensure_server, stop_server
from timers.model import FOLLOWUP, Timer
from timers.store import Caps as TimerCaps
from timers.store import Timers

TARGET_MS = 300.0
TOKEN = "bench-console-token"


def settings_for(url: str, profile: str) -> Settings:
    return Settings(_env_file=None, redis_url=url, bot_profile=profile, admin_token=TOKEN,  # type: ignore[call-arg,arg-type]
                    feishu_domain="http://127.0.0.1:9", log_level="WARNING")


def populate(url: str, profile: str, routes: int, timers: int, dead: int, extras: int) -> dict[str, str]:
    """A deployment's worth of state under `profile`; returns ids the pages look up."""
    import redis

    r = redis.Redis.from_url(url, decode_responses=True)
    keys = Keys(profile)
    inbox = Inbox(r, keys, 6000)
    chats = max(1, routes // 50)
    for n in range(routes):
        chat, sender = f"oc_bench_{n % chats}", f"ou_bench_{n}"
        rk = f"feishu:{profile}:group:{chat}:{sender}"
        event = json.dumps({"event_id": f"ev{n}", "message_id": f"om_{n}", "chat_id": chat, "chat_type": "group",
                            "sender_open_id": sender, "sender_type": "user", "message_type": "text",
                            "text": f"问题 {n}", "content": "{}"})
        inbox.push(rk, event, message_id=f"om_{n}", content_key=f"c{n}", queue="runs")
        inbox.index(rk, (chat, sender))  # as the run that takes it would (no worker runs here)
    store = Timers(r, keys)
    now = time.time()
    for n in range(timers):
        rk = f"feishu:{profile}:group:oc_bench_{n % chats}:ou_bench_{n}"
        store.add(Timer(id=f"f_{n:010d}", kind=FOLLOWUP, route_key=rk, due=now + 3600 + n, chat_id=f"oc_bench_{n}",
                        what=f"核对账单 {n}", created_by=f"ou_bench_{n}", created_at=now),
                  caps=TimerCaps(0, 0, 0, 0), now=now)
    pipe = r.pipeline()
    for n in range(dead):
        rk = f"feishu:{profile}:group:oc_bench_{n % chats}:ou_bench_{n}"
        dead_id = f"b{n}-dead"
        record = {"id": dead_id, "route_key": rk, "batch_id": f"b{n}", "reason": "failed 5 times; last: boom",
                  "events": [json.dumps({"message_id": f"om_{n}", "text": f"问题 {n}", "sender_open_id": "ou_x"})],
                  "message_ids": [f"om_{n}"], "event_ids": [f"ev{n}"], "at": now + n, "attempts": 5}
        pipe.hset(keys.dead, dead_id, json.dumps(record, ensure_ascii=False))
        pipe.zadd(keys.dead_order, {dead_id: now + n})
    pipe.execute()
    items = Items(r, keys)
    first_item = ""
    for n in range(extras):
        got = items.claim(thread_id=f"omt_bench_{n}", chat_id=f"oc_bench_{n % chats}", root_id=f"om_{n}",
                          reporter="ou_x", origin="topic_root")
        first_item = first_item or got[0].item_id
    memories = Memories(r, keys, Caps(files=20, chars=100_000, file_chars=8000))
    for n in range(extras):
        memories.change(Scope("people", f"ou_bench_{n}"), "bench", "seed", _seed(f"回答我用英文 {n}"))
    for n in range(extras * 5):
        audit.write(r, keys, audit.Done(f"ou_bench_{n}", "feishu", "cancel", f"f_{n:010d}", "ok"))
    return {"route": f"feishu:{profile}:group:oc_bench_0:ou_bench_0", "chat": "oc_bench_0", "item": first_item}


def _seed(text: str) -> Callable[[Any], dict[str, str | None]]:
    return lambda _files: {"instructions.md": text}


def signed_in(client: FlaskClient) -> None:
    page = client.get("/console/login").get_data(as_text=True)
    csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)  # type: ignore[union-attr]
    resp = client.post("/console/login/token", data={"csrf": csrf, "token": TOKEN})
    assert resp.status_code == 302, resp.status_code


def pages(ids: dict[str, str], routes: int, timers: int, dead: int) -> dict[str, str]:
    last = lambda total: max(0, total - 50)  # noqa: E731
    out = {"overview": "/console/", "routes": "/console/routes",
           "routes, last page": f"/console/routes?offset={last(routes)}",
           "routes of a chat": f"/console/routes?q={ids['chat']}", "one route": f"/console/routes/{ids['route']}",
           "routing simulator": f"/console/routing?chat_id={ids['chat']}&chat_type=group&sender=ou_x&mention=1",
           "items": "/console/items", "timers": "/console/timers",
           "timers, last page": f"/console/timers?offset={last(timers)}", "dead letters": "/console/deadletters",
           "dead letters, last page": f"/console/deadletters?offset={last(dead)}", "memory": "/console/memory",
           "audit": "/console/audit"}
    if ids.get("item"):
        out["one item"] = f"/console/items/{ids['item']}"
    return out


def measure(client: FlaskClient, path: str, runs: int) -> list[float]:
    client.get(path)  # warm: templates compiled, scripts loaded
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        resp = client.get(path)
        times.append((time.perf_counter() - started) * 1000)
        if resp.status_code != 200:
            raise SystemExit(f"{path}: HTTP {resp.status_code}")
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--routes", type=int, default=10_000)
    parser.add_argument("--timers", type=int, default=1_000)
    parser.add_argument("--dead", type=int, default=500)
    parser.add_argument("--extras", type=int, default=1_000, help="items and memory scopes (audit: five times)")
    parser.add_argument("--runs", type=int, default=25)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.routes, args.timers, args.dead, args.extras, args.runs = 1000, 100, 50, 100, 10
    var = tempfile.mkdtemp(prefix="bc-")
    try:
        url = ensure_server(var)
        started = time.monotonic()
        full_ids = populate(url, "bench_full", args.routes, args.timers, args.dead, args.extras)
        empty_ids = populate(url, "bench_empty", 1, 1, 1, 1)
        print(f"state written in {time.monotonic() - started:.0f} s: {args.routes} routes, {args.timers} timers, "
              f"{args.dead} dead letters, {args.extras} items and memory scopes, {args.extras * 5} audit entries",
              flush=True)
        results = {}
        for label, profile, ids, sizes in (("full", "bench_full", full_ids, (args.routes, args.timers, args.dead)),
                                           ("empty", "bench_empty", empty_ids, (1, 1, 1))):
            app = create_app(settings_for(url, profile))
            client = app.test_client()
            signed_in(client)
            results[label] = {name: measure(client, path, args.runs) for name, path in pages(ids, *sizes).items()}
        return report(results)
    finally:
        stop_server(var)
        shutil.rmtree(var, ignore_errors=True)


def report(results: dict[str, dict[str, list[float]]]) -> int:
    head = f"{'page':<26}{'p50 ms':>9}{'p95 ms':>9}{'max ms':>9}{'empty p50':>11}{'ratio':>8}"
    print(f"\n{head}  target {TARGET_MS:.0f} ms")
    worst = 0.0
    for name, times in results["full"].items():
        p50, p95 = statistics.median(times), sorted(times)[int(len(times) * 0.95) - 1 if len(times) > 1 else 0]
        base = statistics.median(results["empty"].get(name) or results["empty"]["overview"])
        worst = max(worst, p95)
        print(f"{name:<26}{p50:>9.1f}{p95:>9.1f}{max(times):>9.1f}{base:>11.1f}{p50 / base:>8.2f}  "
              f"{'ok' if p95 <= TARGET_MS else 'OVER'}")
    print(f"\nworst p95 {worst:.1f} ms ({'within' if worst <= TARGET_MS else 'over'} the {TARGET_MS:.0f} ms target)")
    return 0 if worst <= TARGET_MS else 1


if __name__ == "__main__":
    os.environ.setdefault("ENV_FILE", os.devnull)
    raise SystemExit(main())
