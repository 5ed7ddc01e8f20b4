"""The Bitable client against the Feishu emulator over real HTTP, through the real lark-oapi client and Redis."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis

from bitable import (
    Bitable,
    BitablePaused,
    BitablePermanent,
    BitableRetryable,
    Record,
    SchemaError,
    client_token_for,
)
from bitable.cells import TEXT
from bitable.lock import TableLock
from core.keys import Keys
from feishu.client import FeishuApi
from sandbox.feishu.emulator import FeishuEmulator
from tests.harness import service_env, settings_from

APP = "bascnItemsApp"
TOPIC = "https://applink.feishu.cn/client/thread/open?threadid=omt_{}"


@pytest.fixture
def table_id(feishu: FeishuEmulator) -> str:
    table = f"tbl{uuid.uuid4().hex[:12]}"
    feishu.add_table(APP, table)
    return table


@pytest.fixture
def make(feishu: FeishuEmulator, redis_url: str, r: redis.Redis, keys: Keys,
         table_id: str) -> Callable[..., Bitable]:
    """A fresh client, as a fresh process would build it: settings from the environment, FeishuApi's lark client."""

    def build(**extra: str) -> Bitable:
        env = service_env(redis_url, feishu.url, "http://127.0.0.1:9",
                          **{"BITABLE_APP_TOKEN": APP, "BITABLE_TABLE_ID": table_id, **extra})
        settings = settings_from(env)
        return Bitable(settings, r, keys, FeishuApi(settings, r, keys).client)

    return build


@pytest.fixture
def bt(make: Callable[..., Bitable]) -> Bitable:
    return make()


def item(bt: Bitable, n: int, **more: Any) -> dict[str, Any]:
    return bt.schema().encode({"title": f"登录页报错 {n} 见 https://wiki.example.com/{n}", "reporter": "ou_alice",
                               "chat": "oc_ops", "topic_link": ("话题", TOPIC.format(n)), "item_id": f"IT-{n}",
                               "status": "待处理", "answer_version": n, **more})


def answers(feishu: FeishuEmulator, op: str) -> list[int]:
    """The `code` of every answer `op` gives from now on."""
    codes: list[int] = []
    feishu.on(op, lambda rec: codes.append(int((rec.get("response") or {}).get("code", -1))))
    return codes


def test_create_and_read_back_as_segments(bt: Bitable, feishu: FeishuEmulator, table_id: str) -> None:
    feishu.add_user("ou_alice", "Alice")
    created = bt.create(item(bt, 1), client_token_for("create-1"))
    assert created.record_id.startswith("rec")

    got = bt.batch_get([created.record_id])[created.record_id]
    assert isinstance(got.fields["标题"], list) and got.fields["标题"][0]["type"] == "text"  # segments, not a string
    assert got.text("标题") == "登录页报错 1 见 https://wiki.example.com/1"
    assert got.links("标题") == ["https://wiki.example.com/1"]
    assert got.users("提出人") == ["ou_alice"] and got.text("提出人") == "Alice"
    assert got.links("话题链接") == [TOPIC.format(1)] and got.text("话题链接") == "话题"
    assert got.text("首答版本") == "1" and got.text("状态") == "待处理"
    assert got.record_url
    assert [w["op"] for w in feishu.bitable_writes(APP, table_id)] == ["create"]


def test_client_token_makes_a_create_after_a_crash_land_once(make: Callable[..., Bitable], feishu: FeishuEmulator,
                                                            table_id: str) -> None:
    first = make()
    fields = item(first, 2)
    # The record is stored, then the connection drops: the caller cannot know whether it was created.
    feishu.inject_fault("bitable_create", "reset_after")
    with pytest.raises(BitableRetryable) as lost:
        first.create(fields, client_token_for("item:omt_2"))
    assert lost.value.code == "transport" and lost.value.source == "bitable"

    again = make().create(fields, client_token_for("item:omt_2"))  # a new process retries with the same seed
    records = feishu.records(APP, table_id)
    assert [r["record_id"] for r in records] == [again.record_id]


def test_client_tokens_are_valid_uuid4_and_deterministic() -> None:
    token = client_token_for("seed")
    assert uuid.UUID(token).version == 4 and str(uuid.UUID(token)) == token
    assert token == client_token_for("seed") != client_token_for("seed2")


