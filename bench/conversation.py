"""A realistic conversation through the whole stack, measured the way the API bills it: the share of each request's
input tokens read from the prompt cache, and the fixed overhead (tools + system) every request carries.

Three routes talk at once, as a team does: a private chat, a group (per-sender route) and a topic with two people,
six turns each, with memory, a follow-up, a thread read and plain questions in between (the stand-in calls the
tools a model would). The Claude stand-in reports `cache_read_input_tokens` / `cache_creation_input_tokens` /
`input_tokens` from the request's breakpoints and the prefixes earlier requests wrote (sandbox/claude/cache.py,
Anthropic's rules: prefix order, 20-block lookback, the model's minimum cacheable length, 5-minute entries).

    python -m bench.conversation           # ~2 min; exit 1 when a route's third turn on reads < 70 % from cache
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "results" / "conversation.json"
TARGET = 0.70  # of input tokens read from cache, from a route's third turn on
TURNS = {
    "p2p": ["以后回答我先给结论，再给细节。", "报表服务昨天 18:00 之后的数据对不上，可能是什么原因？",
            "明天上午十点提醒我再核对一次报表数据", "上次说的 ETL 任务要不要回滚？我倾向先不回滚。",
            "好的，那先不回滚。把现在的结论和待确认的点总结一下。", "谢谢，今天先这样。"],
    "group": ["大家好，发布窗口改到周四晚上 8 点了，有什么要注意的？", "回滚方案需要谁来审批？",
              "周四下午三点提醒我准备发布清单", "数据库迁移脚本要提前跑一遍吗？", "那就这么定，帮我列个检查清单。",
              "收到，谢谢。"],
    "topic": ["看看话题里之前的消息", "登录页偶发 502，日志里是 upstream timeout，先查哪里？",
              "网关超时是 30 秒，后端平均 2 秒，P99 有 40 秒", "后天上午十点提醒我看一下 P99 有没有降下来",
              "找到了，是一个慢查询，加了索引之后 P99 降到 3 秒", "那这个问题可以先关了吗？总结一下。"],
}


def converse(turns: int = 6) -> dict[str, Any]:
    """Run the three routes' turns (interleaved, closed loop) and read every turn request's usage back."""
    from chaos.load import Sender, Target
    from chaos.stack import Stack
    from sandbox.claude.wire import COMPRESSION_MARKER

    with Stack(workers=2) as stack:
        sender = Sender(stack, threads=2)
        topic = sender.add_topic("oc_bench_team", "omt_bench_topic", "ou_bench_amy")
        for n, text in enumerate(("登录页从昨晚开始偶发 502", "我这边也复现了，大概 1% 的请求")):
            stack.feishu.add_message(f"om_bench_early{n}", "oc_bench_team", text=text,
                                     sender_open_id=("ou_bench_amy", "ou_bench_bob")[n], thread_id="omt_bench_topic",
                                     root_id=topic.root_id, parent_id=topic.root_id)
        targets = {"p2p": Target("oc_bench_p2p", "p2p", "ou_bench_amy"),
                   "group": Target("oc_bench_team", "group", "ou_bench_bob"), "topic": topic}
        by_route: dict[str, list[int]] = {}
        for turn in range(turns):
            for kind, target in targets.items():
                if kind == "topic" and turn % 2:
                    target = Target(topic.chat_id, "group", "ou_bench_bob", topic.thread_id, topic.root_id)
                before = len(stack.claude.requests)
                ev = sender.event(target, text=TURNS[kind][turn % len(TURNS[kind])])
                sender.ask(ev, stack.feishu.replies_to)
                by_route.setdefault(kind, []).extend(range(before, len(stack.claude.requests)))
                by_route.setdefault(f"{kind}#turns", []).append(len(stack.claude.requests) - before)
        calls = stack.claude.requests
        sender.close()
    rows = []
    for kind in targets:
        index = 0
        for turn, count in enumerate(by_route[f"{kind}#turns"], start=1):
            for k in range(count):
                call = calls[by_route[kind][index]]
                index += 1
                if COMPRESSION_MARKER in json.dumps(call["body"].get("system"), ensure_ascii=False):
                    continue
                rows.append({"route": kind, "turn": turn, "round": k + 1, **usage_of(call)})
    return summary(rows)


def usage_of(call: dict[str, Any]) -> dict[str, Any]:
    """What the stand-in billed for one recorded call (as it answered it), and its fixed part: tools + system."""
    from sandbox.claude.cache import block_tokens

    body, usage = call["body"], call.get("usage") or {}
    fixed = sum(block_tokens(t) for t in body.get("tools") or [])
    system = body.get("system")
    fixed += sum(block_tokens(b) for b in (system if isinstance(system, list) else [{"text": system or ""}]))
    read, written = usage.get("cache_read_input_tokens") or 0, usage.get("cache_creation_input_tokens") or 0
    fresh = usage.get("input_tokens") or 0
    return {"fixed": fixed, "tools": len(body.get("tools") or []), "input": fresh, "written": written, "read": read,
            "total": fresh + written + read, "body": body}


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    late = [r for r in rows if r["turn"] >= 3]
    shares = [r["read"] / r["total"] for r in late if r["total"]]
    return {"requests": len(rows), "rows": rows,
            "share_from_turn3_min": min(shares) if shares else 0.0,
            "share_from_turn3_median": statistics.median(shares) if shares else 0.0,
            "share_all_median": statistics.median([r["read"] / r["total"] for r in rows if r["total"]] or [0.0]),
            "fixed_overhead_median": statistics.median([r["fixed"] for r in rows] or [0]),
            "tool_lists": sorted({r["tools"] for r in rows})}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=6)
    args = parser.parse_args(argv)
    report = converse(args.turns)
    print_report(report)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({k: v for k, v in report.items() if k != "rows"} |
                              {"rows": [{k: v for k, v in r.items() if k != "body"} for r in report["rows"]]},
                              indent=2))
    return 0 if report["share_from_turn3_min"] >= TARGET else 1


def print_report(report: dict[str, Any]) -> None:
    print("route  turn round  input  written  read   share  fixed(tools+system)")
    for r in report["rows"]:
        print(f"{r['route']:<6} {r['turn']:>4} {r['round']:>5} {r['input']:>6} {r['written']:>8} {r['read']:>5} "
              f"{r['read'] / max(1, r['total']):>6.0%}  {r['fixed']} ({r['tools']} tools)")
    print(f"(c) {report['requests']} turn requests: cache-read share from a route's third turn on: min "
          f"{report['share_from_turn3_min']:.0%}, median {report['share_from_turn3_median']:.0%} (target "
          f"{TARGET:.0%}); all requests median {report['share_all_median']:.0%}; fixed overhead per request "
          f"(tools + system, stand-in tokens) median {report['fixed_overhead_median']:.0f}; tool lists seen: "
          f"{report['tool_lists']}")


if __name__ == "__main__":
    raise SystemExit(main())
