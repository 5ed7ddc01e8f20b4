"""Progress reactions and rendered long replies through the real stack (issue 8, acceptance 1 and 2)."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from feishu.render import plain_of
from tests.harness import (
    WebServer,
    deliver,
    message_id,
    model_requests_with,
    route_key,
    session_log,
    settings_from,
    unique,
    wait_for,
    wait_route_idle,
)
from tests.test_crash import CrashRig, _kill_when
from turn.progress import FAILED, WORKING

FENCE = re.compile(r"^```")


def answer_with_code(lines: int = 420) -> str:
    code = "\n".join(f"    step_{i} = handle(queue, {i})  # 第 {i} 步" for i in range(lines))
    prose = "\n\n".join(f"第 {i} 段：" + "这里解释为什么这样处理消息队列。" * 5 for i in range(10))
    return f"# 处理方案\n\n{prose}\n\n```python\ndef main():\n{code}\n```\n\n## 小结\n\n- 幂等\n- 有序\n"


def model_start(claude, needle: str) -> float:
    return min(float(c["time"]) for c in model_requests_with(claude, needle))


def test_reaction_shows_while_a_slow_turn_runs_and_goes_after_the_reply(service, feishu, claude, r, keys) -> None:
    claude.set_delay(5.0)
    chat = unique("oc_p2p")
    env = deliver(service, feishu, chat_id=chat, chat_type="p2p", text="慢慢想的问题")
    mid = message_id(env)
    shown = feishu.wait_for(lambda: feishu.reactions(mid), timeout=30)
    assert shown[0]["reaction_type"] == {"emoji_type": WORKING} and shown[0]["removed_at"] is None
    reply = feishu.wait_for(lambda: feishu.replies_to(mid), timeout=60)[0]
    wait_route_idle(r, keys, route_key("p2p", chat))
    (reaction,) = feishu.reactions(mid)  # one, never a second
    asked = model_start(claude, "慢慢想的问题")
    replied = [q["time"] for q in feishu.requests if q["op"] == "reply" and q["params"]["message_id"] == mid]
    assert reaction["added_at"] <= asked  # visible before the model even started its 5 s
    assert reaction["removed_at"] is not None and reaction["removed_at"] >= max(replied)
    assert reaction["operator"]["operator_type"] == "app" and reaction["reaction_id"]
    assert reply["msg_type"] == "text"  # the stand-in's plain echo stays a text message


def test_failing_turn_leaves_the_failure_reaction_once(service, feishu, claude, r, keys) -> None:
    marker = unique("总是失败")
    claude.fail_when(marker, status=500)
    chat = unique("oc_p2p")
    env = deliver(service, feishu, chat_id=chat, chat_type="p2p", text=f"{marker} 这个问题")
    mid = message_id(env)
    feishu.wait_for(lambda: [x for x in feishu.reactions(mid) if x["reaction_type"]["emoji_type"] == FAILED],
                    timeout=60)
    wait_route_idle(r, keys, route_key("p2p", chat), timeout=60)
    claude.clear_fail_when(marker)
    assert len(model_requests_with(claude, marker)) >= 3  # retried until dead-lettered
    kinds = [(x["reaction_type"]["emoji_type"], x["removed_at"] is None) for x in feishu.reactions(mid)]
    assert kinds == [(WORKING, False), (FAILED, True)]  # one working reaction across the retries, then gone
    assert len(feishu.replies_to(mid)) == 1  # the dead-letter notice


def test_markdown_answer_is_posted_rendered_and_logged_as_markdown(service, feishu, claude, r, keys) -> None:
    answer = ("## 排查步骤\n\n**先看日志**，再读 [文档](https://open.feishu.cn/document)。\n\n"
              "- 重启服务\n- 清缓存\n\n```bash\ntail -f app.log\n```\n之后再试，先 cp ~/.bashrc ~/backup。")
    claude.set_responder(lambda body: answer)
    chat = unique("oc_grp")
    env = deliver(service, feishu, chat_id=chat, chat_type="group", sender_open_id="ou_alice",
                  text="@_user_1 怎么排查", mentions=[{"key": "@_user_1", "id": {"open_id": "ou_bot"},
                                                       "name": "助手"}])
    (reply,) = feishu.wait_for(lambda: feishu.replies_to(message_id(env)), timeout=30)
    wait_route_idle(r, keys, route_key("group", chat, "ou_alice"))
    assert reply["msg_type"] == "post"
    rows = [e for row in json.loads(reply["body"]["content"])["zh_cn"]["content"] for e in row]
    assert {e["tag"] for e in rows} == {"md"}
    assert "```bash\ntail -f app.log\n```" in [e["text"] for e in rows]
    assert any("`~/.bashrc` `~/backup。`" in e["text"] for e in rows)  # issue 14 B6: no ~underline~ pairs
    (said,) = [e for e in session_log(r, keys, route_key("group", chat, "ou_alice")) if e["role"] == "assistant"]
    assert said["text"] == answer  # history keeps the Markdown source, not the rendered JSON


@pytest.fixture()
def rig(env: dict[str, str], workdir: Path) -> Iterator[CrashRig]:
    from tests.harness import Proc, stop_all

    own = {**env, "BOT_PROFILE": unique("render"), "WORKER_CONCURRENCY": "1"}
    made = CrashRig(WebServer(settings_from(own)), own, workdir)
    sweeper = Proc(["-m", "jobs.sweeper"], own, str(workdir), workdir / f"{made.profile}-sweeper.log")
    yield made
    made.web.stop()
    stop_all([*made.procs, sweeper])


def test_long_answer_with_code_arrives_in_order_once_across_a_worker_kill(rig: CrashRig, feishu, claude, r) -> None:
    answer = answer_with_code()
    assert len(answer) >= 12000
    claude.set_responder(lambda body: answer)
    workers = rig.start_workers(2)
    second_chunk = threading.Event()
    seen: list[Any] = []

    def hold_second(record: dict) -> None:
        if record.get("status") == 200:
            seen.append(record["json"]["uuid"])
            if len(set(seen)) == 2 and not second_chunk.is_set():
                second_chunk.set()  # two chunks are at Feishu: hold this answer while the kill lands
                time.sleep(1.0)

    feishu.on("reply", hold_second, when="after")
    chat = unique("oc_p2p")
    env = deliver(rig.web, feishu, chat_id=chat, chat_type="p2p", text="长回答被杀测试")
    mid = message_id(env)
    rk = route_key("p2p", chat, profile=rig.profile)
    _kill_when(second_chunk, rig, rk, workers, "the second chunk")
    wait_for(lambda: session_log(r, rig.keys, rk), timeout=90, what="the batch committed by a later run")
    wait_route_idle(r, rig.keys, rk, timeout=40)
    replies = sorted(feishu.replies_to(mid), key=lambda m: int(m["create_time"]))
    uuids = [q["json"]["uuid"] for q in feishu.requests if q["op"] == "reply"]
    assert len(replies) == len(set(uuids)) >= 4  # each chunk posted once, though the kill made a rerun send again
    texts = [plain_of(m["msg_type"], m["body"]["content"]) for m in replies]
    for text in texts:
        assert len([ln for ln in text.split("\n") if FENCE.match(ln)]) % 2 == 0, text[:300]  # no open block
    lines = [ln for t in texts for ln in t.split("\n") if ln.strip() and not FENCE.match(ln)]
    assert lines == [ln for ln in answer.split("\n") if ln.strip() and not FENCE.match(ln)]  # in order, complete
    assert len(model_requests_with(claude, "长回答被杀测试")) == 1  # the stored answer was sent, not asked again
    (reaction,) = feishu.reactions(mid)
    assert reaction["removed_at"] is not None
    (said,) = [e for e in session_log(r, rig.keys, rk) if e["role"] == "assistant"]
    assert said["text"] == answer.strip()  # the model adapter trims the text; nothing else changes it
