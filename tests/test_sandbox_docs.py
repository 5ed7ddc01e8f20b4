"""The emulator's document APIs (docx, wiki, sheets v2, drive permissions, metas, download), driven by the real
lark-oapi client: documented shapes, real paging, revisions, permission errors, scope denial, and the CLI."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import lark_oapi as lark
import pytest
from lark_oapi.api.application.v6 import ListScopeRequest
from lark_oapi.api.docx.v1 import GetDocumentBlockChildrenRequest, GetDocumentRequest, ListDocumentBlockRequest
from lark_oapi.api.drive.v1 import BatchQueryMetaRequest, ListPermissionMemberRequest, MetaRequest, RequestDoc
from lark_oapi.api.drive.v2 import GetPermissionPublicRequest
from lark_oapi.api.im.v1 import ListMessageRequest
from lark_oapi.api.wiki.v2 import GetNodeSpaceRequest
from lark_oapi.core.cache import LocalCache
from lark_oapi.core.token.manager import TokenManager

from sandbox.cli.commands import main
from sandbox.documents.blocks import parse_range
from sandbox.feishu.emulator import FeishuEmulator
from sandbox.feishu.rules import ALL_SCOPES, OP_SCOPES, FeishuError
from tests.harness import APP_ID, APP_SECRET, service_env

BODY = """# 概览
这是 **重点**，见 [手册](https://wiki.example/a?b=1) 与 `cfg.yaml`。
- 第一点
1. 步骤一
> 引用
```python
print("hi")
```
| 名称 | 值 |
|---|---|
| a | 1 |
| b | 2 |
"""
DOC_OPS = ("doc_meta", "doc_blocks", "doc_children", "wiki_node", "sheet_meta", "sheet_values", "perm_public",
           "perm_members", "drive_metas", "drive_download")


@pytest.fixture
def client(feishu: FeishuEmulator, monkeypatch: pytest.MonkeyPatch) -> lark.Client:
    """lark-oapi as a bare client (unpaced): the docx reads' and the download's own limits are lifted here;
    test_the_docx_reads_and_the_download_keep_their_own_limits puts them back."""
    monkeypatch.setattr(TokenManager, "cache", LocalCache())
    for op in ("doc_meta", "doc_blocks", "doc_children", "drive_download"):
        feishu.set_doc_limit(op, per_second=100_000)
    builder = lark.Client.builder().app_id(APP_ID).app_secret(APP_SECRET).domain(feishu.url)
    return builder.log_level(lark.LogLevel.CRITICAL).build()


def body(resp: Any) -> dict[str, Any]:
    return dict(json.loads(resp.raw.content))


def raw_get(client: lark.Client, uri: str, headers: dict[str, str] | None = None, **query: str) -> Any:
    """sheets v2 and downloads: lark-oapi's BaseRequest, as feishu/docs.py calls them."""
    builder = lark.BaseRequest.builder().http_method(lark.HttpMethod.GET).uri(uri) \
        .token_types({lark.AccessTokenType.TENANT})
    if headers:
        builder = builder.headers(headers)
    req = builder.build()
    for k, v in query.items():
        req.add_query(k, v)
    return client.request(req)


def blocks(client: lark.Client, token: str, page_size: int, **extra: Any) -> tuple[list[dict[str, Any]], int]:
    """Every block, page by page; returns them and the number of pages."""
    items: list[dict[str, Any]] = []
    page_token, pages = "", 0
    while True:
        req = ListDocumentBlockRequest.builder().document_id(token).page_size(page_size) \
            .document_revision_id(extra.get("revision", -1))
        resp = client.docx.v1.document_block.list((req.page_token(page_token) if page_token else req).build())
        assert resp.success(), resp.msg
        data, pages = body(resp)["data"], pages + 1
        items += data["items"]
        if not data["has_more"]:
            return items, pages
        page_token = data["page_token"]


def text_of(block: dict[str, Any]) -> str:
    kind = {1: "page", 2: "text", 3: "heading1", 12: "bullet", 13: "ordered", 14: "code", 15: "quote"}
    return "".join(e["text_run"]["content"] for e in block[kind[block["block_type"]]]["elements"])


# -- docx ---------------------------------------------------------------------------------------------------------


def test_docx_meta_and_blocks_have_the_documented_shapes_and_really_page(client, feishu) -> None:
    token = feishu.add_doc("周报", BODY)
    meta = client.docx.v1.document.get(GetDocumentRequest.builder().document_id(token).build())
    assert meta.success() and meta.data.document.revision_id == 1 and meta.data.document.title == "周报"

    items, pages = blocks(client, token, 3)
    assert pages == -(-len(items) // 3) and pages > 2  # page_size honoured
    assert [b["block_id"] for b in items] == [b["block_id"] for b in blocks(client, token, 500)[0]]
    by_id = {b["block_id"]: b for b in items}
    page = items[0]
    assert page["block_type"] == 1 and page["block_id"] == token and text_of(page) == "周报"
    kinds = [by_id[c]["block_type"] for c in page["children"]]
    assert kinds == [3, 2, 12, 13, 15, 14, 31]
    para = by_id[page["children"][1]]["text"]["elements"]
    assert [e["text_run"]["text_element_style"]["bold"] for e in para][:2] == [False, True]
    assert para[3]["text_run"]["text_element_style"]["link"]["url"] == quote("https://wiki.example/a?b=1", safe="")
    assert any(e["text_run"]["text_element_style"]["inline_code"] for e in para)
    code = by_id[page["children"][5]]
    assert code["code"]["style"]["language"] == 49 and text_of(code) == 'print("hi")'
    table = by_id[page["children"][6]]
    assert table["table"]["property"]["row_size"] == 3 and table["table"]["property"]["column_size"] == 2
    cells = [by_id[c] for c in table["table"]["cells"]]
    assert all(c["block_type"] == 32 and c["parent_id"] == table["block_id"] for c in cells)
    assert [text_of(by_id[c["children"][0]]) for c in cells] == ["名称", "值", "a", "1", "b", "2"]


def test_edits_bump_the_revision_and_old_revisions_stay_readable(client, feishu) -> None:
    token = feishu.add_doc("说明", "第一版")
    revision = feishu.edit_doc(token, "# 第二版\n多了一段")
    assert revision > 1
    meta = body(client.docx.v1.document.get(GetDocumentRequest.builder().document_id(token).build()))
    assert meta["data"]["document"]["revision_id"] == revision
    assert [text_of(b) for b in blocks(client, token, 500)[0][1:]] == ["第二版", "多了一段"]
    assert [text_of(b) for b in blocks(client, token, 500, revision=1)[0][1:]] == ["第一版"]


def test_docx_refusals(client, feishu) -> None:
    hidden = feishu.add_doc("私密", "x", app_access=False)
    resp = client.docx.v1.document.get(GetDocumentRequest.builder().document_id(hidden).build())
    assert (resp.code, resp.raw.status_code) == (1770032, 403)
    resp = client.docx.v1.document.get(GetDocumentRequest.builder().document_id("nosuchdoc").build())
    assert (resp.code, resp.raw.status_code) == (1770002, 404)
    token = feishu.add_doc("公开", "x")
    bad = ListDocumentBlockRequest.builder().document_id(token).page_token("garbage").build()
    assert client.docx.v1.document_block.list(bad).code == 1770022
    big = ListDocumentBlockRequest.builder().document_id(token).page_size(501).build()
    assert client.docx.v1.document_block.list(big).code == 99992402


# -- wiki -----------------------------------------------------------------------------------------------------------


def test_wiki_node_and_its_refusals(client, feishu) -> None:
    doc = feishu.add_doc("知识", "x")
    node = feishu.add_wiki_node(doc, title="知识页")
    resp = client.wiki.v2.space.get_node(GetNodeSpaceRequest.builder().token(node).obj_type("wiki").build())
    got = body(resp)["data"]["node"]
    assert (got["node_token"], got["obj_token"], got["obj_type"], got["title"]) == (node, doc, "docx", "知识页")
    assert got["node_type"] == "origin" and got["has_child"] is False and got["space_id"].isdigit()
    assert feishu.doc_link("wiki", node).endswith(f"/wiki/{node}")
    feishu.set_doc_access(node, app_access=False)  # a node's access is its document's
    resp = client.wiki.v2.space.get_node(GetNodeSpaceRequest.builder().token(node).obj_type("wiki").build())
    assert (resp.code, resp.raw.status_code) == (131006, 400)
    resp = client.wiki.v2.space.get_node(GetNodeSpaceRequest.builder().token("nonode").obj_type("wiki").build())
    assert resp.code == 131005


# -- sheets v2 ------------------------------------------------------------------------------------------------------


def test_sheet_meta_values_ranges_and_revisions(client, feishu) -> None:
    rows = [["名称", "数量", "备注"], ["苹果", 3, None], ["梨", 5, "甜"]]
    token = feishu.add_sheet("库存", {"水果": rows, "蔬菜": [["白菜"]]})
    meta = body(raw_get(client, f"/open-apis/sheets/v2/spreadsheets/{token}/metainfo"))["data"]
    assert meta["properties"]["title"] == "库存" and meta["properties"]["sheetCount"] == 2
    first = meta["sheets"][0]
    assert (first["title"], first["index"], first["rowCount"], first["columnCount"]) == ("水果", 0, 3, 3)
    sheet = first["sheetId"]
    assert feishu.sheet_ids(token) == {"水果": sheet, "蔬菜": meta["sheets"][1]["sheetId"]}

    def values(cell_range: str) -> Any:
        return raw_get(client, f"/open-apis/sheets/v2/spreadsheets/{token}/values/{quote(cell_range, safe='')}",
                       valueRenderOption="ToString")

    data = body(values(f"{sheet}!A2:B10"))["data"]
    assert data["valueRange"]["values"] == [["苹果", 3], ["梨", 5]] and data["valueRange"]["majorDimension"] == "ROWS"
    assert data["valueRange"]["range"] == f"{sheet}!A2:B3" and data["spreadsheetToken"] == token
    assert body(values(sheet))["data"]["valueRange"]["values"] == rows
    assert body(values(f"{sheet}!B:C"))["data"]["valueRange"]["values"] == [["数量", "备注"], [3, None], [5, "甜"]]
    assert values("nosheet!A1:B2").code == 1310215
    assert values(f"{sheet}!B2:A1").code == 1310202
    feishu.set_sheet_read_limit(20)
    assert values(sheet).code == 1310221  # the documented 10 MB response cap, lowered
    revision = feishu.edit_sheet(token, "水果", [["空"]])
    assert revision == 2 and body(values(sheet))["data"]["revision"] == 2


def test_sheet_refusals(client, feishu) -> None:
    hidden = feishu.add_sheet("机密", {"表": [["x"]]}, app_access=False)
    resp = raw_get(client, f"/open-apis/sheets/v2/spreadsheets/{hidden}/metainfo")
    assert (resp.code, resp.raw.status_code) == (1310213, 400)
    assert raw_get(client, "/open-apis/sheets/v2/spreadsheets/nosheet/metainfo").code == 1310214


@pytest.mark.parametrize("text, expected", [
    ("s1", ("s1", 0, 0, None, None)), ("s1!A1:C10", ("s1", 0, 0, 9, 2)), ("s1!B:D", ("s1", 0, 1, None, 3)),
    ("s1!A2:C", ("s1", 1, 0, None, 2)), ("s1!AA3", ("s1", 2, 26, 2, 26)),
])
def test_a1_ranges(text: str, expected: tuple[Any, ...]) -> None:
    assert parse_range(text) == expected


@pytest.mark.parametrize("text", ["!A1", "s1!1A", "s1!C1:A1", "s1!A0:B2", "s1!A:B5"])
def test_bad_a1_ranges(text: str) -> None:
    with pytest.raises(FeishuError) as caught:
        parse_range(text)
    assert caught.value.code == 1310202


# -- drive: permissions, metas, download ----------------------------------------------------------------------------


def test_permissions_public_and_members(client, feishu) -> None:
    feishu.add_user("ou_amy", "艾米")
    feishu.add_chat("oc_team", name="项目群")
    token = feishu.add_doc("共享", "x", link_share="tenant_readable",
                           members=[("openid", "ou_amy", "view"), ("openchat", "oc_team", "edit")])
    public = client.drive.v2.permission_public.get(GetPermissionPublicRequest.builder().token(token).type("docx")
                                                   .build())
    shown = body(public)["data"]["permission_public"]
    assert shown["link_share_entity"] == "tenant_readable" and shown["external_access_entity"] == "closed"
    assert {"security_entity", "comment_entity", "share_entity", "manage_collaborator_entity", "copy_entity",
            "lock_switch"} <= set(shown)
    plain = body(client.drive.v1.permission_member.list(
        ListPermissionMemberRequest.builder().token(token).type("docx").build()))["data"]["items"]
    assert plain == [{"member_type": "openid", "member_id": "ou_amy", "perm": "view", "perm_type": "container"},
                     {"member_type": "openchat", "member_id": "oc_team", "perm": "edit", "perm_type": "container"}]
    full = body(client.drive.v1.permission_member.list(
        ListPermissionMemberRequest.builder().token(token).type("docx").fields("*").build()))["data"]["items"]
    assert [(m["type"], m["name"]) for m in full] == [("user", "艾米"), ("chat", "项目群")]

    feishu.set_doc_access(token, app_access=False)
    denied = client.drive.v2.permission_public.get(GetPermissionPublicRequest.builder().token(token).type("docx")
                                                   .build())
    assert (denied.code, denied.raw.status_code) == (1063002, 403)
    mismatch = client.drive.v1.permission_member.list(
        ListPermissionMemberRequest.builder().token(token).type("sheet").build())
    assert (mismatch.code, mismatch.raw.status_code) == (1063001, 400)


def test_metas_batch_query_reports_each_document(client, feishu) -> None:
    feishu.set_web_origin("https://acme.feishu.cn")
    doc = feishu.add_doc("甲", "x", owner="ou_owner")
    node = feishu.add_wiki_node(doc)
    sheet = feishu.add_sheet("乙", {"表": [["1"]]})
    hidden = feishu.add_doc("丙", "x", app_access=False)
    wanted = [(doc, "docx"), (node, "wiki"), (sheet, "sheet"), (hidden, "docx"), ("gone", "docx"), (doc, "mp3")]
    req = MetaRequest.builder().request_docs([RequestDoc.builder().doc_token(t).doc_type(k).build()
                                              for t, k in wanted]).with_url(True).build()
    data = body(client.drive.v1.meta.batch_query(BatchQueryMetaRequest.builder().user_id_type("open_id")
                                                 .request_body(req).build()))["data"]
    metas = {m["doc_token"]: m for m in data["metas"]}
    assert set(metas) == {doc, node, sheet}
    assert metas[doc]["owner_id"] == "ou_owner" and metas[doc]["url"] == f"https://acme.feishu.cn/docx/{doc}"
    assert metas[node]["url"].endswith(f"/wiki/{node}") and metas[doc]["create_time"].isdigit()
    assert data["failed_list"] == [{"token": hidden, "code": 970003}, {"token": "gone", "code": 970005},
                                   {"token": doc, "code": 970002}]


def test_a_drive_files_size_is_read_with_a_range_download(client, feishu) -> None:
    token = feishu.add_drive_file("报告.pdf", "pdf", 123456)
    resp = raw_get(client, f"/open-apis/drive/v1/files/{token}/download", headers={"Range": "bytes=0-0"})
    assert resp.raw.status_code == 206 and resp.raw.headers["Content-Range"] == "bytes 0-0/123456"
    assert len(resp.raw.content) == 1
    hidden = feishu.add_drive_file("密.pdf", "pdf", 10, app_access=False)
    denied = raw_get(client, f"/open-apis/drive/v1/files/{hidden}/download")
    assert denied.raw.status_code == 403 and body(denied)["code"] == 1061004


def test_each_permission_fact_is_refused_alone_by_its_own_documented_scopes(client, feishu) -> None:
    """B1: link share, members and metas are three APIs with three scope lists; a tenant without one list's
    scopes is refused that call alone (99991672 naming them) and still gets the other two."""
    assert OP_SCOPES["drive_metas"] == ("drive:drive.metadata:readonly", "drive:drive")  # meta/batch_query page
    assert "drive:drive:readonly" not in OP_SCOPES["perm_members"]  # permission-member/list page
    assert {"docs:permission.setting:read", "drive:drive:readonly", "docx:document"} <= set(OP_SCOPES["perm_public"])
    token = feishu.add_doc("三问", "x", owner="ou_owner", members=[("openid", "ou_amy", "view")])
    req = MetaRequest.builder().request_docs([RequestDoc.builder().doc_token(token).doc_type("docx").build()]).build()
    calls = {
        "perm_public": lambda: client.drive.v2.permission_public.get(
            GetPermissionPublicRequest.builder().token(token).type("docx").build()),
        "perm_members": lambda: client.drive.v1.permission_member.list(
            ListPermissionMemberRequest.builder().token(token).type("docx").build()),
        "drive_metas": lambda: client.drive.v1.meta.batch_query(BatchQueryMetaRequest.builder().request_body(req)
                                                                .build()),
    }
    for denied in calls:
        feishu.deny_scopes(OP_SCOPES[denied])
        answers = {op: call() for op, call in calls.items()}
        assert answers[denied].code == 99991672 and OP_SCOPES[denied][0] in answers[denied].msg
        assert all(a.success() for op, a in answers.items() if op != denied), denied
    feishu.deny_scopes(())


def test_a_tab_that_is_not_a_grid_carries_block_info_and_has_no_cells(client, feishu) -> None:
    token = feishu.add_sheet("项目", {"看板": "BITABLE_BLOCK", "明细": [["a", "b"]]})
    meta = body(raw_get(client, f"/open-apis/sheets/v2/spreadsheets/{token}/metainfo"))["data"]
    board, grid = meta["sheets"]
    assert board["blockInfo"]["blockType"] == "BITABLE_BLOCK" and "_tbl" in board["blockInfo"]["blockToken"]
    assert (board["index"], board["rowCount"], board["columnCount"]) == (0, 0, 0) and "blockInfo" not in grid
    assert raw_get(client, f"/open-apis/sheets/v2/spreadsheets/{token}/values/{board['sheetId']}!A1:B2").code == 1310211


def test_a_reference_synced_block_lists_its_source_and_its_content_is_read_there(client, feishu) -> None:
    source = feishu.add_doc("源文档", "开头")
    block = feishu.add_synced_source(source, "## 同步标题\n同步内容 CANARY")
    target = feishu.add_doc("引用文档", "正文")
    ref = feishu.add_synced_reference(target, source, block)
    listed = {b["block_id"]: b for b in blocks(client, target, 500)[0]}
    assert listed[ref]["block_type"] == 50 and "children" not in listed[ref]
    assert listed[ref]["reference_synced"] == {"source_document_id": source, "source_block_id": block}
    deep = body(client.docx.v1.document_block_children.get(
        GetDocumentBlockChildrenRequest.builder().document_id(source).block_id(block).with_descendants(True)
        .build()))["data"]["items"]
    assert [b["block_type"] for b in deep] == [49, 4, 2] and text_of(deep[2]) == "同步内容 CANARY"
    assert deep[1]["parent_id"] == block
    shallow = body(client.docx.v1.document_block_children.get(
        GetDocumentBlockChildrenRequest.builder().document_id(source).block_id(block).build()))["data"]["items"]
    assert [b["block_type"] for b in shallow] == [4, 2]
    feishu.set_doc_access(source, app_access=False)  # the app needs read access to the source document
    denied = client.docx.v1.document_block_children.get(
        GetDocumentBlockChildrenRequest.builder().document_id(source).block_id(block).with_descendants(True).build())
    assert (denied.code, denied.raw.status_code) == (1770032, 403)


def test_the_docx_reads_and_the_download_keep_their_own_limits(client, feishu) -> None:
    """B9: docx get / blocks list / block children 5 a second per app (HTTP 400, 99991400), the download 5 a
    second and 10,000 a day (1061045). The emulator's clock is stopped: every call lands in one second."""
    feishu.doc_limits.reset()  # the documented limits, not the lifted ones of `client`
    feishu.doc_limits.clock = lambda: 1000.0
    token = feishu.add_doc("限频", "x")
    file_token = feishu.add_drive_file("a.zip", "zip", 10)
    try:
        gets = [client.docx.v1.document.get(GetDocumentRequest.builder().document_id(token).build()) for _ in range(6)]
        assert all(g.success() for g in gets[:5]) and (gets[5].code, gets[5].raw.status_code) == (99991400, 400)
        assert blocks(client, token, 500)[1] == 1  # each op has its own 5
        downloads = [raw_get(client, f"/open-apis/drive/v1/files/{file_token}/download") for _ in range(6)]
        assert [d.raw.status_code for d in downloads] == [200] * 5 + [400] and body(downloads[5])["code"] == 1061045
        feishu.doc_limits.clock = lambda: 1002.0
        feishu.set_doc_limit("drive_download", per_day=6)
        assert raw_get(client, f"/open-apis/drive/v1/files/{file_token}/download").raw.status_code == 200
        assert body(raw_get(client, f"/open-apis/drive/v1/files/{file_token}/download"))["code"] == 1061045
        assert feishu.doc_rejections == {"doc_meta": 1, "drive_download": 2}
    finally:
        feishu.doc_limits.clock = time.monotonic


def test_the_scope_list_holds_user_grants_beside_the_tenants(client, feishu) -> None:
    """application/v6/scopes: grant_status 1 granted, 2 not; `scope_type` tells the tenant's grants from users'."""
    feishu.deny_scopes({"docx:document:readonly"})
    scopes = body(client.application.v6.scope.list(ListScopeRequest.builder().build()))["data"]["scopes"]
    rows = {(s["scope_name"], s["scope_type"]): s["grant_status"] for s in scopes}
    assert rows[("docx:document:readonly", "tenant")] == 2 and rows[("docx:document:readonly", "user")] == 1
    assert {name for name, _ in rows} == ALL_SCOPES
    feishu.deny_scopes(())


def test_a_groups_history_needs_a_read_scope_and_the_group_message_scope(client, feishu) -> None:
    """获取会话历史消息: a read scope, and for a group chat im:message.group_msg too; p2p needs only the first."""
    feishu.add_message("om_g1", "oc_hist_group", text="群消息")
    feishu.add_message("om_p1", "oc_hist_p2p", text="单聊", chat_mode="p2p")

    def listed(chat: str) -> Any:
        return client.im.v1.message.list(ListMessageRequest.builder().container_id_type("chat").container_id(chat)
                                         .build())

    feishu.deny_scopes({"im:message.group_msg"})
    refused = listed("oc_hist_group")
    assert refused.code == 99991672 and "im:message.group_msg" in refused.msg
    assert listed("oc_hist_p2p").success()
    feishu.deny_scopes({"im:message", "im:message:readonly", "im:message.history:readonly"})
    assert listed("oc_hist_group").code == 99991672 and listed("oc_hist_p2p").code == 99991672
    feishu.deny_scopes(())
    assert listed("oc_hist_group").success()


# -- the plumbing every op shares: recording, faults, scopes --------------------------------------------------------


def test_every_docs_op_is_recorded_can_be_failed_and_needs_its_scopes(client, feishu) -> None:
    token = feishu.add_doc("记录", "x")
    feishu.inject("doc_meta", code=1770032, http_status=403)
    first = client.docx.v1.document.get(GetDocumentRequest.builder().document_id(token).build())
    assert first.code == 1770032
    assert client.docx.v1.document.get(GetDocumentRequest.builder().document_id(token).build()).success()
    assert [r["op"] for r in feishu.requests if r["op"].startswith("doc_")] == ["doc_meta", "doc_meta"]
    for op in DOC_OPS:
        feishu.set_delay(op, 0)  # every op is known to the controls
    feishu.deny_scopes(OP_SCOPES["doc_meta"])
    denied = client.docx.v1.document.get(GetDocumentRequest.builder().document_id(token).build())
    assert denied.code == 99991672 and "docx:document:readonly" in denied.msg
    feishu.deny_scopes(OP_SCOPES["sheet_values"])
    assert raw_get(client, f"/open-apis/sheets/v2/spreadsheets/{token}/values/x").code == 99991672
    feishu.deny_scopes(())


# -- the CLI --------------------------------------------------------------------------------------------------------


@pytest.fixture
def cli(feishu: FeishuEmulator, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> Iterator[Any]:
    for name, value in service_env("redis://127.0.0.1:1/0", feishu.url, "http://127.0.0.1:9").items():
        monkeypatch.setenv(name, value)

    def run(*args: str) -> tuple[int, str]:
        capsys.readouterr()
        code = main(list(args))
        return code, capsys.readouterr().out.strip()

    yield run


def test_the_doc_and_sheet_commands(cli, feishu, client) -> None:
    feishu.set_web_origin("https://sandbox.feishu.cn")
    code, link = cli("doc", "new", "手册", "# 安装\\n运行 make")
    assert code == 0 and link.startswith("https://sandbox.feishu.cn/docx/")
    token = link.rsplit("/", 1)[1]
    assert [text_of(b) for b in blocks(client, token, 500)[0][1:]] == ["安装", "运行 make"]
    code, out = cli("doc", "edit", link, "# 安装\\n运行 make run")
    assert code == 0 and out == f"revision {feishu.doc_info(token)['revision']}" and out != "revision 1"
    assert cli("doc", "share", token, "closed")[0] == 0 and feishu.doc_info(token)["link_share"] == "closed"
    assert cli("doc", "member", link, "ou_bob")[0] == 0
    assert feishu.doc_info(token)["members"] == [["openid", "ou_bob", "view"]]
    assert cli("doc", "app", link, "off")[0] == 0 and feishu.doc_info(token)["app_access"] is False
    code, wiki = cli("doc", "wiki", link)
    assert code == 0 and feishu.doc_info(wiki.rsplit("/", 1)[1])["token"] == token
    code, sheet = cli("sheet", "new", "名单", "姓名,组", "艾米,A")
    assert code == 0 and "/sheets/" in sheet
    meta = body(raw_get(client, f"/open-apis/sheets/v2/spreadsheets/{sheet.rsplit('/', 1)[1]}/metainfo"))
    assert meta["data"]["sheets"][0]["rowCount"] == 2
