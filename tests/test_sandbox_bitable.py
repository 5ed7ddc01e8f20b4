"""The emulator's Bitable, drive subscribe, chat members and card PATCH endpoints, driven by the real lark-oapi."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import lark_oapi as lark
import pytest
import requests
from lark_oapi.api.bitable.v1 import (
    AppTableRecord,
    BatchGetAppTableRecordRequest,
    BatchGetAppTableRecordRequestBody,
    Condition,
    CreateAppTableRecordRequest,
    FilterInfo,
    ListAppTableFieldRequest,
    SearchAppTableRecordRequest,
    SearchAppTableRecordRequestBody,
    Sort,
    UpdateAppTableRecordRequest,
)
from lark_oapi.api.drive.v1 import SubscribeFileRequest
from lark_oapi.api.im.v1 import (
    CreateMessageRequest,
    CreateMessageRequestBody,
    GetChatMembersRequest,
    GetMessageRequest,
    PatchMessageRequest,
    PatchMessageRequestBody,
)
from lark_oapi.core.cache import LocalCache
from lark_oapi.core.token.manager import TokenManager

from bitable.client import Record
from sandbox.bitable.tables import DEFAULT_FIELDS
from sandbox.feishu.emulator import FeishuEmulator
from sandbox.feishu.events import (
    bitable_record_changed_event,
    card_action_event,
    message_recalled_event,
    message_updated_event,
)
from sandbox.feishu.rules import FeishuError

SECRET = "bitable-test-secret"
APP, TABLE = "bascnItems", "tblItems"


@pytest.fixture
def emulator() -> Iterator[FeishuEmulator]:
    emu = FeishuEmulator(app_id=f"cli_{uuid.uuid4().hex[:12]}", app_secret=SECRET).start()
    emu.add_table(APP, TABLE)
    yield emu
    emu.stop()


@pytest.fixture
def client(emulator: FeishuEmulator, monkeypatch: pytest.MonkeyPatch) -> lark.Client:
    monkeypatch.setattr(TokenManager, "cache", LocalCache())
    builder = lark.Client.builder().app_id(emulator.app_id).app_secret(SECRET).domain(emulator.url)
    return builder.log_level(lark.LogLevel.CRITICAL).build()


def create(client: lark.Client, fields: dict[str, Any], token: str | None = None, table: str = TABLE) -> Any:
    req = CreateAppTableRecordRequest.builder().app_token(APP).table_id(table).user_id_type("open_id")
    if token is not None:
        req = req.client_token(token)
    return client.bitable.v1.app_table_record.create(
        req.request_body(AppTableRecord.builder().fields(fields).build()).build())


def update(client: lark.Client, record_id: str, fields: dict[str, Any]) -> Any:
    req = UpdateAppTableRecordRequest.builder().app_token(APP).table_id(TABLE).record_id(record_id)
    return client.bitable.v1.app_table_record.update(
        req.request_body(AppTableRecord.builder().fields(fields).build()).build())


def search(client: lark.Client, *conditions: tuple[str, str, list[str]], conjunction: str = "and",
           page_size: int | None = None, page_token: str | None = None, **body: Any) -> Any:
    flt = FilterInfo.builder().conjunction(conjunction).conditions(
        [Condition.builder().field_name(f).operator(op).value(v).build() for f, op, v in conditions]).build()
    built = SearchAppTableRecordRequestBody.builder()
    if conditions:
        built = built.filter(flt)
    if "sort" in body:
        built = built.sort([Sort.builder().field_name(name).desc(desc).build() for name, desc in body["sort"]])
    if "field_names" in body:
        built = built.field_names(body["field_names"])
    req = SearchAppTableRecordRequest.builder().app_token(APP).table_id(TABLE)
    if page_size is not None:
        req = req.page_size(page_size)
    if page_token:
        req = req.page_token(page_token)
    return client.bitable.v1.app_table_record.search(req.request_body(built.build()).build())


def batch_get(client: lark.Client, ids: list[str]) -> Any:
    body = BatchGetAppTableRecordRequestBody.builder().record_ids(ids).build()
    req = BatchGetAppTableRecordRequest.builder().app_token(APP).table_id(TABLE).request_body(body).build()
    return client.bitable.v1.app_table_record.batch_get(req)


ITEM = {
    "标题": "登录页 500，详见 https://wiki.example/x 谢谢", "提出人": [{"id": "ou_amy"}], "状态": "待处理",
    "来源群": [{"id": "oc_team"}], "话题链接": {"text": "话题", "link": "https://applink.feishu.cn/t"},
    "事项ID": "IT-1", "首答版本": 1,
}


# -- Bitable --------------------------------------------------------------------------------------------


def test_fields_list_the_default_table_with_paging(client: lark.Client) -> None:
    def req() -> Any:
        return ListAppTableFieldRequest.builder().app_token(APP).table_id(TABLE)

    first = client.bitable.v1.app_table_field.list(req().page_size(5).build())
    assert first.code == 0, first.msg
    assert first.data.total == len(DEFAULT_FIELDS) and first.data.has_more
    rest = client.bitable.v1.app_table_field.list(req().page_token(first.data.page_token).page_size(100).build())
    fields = [*first.data.items, *rest.data.items]
    assert [(f.field_name, f.type) for f in fields] == list(DEFAULT_FIELDS) and not rest.data.has_more
    assert [f.is_primary for f in fields].count(True) == 1 and fields[0].field_name == "标题"
    assert {f.field_name: f.ui_type for f in fields}["提出人"] == "User"
    assert all(f.field_id.startswith("fld") for f in fields)


def test_records_read_back_in_the_read_format(emulator: FeishuEmulator, client: lark.Client) -> None:
    emulator.add_user("ou_amy", "Amy", email="amy@example.com")
    emulator.add_chat("oc_team", name="研发群")
    made = create(client, ITEM, str(uuid.uuid4()))
    assert made.code == 0, made.msg
    record = made.data.record
    assert json.loads(made.raw.content)["data"]["record"]["id"] == record.record_id
    assert len(record.record_id) == 17 and record.record_id.startswith("rec") and record.record_id[3:].isalnum()
    got = batch_get(client, [record.record_id, "recMissing000000"])
    assert got.code == 0 and got.data.absent_record_ids == ["recMissing000000"]
    (item,) = got.data.records
    assert item.record_url == f"https://feishu.cn/base/{APP}?table={TABLE}&record={record.record_id}"
    assert item.fields["标题"] == [{"type": "text", "text": "登录页 500，详见 "},
                                 {"type": "url", "text": "https://wiki.example/x", "link": "https://wiki.example/x"},
                                 {"type": "text", "text": " 谢谢"}]
    amy = item.fields["提出人"][0]
    assert (amy["id"], amy["name"], amy["email"]) == ("ou_amy", "Amy", "amy@example.com")
    assert item.fields["来源群"] == [{"id": "oc_team", "name": "研发群", "avatar_url": ""}]
    assert item.fields["话题链接"] == ITEM["话题链接"] and item.fields["首答版本"] == 1
    assert "负责人" not in item.fields  # empty cells are left out
    assert emulator.records(APP, TABLE) == [{"record_id": record.record_id, "fields": item.fields}]


def test_search_filters_on_plain_text_people_and_emptiness(client: lark.Client) -> None:
    ids = [create(client, {**ITEM, "事项ID": f"IT-{i}", "提出人": [{"id": who}]}).data.record.record_id
           for i, who in enumerate(["ou_amy", "ou_bob", "ou_amy"])]
    assert create(client, {"标题": "无人认领"}).code == 0
    by_amy = search(client, ("提出人", "is", ["ou_amy"]))
    assert by_amy.code == 0 and by_amy.data.total == 2
    assert [i.record_id for i in by_amy.data.items] == [ids[0], ids[2]]
    assert search(client, ("标题", "contains", ["500，详见 https"])).data.total == 3  # across segments
    assert search(client, ("事项ID", "is", ["IT-1"])).data.items[0].record_id == ids[1]
    assert search(client, ("事项ID", "isNot", ["IT-1"])).data.total == 3
    assert search(client, ("提出人", "isEmpty", [])).data.total == 1
    assert search(client, ("标题", "doesNotContain", ["登录"]), ("提出人", "isNotEmpty", [])).data.total == 0
    either = search(client, ("事项ID", "is", ["IT-0"]), ("事项ID", "is", ["IT-2"]), conjunction="or")
    assert either.data.total == 2
    page = search(client, page_size=3, sort=[("事项ID", True)], field_names=["事项ID"])
    assert [i.fields for i in page.data.items] == [{"事项ID": [{"type": "text", "text": f"IT-{n}"}]} for n in (2, 1, 0)]
    assert page.data.has_more and page.data.total == 4
    rest = search(client, page_size=3, page_token=page.data.page_token, sort=[("事项ID", True)])
    assert len(rest.data.items) == 1 and not rest.data.has_more
    assert search(client, page_size=501).code == 1254011


def test_client_token_makes_create_idempotent_and_must_be_uuid4(emulator: FeishuEmulator,
                                                               client: lark.Client) -> None:
    token = str(uuid.uuid4())
    first = create(client, ITEM, token)
    again = create(client, {"标题": "不同内容"}, token)
    assert first.code == again.code == 0 and again.data.record.record_id == first.data.record.record_id
    assert len(emulator.records(APP, TABLE)) == 1 and len(emulator.bitable_writes(APP, TABLE)) == 1
    for bad in ("not-a-uuid", str(uuid.uuid1())):
        refused = create(client, ITEM, bad)
        assert (refused.raw.status_code, refused.code) == (400, 1254037)
    assert create(client, ITEM, str(uuid.uuid4())).data.record.record_id != first.data.record.record_id


def test_write_errors_carry_bitable_codes(emulator: FeishuEmulator, client: lark.Client) -> None:
    missing = create(client, {"没有这个字段": "x"})
    assert (missing.raw.status_code, missing.code) == (200, 1254045)
    assert search(client, ("没有这个字段", "is", ["x"])).code == 1254045
    assert create(client, {"标题": 5}).code == 1254060
    assert create(client, {"首答版本": "2"}).code == 1254061
    assert create(client, {"状态": ["a"]}).code == 1254062
    assert create(client, {"提出人": [{"id": "ou_amy", "name": "Amy"}]}).code == 1254066
    assert create(client, {"话题链接": "https://x"}).code == 1254068
    assert update(client, "recNotThere00000", {"状态": "完成"}).code == 1254043
    assert create(client, ITEM, table="tblNope").code == 1254041
    other = CreateAppTableRecordRequest.builder().app_token("basNope").table_id(TABLE)
    body = AppTableRecord.builder().fields(ITEM).build()
    assert client.bitable.v1.app_table_record.create(other.request_body(body).build()).code == 1254040
    assert emulator.records(APP, TABLE) == [] and emulator.bitable_writes(APP, TABLE) == []


def test_update_is_partial_and_ui_edits_are_not_api_writes(emulator: FeishuEmulator, client: lark.Client) -> None:
    record_id = create(client, ITEM).data.record.record_id
    changed = update(client, record_id, {"状态": "处理中", "负责人": [{"id": "ou_bob"}]})
    assert changed.code == 0 and changed.data.record.fields == {"状态": "处理中", "负责人": [{"id": "ou_bob"}]}
    edited = emulator.edit_record(APP, TABLE, record_id, {"首答状态": "已确认", "话题链接": None})
    assert edited["fields"]["首答状态"] == "已确认" and "话题链接" not in edited["fields"]
    fields = batch_get(client, [record_id]).data.records[0].fields
    assert fields["状态"] == "处理中" and fields["事项ID"] == [{"type": "text", "text": "IT-1"}]
    assert "话题链接" not in fields
    added = emulator.add_record(APP, TABLE, {"标题": "手工添加"})
    assert search(client, ("标题", "is", ["手工添加"])).data.items[0].record_id == added["record_id"]
    assert [(w["op"], w["record_id"]) for w in emulator.bitable_writes(APP, TABLE)] == [
        ("create", record_id), ("update", record_id)]
    with pytest.raises(ValueError, match="1254045"):
        emulator.edit_record(APP, TABLE, record_id, {"nope": 1})
    state = status_options(client)
    assert {"待处理", "处理中"} <= state  # unknown single-select options are created on write


def status_options(client: lark.Client) -> set[str]:
    req = ListAppTableFieldRequest.builder().app_token(APP).table_id(TABLE).page_size(100).build()
    status = next(f for f in client.bitable.v1.app_table_field.list(req).data.items if f.field_name == "状态")
    return {o.name for o in status.property.options}


def test_concurrent_writes_to_one_table_conflict(emulator: FeishuEmulator, client: lark.Client) -> None:
    emulator.set_bitable_write_time(1.0)  # the first write holds the table long enough for the second to meet it
    both_in = threading.Barrier(2, timeout=5)
    arrivals: list[dict[str, Any]] = []

    def hold(record: dict[str, Any]) -> None:  # the first two creates wait for each other: surely concurrent
        arrivals.append(record)
        if len(arrivals) <= 2:
            both_in.wait()

    emulator.on("bitable_create", hold, when="before")
    codes: list[int] = []
    writers = [threading.Thread(target=lambda i=i: codes.append(create(client, {"标题": f"并发{i}"}).code))
               for i in range(2)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(10)
    assert sorted(codes) == [0, 1254291]
    assert len(emulator.records(APP, TABLE)) == 1 and len(emulator.bitable_writes(APP, TABLE)) == 1
    emulator.set_bitable_write_time(0)
    assert create(client, {"标题": "之后"}).code == 0  # the table is free again once the write answered


def test_rate_limit_faults_answer_bitable_codes(emulator: FeishuEmulator, client: lark.Client) -> None:
    emulator.inject_fault("bitable_search", "bitable_rate_limit")
    limited = search(client)
    assert (limited.raw.status_code, limited.code) == (200, 1254290)
    assert search(client).code == 0
    emulator.set_profile(["bitable_create"], 1.0, {"bitable_not_ready": 1, "bitable_fail": 1}, seed=3)
    assert {create(client, ITEM).code for _ in range(12)} == {1254607, 1254002}
    assert emulator.records(APP, TABLE) == []
    emulator.clear_profile()
    requests.post(f"{emulator.url}/_sandbox/faults", json={"op": "bitable_update", "kind": "bitable_conflict"},
                  timeout=5)
    record_id = create(client, ITEM).data.record.record_id
    assert update(client, record_id, {"状态": "x"}).code == 1254291
    with pytest.raises(ValueError, match="does not apply"):
        emulator.inject_fault("reply", "bitable_rate_limit")
    assert emulator.stats["faults"]["bitable_search"] == {"bitable_rate_limit": 1}


# -- drive subscribe, chat members, card PATCH --------------------------------------------------------


def test_drive_subscribe_is_recorded(emulator: FeishuEmulator, client: lark.Client) -> None:
    req = SubscribeFileRequest.builder().file_token(APP).file_type("bitable").build()
    resp = client.drive.v1.file.subscribe(req)
    assert resp.code == 0, resp.msg
    assert json.loads(resp.raw.content) == {"code": 0, "msg": "success", "data": {}}
    assert client.drive.v1.file.subscribe(req).code == 0
    assert emulator.subscriptions() == [{"file_token": APP, "file_type": "bitable"}]
    assert [r["query"] for r in emulator.requests if r["op"] == "drive_subscribe"] == [{"file_type": "bitable"}] * 2
    bad = SubscribeFileRequest.builder().file_token(APP).file_type("video").build()
    assert client.drive.v1.file.subscribe(bad).code == 99992402


def members(client: lark.Client, chat_id: str, page_size: int | None = None, page_token: str | None = None,
            id_type: str = "open_id") -> Any:
    req = GetChatMembersRequest.builder().chat_id(chat_id).member_id_type(id_type)
    if page_size is not None:
        req = req.page_size(page_size)
    if page_token:
        req = req.page_token(page_token)
    return client.im.v1.chat_members.get(req.build())


def test_chat_members_page_through_people(emulator: FeishuEmulator, client: lark.Client) -> None:
    people = [f"ou_{i:02d}" for i in range(25)]
    emulator.add_chat("oc_team", name="研发群", members=people)
    emulator.add_user("ou_00", "Amy")
    first = members(client, "oc_team")
    assert first.code == 0, first.msg
    assert len(first.data.items) == 20 and first.data.has_more and first.data.member_total == 25
    amy = first.data.items[0]
    assert (amy.member_id_type, amy.member_id, amy.name, amy.tenant_key) == ("open_id", "ou_00", "Amy",
                                                                             "tenant_sandbox")
    rest = members(client, "oc_team", page_token=first.data.page_token)
    assert [m.member_id for m in [*first.data.items, *rest.data.items]] == people and not rest.data.has_more
    assert members(client, "oc_team", page_size=101).code == 99992402
    assert members(client, "oc_team", id_type="union_id").data.items[0].member_id.startswith("on_")
    emulator.set_members("oc_team", ["ou_solo"])
    assert [m.member_id for m in members(client, "oc_team", page_size=100).data.items] == ["ou_solo"]
    missing = members(client, "oc_unknown")
    assert (missing.raw.status_code, missing.code) == (400, 232011)


def card(title: str, *, shared: bool = True) -> str:
    body: dict[str, Any] = {"header": {"title": {"tag": "plain_text", "content": title}}, "elements": []}
    if shared:
        body["config"] = {"update_multi": True}
    return json.dumps(body, ensure_ascii=False)


def send_card(client: lark.Client, chat_id: str, content: str) -> str:
    body = CreateMessageRequestBody.builder().receive_id(chat_id).msg_type("interactive").content(content).build()
    resp = client.im.v1.message.create(CreateMessageRequest.builder().receive_id_type("chat_id")
                                       .request_body(body).build())
    assert resp.code == 0, resp.msg
    return str(resp.data.message_id)


def patch(client: lark.Client, message_id: str, content: str) -> Any:
    body = PatchMessageRequestBody.builder().content(content).build()
    return client.im.v1.message.patch(PatchMessageRequest.builder().message_id(message_id).request_body(body).build())


def test_card_patch_keeps_history_and_needs_update_multi(emulator: FeishuEmulator, client: lark.Client) -> None:
    emulator.add_chat("oc_team")
    message_id = send_card(client, "oc_team", card("v1"))
    resp = patch(client, message_id, card("v2"))
    assert resp.code == 0, resp.msg
    assert json.loads(resp.raw.content) == {"code": 0, "msg": "success", "data": {}}
    assert patch(client, message_id, card("v3", shared=False)).code == 230001  # the new card must stay shared
    assert patch(client, message_id, card("长" * 11_000)).code == 230025
    versions = emulator.card_versions(message_id)
    assert [v["header"]["title"]["content"] for v in versions] == ["v1", "v2"]
    got = client.im.v1.message.get(GetMessageRequest.builder().message_id(message_id).build())
    assert json.loads(got.data.items[0].body.content) == versions[-1]

    private = send_card(client, "oc_team", card("私有", shared=False))
    assert patch(client, private, card("改")).code == 230001  # sent without update_multi: never patchable
    emulator.add_message("om_user", "oc_team", msg_type="interactive", content=card("用户的"))
    assert patch(client, "om_user", card("改")).code == 230001
    assert patch(client, "om_missing", card("改")).code == 231003
    assert emulator.card_versions(private) == [json.loads(card("私有", shared=False))]
    assert len(emulator.card_versions(message_id)) == 2


def test_control_api_drives_tables_members_and_cards(emulator: FeishuEmulator, client: lark.Client) -> None:
    base = f"{emulator.url}/_sandbox"
    fields = requests.post(f"{base}/bitable/tables", json={"app_token": APP, "table_id": "tblSmall",
                                                           "fields": [["名称", 1], ["数量", 2]]}, timeout=5).json()
    assert [(f["field_name"], f["type"], f["is_primary"]) for f in fields] == [("名称", 1, True), ("数量", 2, False)]
    args = {"app_token": APP, "table_id": "tblSmall"}
    added = requests.post(f"{base}/bitable/records", json={**args, "fields": {"名称": "甲", "数量": 1}}, timeout=5)
    record_id = added.json()["record_id"]
    edited = requests.post(f"{base}/bitable/records/edit", timeout=5,
                           json={**args, "record_id": record_id, "fields": {"数量": 2}})
    assert edited.json()["fields"] == {"名称": [{"type": "text", "text": "甲"}], "数量": 2}
    bad = requests.post(f"{base}/bitable/records/edit", timeout=5,
                        json={**args, "record_id": record_id, "fields": {"数量": "二"}})
    assert bad.status_code == 400 and "1254061" in bad.json()["msg"]
    listed = requests.get(f"{base}/bitable/records", params=args, timeout=5).json()
    assert listed == [{"record_id": record_id, "fields": edited.json()["fields"]}]
    assert requests.get(f"{base}/bitable/writes", params=args, timeout=5).json() == []
    assert requests.post(f"{base}/bitable/write_time", json={"seconds": 0}, timeout=5).json() == {"ok": True}
    assert emulator.bitable.write_time == 0
    requests.post(f"{base}/members", json={"chat_id": "oc_ctl", "members": ["ou_a", "ou_b"]}, timeout=5)
    requests.post(f"{base}/users", json={"open_id": "ou_b", "name": "Bob"}, timeout=5)
    assert [(m.member_id, m.name) for m in members(client, "oc_ctl").data.items] == [("ou_a", ""), ("ou_b", "Bob")]
    message_id = send_card(client, "oc_ctl", card("v1"))
    patch(client, message_id, card("v2"))
    versions = requests.get(f"{base}/card_versions", params={"message_id": message_id}, timeout=5).json()
    assert [v["header"]["title"]["content"] for v in versions] == ["v1", "v2"]
    client.drive.v1.file.subscribe(SubscribeFileRequest.builder().file_token(APP).file_type("bitable").build())
    assert requests.get(f"{base}/subscriptions", timeout=5).json() == [{"file_token": APP, "file_type": "bitable"}]
    requests.post(f"{base}/reset", timeout=5)
    assert emulator.subscriptions() == [] and emulator.bitable.apps == {}


# -- event builders ------------------------------------------------------------------------------------


def test_event_builders_parse_into_the_sdk_models(emulator: FeishuEmulator) -> None:
    from lark_oapi.api.drive.v1 import P2DriveFileBitableRecordChangedV1
    from lark_oapi.api.im.v1 import P2ImMessageRecalledV1, P2ImMessageReceiveV1
    from lark_oapi.event.callback.model.p2_card_action_trigger import P2CardActionTrigger

    def parse(payload: dict[str, Any], model: type) -> Any:
        return lark.JSON.unmarshal(json.dumps(payload, ensure_ascii=False), model)

    pressed = parse(card_action_event("ou_amy", {"action": "confirm", "item": "IT-1"}, message_id="om_card",
                                      chat_id="oc_team", event_id="ev-card"), P2CardActionTrigger)
    assert (pressed.header.event_type, pressed.header.event_id) == ("card.action.trigger", "ev-card")
    assert pressed.event.operator.open_id == "ou_amy" and pressed.event.operator.union_id.startswith("on_")
    assert pressed.event.action.value == {"action": "confirm", "item": "IT-1"} and pressed.event.action.tag == "button"
    assert (pressed.event.context.open_message_id, pressed.event.context.open_chat_id) == ("om_card", "oc_team")
    assert pressed.event.host == "im_message" and pressed.event.token.startswith("c-")

    emulator.add_user("ou_amy", "Amy")
    record_id = emulator.add_record(APP, TABLE, {"标题": "问题", "提出人": [{"id": "ou_amy"}]})["record_id"]
    after = emulator.record_change_values(APP, TABLE, record_id)
    changed = parse(bitable_record_changed_event(APP, TABLE, record_id, "record_edited", "ou_amy", after=after),
                    P2DriveFileBitableRecordChangedV1)
    assert changed.header.event_type == "drive.file.bitable_record_changed_v1"
    event = changed.event
    assert (event.file_token, event.file_type, event.table_id, event.operator_id.open_id) == (
        APP, "bitable", TABLE, "ou_amy")
    (action,) = event.action_list
    assert (action.record_id, action.action, action.before_value) == (record_id, "record_edited", [])
    ids = {f["field_name"]: f["field_id"] for f in emulator.add_table(APP, TABLE)}
    values = {v.field_id: json.loads(v.field_value) for v in action.after_value}
    assert values[ids["标题"]] == [{"type": "text", "text": "问题"}] and values[ids["提出人"]][0]["name"] == "Amy"
    by_id = bitable_record_changed_event(APP, TABLE, record_id, after={ids["首答版本"]: 2})
    assert by_id["event"]["action_list"][0]["after_value"] == [{"field_id": ids["首答版本"], "field_value": "2"}]

    recalled = parse(message_recalled_event("om_1", "oc_team", recall_type="group_owner"), P2ImMessageRecalledV1)
    assert (recalled.header.event_type, recalled.event.message_id, recalled.event.recall_type) == (
        "im.message.recalled_v1", "om_1", "group_owner")
    edited = message_updated_event(chat_id="oc_team", chat_type="group", text="改过的", message_id="om_2",
                                   create_time_ms=1_700_000_000_000, update_time_ms=1_700_000_060_000)
    assert edited["header"]["event_type"] == "im.message.updated_v1"
    body = parse(edited, P2ImMessageReceiveV1).event.message  # the same body shape as receive_v1
    assert (body.message_id, body.create_time, body.update_time) == ("om_2", "1700000000000", "1700000060000")
    assert json.loads(body.content) == {"text": "改过的"}


# -- record search: automatic fields, is / isNot, and / or, pages, the filter guide's rules -------------


def search_raw(client: lark.Client, body: dict[str, Any], page_size: int | None = None,
               page_token: str | None = None) -> Any:
    """A search whose body is given as the wire JSON (the SDK model drops what is None)."""
    req = SearchAppTableRecordRequest.builder().app_token(APP).table_id(TABLE).user_id_type("open_id")
    if page_size is not None:
        req = req.page_size(page_size)
    if page_token:
        req = req.page_token(page_token)
    return client.bitable.v1.app_table_record.search(req.request_body(SearchAppTableRecordRequestBody(body)).build())


def wire_items(resp: Any) -> list[dict[str, Any]]:
    assert resp.code == 0, resp.msg
    return list(json.loads(resp.raw.content)["data"]["items"])


def test_search_returns_automatic_fields_kept_on_create_and_update(client: lark.Client) -> None:
    before = int(time.time() * 1000)
    record_id = create(client, ITEM).data.record.record_id
    (made,) = wire_items(search_raw(client, {"automatic_fields": True}))
    assert before <= made["created_time"] == made["last_modified_time"] <= int(time.time() * 1000)
    assert made["created_by"]["id"] == made["last_modified_by"]["id"]
    assert update(client, record_id, {"状态": "处理中"}).code == 0
    (changed,) = wire_items(search_raw(client, {"automatic_fields": True}))
    assert changed["created_time"] == made["created_time"] < changed["last_modified_time"]
    assert Record.from_wire(changed).last_modified_time == changed["last_modified_time"]
    (plain,) = wire_items(search_raw(client, {}))
    assert not {"created_time", "last_modified_time", "created_by", "last_modified_by"} & set(plain)
    assert Record.from_wire(plain).last_modified_time is None


def test_is_and_is_not_on_single_select_and_group_chat_with_and_or(client: lark.Client) -> None:
    rows = {"open": ("oc_a", "待处理"), "done": ("oc_a", "已完成"), "closed": ("oc_a", "已关闭"),
            "blank": ("oc_a", None), "other": ("oc_b", "待处理")}
    ids = {}
    for key, (chat, status) in rows.items():
        fields = {"标题": key, "来源群": [{"id": chat}], **({"状态": status} if status else {})}
        ids[key] = create(client, fields).data.record.record_id
    open_in_a = {"conjunction": "and", "conditions": [
        {"field_name": "来源群", "operator": "is", "value": ["oc_a"]},
        {"field_name": "状态", "operator": "isNot", "value": ["已完成"]},
        {"field_name": "状态", "operator": "isNot", "value": ["已关闭"]},
        {"field_name": "状态", "operator": "isNot", "value": ["Done"]}]}  # an option the table lacks matches nothing
    found = wire_items(search_raw(client, {"filter": open_in_a}))
    assert {i["record_id"] for i in found} == {ids["open"], ids["blank"]}  # isNot keeps empty cells
    either = {"conjunction": "or", "conditions": [{"field_name": "状态", "operator": "is", "value": ["已完成"]},
                                                  {"field_name": "来源群", "operator": "is", "value": ["oc_b"]}]}
    assert {i["record_id"] for i in wire_items(search_raw(client, {"filter": either}))} == {ids["done"], ids["other"]}
    nested = {"conjunction": "and", "children": [
        {"conjunction": "or", "conditions": [{"field_name": "状态", "operator": "is", "value": ["已完成"]},
                                             {"field_name": "状态", "operator": "is", "value": ["已关闭"]}]},
        {"conjunction": "and", "conditions": [{"field_name": "来源群", "operator": "isNot", "value": ["oc_b"]}]}]}
    assert {i["record_id"] for i in wire_items(search_raw(client, {"filter": nested}))} == {ids["done"], ids["closed"]}


def test_search_pages_follow_the_page_token_to_the_end(client: lark.Client) -> None:
    made = [create(client, {"标题": f"第{i}条", "来源群": [{"id": "oc_a"}]}).data.record.record_id for i in range(5)]
    flt = {"conjunction": "and", "conditions": [{"field_name": "来源群", "operator": "is", "value": ["oc_a"]}]}
    seen, token, pages = [], None, 0
    while True:
        resp = search_raw(client, {"filter": flt, "automatic_fields": True}, page_size=2, page_token=token)
        data = json.loads(resp.raw.content)["data"]
        seen += [i["record_id"] for i in data["items"]]
        assert all("last_modified_time" in i for i in data["items"]) and data["total"] == 5
        pages += 1
        if not data["has_more"]:
            break
        token = data["page_token"]
    assert (seen, pages) == (made, 3)
    assert search_raw(client, {}, page_token="not-a-token").code == 1254002


def test_search_filters_follow_the_record_filter_guide(emulator: FeishuEmulator, client: lark.Client) -> None:
    def cond(op: str = "is", value: Any = ("x",)) -> dict[str, Any]:
        return {"field_name": "标题", "operator": op, **({} if value is None else {"value": list(value)})}

    def code(flt: dict[str, Any]) -> tuple[int, int]:
        resp = search_raw(client, {"filter": flt})
        return resp.raw.status_code, resp.code

    assert code({"conjunction": "and", "conditions": [cond()] * 50}) == (200, 0)
    assert code({"conditions": [cond()]}) == (200, 1254018)  # the conjunction is required
    assert code({"conjunction": "xor", "conditions": [cond()]}) == (200, 1254018)
    assert code({"conjunction": "and", "conditions": [cond()] * 51}) == (400, 99992402)
    assert code({"conjunction": "and", "conditions": [cond("contains", "abcdefghijk")]}) == (400, 99992402)
    assert code({"conjunction": "and", "conditions": [cond("contains", "abcdefghij")]}) == (200, 0)
    assert code({"conjunction": "and", "conditions": [cond("is", ("a", "b"))]}) == (200, 1254018)
    assert code({"conjunction": "and", "conditions": [cond("isNot", ("a", "b"))]}) == (200, 1254018)
    assert code({"conjunction": "and", "conditions": [cond("isEmpty", None)]}) == (200, 1254018)  # value: [] needed
    assert code({"conjunction": "and", "conditions": [cond("isEmpty", ())]}) == (200, 0)
    assert code({"conjunction": "and", "conditions": [cond("like")]}) == (200, 1254018)
    deep = {"conjunction": "and", "children": [{"conjunction": "or", "children": [
        {"conjunction": "and", "conditions": [cond()]}]}]}
    with pytest.raises(FeishuError, match="1254018"):  # children nest one level (the SDK cannot even send this)
        emulator.bitable.search(APP, TABLE, {}, {"filter": deep})
