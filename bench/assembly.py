"""Context engine: assembly cost against history size, and prompt-cache friendliness across turns.

(a) Assembly time and request tokens for 20 routes × 20 messages of session history versus 2,000 routes ×
    2,000 messages (a log that long cannot arise, rotation bounds it, but an upgrade or a bug could leave
    one): a turn reads one bounded tail (turn/rotation.py `load`) and fits it (claude/budget.py), so both
    ratios (large ÷ small, measured in the same run) must stay ≤ 1.2. The small set already exceeds the
    budget, so the request tokens compare like with like.
(b) Prompt-cache friendliness: a 30-turn conversation through the whole stack (small budget, so it
    rotates); for each pair of consecutive turn requests, the byte-identical prefix (tools, system,
    messages, in the order the API caches them) as a fraction of the later request. Median ≥ 0.8.
(c) What the API bills (bench/conversation.py): three routes talking at once (private chat, group, topic with two
    people), six turns each with memory, a follow-up and a thread read; per request the share of its input tokens
    read from the prompt cache as the stand-in reports it by Anthropic's rules (prefix order, breakpoints, 20-block
    lookback, the model's minimum cacheable length), and the fixed overhead (tools + system) each request carries.
    From a route's third turn on, every request reads ≥ 70 % of its input from the cache.

    python -m bench.assembly                    # all three (~5–7 min, ~2.5 GB of Redis for (a))
    python -m bench.assembly --routes 200 --messages 200 --skip-stack
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from claude import budget as bud
from claude.prompt import session_messages, system_blocks
from core.keys import Keys
from memory.sessions import entry
from state.embedded import ensure_server, stop_server
from turn.rotation import load

OUT = Path(__file__).resolve().parent / "results" / "context.json"
BUDGET, RESERVE = 6000, 256
SAMPLE = 200  # assemblies timed per set
# ~240 characters: 20 of them overflow the room the budget leaves beside the fixed prompt (~4,100 tokens), so the
# small set's request is as full as the large one's and (a) compares history size alone.
TEXT = "调度日志显示任务按时启动，耗时正常，输出文件大小也和前几天差不多，但是下游看板的数字仍然对不上。" * 5


def populate(r: redis.Redis, keys: Keys, routes: int, messages: int, tag: str) -> list[tuple[str, str]]:
    out = []
    for i in range(routes):
        rk, sid = f"feishu:bench:p2p:oc_{tag}{i:05d}", f"s_bench_{tag}{i:05d}"
        entries = [entry("user" if n % 2 == 0 else "assistant", f"<message>{n} {TEXT}</message>", batch_id=str(n))
                   for n in range(messages)]
        pipe = r.pipeline(transaction=False)
        pipe.hset(keys.route_state(rk), mapping={"sid": sid, "gen": 0})
        for start in range(0, len(entries), 1000):
            pipe.rpush(keys.session_log(rk, sid), *entries[start:start + 1000])
        pipe.execute()
        out.append((rk, sid))
    return out


def assemble_once(r: redis.Redis, keys: Keys, rk: str, sid: str) -> int:
    """What every turn pays before its model call (no rotation): read, fit, build; the request's tokens."""
    b = bud.Budget(BUDGET, RESERVE)
    system = system_blocks()
    fixed = b.request_cost(system, [])
    loaded = load(r, keys, rk, sid, b, b.input_room(fixed))  # as turn/rotation.py `prepare` reads it
    fitted = bud.fit_session(b, fixed, loaded.summary, loaded.turns, "<message>现在该怎么处理？</message>")
    return b.request_cost(system, session_messages(fitted.summary, fitted.turns, fitted.batch))


def measure(r: redis.Redis, keys: Keys, routes: list[tuple[str, str]]) -> dict[str, float]:
    rng = random.Random(7)
    picks = [rng.choice(routes) for _ in range(SAMPLE)]
    for rk, sid in picks[:20]:  # warm-up: connections, code paths
        assemble_once(r, keys, rk, sid)
    times, tokens = [], []
    for rk, sid in picks:
        started = time.perf_counter()
        tokens.append(assemble_once(r, keys, rk, sid))
        times.append(time.perf_counter() - started)
    return {"median_ms": statistics.median(times) * 1000, "p90_ms": sorted(times)[int(len(times) * 0.9)] * 1000,
            "median_tokens": statistics.median(tokens)}


