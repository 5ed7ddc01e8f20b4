"""Materials against Feishu's documented rules (issue 23 B): partial grants, metas' failed_list, spreadsheets whose
first tab is not a grid, synced blocks, and the docx/download limits — through the shared service (web + two
workers + sweeper), lark-oapi against the Feishu emulator, which follows each rule (sandbox/documents/api.py names
the pages)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from feishu.capabilities import CAPABILITIES
from sandbox.feishu.rules import OP_SCOPES
from tests.harness import deliver, model_requests_with, reply_text, wait_for, wait_route_idle
from tests.test_documents import AT_BOT, Chat, link, ops, text_of

ASKER = "ou_grant_asker"
DOC_OPS = ("doc_meta", "doc_blocks", "doc_children", "wiki_node", "sheet_meta", "sheet_values", "perm_public",
           "perm_members", "drive_metas", "drive_download")
DOC_SCOPES = frozenset(s for op in DOC_OPS for s in OP_SCOPES[op])
# A tenant that granted the narrowest documented scope of each API the materials use.
MINIMAL = ("docx:document:readonly", "docs:permission.setting:read", "docs:permission.member:retrieve",
           "drive:drive.metadata:readonly", "sheets:spreadsheet:readonly", "wiki:wiki:readonly", "drive:file:readonly")
MEMBER, OWNER, SHARED, SHEET, SIZE = "CANARY-MEMBER-4410", "CANARY-OWNER-4420", "CANARY-LINK-4430", \
    "CANARY-SHEET-4440", "4242 bytes"
# What still reaches the asker's request with each scope missing alone (the others of MINIMAL granted).
STILL = {
    None: {MEMBER, OWNER, SHARED, SHEET, SIZE},
    "docx:document:readonly": {SHEET, SIZE},  # docx off; the sheet and the file are no docx
    "docs:permission.setting:read": {MEMBER, OWNER},  # the link share is unread: it lets nobody in
    "docs:permission.member:retrieve": {OWNER, SHARED, SHEET, SIZE},  # a collaborator no longer counts; the rest do
    "drive:drive.metadata:readonly": {MEMBER, SHARED, SHEET},  # the owner is unknown; the file cannot be named
    "sheets:spreadsheet:readonly": {MEMBER, OWNER, SHARED, SIZE},
    "wiki:wiki:readonly": {MEMBER, OWNER, SHEET, SIZE},  # the wiki link cannot be resolved
    "drive:file:readonly": {MEMBER, OWNER, SHARED, SHEET},  # the file is named, without its size
}


@pytest.fixture
def clean_capabilities(feishu, r, keys) -> Iterator[None]:
    yield
    feishu.deny_scopes(())
    r.delete(*[keys.capability_off(name) for name in CAPABILITIES], keys.alerts)


@pytest.mark.parametrize("missing", list(STILL), ids=lambda m: m or "all-granted")
def test_each_scope_missing_alone_withholds_only_what_it_proves(missing, clean_capabilities, service, feishu, claude,
                                                                r, keys) -> None:
    """B1 and the attack row "partial grants": each permission fact is read on its own; a fact that could not be
    read lets nobody in and takes nothing from what the others proved (a refused owner lookup no longer withholds
    a document shared with the asker directly)."""
    member = feishu.add_doc("成员文档", f"## 内容\n{MEMBER}", members=[("openid", ASKER, "view")])
    owned = feishu.add_doc("所有者文档", f"## 内容\n{OWNER}", owner=ASKER)
    node = feishu.add_wiki_node(feishu.add_doc("全员文档", f"## 内容\n{SHARED}", link_share="tenant_readable"))
    sheet = feishu.add_sheet("全员表格", {"表": [["指标", "值"], [SHEET, "1"]]}, link_share="tenant_readable")
    log = feishu.add_drive_file("日志.zip", "zip", 4242, link_share="tenant_readable")
    feishu.deny_scopes(DOC_SCOPES - (set(MINIMAL) - {missing}))
    question = f"看看这些材料（{missing or 'all'}）"
    links = " ".join([link("docx", member), link("docx", owned), link("wiki", node), link("sheets", sheet),
                      link("file", log)])
    reply = reply_text(Chat(service, feishu, r, keys).ask(f"{question} {links}", sender=ASKER))
    sent = text_of(model_requests_with(claude, question)[0])
    shown = {c for c in (MEMBER, OWNER, SHARED, SHEET, SIZE) if c in sent}
    assert shown == STILL[missing], sent
    assert question in reply  # answered all the same
    if missing == "drive:file:readonly":
        assert 'title="日志.zip" kind="file"' in sent  # named, without a size


def test_a_fact_that_could_not_be_read_is_asked_again_once_the_scope_is_granted(clean_capabilities, service, feishu,
                                                                                 claude, r, keys) -> None:
    """A partly read answer is never cached (a complete one is, DOCUMENT_ACL_CACHE_SECONDS): granting the scope
    lets the owner in at their next question."""
    owned = feishu.add_doc("我的文档", "CANARY-REGRANT-5501", owner=ASKER)
    feishu.deny_scopes({"drive:drive.metadata:readonly", "drive:drive"})
    chat = Chat(service, feishu, r, keys)
    chat.ask(f"看看（未授权） {link('docx', owned)}", sender=ASKER)
    assert "CANARY-REGRANT-5501" not in text_of(model_requests_with(claude, "看看（未授权）")[0])
    feishu.deny_scopes(())
    chat.ask(f"再看看（已授权） {link('docx', owned)}", sender=ASKER)
    assert "CANARY-REGRANT-5501" in text_of(model_requests_with(claude, "再看看（已授权）")[0])


def test_a_file_the_app_cannot_see_is_said_to_be_not_shared_with_the_app(service, feishu, claude, r, keys) -> None:
    """B4: metas answers code 0 and lists the file in failed_list (970003): not "you may not view it"."""
    hidden = feishu.add_drive_file("内部.zip", "zip", 10, link_share="tenant_readable", app_access=False)
    reply = reply_text(Chat(service, feishu, r, keys).ask(f"这个文件是什么（隐藏） {link('file', hidden)}"))
    sent = text_of(model_requests_with(claude, "这个文件是什么（隐藏）")[0])
    assert "not shared with the app" in sent and "may not view" not in sent
    assert "添加文档应用" in reply and "需要查看权限" not in reply
    missing = link("file", "boxcnNoSuchFile000000000")
    gone = reply_text(Chat(service, feishu, r, keys).ask(f"这个呢（不存在） {missing}"))
    assert "打不开" in gone and "需要查看权限" not in gone  # 970005: deleted or a wrong link


def test_a_spreadsheet_whose_first_tab_is_not_a_grid_reads_its_first_grid_and_names_the_rest(service, feishu,
                                                                                              claude, r, keys) -> None:
    """B6: sheets v2 metainfo marks an embedded bitable tab with blockInfo; it is never read as cells."""
    rows = [["指标", "数值"], ["失败率", "CANARY-GRID-3.2%"]]
    token = feishu.add_sheet("项目表", {"项目看板": "BITABLE_BLOCK", "明细": rows}, link_share="tenant_readable")
    chat = Chat(service, feishu, r, keys)
    chat.ask(f"整张表（看板在前） {link('sheets', token)}")
    whole = text_of(model_requests_with(claude, "整张表（看板在前）")[0])
    assert "| 失败率 | CANARY-GRID-3.2% |" in whole and "《项目看板》 (an embedded bitable)" in whole
    assert 'title="项目表 / 明细"' in whole and "could not be read" not in whole
    board = feishu.sheet_ids(token)["项目看板"]
    chat.ask(f"看板那页（看板） {link('sheets', token, '?sheet=' + board)}")
    linked = text_of(model_requests_with(claude, "看板那页（看板）")[0])
    assert "this tab is an embedded bitable, not a grid" in linked and "could not be read" not in linked
    assert not [q for q in feishu.requests if q["op"] == "sheet_values" and board in q["path"]]


def test_a_reference_synced_block_shows_its_source_to_those_who_may_view_the_source(service, feishu, claude, r,
                                                                                     keys) -> None:
    """B7: block type 50 lists no children when its source is another document; the content is read there
    (block children get, with_descendants) and shown only to askers who may view that source."""
    source = feishu.add_doc("公共条款", "开头", link_share="tenant_readable")
    block = feishu.add_synced_source(source, "## 条款\nCANARY-SYNCED-7001")
    page = feishu.add_doc("产品说明", "## 说明\n正文 CANARY-PAGE-7002", link_share="tenant_readable")
    feishu.add_synced_reference(page, source, block)
    chat = Chat(service, feishu, r, keys)
    chat.ask(f"看看说明（同步） {link('docx', page)}", sender=ASKER)
    sent = text_of(model_requests_with(claude, "看看说明（同步）")[0])
    assert "CANARY-PAGE-7002" in sent and "CANARY-SYNCED-7001" in sent and "## 条款" in sent
    # A source only its collaborators may view: the page is shown to the asker, the synced part is not.
    private = feishu.add_doc("内部条款", "开头", members=[("openid", "ou_insider", "view")])
    secret = feishu.add_synced_source(private, "CANARY-SYNCED-SECRET-7003")
    page2 = feishu.add_doc("对外说明", "正文 CANARY-PAGE-7004", link_share="tenant_readable")
    feishu.add_synced_reference(page2, private, secret)
    Chat(service, feishu, r, keys).ask(f"看看对外说明（外人） {link('docx', page2)}", sender=ASKER)
    outsider = text_of(model_requests_with(claude, "看看对外说明（外人）")[0])
    assert "CANARY-PAGE-7004" in outsider and "CANARY-SYNCED-SECRET-7003" not in outsider
    assert "[synced block from another document: not shown]" in outsider
    Chat(service, feishu, r, keys).ask(f"看看对外说明（内部） {link('docx', page2)}", sender="ou_insider")
    assert "CANARY-SYNCED-SECRET-7003" in text_of(model_requests_with(claude, "看看对外说明（内部）")[0])
    # A source the app may not read: the placeholder, the rest of the page.
    feishu.set_doc_access(source, app_access=False)
    page3 = feishu.add_doc("第三份", "正文 CANARY-PAGE-7005", link_share="tenant_readable")
    feishu.add_synced_reference(page3, source, block)
    Chat(service, feishu, r, keys).ask(f"看看第三份（应用无权） {link('docx', page3)}", sender=ASKER)
    third = text_of(model_requests_with(claude, "看看第三份（应用无权）")[0])
    assert "CANARY-PAGE-7005" in third and "CANARY-SYNCED-7001" not in third and "not shown" in third


def test_a_batch_of_several_senders_sees_synced_content_only_if_every_sender_may(service, feishu, claude, r,
                                                                                  keys) -> None:
    """Attack row "several people": one batch, an insider and an outsider of the synced block's source: the page
    (tenant-wide) is shown, the source's content is not; the insider alone, later, sees it."""
    private = feishu.add_doc("内部条款", "开头", members=[("openid", "ou_insider", "view")])
    secret = feishu.add_synced_source(private, "CANARY-SYNCED-BATCH-7101")
    page = feishu.add_doc("对外说明", "正文 CANARY-PAGE-7102", link_share="tenant_readable")
    feishu.add_synced_reference(page, private, secret)
    topic = Chat(service, feishu, r, keys, kind="topic")
    claude.set_delay(1.5)  # the first turn holds the route while the two others write: they form one batch
    try:
        first = threading.Thread(target=topic.ask, args=("先问一个别的（占位）",), kwargs={"sender": "ou_first"})
        first.start()
        wait_for(lambda: model_requests_with(claude, "先问一个别的（占位）"), 20, what="the first turn")
        for sender, text in (("ou_insider", f"内部人看看（批） {link('docx', page)}"), (ASKER, "外人也看看（批）")):
            deliver(service, feishu, chat_id=topic.chat, chat_type="group", thread_id=topic.thread,
                    sender_open_id=sender, text=f"@_user_1 {text}", mentions=AT_BOT)
        first.join(60)
        wait_for(lambda: model_requests_with(claude, "外人也看看（批）"), 60, what="the batch's turn")
        wait_route_idle(r, keys, topic.rk(ASKER))
    finally:
        claude.set_delay(0)
    batch = text_of(model_requests_with(claude, "外人也看看（批）")[0])
    assert "内部人看看（批）" in batch and "CANARY-PAGE-7102" in batch
    assert "CANARY-SYNCED-BATCH-7101" not in batch and "not shown" in batch
    Chat(service, feishu, r, keys).ask(f"只有内部人（单） {link('docx', page)}", sender="ou_insider")
    assert "CANARY-SYNCED-BATCH-7101" in text_of(model_requests_with(claude, "只有内部人（单）")[0])


