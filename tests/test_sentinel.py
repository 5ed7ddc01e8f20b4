"""Redis through Sentinel (issue 16): settings and URLs, and the real service riding through failovers.

The scenario runs web, worker and sweeper against a primary, a replica and three sentinels
(sandbox/redis_ha.py), keeps several routes talking, and kills the master twice: once plainly, once
while the replication stream is stalled, so that only acknowledgements that waited for a replica
(`WAIT 1`, state/store.py ReplicaWait) survive. Every event the web answered non-2xx is delivered again,
as Feishu does. Every message must be answered exactly once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
import requests
from pydantic import ValidationError

from core.keys import Keys
from sandbox.claude.standin import ClaudeStandin
from sandbox.feishu.emulator import FeishuEmulator
from sandbox.feishu.events import message_event
from sandbox.redis_ha import SentinelRig
from state import ha as sentinel
from state.ha import SentinelConfigError, Target, parse_address, parse_url
from state.store import ReplicaWait, resolve_url, rq_client, state_client
from tests.harness import (
    APP_ID,
    VERIFICATION_TOKEN,
    Proc,
    WebServer,
    service_env,
    settings_from,
    stop_all,
    unique,
    wait_for,
    worker_count,
)

# -- settings and URLs ------------------------------------------------------------------------------------


def test_sentinel_url_round_trip() -> None:
    t = Target((("10.0.0.1", 26379), ("s2", 26380), ("::1", 5000)), "main", "p@ss:/w", None, 2)
    url = t.url()
    assert url == "redis+sentinel://:p%40ss%3A%2Fw@10.0.0.1:26379,s2:26380,[::1]:5000/main/2"
    assert parse_url(url) == t
    assert "p%40ss" not in t.describe()
    assert parse_url("redis+sentinel://a,b:1/m") == Target((("a", 26379), ("b", 1)), "m")
    assert parse_url("REDIS+SENTINEL://u:pw@a:1/m").username == "u"


@pytest.mark.parametrize("url", [
    "redis+sentinel://a:1", "redis+sentinel://a:1/", "redis+sentinel:///m", "redis+sentinel://a:x/m",
    "redis+sentinel://a:1/m/x", "redis+sentinel://a:1:2/m", "redis+sentinel://a:99999/m", "redis://a:1/0",
])
def test_bad_sentinel_urls(url: str) -> None:
    with pytest.raises(SentinelConfigError):
        parse_url(url)


def test_addresses() -> None:
    assert parse_address(" h:1 ") == ("h", 1)
    assert parse_address("[fe80::1]:7") == ("fe80::1", 7)
    assert parse_address("h") == ("h", 26379)
    with pytest.raises(SentinelConfigError):
        parse_address("fe80::1")


@pytest.mark.parametrize(("env", "says"), [
    ({"REDIS_SENTINELS": "a:1,b:2"}, "REDIS_SENTINEL_MASTER"),
    ({"REDIS_SENTINEL_MASTER": "m"}, "REDIS_SENTINELS is empty"),
    ({"REDIS_SENTINELS": "a:1", "REDIS_SENTINEL_MASTER": "m", "REDIS_URL": "redis://x"}, "either REDIS_URL"),
    ({"REDIS_SENTINELS": "a:port", "REDIS_SENTINEL_MASTER": "m"}, "no valid port"),
    ({"REDIS_URL": "redis+sentinel://a:1/"}, "names no master"),
])
def test_settings_refuse_half_a_sentinel_config(env: dict[str, str], says: str) -> None:
    with pytest.raises(ValidationError) as err:
        settings_from(env)
    assert says in str(err.value)


def test_settings_resolve_to_one_sentinel_url() -> None:
    s = settings_from({"REDIS_SENTINELS": "a:1, b:2", "REDIS_SENTINEL_MASTER": "m", "REDIS_PASSWORD": "pw"})
    assert resolve_url(s) == "redis+sentinel://:pw@a:1,b:2/m"
    url = "redis+sentinel://:pw@a:1,b:2/m/3"
    assert resolve_url(settings_from({"REDIS_URL": url})) == url


def test_no_replica_no_wait(redis_url: str) -> None:
    """A single server: the acknowledgement waits for nobody (and says so only in Sentinel mode)."""
    wait = ReplicaWait(redis.Redis.from_url(redis_url))
    assert not wait.wanted()


# -- the real service through failovers --------------------------------------------------------------------


@dataclass
class Load:
    """Closed-loop senders, one per route: a message, redelivered until the web answers 2xx, then its reply
    awaited before the next one. So each message must get exactly one reply of its own."""

    web: WebServer
    feishu: FeishuEmulator
    chats: list[str]
    stop: threading.Event = field(default_factory=threading.Event)
    sent: dict[str, str] = field(default_factory=dict)  # message_id → chat
    refused: int = 0  # deliveries answered non-2xx (or not at all)
    redelivered: set[str] = field(default_factory=set)
    stuck: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, chat: str) -> None:
        i = 0
        while not self.stop.is_set():
            i += 1
            envelope = message_event(token=VERIFICATION_TOKEN, app_id=APP_ID, chat_id=chat,
                                     text=f"ha {chat} #{i}")
            m = envelope["event"]["message"]
            self.feishu.add_message(m["message_id"], chat, sender_open_id="ou_user", msg_type="text",
                                    content=m["content"], chat_mode="p2p")
            with self.lock:
                self.sent[m["message_id"]] = chat
            while True:  # Feishu's redelivery: the same event again until it is acknowledged
                try:
                    ok = self.web.post(envelope).status_code == 200
                except requests.RequestException:
                    ok = False
                if ok:
                    break
                with self.lock:
                    self.refused += 1
                    self.redelivered.add(m["message_id"])
                time.sleep(0.2)
            deadline = time.monotonic() + 30
            while not self.feishu.replies_to(m["message_id"]):
                if time.monotonic() > deadline:
                    with self.lock:
                        self.stuck.append(m["message_id"])
                    return
                time.sleep(0.05)

    def start(self) -> list[threading.Thread]:
        threads = [threading.Thread(target=self.run, args=(c,), daemon=True) for c in self.chats]
        for t in threads:
            t.start()
        return threads


@pytest.fixture(scope="module")
def ha() -> Iterator[SentinelRig]:
    with SentinelRig() as rig:
        yield rig


def test_failover_mid_load_loses_nothing_and_answers_once(ha: SentinelRig, feishu: FeishuEmulator,
                                                          claude: ClaudeStandin,
                                                          workdir: Path) -> None:
    profile = unique("ha")
    env = service_env("", feishu.url, claude.url, BOT_PROFILE=profile, WORKER_CONCURRENCY="4",
                      RUN_LEASE_SECONDS="3")
    del env["REDIS_URL"]
    env.update(ha.env())
    keys = Keys(profile)
    url = resolve_url(settings_from(env))
    r = state_client(url)
    procs = [Proc(["-m", "jobs.worker", "--name", profile], env, str(workdir), workdir / f"{profile}-worker.log"),
             Proc(["-m", "jobs.sweeper"], env, str(workdir), workdir / f"{profile}-sweeper.log")]
    web = WebServer(settings_from(env))
    load = Load(web, feishu, [f"oc_{profile}_{i}" for i in range(6)])
    try:
        rq = rq_client(url)
        wait_for(lambda: all(p.alive() for p in procs) and worker_count(rq, f"{profile}-runs") >= 4, 60,
                 what="workers")
        wait_for(lambda: r.get(keys.bot_open_id), 60, what="the sweeper")
        threads = load.start()
        time.sleep(3)

        # 1. the master dies under load
        first = ha.kill_master()
        second = ha.wait_failover(first)
        time.sleep(3)
        ha.restart(first)  # back as a replica of the new master
        wait_for(lambda: ha.replicas_connected(second) >= 1, 30, what="a replica again")
        time.sleep(1.5)

        # 2. the master dies while its replica hears nothing: only writes that waited for it survive
        ha.stall_replication()
        time.sleep(1.5)
        refused_before = load.refused
        ha.kill_master()
        third = ha.wait_failover(second)
        time.sleep(3)
        load.stop.set()
        for t in threads:
            t.join(timeout=90)

        assert not load.stuck, f"unanswered (lost): {load.stuck}"
        counts = {mid: len(feishu.replies_to(mid)) for mid in load.sent}
        assert all(n == 1 for n in counts.values()), {m: n for m, n in counts.items() if n != 1}
        bot = sum(len(feishu.bot_messages(c)) for c in load.chats)
        assert bot == len(load.sent), (bot, len(load.sent))
        assert load.refused > refused_before, "the stalled replica should have cost some acknowledgements"

        ready = requests.get(f"{web.url}/readyz", timeout=10).json()
        info = ready["redis_ha"]
        assert info["master"] == f"{third[0]}:{third[1]}"
        assert info["sentinels_reachable"] == 3
        assert info["last_failover"]["to"] == f"{third[0]}:{third[1]}"
        assert info["last_failover"]["from"] == f"{second[0]}:{second[1]}"
        first_epoch, second_epoch = [f["epoch"] for f in info["failovers"]][-2:]
        assert 1 <= first_epoch < second_epoch  # two failovers; an election the sentinels retried skips an epoch
        assert ready["status"] == "degraded" and info["replicas_connected"] == 0  # the old ones are dead
        print(f"\nfailovers {[(round(s, 2)) for *_, s in ha.failovers]} s; {len(load.sent)} messages, "
              f"{load.refused} deliveries refused, {len(load.redelivered)} events redelivered")
    finally:
        load.stop.set()
        web.stop()
        stop_all(procs)


def test_report_without_sentinels_is_degraded(ha: SentinelRig) -> None:
    """Sentinels the service cannot reach show in the report, and fewer than a majority is a problem."""
    url = ha.url()
    t = parse_url(url)
    dead = Target((t.sentinels[0], ("127.0.0.1", 1), ("127.0.0.1", 2)), t.master, t.password)
    report = sentinel.report(dead.url(), state_client(url))
    assert report["sentinels_reachable"] == 1
    assert any("sentinels answer" in p for p in report["problems"])