def assembly(routes: int, messages: int) -> dict[str, Any]:
    var = tempfile.mkdtemp(prefix="bctx-")
    r = redis.Redis.from_url(ensure_server(var), decode_responses=True)
    try:
        keys = Keys("bench")
        small = populate(r, keys, 20, 20, "s")
        started = time.monotonic()
        large = populate(r, keys, routes, messages, "l")
        fill_s = time.monotonic() - started
        rounds = [(measure(r, keys, small), measure(r, keys, large)) for _ in range(3)]  # interleaved
        s = {k: statistics.median(x[0][k] for x in rounds) for k in rounds[0][0]}
        big = {k: statistics.median(x[1][k] for x in rounds) for k in rounds[0][1]}
        used = int(r.info("memory")["used_memory"])
    finally:
        stop_server(var)
    return {"small": s, "large": big, "routes": routes, "messages": messages, "fill_s": round(fill_s, 1),
            "redis_mb": used // 2**20, "time_ratio": big["median_ms"] / s["median_ms"],
            "token_ratio": big["median_tokens"] / s["median_tokens"]}


def cache_friendliness(turns: int) -> dict[str, Any]:
    from chaos.load import Sender, p2p_targets
    from chaos.stack import Stack
    from sandbox.claude.wire import COMPRESSION_MARKER

    env = {"CONTEXT_BUDGET_TOKENS": str(BUDGET), "MAX_OUTPUT_TOKENS": str(RESERVE)}
    with Stack(workers=2, env=env) as stack:
        sender = Sender(stack, threads=1)
        target = p2p_targets(1, "cx")[0]
        for turn in range(turns):
            ev = sender.event(target, text=f"第{turn}轮：{TEXT[: 60 + turn % 7 * 10]}")
            sender.ask(ev, stack.feishu.replies_to)
        bodies = [c["body"] for c in stack.claude.requests]
        sessions = sum(1 for f in stack.r.hkeys(stack.keys.sessions(ev.route)) if "#" not in str(f))
        sender.close()
    turn_bodies = [b for b in bodies if COMPRESSION_MARKER not in json.dumps(b.get("system"), ensure_ascii=False)]
    wire = [json.dumps([b.get("tools"), b.get("system"), b["messages"]], ensure_ascii=False).encode()
            for b in turn_bodies]
    fractions = [_common_prefix(a, b) / len(b) for a, b in itertools.pairwise(wire)]
    return {"turns": len(turn_bodies), "compressions": len(bodies) - len(turn_bodies), "sessions": sessions,
            "median": statistics.median(fractions), "min": min(fractions),
            "fractions": [round(f, 3) for f in fractions]}


def _common_prefix(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--routes", type=int, default=2000)
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--skip-stack", action="store_true", help="not (b)")
    parser.add_argument("--skip-assembly", action="store_true", help="not (a)")
    parser.add_argument("--skip-conversation", action="store_true", help="not (c)")
    args = parser.parse_args(argv)
    report: dict[str, Any] = {}
    ok = True
    if not args.skip_assembly:
        ok = _assembly_report(report, args.routes, args.messages)
    if not args.skip_stack:
        c = report["cache"] = cache_friendliness(args.turns)
        print(f"(b) {c['turns']} turn requests, {c['compressions']} compression(s), {c['sessions']} sessions: "
              f"shared prefix median {c['median']:.3f}, min {c['min']:.3f}")
        ok = ok and c["median"] >= 0.8
    if not args.skip_conversation:
        from bench import conversation

        talk = conversation.converse()
        conversation.print_report(talk)
        report["conversation"] = {k: v for k, v in talk.items() if k != "rows"}
        ok = ok and talk["share_from_turn3_min"] >= conversation.TARGET
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2))
    return 0 if ok else 1


def _assembly_report(report: dict[str, Any], routes: int, messages: int) -> bool:
    a = report["assembly"] = assembly(routes, messages)
    print(f"(a) {a['routes']} routes × {a['messages']} messages ({a['redis_mb']} MB of Redis, filled in "
          f"{a['fill_s']} s) vs 20 × 20: assembly median {a['large']['median_ms']:.3f} ms vs "
          f"{a['small']['median_ms']:.3f} ms → ratio {a['time_ratio']:.2f}; request tokens "
          f"{a['large']['median_tokens']:.0f} vs {a['small']['median_tokens']:.0f} → ratio {a['token_ratio']:.2f}")
    return bool(a["time_ratio"] <= 1.2 and a["token_ratio"] <= 1.2)


if __name__ == "__main__":
    raise SystemExit(main())
