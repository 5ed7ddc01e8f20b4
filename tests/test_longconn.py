"""Long-connection mode through the real stack: the `ws` process (lark-oapi ws.Client) against the emulated
endpoint, with real workers, sweeper and Redis (issue 8, acceptance 3)."""

from __future__ import annotations

import json
import os
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from core.keys import Keys
from sandbox.feishu.emulator import FeishuEmulator
from sandbox.feishu.events import mention
from state.embedded import ensure_server, stop_server
from tests.harness import (
    APP_ID,
    APP_SECRET,
    BOT_OPEN_ID,
    Proc,
    WebServer,
    deliver,
    message_id,
    route_key,
    service_env,
    settings_from,
    stop_all,
    unique,
    wait_for,
    wait_route_idle,
    wait_routes_idle,
    wait_serving,
)

AT_BOT = [mention(BOT_OPEN_ID, "助手")]


class _Pushed:
    status_code, text = 200, ""


class OverWs:
    """`harness.deliver`'s transport for the long connection: the emulator pushes the event to ONE client."""

    def __init__(self, feishu: FeishuEmulator, frames: int = 1, drop_acks: int = 0) -> None:
        self.feishu, self.frames, self.drop_acks = feishu, frames, drop_acks

    def post(self, payload: dict[str, Any]) -> _Pushed:
        self.feishu.ws.push(payload, frames=self.frames, drop_acks=self.drop_acks)
        return _Pushed()


def ws_procs(env: dict[str, str], workdir: Path, name: str, n: int) -> list[Proc]:
    """`n` ws processes started as the Procfile's `ws` line starts them."""
    return [Proc(["-m", "bot.longconn"], env, str(workdir), workdir / f"{name}-ws{i}.log") for i in range(n)]


@pytest.fixture(scope="module")
def rig(env: dict[str, str], workdir: Path, r: redis.Redis, feishu: FeishuEmulator) -> Iterator[tuple[WebServer, Keys]]:
    """Its own profile: web (for the webhook comparison), sweeper, worker and two ws processes."""
    profile = unique("ws")
    own = {**env, "BOT_PROFILE": profile, "FEISHU_CONNECTION_MODE": "websocket"}
    web, keys = WebServer(settings_from(own)), Keys(profile)
    procs = [Proc(["-m", "jobs.sweeper"], own, str(workdir), workdir / f"{profile}-sweeper.log"),
             Proc(["-m", "jobs.worker", "--name", profile], own, str(workdir), workdir / f"{profile}-worker.log"),
             *ws_procs(own, workdir, profile, 2)]
    wait_for(lambda: r.get(keys.bot_open_id), 60, what="the rig's sweeper")
    wait_serving(r, procs, profile)
    wait_for(lambda: all(p.alive() for p in procs) and len(feishu.ws_clients()) >= 2, 60, what="two ws clients")
    yield web, keys
    web.stop()
    stop_all(procs)
    wait_for(lambda: not feishu.ws_clients(), 20, what="ws clients gone")


def shape(feishu: FeishuEmulator, envelope: dict[str, Any]) -> dict[str, Any]:
    """Where and how the bot answered one message, independent of ids."""
    m = envelope["event"]["message"]
    replies = feishu.replies_to(message_id(envelope))
    calls = [c for c in feishu.requests if c["op"] in ("reply", "create")
             and c["params"].get("message_id") == message_id(envelope)]
    return {"count": len(replies), "types": [x["msg_type"] for x in replies],
            "contents": [x["body"]["content"] for x in replies],
            "in_its_thread": [x.get("thread_id") == m.get("thread_id") for x in replies],
            "reply_in_thread": sorted({bool(c["json"].get("reply_in_thread")) for c in calls})}


def scenarios(feishu: FeishuEmulator) -> dict[str, dict[str, Any]]:
    chat_p2p, chat_group, chat_topic = unique("oc_p2p"), unique("oc_grp"), unique("oc_topic")
    thread, root = unique("omt"), unique("om_root")
    feishu.add_message(root, chat_topic, text="root", thread_id=thread)
    return {
        "p2p": {"chat_id": chat_p2p, "chat_type": "p2p", "text": "登录页报错 500 怎么办"},
        "group": {"chat_id": chat_group, "chat_type": "group", "text": "@_user_1 看下这个报表",
                  "mentions": AT_BOT},
        "topic": {"chat_id": chat_topic, "chat_type": "group", "thread_id": thread, "root_id": root,
                  "parent_id": root, "text": "@_user_1 话题里的追问", "mentions": AT_BOT},
    }


def final_turns(claude: Any) -> list[str]:
    """The new-input part (the last user turn) of every model request; history comes before it."""
    return [json.dumps(req["body"]["messages"][-1]["content"], ensure_ascii=False) for req in claude.requests]


def route_of(kind: str, kw: dict[str, Any], keys: Keys) -> str:
    rest = {"p2p": [], "group": ["ou_user"], "topic": [kw.get("thread_id", "")]}[kind]
    return route_key(kind, kw["chat_id"], *rest, profile=keys.profile)


def test_p2p_group_and_topic_are_answered_as_over_the_webhook(rig, feishu, claude, r) -> None:
    web, keys = rig
    pairs = []
    for transport in (web, OverWs(feishu, frames=3)):  # the same messages, in chats of their own
        cases = scenarios(feishu)
        sent = {kind: deliver(transport, feishu, **kw) for kind, kw in cases.items()}
        pairs.append((cases, sent))
        for envelope in sent.values():
            feishu.wait_for(lambda e=envelope: feishu.replies_to(message_id(e)), 60)
        wait_routes_idle(r, keys, [route_of(k, kw, keys) for k, kw in cases.items()])
    (_, over_http), (_, over_ws) = pairs
    for kind in ("p2p", "group", "topic"):
        assert shape(feishu, over_ws[kind]) == shape(feishu, over_http[kind]), kind
        assert shape(feishu, over_ws[kind])["count"] == 1
    assert shape(feishu, over_ws["topic"])["reply_in_thread"] == [True]
    assert {a["code"] for a in feishu.ws_acks()} == {200}


