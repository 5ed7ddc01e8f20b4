"""Dead letters: list, inspect and replay them (`python -m jobs.deadletter list|show ID|replay ID`).

A replay puts the batch's events back in front of their route's inbox in one atomic step; a second
replay of the same dead letter finds it gone and changes nothing. Each replayed event carries a replay
count, so its batch gets a new id: a fresh answer, and a fresh notice should it fail again (Feishu
would swallow a notice that reused the first one's uuid).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Literal

from core import boot
from runs.runtime import Runtime, current

ReplayResult = Literal["replayed", "already-replayed", "unknown"]
DiscardResult = Literal["discarded", "already-handled", "unknown"]


def records(rt: Runtime, limit: int = 1000, offset: int = 0) -> list[dict[str, Any]]:
    """Dead letters, oldest first (`offset`, `limit`: one page of the order index)."""
    ids = [str(i) for i in rt.state.zrange(rt.keys.dead_order, offset, offset + limit - 1)]
    if not ids:
        return []
    raws = rt.state.hmget(rt.keys.dead, ids)
    return [json.loads(raw) for raw in raws if raw]


def get(rt: Runtime, dead_id: str) -> dict[str, Any] | None:
    raw = rt.state.hget(rt.keys.dead, dead_id)
    return json.loads(raw) if raw else None


def summary(record: dict[str, Any]) -> dict[str, Any]:
    """What a list shows: everything but the raw events."""
    return {k: v for k, v in record.items() if k != "events"} | {"events": len(record.get("events", []))}


def with_replay_count(raw: str) -> str:
    """The event with its replay count raised by one and without the generation it was stored under: a
    replay is an explicit request to answer it now, in the route's current session, even after a reset
    (a stale generation would have it dropped unanswered). Entries that are not JSON objects stay as they are."""
    try:
        event = json.loads(raw)
    except ValueError:
        return raw
    if not isinstance(event, dict):
        return raw
    event["replay"] = int(event.get("replay") or 0) + 1
    event.pop("gen", None)
    return json.dumps(event, ensure_ascii=False, separators=(",", ":"))


def replay(rt: Runtime, dead_id: str) -> ReplayResult:
    record = get(rt, dead_id)
    if record is None:
        return "already-replayed" if rt.state.exists(rt.keys.dead_replayed(dead_id)) else "unknown"
    rk = record["route_key"]
    events = [with_replay_count(raw) for raw in record["events"]]
    if not rt.inbox.replay(dead_id, rk, rt.queue_of(rk), events):
        return "already-replayed"  # another replay won the race
    from core import metrics

    metrics.count(rt.state, rt.keys, "replays")
    return "replayed"


def discard(rt: Runtime, dead_id: str) -> DiscardResult:
    """Drop it for good (an operator decided it must not run); once, like a replay, and never after one."""
    if rt.inbox.discard(dead_id):
        return "discarded"
    return "already-handled" if rt.state.exists(rt.keys.dead_replayed(dead_id)) else "unknown"


def handled(rt: Runtime, dead_id: str) -> str | None:
    """How a dead letter that left the list was handled: "replayed", "discarded", or None (unknown)."""
    mark = rt.state.get(rt.keys.dead_replayed(dead_id))
    if mark is None:
        return None
    return "discarded" if str(mark).startswith("discarded:") else "replayed"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="print dead letters, oldest first")
    sub.add_parser("show", help="print one dead letter as JSON").add_argument("id")
    sub.add_parser("replay", help="replay one dead letter into its route").add_argument("id")
    args = parser.parse_args(argv)
    rt = current()
    if args.command == "list":
        for r in records(rt):
            print(f"{r['id']}  {r['route_key']}  events={len(r['events'])}  reason={r['reason']}")
        return 0
    if args.command == "show":
        record = get(rt, args.id)
        print(json.dumps(record, ensure_ascii=False, indent=2) if record else f"no dead letter {args.id}")
        return 0 if record else 1
    result = replay(rt, args.id)
    print(f"{args.id}: {result}")
    return 0 if result == "replayed" else 1


if __name__ == "__main__":
    boot.started()  # the imports are done (core/boot.py)
    sys.exit(main())
