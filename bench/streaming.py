"""Streaming answers (issue 16): how soon and how steadily a CardKit card shows the model's text, and what it costs
in Open API calls, with R routes streaming at once.

The whole real stack (chaos.stack: gunicorn, the worker supervisor with WORKER_CONCURRENCY ≥ R, the sweeper,
embedded Redis) with REPLY_STREAMING=card and STREAM_UPDATE_SECONDS=1, against the Feishu emulator (CardKit
entities, every request recorded with its op) and the Claude stand-in, whose answer (~1,800 characters of
Markdown, 16-character deltas) is spread over `--stream` seconds after `--delay` to the first token. R routes
each send one message at the same moment. Per answer:

- (a) model first token → first text in the chat: the card's `send` (the card message appears) minus the model
  request's `first_text_at`; the first card op (`card_create`) is reported too. p50 / p99, target ≤ 2 s;
- (b) the longest time the chat's card did not change while the model wrote: gaps between consecutive visible
  ops (send, card_content, card_update) from the send on, up to the first op at or after the model's end (the
  final update), target ≤ 2 s; the gaps between ops that happened while the model wrote only are reported too;
- (c) Open API calls per streamed answer (card_create + reply + card_content + card_update, from the emulator's
  request log), against the same answers with REPLY_STREAMING=off (the baseline, rendered replies), measured in
  the same stack after `Stack.reconfigure`;
- (d) no HTTP 429 / 99991400 (nor 230020) from the emulator in either phase, and at most 5 sends per chat in any
  second.

    python -m bench.streaming                 # 30 routes × a 40 s streamed answer, then the baseline (~3 min)
    python -m bench.streaming --quick         # 8 routes × 10 s
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from chaos.load import Event, Sender, p2p_targets
from chaos.measure import wait_idle
from chaos.stack import Stack
from feishu.render import card_markdown
from sandbox.feishu.emulator import OPS

OUT = Path(__file__).resolve().parent / "results" / "streaming.json"
FIRST_VISIBLE_S = 2.0
UPDATE_GAP_S = 2.0
CHAT_QPS = 5
CARD_OPS = ("card_create", "reply", "create", "card_content", "card_update", "card_settings")
VISIBLE = ("send", "card_content", "card_update", "card_settings")
UNCOUNTED = ("token", "bot_info", "scopes", "drive_subscribe")  # background, not per answer


def answer_for(token: str) -> str:
    """The Markdown the model 'writes' for one question: ~1,800 characters (≈ 110 deltas of 16)."""
    body = [f"## 结论（{token}）", "", "- 第一点：导出任务在队列里排队", "- 第二点：重试之后恢复", ""]
    line = "这里是较长的分析内容，用来观察卡片随着模型输出逐步增长，直到最后显示完整答案。"
    body += [f"第 {i} 段：{line}" for i in range(40)]
    return "\n".join(body)


def responder(token_re: re.Pattern[str]) -> Any:
    def respond(body: dict[str, Any]) -> str:
        found = token_re.findall(json.dumps(body["messages"], ensure_ascii=False))
        return answer_for(found[-1]) if found else "收到。"
    return respond


class Statuses:
    """Every answer the emulator gave (after-hooks see status and body): refusals are counted from here, since
    the request log holds requests only."""

    def __init__(self, stack: Stack) -> None:
        self.seen: list[tuple[float, str, int, int]] = []  # (time, op, HTTP status, code)
        for op in OPS:
            stack.feishu.on(op, self._note)

    def _note(self, record: dict[str, Any]) -> None:
        resp = record.get("response")
        code = resp.get("code", 0) if isinstance(resp, dict) else 0
        self.seen.append((time.time(), record["op"], int(record.get("status") or 0), int(code or 0)))

    def refused(self, since: float, until: float) -> dict[str, int]:
        out: Counter[str] = Counter()
        for at, op, status, code in list(self.seen):
            if since <= at <= until and (status == 429 or code in (99991400, 230020)):
                out[f"{op} {status}/{code}"] += 1
        return dict(out)


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


def ask_all(stack: Stack, routes: int, tag: str, timeout: float) -> tuple[Sender, list[Event], float, float]:
    """R routes each send one message at once; returns when every route is idle again (start, end epoch)."""
    sender = Sender(stack, threads=min(64, routes))
    events = [sender.event(t, "请详细分析导出为什么失败") for t in p2p_targets(routes, tag)]
    start = time.time()
    for ev in events:
        sender.send(ev)
    sender.wait(60)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not all(stack.feishu.replies_to(e.message_id) for e in events):
        time.sleep(0.2)
    state = wait_idle(stack, {e.route for e in events}, max(5.0, deadline - time.monotonic()))
    if state:
        print(f"WARNING: not idle: {json.dumps(state, default=str)[:300]}", file=sys.stderr)
    return sender, events, start, time.time()


def model_call(stack: Stack, cursor: int, token: str) -> dict[str, Any] | None:
    calls = [c for c in stack.claude.requests_since(cursor)
             if c["body"].get("stream") and token in json.dumps(c["body"]["messages"], ensure_ascii=False)]
    return calls[-1] if calls else None


def per_answer(stack: Stack, ev: Event, model_cursor: int, token: str) -> dict[str, Any]:
    """Timings of one streamed answer from its card's history and its model call."""
    replies = stack.feishu.replies_to(ev.message_id)
    row: dict[str, Any] = {"token": token, "replies": len(replies)}
    card_msgs = [m for m in replies if m["msg_type"] == "interactive"]
    card_id = stack.feishu.card_of(card_msgs[0]["message_id"]) if card_msgs else None
    call = model_call(stack, model_cursor, token)
    if card_id is None or call is None or call.get("first_text_at") is None:
        row["error"] = "no card" if card_id is None else "no streamed model call"
        return row
    history = stack.feishu.card_history(card_id)
    first, end = float(call["first_text_at"]), float(call["end"] or time.time())
    sent = next(h for h in history if h["op"] == "send")
    visible = [h for h in history if h["op"] in VISIBLE and h["at"] >= sent["at"]]
    upto = next((i for i, h in enumerate(visible) if h["at"] >= end), len(visible) - 1)
    shown = [h["at"] for h in visible[: upto + 1]]
    writing = [h["at"] for h in visible if h["at"] <= end]
    gaps = [b - a for a, b in itertools.pairwise(shown)]
    writing_gaps = [b - a for a, b in itertools.pairwise(writing)]
    entity = next(c for c in stack.feishu.cards() if c["card_id"] == card_id)
    row.update(
        first_op_s=round(history[0]["at"] - first, 3), first_visible_s=round(sent["at"] - first, 3),
        max_gap_s=round(max(gaps), 3) if gaps else None,
        max_gap_writing_s=round(max(writing_gaps), 3) if writing_gaps else None,
        updates_while_writing=len(writing), model_write_s=round(end - first, 2),
        final_after_model_s=round(visible[-1]["at"] - end, 3),
        complete=not entity["streaming"] and entity["text"] == card_markdown(answer_for(token)),
        cards=sum(1 for c in stack.feishu.cards() if c["message_id"] in {m["message_id"] for m in replies}),
        created_at=history[0]["at"],
    )
    return row