def test_create_refuses_a_client_token_that_is_not_uuid4(bt: Bitable, feishu: FeishuEmulator) -> None:
    with pytest.raises(ValueError, match="uuid4"):
        bt.create({"标题": "x"}, "not-a-uuid")
    with pytest.raises(ValueError, match="uuid4"):
        bt.create({"标题": "x"}, str(uuid.uuid1()))
    assert feishu.stats["calls"].get("bitable_create", 0) == 0


def test_search_by_item_id_and_by_topic_link(bt: Bitable, feishu: FeishuEmulator) -> None:
    ids = [bt.create(item(bt, n), client_token_for(f"s{n}")).record_id for n in (3, 4, 5)]

    by_id = bt.search("事项ID", "IT-4")
    assert [r.record_id for r in by_id] == [ids[1]]
    assert by_id[0].text("事项ID") == "IT-4"

    by_topic = bt.search("话题链接", "omt_5", operator="contains")
    assert [r.record_id for r in by_topic] == [ids[2]]
    assert bt.search("事项ID", "IT-404") == []
    assert {r.record_id for r in bt.search("事项ID", None, operator="isNotEmpty")} == set(ids)


def test_search_and_batch_get_read_every_page(bt: Bitable, feishu: FeishuEmulator, table_id: str) -> None:
    made = [feishu.add_record(APP, table_id, {"事项ID": f"IT-{n}", "标题": "同一个"})["record_id"]
            for n in range(520)]
    found = bt.search("标题", "同一个")
    assert len(found) == 520 and {r.record_id for r in found} == set(made)
    assert feishu.stats["calls"]["bitable_search"] == 2  # 500 per page

    got = bt.batch_get(made[:250])  # the API takes at most 100 ids per call
    assert set(got) == set(made[:250]) and got[made[7]].text("事项ID") == "IT-7"
    assert feishu.stats["calls"]["bitable_batch_get"] == 3


def test_batch_get_leaves_absent_ids_out(bt: Bitable) -> None:
    rec = bt.create(item(bt, 6), client_token_for("b6"))
    got = bt.batch_get([rec.record_id, "recAbsentAbsent1"])
    assert list(got) == [rec.record_id]
    assert bt.batch_get([]) == {}


def test_update_changes_only_the_given_fields(bt: Bitable, feishu: FeishuEmulator, table_id: str) -> None:
    rec = bt.create(item(bt, 7), client_token_for("u7"))
    schema = bt.schema()
    updated = bt.update(rec.record_id, schema.encode({"status": "已解决", "owner": ["ou_bob"]}))
    assert isinstance(updated, Record) and updated.record_id == rec.record_id

    got = bt.batch_get([rec.record_id])[rec.record_id]
    assert got.text("状态") == "已解决" and got.users("负责人") == ["ou_bob"]
    assert got.text("事项ID") == "IT-7" and got.links("话题链接") == [TOPIC.format(7)]  # untouched
    assert [w["op"] for w in feishu.bitable_writes(APP, table_id)] == ["create", "update"]


def test_schema_names_a_misconfigured_field_and_the_table_s_fields(make: Callable[..., Bitable],
                                                                   table_id: str) -> None:
    bt = make(BITABLE_FIELD_OWNER="责任人")
    with pytest.raises(SchemaError) as bad:
        bt.schema()
    text = str(bad.value)
    assert f'BITABLE_FIELD_OWNER="责任人" is not a field of table {table_id}' in text
    assert '"负责人"' in text and '"标题"' in text  # the actual names, to spot the typo
    assert "TITLE" not in text  # only the wrong one is named
    assert isinstance(bad.value, BitablePaused) and bad.value.code == "schema"


def test_schema_is_read_once_per_process(bt: Bitable, feishu: FeishuEmulator) -> None:
    schema = bt.schema()
    assert (schema["owner"].name, schema["owner"].type) == ("负责人", 11) and schema["title"].type == TEXT
    assert bt.schema() is schema
    assert feishu.stats["calls"]["bitable_fields"] == 1


