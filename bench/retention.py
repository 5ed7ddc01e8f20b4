"""Redis bytes of idle routes (issue 14 A6): 10,000 routes each touched once, then left idle past retention.

Each route goes through what one answered message writes — push (dedupe marks, inbox, kick), acquire, take,
a session start, a commit with its user and assistant entries, finish — with the protocol's own scripts on
an embedded Redis, and a recall note in its chat. `used_memory` is read at the baseline (empty profile),
after the routes, and after ROUTE_RETENTION (a few seconds here) has passed. The 24 h dedupe marks are
reported apart: they expire on their own clock, by design (Feishu redelivers for up to ~7 h).

    python -m bench.retention                 # 10,000 routes, 3 s retention
    python -m bench.retention --routes 2000
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import redis

from core.keys import Keys
from memory.sessions import Sessions, entry
from runs.inbox import Commit, Inbox
from state.embedded import ensure_server

OUT = Path(__file__).resolve().parent / "results" / "retention.json"


def used(r: redis.Redis) -> int:
    return int(r.info("memory")["used_memory"])


def touch(inbox: Inbox, sessions: Sessions, r: redis.Redis, keys: Keys, n: int) -> None:
    rk = f"feishu:{keys.profile}:p2p:oc_bench_{n}"
    inbox.push(rk, json.dumps({"n": n}), message_id=f"om_{n}", content_key=f"c{n}", queue="q")
    kick = inbox.next_kicks(0.01)[0]
    assert inbox.acquire(rk, kick.token, f"exec{n}")
    inbox.take(rk, f"exec{n}", budget_s=60)
    sid = sessions.start(rk, (f"exec{n}", 0), expected=None)
    entries = [entry("user", f"<message>问题 {n}</message>", batch_id=f"b{n}", message_ids=[f"om_{n}"]),
               entry("assistant", f"回答 {n}" * 20, batch_id=f"b{n}")]
    inbox.commit(rk, f"exec{n}", Commit(n=1, batch_id=f"b{n}", entries=entries, gen=0))
    inbox.finish(rk, f"exec{n}")
    assert sid


def dedupe_bytes(r: redis.Redis, keys: Keys) -> int:
    return sum(int(r.memory_usage(k, samples=0) or 0) for k in r.scan_iter(f"{keys.prefix}:seen:*", count=1000))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.retention", description=__doc__.splitlines()[0])
    p.add_argument("--routes", type=int, default=10_000)
    p.add_argument("--retention", type=int, default=3, help="ROUTE_RETENTION in seconds for the run")
    args = p.parse_args(argv)
    url = ensure_server(Path("var") / "bench-retention")
    r = redis.Redis.from_url(url, decode_responses=True)
    keys = Keys(f"retention{int(time.time())}")
    inbox = Inbox(r, keys, lease_ms=5000, route_retention_s=args.retention)
    sessions = Sessions(r, keys)
    baseline = used(r)
    started = time.monotonic()
    for n in range(args.routes):
        touch(inbox, sessions, r, keys, n)
    loaded, seconds = used(r), time.monotonic() - started
    marks = dedupe_bytes(r, keys)
    time.sleep(args.retention + 1)
    for _ in range(20):  # let Redis' active expiry finish the expired keys
        if not next(iter(r.scan_iter(f"{keys.prefix}:route:*", count=1000)), None):
            break
        time.sleep(0.5)
    after = used(r)
    left = sum(1 for k in r.scan_iter(f"{keys.prefix}:*", count=1000) if ":seen:" not in k and k != keys.metrics)
    result = {"routes": args.routes, "baseline_bytes": baseline, "loaded_bytes": loaded, "after_bytes": after,
              "dedupe_marks_bytes": marks, "route_keys_left": left, "seconds_to_load": round(seconds, 1),
              "ratio_loaded": round(loaded / baseline, 2),
              "ratio_after_without_marks": round((after - marks) / baseline, 3)}
    print(f"{args.routes} routes touched once in {seconds:.1f} s")
    print(f"used_memory: baseline {baseline / 1e6:.1f} MB → loaded {loaded / 1e6:.1f} MB "
          f"({result['ratio_loaded']}×) → after retention {after / 1e6:.1f} MB")
    print(f"after retention, less the 24 h dedupe marks ({marks / 1e6:.1f} MB): "
          f"{result['ratio_after_without_marks']}× baseline; route keys left: {left}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2))
    r.delete(*(list(r.scan_iter(f"{keys.prefix}:*", count=1000)) or ["-"]))
    return 0 if left == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