def calls(stack: Stack, cursor: int, n: int) -> dict[str, Any]:
    ops = Counter(r["op"] for r in stack.feishu.requests_since(cursor) if r["op"] not in UNCOUNTED)
    card = sum(ops[op] for op in CARD_OPS)
    return {"ops": dict(ops), "answers": n, "reply_path_calls": card, "per_answer": round(card / n, 2),
            "all_per_answer": round(sum(ops.values()) / n, 2),
            "by_op_per_answer": {op: round(ops[op] / n, 2) for op in CARD_OPS if ops[op]}}


def phase(stack: Stack, statuses: Statuses, routes: int, tag: str, stream_s: float, cards: bool) -> dict[str, Any]:
    feishu_cursor = len(stack.feishu.requests_since(0))
    model_cursor = len(stack.claude.requests_since(0))
    sends_before = {chat: len(ts) for chat, ts in stack.feishu.sends().items()}
    sender, events, start, end = ask_all(stack, routes, tag, timeout=stream_s * 3 + 90)
    try:
        out: dict[str, Any] = {"routes": routes, "seconds": round(end - start, 1),
                               "answered": sum(1 for e in events if stack.feishu.replies_to(e.message_id)),
                               "calls": calls(stack, feishu_cursor, routes),
                               "refused": statuses.refused(start, end + 1)}
        chats = {e.target.chat_id for e in events}
        sends = {c: ts for c, ts in stack.feishu.sends().items() if c in chats and len(ts) > sends_before.get(c, 0)}
        peak = stack.feishu.peak_sends(1.0)
        out["peak_sends_per_chat"] = max((peak.get(c, 0) for c in sends), default=0)
        out["rows"] = [per_answer(stack, e, model_cursor, e.token) for e in events] if cards else []
        if cards:
            out["card_content"] = content_pace(stack, {e.message_id for e in events})
        return out
    finally:
        sender.close()


