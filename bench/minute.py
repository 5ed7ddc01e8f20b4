"""A 3,000-reply minute (issue 14 B3): the outbox spreads it under Feishu's 1,000 calls per minute per API.

Sixteen threads send 3,000 replies (30 chats x 100) through the real outbox (pacing scripts on an embedded
Redis, lark-oapi over HTTP) to the Feishu emulator, which enforces 5/s per chat and 1,000/min for the reply API
as Feishu documents them. Reported: refusals (429 / 230020, target 0), the most replies the emulator saw in any
60-second window (≤ 1,000), and the elapsed time against the floor the cap implies ((n - 1000) / 1000 minutes).

    python -m bench.minute               # 3,000 replies (~2–3 min)
    python -m bench.minute --replies 1200
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import redis

from core.keys import Keys
from core.settings import Settings
from feishu.client import FeishuApi
from runs.inbox import Inbox
from runs.outbox import Destination, Limits, Outbox
from sandbox.feishu.emulator import FeishuEmulator
from state.embedded import ensure_server

OUT = Path(__file__).resolve().parent / "results" / "minute.json"


def most_in_window(times: list[float], window: float) -> int:
    times, best, j = sorted(times), 0, 0
    for i, t in enumerate(times):
        while times[j] <= t - window:
            j += 1
        best = max(best, i - j + 1)
    return best


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.minute", description=__doc__.splitlines()[0])
    p.add_argument("--replies", type=int, default=3000)
    p.add_argument("--chats", type=int, default=30)
    args = p.parse_args(argv)
    emu = FeishuEmulator(app_id="cli_bench", app_secret="bench-secret").start()
    emu.set_chat_qps(5)
    url = ensure_server(str(Path("var") / "bench-minute"))
    settings = Settings(_env_file=None, feishu_app_id="cli_bench", feishu_app_secret="bench-secret",  # type: ignore[call-arg]
                        feishu_verification_token="t", feishu_encrypt_key="k", feishu_domain=emu.url,
                        anthropic_api_key="sk-bench", redis_url=url, bot_profile="benchminute")
    r = redis.Redis.from_url(url, decode_responses=True)
    keys = Keys(f"benchminute{int(time.time())}")
    outbox = Outbox(Inbox(r, keys, 30_000), keys, FeishuApi(settings, r, keys),
                    Limits(3500, chat_qps=5, app_qps=50, api_qpm=1000))
    targets = []
    for n in range(args.replies):
        chat, target = f"oc_min_{n % args.chats}", f"om_{uuid.uuid4().hex[:16]}"
        emu.add_message(target, chat, text="问题", chat_mode="p2p")
        targets.append((chat, target))

    def send(pair: tuple[str, str]) -> None:
        chat, target = pair
        outbox.reply(Destination(f"feishu:bench:p2p:{chat}", chat, target), uuid.uuid4().hex, "收到")

    started = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(send, targets))
    elapsed = time.monotonic() - started
    arrivals = [t for times in emu.sends().values() for t in times]
    stats = emu.stats
    refused = {"minute_429": sum(emu.minute_rejections.values()),
               "chat_230020": sum(stats["chat_limit_rejections"].values())}
    floor = max(0.0, (args.replies - 1000) / 1000 * 60)
    result = {"replies": args.replies, "elapsed_s": round(elapsed, 1), "floor_s": floor,
              "ratio_to_floor": round(elapsed / floor, 3) if floor else None, "refused": refused,
              "most_in_60s": most_in_window(arrivals, 60.0), "most_in_1s": most_in_window(arrivals, 1.0)}
    print(json.dumps(result, indent=2))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2))
    emu.stop()
    ok = refused["minute_429"] == 0 and result["most_in_60s"] <= 1000
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