def test_two_ws_processes_never_answer_one_message_twice(rig, feishu, claude, r) -> None:
    """Cluster delivery: each event goes to ONE client. Its ack is lost (as if later than 3 s), so once the
    message is answered Feishu delivers it again, to the OTHER client, which stores it too: dedupe must
    leave one turn and one reply per message."""
    _, keys = rig
    chats = [unique("oc_dup") for _ in range(10)]
    feishu.ws.redeliver_after = 3600.0  # redelivered only when the test expires the timer
    try:
        sent = [deliver(OverWs(feishu, drop_acks=1), feishu, chat_id=c, chat_type="p2p", text=f"问题 {i}。")
                for i, c in enumerate(chats)]
        for envelope in sent:
            feishu.wait_for(lambda e=envelope: feishu.replies_to(message_id(e)), 60)
        events = {e["header"]["event_id"] for e in sent}
        mine = lambda: [d for d in feishu.ws.deliveries() if d["event_id"] in events]  # noqa: E731
        assert not [d for d in mine() if d["acked"]]
        assert feishu.ws.expire() == len(events)
        feishu.wait_for(lambda: all(d["acked"] for d in mine()), 30)
    finally:
        feishu.ws.redeliver_after = 1.0
    wait_routes_idle(r, keys, [route_key("p2p", c, profile=keys.profile) for c in chats])
    for d in mine():  # both clients got every event: the second delivery went to the other one
        assert d["attempts"] == 2 and len(set(d["clients"])) == 2, d
    assert len({d["clients"][0] for d in mine()}) == 2  # and the first deliveries were spread over both
    assert all(len(feishu.replies_to(message_id(e))) == 1 for e in sent)
    for i in range(len(chats)):  # and each message was one turn's new input, once
        assert sum(f"问题 {i}。" in turn for turn in final_turns(claude)) == 1
    acks = [a for a in feishu.ws_acks() if a["event_id"] in events]
    assert len(acks) == 2 * len(events) and {a["code"] for a in acks} == {200}


# -- Redis down: not acknowledged, answered after redelivery ------------------------------------------------

def _stop_redis(var: Path) -> None:
    pid = int((var / "redis.pid").read_text().strip())
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: not Path(f"/proc/{pid}").exists() or "zombie" in _state(pid), 15, what="redis stopped")


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return "zombie"


@pytest.fixture
def own_stack(claude: Any) -> Iterator[tuple[FeishuEmulator, Path, dict[str, str]]]:
    """An emulator and a Redis of its own (this test stops that Redis), with sweeper, worker and one ws."""
    base = Path(tempfile.mkdtemp(prefix="fbws-"))
    var = base / "var"
    url = ensure_server(str(var))
    emu = FeishuEmulator(app_id=APP_ID, app_secret=APP_SECRET, bot_open_id=BOT_OPEN_ID).start()
    emu.ws.redeliver_after, emu.ws.max_attempts = 0.5, 1000
    env = service_env(url, emu.url, claude.url, BOT_PROFILE=unique("wsdown"), FEISHU_CONNECTION_MODE="websocket")
    procs = [Proc(["-m", "jobs.sweeper"], env, str(base), base / "sweeper.log"),
             Proc(["-m", "jobs.worker"], env, str(base), base / "worker.log"), *ws_procs(env, base, "down", 1)]
    state = redis.Redis.from_url(url, decode_responses=True)
    try:
        wait_for(lambda: state.get(Keys(env["BOT_PROFILE"]).bot_open_id), 60, what="sweeper")
        wait_for(lambda: all(p.alive() for p in procs) and emu.ws_clients(), 60, what="the ws client")
        yield emu, var, env
    finally:
        stop_all(procs)
        emu.stop()
        stop_server(str(var))


def test_an_event_received_while_redis_is_down_is_not_acknowledged_and_answered_after_redelivery(own_stack) -> None:
    emu, var, env = own_stack
    keys = Keys(env["BOT_PROFILE"])
    _stop_redis(var)
    chat = unique("oc_down")
    envelope = deliver(OverWs(emu), emu, chat_id=chat, chat_type="p2p", text="Redis 停了也别丢")
    event_id = envelope["header"]["event_id"]
    refused = emu.wait_for(lambda: [a for a in emu.ws_acks() if a["event_id"] == event_id], 20)
    assert refused[0]["code"] == 500  # the SDK's "not handled": Feishu must deliver it again
    assert not [d for d in emu.ws.deliveries() if d["event_id"] == event_id and d["acked"]]
    ensure_server(str(var))
    state = redis.Redis.from_url(env["REDIS_URL"], decode_responses=True)
    emu.wait_for(lambda: emu.replies_to(message_id(envelope)), 90)
    wait_route_idle(state, keys, route_key("p2p", chat, profile=keys.profile), timeout=60)
    assert len(emu.replies_to(message_id(envelope))) == 1
    acks = [a for a in emu.ws_acks() if a["event_id"] == event_id]
    assert acks[-1]["code"] == 200 and acks[-1]["attempt"] >= 2
    assert [a["code"] for a in acks[:-1]] == [500] * (len(acks) - 1)


# -- webhook mode: the Procfile line idles --------------------------------------------------------------------


# Webhook mode (the default): the Procfile's ws line idles — checked by tests/test_run_e2e.py under honcho.