def content_pace(stack: Stack, asked: set[str]) -> dict[str, Any]:
    """When the cards' content updates happened: the most in any 60 s and in any second (the outbox paces them
    by the app's per-minute and per-second windows), and when the last one was, from the first card."""
    ours = {m["message_id"] for m in stack.feishu.messages if m.get("parent_id") in asked}
    ats = sorted(h["at"] for c in stack.feishu.cards() if c["message_id"] in ours
                 for h in stack.feishu.card_history(c["card_id"]) if h["op"] == "card_content")
    creates = [h["at"] for c in stack.feishu.cards() if c["message_id"] in ours
               for h in stack.feishu.card_history(c["card_id"]) if h["op"] == "card_create"]
    if not ats:
        return {}
    minute = max(sum(1 for t in ats if s <= t < s + 60) for s in ats)
    second = max(sum(1 for t in ats if s <= t < s + 1) for s in ats)
    return {"calls": len(ats), "max_in_60s": minute, "max_in_1s": second,
            "last_after_first_card_s": round(ats[-1] - min(creates), 1)}


def summarise(streamed: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any]:
    rows = [r for r in streamed["rows"] if "error" not in r]
    first_visible = [r["first_visible_s"] for r in rows]
    first_op = [r["first_op_s"] for r in rows]
    gaps = [r["max_gap_s"] for r in rows if r["max_gap_s"] is not None]
    writing_gaps = [r["max_gap_writing_s"] for r in rows if r["max_gap_writing_s"] is not None]
    created = sorted(r["created_at"] for r in rows)
    s, b = streamed["calls"]["per_answer"], baseline["calls"]["per_answer"]
    return {
        "answers": len(streamed["rows"]), "measured": len(rows),
        "errors": [r for r in streamed["rows"] if "error" in r],
        "first_visible_p50_s": pct(first_visible, 0.5), "first_visible_p99_s": pct(first_visible, 0.99),
        "first_card_op_p50_s": pct(first_op, 0.5), "first_card_op_p99_s": pct(first_op, 0.99),
        "max_gap_p50_s": pct(gaps, 0.5), "max_gap_max_s": max(gaps, default=None),
        "max_gap_while_writing_max_s": max(writing_gaps, default=None),
        "updates_while_writing_median": pct([r["updates_while_writing"] for r in rows], 0.5),
        "final_after_model_p50_s": pct([r["final_after_model_s"] for r in rows], 0.5),
        "final_after_model_p99_s": pct([r["final_after_model_s"] for r in rows], 0.99),
        "cards_created_within_s": round(created[-1] - created[0], 2) if created else None,
        "complete": sum(1 for r in rows if r["complete"]),
        "one_reply_one_card": sum(1 for r in rows if r["replies"] == 1 and r["cards"] == 1),
        "calls_per_answer_streamed": s, "calls_per_answer_baseline": b,
        "calls_ratio": round(s / b, 2) if b else None,
        "refused": {"streamed": streamed["refused"], "baseline": baseline["refused"]},
        "card_content_pace": streamed.get("card_content", {}),
        "peak_sends_per_chat": max(streamed["peak_sends_per_chat"], baseline["peak_sends_per_chat"]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--routes", type=int, default=30)
    parser.add_argument("--stream", type=float, default=40.0, help="seconds over which each answer is written")
    parser.add_argument("--delay", type=float, default=0.5, help="model time to first token")
    parser.add_argument("--quick", action="store_true", help="8 routes × 10 s")
    parser.add_argument("--api-qpm", type=int, default=None,
                        help="FEISHU_API_QPM for the service (diagnosis only: the outbox paces card_content by it)")
    args = parser.parse_args(argv)
    if args.quick:
        args.routes, args.stream = 8, 10.0
    env = {"REPLY_STREAMING": "card", "STREAM_UPDATE_SECONDS": "1", "LLM_TIMEOUT_SECONDS": "120",
           "RUN_BUDGET_SECONDS": "3600", "FEISHU_TIMEOUT_SECONDS": "10"}
    if args.api_qpm:
        env["FEISHU_API_QPM"] = str(args.api_qpm)
    started = time.monotonic()
    with Stack(workers=max(30, args.routes) if not args.quick else max(8, args.routes), env=env) as stack:
        stack.feishu.set_chat_qps(CHAT_QPS)  # Feishu's 5 sends/s per chat: a refusal would show as 230020
        statuses = Statuses(stack)
        tag = f"st{int(time.time()) % 10000}"
        stack.claude.set_responder(responder(re.compile(r"k[0-9a-f]{4}n\d{5}")))
        stack.claude.set_delay(args.delay)
        stack.claude.set_stream(args.stream)
        streamed = phase(stack, statuses, args.routes, f"{tag}s", args.stream, cards=True)
        print(json.dumps({k: v for k, v in streamed.items() if k != "rows"}), flush=True)
        stack.reconfigure(REPLY_STREAMING="off")
        baseline = phase(stack, statuses, args.routes, f"{tag}b", args.stream, cards=False)
        print(json.dumps({k: v for k, v in baseline.items() if k != "rows"}), flush=True)
    summary = summarise(streamed, baseline)
    checks = {
        f"first token → first visible text p99 ≤ {FIRST_VISIBLE_S:g} s":
            summary["first_visible_p99_s"] is not None and summary["first_visible_p99_s"] <= FIRST_VISIBLE_S,
        f"longest gap between visible updates ≤ {UPDATE_GAP_S:g} s":
            summary["max_gap_max_s"] is not None and summary["max_gap_max_s"] <= UPDATE_GAP_S,
        "every answer: one reply, one card, complete and closed":
            summary["complete"] == summary["one_reply_one_card"] == args.routes,
        "no 429 / 99991400 / 230020": not summary["refused"]["streamed"] and not summary["refused"]["baseline"],
        f"peak sends per chat ≤ {CHAT_QPS}/s": summary["peak_sends_per_chat"] <= CHAT_QPS,
    }
    result = {"routes": args.routes, "stream_s": args.stream, "delay_s": args.delay, "quick": args.quick,
              "api_qpm": args.api_qpm,
              "wall_s": round(time.monotonic() - started, 1), "summary": summary, "checks": checks,
              "streamed": streamed, "baseline": baseline}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    out = OUT.with_name(f"streaming-qpm{args.api_qpm}.json") if args.api_qpm else OUT
    out.write_text(json.dumps(result, ensure_ascii=False, indent=2) + "\n")
    print(json.dumps(summary, ensure_ascii=False, indent=2))
    print(f"Open API calls per answer: streamed {streamed['calls']['by_op_per_answer']} = "
          f"{summary['calls_per_answer_streamed']}; baseline {baseline['calls']['by_op_per_answer']} = "
          f"{summary['calls_per_answer_baseline']}")
    for name, ok in checks.items():
        print(f"{'PASS' if ok else 'FAIL'}: {name}")
    print(f"full report: {out}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
