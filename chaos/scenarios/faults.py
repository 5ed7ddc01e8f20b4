"""Scenarios 5-7: Open API faults under per-chat pacing, model faults with dead letters and a replay, and a
poison message inside a shared topic batch."""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any

import requests

from chaos.load import Event, Target, group_targets, p2p_targets
from chaos.measure import NOTICE_MARKS, Run, reply_text
from chaos.report import Result
from chaos.scenarios.base import Context, scenario
from sandbox.claude.wire import default_reply

SEND_FAULTS = {"rate_limit": 2.0, "chat_limit": 1.0, "token_invalid": 1.0, "gateway": 1.0, "gateway_after": 1.0,
               "timeout": 1.0, "reset": 1.0, "reset_after": 1.0}
TOKEN_FAULTS = {"rate_limit": 1.0, "gateway": 1.0, "timeout": 1.0, "reset": 1.0}
MODEL_FAULTS = {"overloaded": 3.0, "rate_limit": 2.0, "api_error": 2.0, "reset": 1.0, "timeout": 1.0}


CHUNK_LINE = 1200  # three reply chunks per answer (REPLY_CHUNK_CHARS 3500): three sends that can fail


def long_answer(body: dict[str, Any]) -> str:
    """The stand-in's echo followed by numbered padding lines, so each answer is sent as several chunks."""
    lines = [f"[段{i}]" + "补充说明" * (CHUNK_LINE // 4) for i in range(1, 6)]
    return "\n".join([default_reply(body), *lines])


def chunk_problems(run: Run) -> list[str]:
    """Per replied-to message, each padding line must be delivered exactly once and in order."""
    seen: dict[str, list[int]] = {}
    for m in run.messages():
        seen.setdefault(str(m.get("parent_id")), []).extend(int(x) for x in re.findall(r"\[段(\d)\]", reply_text(m)))
    return [f"{parent}: {segs}" for parent, segs in seen.items() if segs and segs != [1, 2, 3, 4, 5]]


def arrival_peaks(run: Run, chats: set[str], window: float = 1.0) -> dict[str, int]:
    """Per chat, the most reply requests (attempts, whatever their outcome) that arrived within `window`."""
    chat_of = {mid: e.target.chat_id for e in run.sender.events for mid in e.message_ids}
    times: dict[str, list[float]] = {}
    for req in run.stack.feishu.requests_since(run.feishu_requests_from):
        chat = chat_of.get(req["params"].get("message_id", ""))
        if req["op"] == "reply" and chat in chats:
            times.setdefault(chat, []).append(req["time"])
    peaks = {}
    for chat, ts in times.items():
        ts.sort()
        start = best = 0
        for end, t in enumerate(ts):
            while t - ts[start] >= window:
                start += 1
            best = max(best, end - start + 1)
        peaks[chat] = best
    return peaks


def notices_to(run: Run, ev: Event) -> list[dict[str, object]]:
    return [m for m in run.messages() if m.get("parent_id") in ev.message_ids
            and any(mark in reply_text(m) for mark in NOTICE_MARKS)]


@scenario(5, "Open API faults on 20% of calls, 5 sends/s per chat")
def open_api_faults(ctx: Context, result: Result) -> None:
    stack = ctx.stack
    chats, senders, n = ctx.size(2, 4), ctx.size(6, 10), ctx.size(30, 200)
    result.size = f"{n} msgs / {chats} chats x {senders} senders, 3 chunks per answer"
    stack.claude.set_responder(long_answer)
    timeout = float(stack.env["FEISHU_TIMEOUT_SECONDS"]) + 0.5  # the emulator answers after the client gave up
    stack.feishu.set_chat_qps(5)
    stack.feishu.set_profile(["reply", "create"], 0.2, SEND_FAULTS, seed=ctx.seed, reset_seconds=1,
                             timeout_seconds=timeout)
    stack.feishu.set_profile("token", 0.2, TOKEN_FAULTS, seed=ctx.seed, reset_seconds=1, timeout_seconds=timeout)
    stack.r.delete(*stack.r.keys(stack.keys.lark_cache("*")) or ["-"])  # every horse fetches a token again
    stack.feishu.expire_tokens()
    before = stack.feishu.stats
    run = ctx.run(result, dup_rate=0.05)
    try:
        targets = group_targets(chats, senders, "s5")
        run.sender.open_loop(targets, rate=ctx.size(12, 20), count=n)
        run.phase("sending")
        run.settle(idle_timeout=90)
        run.finish()
        stats = stack.feishu.stats
        ours = {t.chat_id for t in targets}
        peaks = {c: p for c, p in stack.feishu.peak_sends(1.0).items() if c in ours}
        rejected = {c: k for c, k in stats["chat_limit_rejections"].items() if c in ours}
        faults = {op: {k: v - before["faults"].get(op, {}).get(k, 0) for k, v in kinds.items()}
                  for op, kinds in stats["faults"].items()}
        injected = sum(sum(kinds.values()) for kinds in faults.values())
        sends = sum(len(v) for c, v in stack.feishu.sends().items() if c in ours)
        result.check("faults injected", injected >= 5, f"{injected} faults: {faults}")
        result.check("every chunk exactly once, in order", not chunk_problems(run), f"{chunk_problems(run)[:3]}")
        result.check("at most 5 sends per chat in any second", max(peaks.values(), default=0) <= 5, f"peaks {peaks}")
        # The service paces on Redis time when a send starts, the emulator counts arrivals: jitter can make
        # an arrival window hold a sixth send now and then. Systematic overshoot would show in many.
        result.check("pacing: the 5/s limiter rarely refuses", sum(rejected.values()) <= max(1, sends // 20),
                     f"230020 from the limiter: {rejected} for {sends} sends; reply attempts arriving per chat "
                     f"in any second: {arrival_peaks(run, ours)}", timed=True)
        dedupe = stats["dedupe_hits"] - before["dedupe_hits"]
        result.notes.append(f"faults injected: {faults}; uuid dedupe hits: {dedupe}; {sends} sends; "
                            f"peak sends per chat: {max(peaks.values(), default=0)}; "
                            f"refused by the 5/s limiter: {sum(rejected.values())}")
    finally:
        run.close()


def replay(ctx: Context, dead_id: str, token: str | None) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return requests.post(f"{ctx.stack.url}/admin/api/deadletters/{dead_id}/replay", headers=headers, timeout=10)


@scenario(6, "model faults on 30% of calls; exhausted retries dead-letter and replay once")
def model_faults(ctx: Context, result: Result) -> None:
    stack = ctx.stack
    n, routes = ctx.size(30, 150), ctx.size(10, 30)
    result.size = f"{n} msgs / {routes} routes + 1 doomed"
    timeout = float(stack.env["LLM_TIMEOUT_SECONDS"]) + 1.0
    stack.claude.set_profile(0.3, MODEL_FAULTS, seed=ctx.seed, retry_after=0.5, timeout_seconds=timeout)
    marker = f"OVERLOADED{os.urandom(3).hex()}"
    stack.claude.fail_when(marker, kind="overloaded")
    run = ctx.run(result)
    try:
        doomed = run.sender.event(Target("oc_s6_doomed", "p2p", "ou_s6_doomed"), marker=marker)
        run.sender.send(doomed)
        run.sender.open_loop(p2p_targets(routes, "s6"), rate=ctx.size(10, 15), count=n)
        run.barrier("the replay", timeout=120)
        records = [json.loads(x) for x in stack.r.hvals(stack.keys.dead)]
        buried = [r for r in records if set(r["message_ids"]) & set(doomed.message_ids)]
        others = [r for r in records if set(r["message_ids"]) & {m for e in run.sender.events if e is not doomed
                                                                  for m in e.message_ids}]
        result.check("retries ran out: dead-lettered once", len(buried) == 1, f"{len(buried)} records")
        result.check("its sender told once", len(notices_to(run, doomed)) == 1, f"{len(notices_to(run, doomed))}")
        result.check("nothing else dead-lettered", not others, f"{len(others)} others")
        stack.claude.clear_fail_when(marker)  # the model is well again; the faults profile stays on
        if buried:
            refused = replay(ctx, buried[0]["id"], "wrong-" + stack.secrets.admin_token).status_code
            first = replay(ctx, buried[0]["id"], stack.secrets.admin_token)
            second = replay(ctx, buried[0]["id"], stack.secrets.admin_token).status_code
            result.check("replay needs the admin token", refused == 401, f"HTTP {refused}")
            result.check("replayed via the admin API", first.status_code == 200,
                         f"HTTP {first.status_code} {first.text.strip()}")
            result.check("a second replay changes nothing", second == 409, f"HTTP {second}")
        run.settle(idle_timeout=90)
        run.finish(exclude_order={doomed.token})
        carriers = run.book.carriers.get(doomed.token, [])
        result.check("the replay answered it once", len(carriers) == 1, f"{len(carriers)} answers")
        faults = stack.claude.stats["faults"].get("messages", {})
        result.notes.append(f"model faults (stand-in lifetime): {faults}")
    finally:
        run.close()


@scenario(7, "a poison message in a shared topic batch")
def poison_batch(ctx: Context, result: Result) -> None:
    stack = ctx.stack
    topics = ctx.size(1, 3)
    result.size = f"{topics} topic(s) x 4 senders"
    stack.claude.set_delay(1.0)  # the first turn holds the route while the others write: they form one batch
    marker = f"POISON{os.urandom(3).hex()}"
    stack.claude.fail_when(marker, 400, "invalid_request_error")
    run = ctx.run(result)
    try:
        tag = run.sender.tag
        rooms = [[run.sender.add_topic(f"oc_s7_{tag}_{i}", f"omt_s7_{tag}_{i}", f"ou_s7_{who}")
                  for who in ("alice", "bob", "carol", "dave")] for i in range(topics)]
        firsts = [run.sender.event(room[0], "正常问题") for room in rooms]
        for e in firsts:
            run.sender.send(e)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(_asked(ctx, e.token, run.model_cursor) for e in firsts):
            time.sleep(0.05)
        poisons = [run.sender.event(room[1], "请看", marker=marker) for room in rooms]
        rest = [run.sender.event(room[i], "另一个正常问题") for room in rooms for i in (2, 3)]
        for e in [*poisons, *rest]:
            run.sender.send(e)
        run.barrier("the next message", timeout=60)
        after = [run.sender.event(room[3], "之后的问题") for room in rooms]
        for e in after:
            run.sender.send(e)
        run.settle(idle_timeout=60)
        run.finish(exclude_order={e.token for e in poisons}, expect_dead=topics)
        lasts = [json.dumps(q["body"]["messages"][-1]["content"], ensure_ascii=False)  # text or blocks (issue 34)
                 for q in stack.claude.requests_since(run.model_cursor)]
        batched = [last for last in lasts if marker in last and any(e.token in last for e in rest)]
        result.check("the poison reached the model inside a batch", len(batched) >= topics, f"{len(batched)} calls")
        lone = all(d["message_ids"] == [p.message_id] for d in run.dead for p in poisons
                   if p.message_id in d["message_ids"])
        result.check("only the poison dead-lettered", lone and len(run.dead) == topics,
                     f"{[d['message_ids'] for d in run.dead]}")
        told = [len(notices_to(run, p)) for p in poisons]
        result.check("its sender told once", told == [1] * topics, f"notices {told}")
        once = [len(run.book.carriers.get(e.token, [])) for e in [*firsts, *rest, *after]]
        result.check("the others answered once, the route goes on", once == [1] * len(once), f"{once}")
    finally:
        run.close()


def _asked(ctx: Context, token: str, cursor: int) -> bool:
    return any(token in (e.get("last_user") or "") for e in ctx.stack.claude.timeline_since(cursor))