def test_the_docx_limit_holds_across_workers_and_file_sizes_are_not_asked_twice(service, feishu, claude, r,
                                                                                keys) -> None:
    """B9: docx get / blocks list at 5 a second per app, shared by both workers through Redis; the emulator
    refuses a sixth call in any second (99991400), and none is refused. A file's size is downloaded once."""
    chats = [Chat(service, feishu, r, keys) for _ in range(2)]
    tokens = [[feishu.add_doc(f"手册{c}{i}", f"## 第{i}节\nCANARY-PACE-{c}-{i}", link_share="tenant_readable")
               for i in range(5)] for c in range(2)]
    threads = [threading.Thread(target=chat.ask, args=(f"一起读（{c}） " + " ".join(link("docx", t) for t in ts),))
               for c, (chat, ts) in enumerate(zip(chats, tokens, strict=True))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for c in range(2):
        sent = text_of(model_requests_with(claude, f"一起读（{c}）")[0])
        assert all(f"CANARY-PACE-{c}-{i}" in sent for i in range(5)), sent
    assert feishu.doc_rejections == {}
    assert sum(ops(feishu, "doc_meta", t) for ts in tokens for t in ts) == 10
    log = feishu.add_drive_file("导出.zip", "zip", 777, link_share="tenant_readable")
    chat = Chat(service, feishu, r, keys)
    chat.ask(f"文件多大（一） {link('file', log)}")
    chat.ask(f"文件多大（二） {link('file', log)}")
    assert "777 bytes" in text_of(model_requests_with(claude, "文件多大（二）")[0])
    assert ops(feishu, "drive_download", log) == 1
