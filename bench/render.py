"""Rendered replies (issue 8): time from the model's answer to the reply stored at Feishu, text vs post vs card.

The real outbox (feishu/render.py + runs/outbox.py: render, ledger, pacer scripts, lark-oapi over
HTTP) against the Feishu emulator and an embedded Redis, in one process. The clock starts when the answer is handed to
`Outbox.reply` (the model's answer is stored by then) and stops at the emulator's record of the reply request
(when Feishu has the message). Each send goes to a chat of its own and the app tier is opened wide, so the
numbers are rendering and delivery, not the 5/s pacing (tests/test_pacing.py covers that). Kinds alternate
send by send, so drift hits them alike; results are ratios to text in the same run.

    python -m bench.render              # 150 sends per kind (~1 min)
    python -m bench.render --n 40
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import redis

from core.keys import Keys
from core.settings import Settings
from feishu.client import FeishuApi
from feishu.render import choose_style
from runs.inbox import Inbox
from runs.outbox import Destination, Limits, Outbox
from sandbox.feishu.emulator import FeishuEmulator
from state.embedded import ensure_server, stop_server

OUT = Path(__file__).resolve().parent / "results" / "render.json"
PROSE = "这一段解释为什么这样处理，以及下一步该做什么。"
ANSWERS = {
    "text": "\n".join(PROSE * 3 for _ in range(8)),
    "post": "## 排查步骤\n\n" + "\n".join(f"- **第 {i} 步**：{PROSE} [文档](https://open.feishu.cn/document)"
                                       for i in range(8)) + "\n\n```bash\ntail -f app.log\n```",
    "card": "| 步骤 | 说明 |\n|---|---|\n" + "\n".join(f"| {i} | {PROSE * 2} |" for i in range(8)),
}


def _outbox(feishu_url: str, redis_url: str) -> tuple[Outbox, redis.Redis]:
    env = {"feishu_app_id": "cli_bench", "feishu_app_secret": "bench-secret", "feishu_verification_token": "t",
           "feishu_encrypt_key": "k", "feishu_domain": feishu_url, "anthropic_api_key": "sk-bench",
           "redis_url": redis_url, "bot_profile": "benchrender"}
    settings = Settings(_env_file=None, **env)  # type: ignore[call-arg,arg-type]
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    keys = Keys("benchrender")
    inbox = Inbox(r, keys, 30_000)
    return Outbox(inbox, keys, FeishuApi(settings, r, keys), Limits(3500, chat_qps=5, app_qps=100_000)), r


def _one(outbox: Outbox, emu: FeishuEmulator, kind: str) -> float:
    chat, target = f"oc_bench_{uuid.uuid4().hex[:12]}", f"om_{uuid.uuid4().hex[:16]}"
    emu.add_message(target, chat, text="问题", chat_mode="p2p")
    started = time.time()
    outbox.reply(Destination("bench:render", chat, target), uuid.uuid4().hex, ANSWERS[kind])
    arrived = max(q["time"] for q in emu.requests_since(0) if q["op"] == "reply"
                  and q["params"].get("message_id") == target)
    return (arrived - started) * 1000


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench.render")
    parser.add_argument("--n", type=int, default=150)
    args = parser.parse_args(argv)
    assert {k: choose_style(v) for k, v in ANSWERS.items()} == {"text": "text", "post": "post", "card": "interactive"}
    var = tempfile.mkdtemp(prefix="fb-bench-render-")
    emu = FeishuEmulator(app_id="cli_bench", app_secret="bench-secret").start()
    try:
        outbox, _ = _outbox(emu.url, ensure_server(var))
        for kind in ANSWERS:  # warm-up: token, connections, scripts
            _one(outbox, emu, kind)
        times: dict[str, list[float]] = {k: [] for k in ANSWERS}
        for i in range(args.n):
            for kind in list(ANSWERS)[i % 3:] + list(ANSWERS)[:i % 3]:
                times[kind].append(_one(outbox, emu, kind))
            if i % 50 == 49:
                emu.reset(keep_tokens=True)  # keep the emulator's request log short
    finally:
        emu.stop()
        stop_server(var)
    return _report(times, args.n)


def _report(times: dict[str, list[float]], n: int) -> int:
    base50, base99 = _pct(times["text"], 50), _pct(times["text"], 99)
    rows = {k: {"p50_ms": round(_pct(v, 50), 2), "p99_ms": round(_pct(v, 99), 2),
                "p50_vs_text": round(_pct(v, 50) / base50, 2), "p99_vs_text": round(_pct(v, 99) / base99, 2),
                "mean_ms": round(statistics.fmean(v), 2), "chars": len(ANSWERS[k])} for k, v in times.items()}
    print(f"answer → rendered reply at Feishu, {n} sends per kind (one chunk each)")
    print(f"{'kind':6} {'chars':>6} {'p50 ms':>8} {'p99 ms':>8} {'p50/text':>9} {'p99/text':>9}")
    for kind, row in rows.items():
        print(f"{kind:6} {row['chars']:>6} {row['p50_ms']:>8} {row['p99_ms']:>8} {row['p50_vs_text']:>9} "
              f"{row['p99_vs_text']:>9}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"n": n, "kinds": rows, "at": round(time.time())}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
