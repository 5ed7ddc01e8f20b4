"""Dead letters: list them, and replay one back into its route (`python -m jobs.deadletter list|replay N`)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from jobs.runtime import Runtime, current


def records(rt: Runtime) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in rt.state.lrange(rt.keys.dead_letters, 0, -1)]


def replay(rt: Runtime, index: int) -> str:
    """Put a buried batch back at the front of its route's inbox and kick a run; returns the route key."""
    raw = rt.state.lindex(rt.keys.dead_letters, index)
    if raw is None:
        raise IndexError(f"no dead letter at index {index}")
    raw = str(raw)
    record = json.loads(raw)
    rk = record["route_key"]
    pipe = rt.state.pipeline()
    pipe.lpush(rt.keys.inbox(rk), *reversed(record["events"]))  # keep their original order, before newer mail
    pipe.zadd(rt.keys.dirty, {rk: 0}, nx=True)
    pipe.lrem(rt.keys.dead_letters, 1, raw)
    pipe.execute()
    token = rt.inbox.kick(rk)
    if token:
        rt.start_run(rk, token)
    return str(rk)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="print dead letters, newest last")
    rp = sub.add_parser("replay", help="replay the dead letter at INDEX (as shown by list)")
    rp.add_argument("index", type=int)
    args = parser.parse_args(argv)
    rt = current()
    if args.command == "list":
        for i, record in enumerate(records(rt)):
            print(f"[{i}] {record['route_key']} batch={record['batch_id']} attempts={record['attempts']} "
                  f"events={len(record['events'])} reason={record['reason']}")
    else:
        print(f"replayed into {replay(rt, args.index)}")


if __name__ == "__main__":
    main()