def test_fields_reads_every_page(make: Callable[..., Bitable], feishu: FeishuEmulator) -> None:
    wide = f"tbl{uuid.uuid4().hex[:12]}"
    feishu.add_table(APP, wide, [(f"列{n}", TEXT) for n in range(130)])
    bt = make(BITABLE_TABLE_ID=wide)
    assert [f["field_name"] for f in bt.fields()] == [f"列{n}" for n in range(130)]
    assert feishu.stats["calls"]["bitable_fields"] == 2  # 100 per page


def test_rate_limit_is_retried_in_the_call(bt: Bitable, feishu: FeishuEmulator, table_id: str) -> None:
    fields = item(bt, 8)
    feishu.inject_fault("bitable_create", "bitable_rate_limit", times=2)
    codes = answers(feishu, "bitable_create")
    rec = bt.create(fields, client_token_for("r8"))
    assert codes == [1254290, 1254290, 0]
    assert [r["record_id"] for r in feishu.records(APP, table_id)] == [rec.record_id]


def test_rate_limit_past_the_local_tries_is_retryable(bt: Bitable, feishu: FeishuEmulator) -> None:
    feishu.inject_fault("bitable_search", "bitable_rate_limit", times=5)
    with pytest.raises(BitableRetryable) as busy:
        bt.search("事项ID", "IT-1")
    assert busy.value.code == "1254290" and busy.value.source == "bitable"
    assert feishu.stats["calls"]["bitable_search"] == 5


def test_a_rejected_token_is_fetched_again(bt: Bitable, feishu: FeishuEmulator) -> None:
    bt.search("事项ID", "IT-1")
    feishu.inject_fault("bitable_search", "token_invalid")
    assert bt.search("事项ID", "IT-1") == []


def test_concurrent_creates_take_turns(make: Callable[..., Bitable], feishu: FeishuEmulator, table_id: str) -> None:
    clients = [make() for _ in range(5)]  # five processes, one Redis
    fields = [item(c, 10 + n) for n, c in enumerate(clients)]
    feishu.set_bitable_write_time(0.3)
    codes = answers(feishu, "bitable_create")
    start = threading.Barrier(5)
    made: list[str] = []
    failures: list[BaseException] = []

    def create(n: int) -> None:
        start.wait()
        try:
            made.append(clients[n].create(fields[n], client_token_for(f"c{n}")).record_id)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=create, args=(n,)) for n in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert sorted(made) == sorted(r["record_id"] for r in feishu.records(APP, table_id)) and len(made) == 5
    assert codes == [0] * 5  # not one write conflict was even answered: the lock kept writers apart


def test_a_permanent_error_keeps_its_code_and_message(bt: Bitable) -> None:
    with pytest.raises(BitablePermanent) as bad:
        bt.create({"不存在的列": "x"}, client_token_for("p1"))
    assert bad.value.code == "1254045" and bad.value.source == "bitable"
    assert "FieldNameNotFound" in bad.value.msg and str(bad.value).startswith("bitable error 1254045: ")


def test_a_missing_table_pauses(make: Callable[..., Bitable]) -> None:
    with pytest.raises(BitablePaused) as gone:
        make(BITABLE_TABLE_ID="tblNoSuchTable").fields()
    assert gone.value.code == "1254041"


def test_transport_failure_is_retryable(bt: Bitable, feishu: FeishuEmulator) -> None:
    feishu.inject_fault("bitable_batch_get", "reset")
    with pytest.raises(BitableRetryable) as lost:
        bt.batch_get(["recAbsentAbsent1"])
    assert lost.value.code == "transport"


def test_the_lock_releases_only_its_own_hold(r: redis.Redis) -> None:
    key = f"fb:bitable:lock:test:{uuid.uuid4().hex}"
    lock = TableLock(r, key, ttl_s=30, wait_s=0)
    with lock.held():
        assert r.pttl(key) > 0
        r.set(key, "another-holder")  # our TTL ran out and someone else took the table
    assert r.get(key) == "another-holder"
    with pytest.raises(BitableRetryable) as busy, lock.held():  # held by someone else past the wait bound
        pass
    assert busy.value.code == "lock_busy"
    r.delete(key)
    with lock.held():
        pass
    assert r.exists(key) == 0
