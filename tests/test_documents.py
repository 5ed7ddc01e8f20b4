"""Materials through the real stack (issue 15): linked docx, wiki and sheets are read with their revision,
within budget, resumable, and never shown to someone who may not open them.

The shared service (web + two workers + sweeper) against the Feishu emulator's docx/wiki/sheets/permission
endpoints and the model stand-in (which calls read_document when asked to read a document through).
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import requests

from sandbox.claude.wire import input_tokens
from sandbox.feishu.events import mention
from tests.harness import (
    BOT_OPEN_ID,
    deliver,
    message_id,
    model_requests_with,
    reply_text,
    route_key,
    session_log,
    unique,
    wait_for,
    wait_route_idle,
)
from turn.recall import request_text

AT_BOT = [mention(BOT_OPEN_ID, "助手")]
ORIGIN = "https://feishu.cn"
BUDGET = 24000  # the shared service's CONTEXT_BUDGET_TOKENS (the default)
GUIDE = """# 导出失败排查

## 现象
报表导出返回空文件，从 18:00 开始。

## 复现代码
```python
def export(report_id):
    return render(report_id)  # CANARY-CODE-7781
```

## 环境对比
| 环境 | 结果 |
| --- | --- |
| 测试 | 复现 |
| 生产 | 复现 |

- 第一步：清缓存
- 第二步：重跑任务
"""
_SHOWN = re.compile(r'<shown from="(\d+)" to="(\d+)"/>')


def link(kind: str, token: str, query: str = "") -> str:
    return f"{ORIGIN}/{kind}/{token}{query}"


def text_of(req: dict[str, Any]) -> str:
    return request_text(req["body"]["messages"])


def ops(feishu: Any, op: str, token: str = "") -> int:
    return sum(1 for q in feishu.requests
               if q["op"] == op and (token in q.get("path", "") or token in (q.get("query") or {}).values()))


class Chat:
    """One conversation with the bot: p2p, a group (each sender their own route) or a topic."""

    def __init__(self, service: Any, feishu: Any, r: Any, keys: Any, kind: str = "p2p") -> None:
        self.service, self.feishu, self.r, self.keys, self.kind = service, feishu, r, keys, kind
        self.chat = unique(f"oc_doc_{kind}")
        self.thread = unique("omt") if kind == "topic" else None

    def rk(self, sender: str) -> str:
        if self.kind == "p2p":
            return route_key("p2p", self.chat)
        if self.kind == "topic":
            return route_key("topic", self.chat, str(self.thread))
        return route_key("group", self.chat, sender)

    def ask(self, text: str, sender: str = "ou_alice") -> dict[str, Any]:
        extra: dict[str, Any] = {"chat_type": "p2p"} if self.kind == "p2p" else {
            "chat_type": "group", "text": f"@_user_1 {text}", "mentions": AT_BOT}
        if self.thread:
            extra["thread_id"] = self.thread
        env = deliver(self.service, self.feishu, chat_id=self.chat, sender_open_id=sender,
                      **{"text": text, **extra})
        reply = wait_for(lambda: self.feishu.replies_to(message_id(env)), 60, what="the reply")[0]
        wait_route_idle(self.r, self.keys, self.rk(sender))
        return reply

    def say(self, text: str, sender: str) -> None:
        """A group message that does not address the bot (kept as related discussion)."""
        deliver(self.service, self.feishu, chat_id=self.chat, chat_type="group", sender_open_id=sender, text=text,
                **({"thread_id": self.thread} if self.thread else {}))

    def ledger(self, sender: str = "ou_alice") -> list[dict[str, Any]]:
        return list(session_log(self.r, self.keys, self.rk(sender))[-1]["recall"]["documents"])


# -- 1. a docx link: its text (structure kept), title and revision; the reply names the revision -------------

def test_a_linked_docx_is_read_with_structure_title_and_revision(service, feishu, claude, r, keys) -> None:
    token = feishu.add_doc("导出失败排查", GUIDE, link_share="tenant_readable")
    chat = Chat(service, feishu, r, keys)
    reply = chat.ask(f"根据这份文档看看原因 {link('docx', token)}")
    sent = text_of(model_requests_with(claude, "根据这份文档看看原因")[0])
    assert 'title="导出失败排查"' in sent and 'revision="1"' in sent
    assert "## 复现代码" in sent and "```python" in sent and "CANARY-CODE-7781" in sent
    assert "| 测试 | 复现 |" in sent and "- 第一步：清缓存" in sent
    assert "《导出失败排查》r1" in reply_text(reply)
    assert "CANARY-CODE-7781" not in str(session_log(r, keys, chat.rk("ou_alice")))  # request-only, never logged


# -- 2. the same document through a wiki link: one node lookup ------------------------------------------------

def test_a_wiki_link_resolves_to_the_same_document_with_one_node_lookup(service, feishu, claude, r, keys) -> None:
    token = feishu.add_doc("导出失败排查", GUIDE, link_share="tenant_readable")
    node = feishu.add_wiki_node(token)
    chat = Chat(service, feishu, r, keys)
    chat.ask(f"这个知识库页面讲了什么 {link('wiki', node)}")
    chat.ask(f"再对照一下 {link('wiki', node)}")
    first = text_of(model_requests_with(claude, "这个知识库页面讲了什么")[0])
    assert "CANARY-CODE-7781" in first and f'wiki_node="{node}"' in first
    assert "CANARY-CODE-7781" in text_of(model_requests_with(claude, "再对照一下")[0])
    assert ops(feishu, "wiki_node", node) == 1


# -- 3. a 300-page document: within budget, read on with read_document, resumed at the recorded cursor -------

def _pages(n: int, canary: str = "") -> str:
    parts = []
    for i in range(1, n + 1):
        lines = [f"page {i} line {j}: the export job wrote {i * j} rows before the cache flush." for j in range(24)]
        parts.append(f"## 第 {i} 页 {canary}\n" + "\n".join(lines))
    return "# 年度运维手册\n\n" + "\n\n".join(parts)


def _shown(requests_: list[dict[str, Any]]) -> set[tuple[int, int]]:
    return {(int(a), int(b)) for q in requests_ for a, b in _SHOWN.findall(text_of(q))}


def test_a_300_page_document_stays_in_budget_and_resumes_at_the_cursor(service, feishu, claude, r, keys) -> None:
    token = feishu.add_doc("年度运维手册", _pages(300), link_share="tenant_readable")
    chat = Chat(service, feishu, r, keys)
    chat.ask(f"请读完文档全文 {link('docx', token)}")
    turn1 = model_requests_with(claude, "请读完文档全文")
    assert len(turn1) >= 3  # the inline part, then two read_document rounds
    for q in turn1:
        assert input_tokens(q["body"]) <= BUDGET  # as the API counts them
    ledger = next(d for d in chat.ledger() if d["token"] == token)
    assert ledger["length"] > 400_000 and ledger["status"] == "included"
    assert {tuple(x) for x in ledger["included"]} == _shown(turn1)  # the ledger says what the requests carried
    starts = sorted(_shown(turn1))
    assert starts[0][0] == 0 and all(b == c for (_, b), (c, _) in itertools.pairwise(starts))
    cursor = ledger["cursor"]
    assert cursor == starts[-1][1] < ledger["length"]
    chat.ask("继续")
    turn2 = model_requests_with(claude, "继续")[0]
    assert f'<shown from="{cursor}"' in text_of(turn2)  # the next turn resumed where the ledger stopped
    outline = text_of(turn2).split("<outline>")[1].split("</outline>")[0]
    assert "earlier headings" in outline and "later headings" in outline  # a window around the cursor
    at = [int(x) for x in re.findall(r"\(cursor (\d+)\)", outline)]
    assert at == sorted(at) and at[0] <= cursor <= at[-1]  # it names where each nearby section starts
    assert input_tokens(turn2["body"]) <= BUDGET


# -- 4. edited between two turns: said, and the new text read; unchanged: no download ------------------------

def test_an_edit_between_turns_is_said_and_unchanged_documents_are_not_downloaded(service, feishu, claude, r,
                                                                                     keys) -> None:
    token = feishu.add_doc("导出失败排查", GUIDE, link_share="tenant_readable")
    chat = Chat(service, feishu, r, keys)
    chat.ask(f"看看这份文档 {link('docx', token)}")
    assert ops(feishu, "doc_blocks", token) == 1
    feishu.edit_doc(token, GUIDE.replace("CANARY-CODE-7781", "CANARY-FIXED-9902"))
    chat.ask("文档有更新吗")
    second = text_of(model_requests_with(claude, "文档有更新吗")[0])
    assert 'updated_since="r1 → r2"' in second and "CANARY-FIXED-9902" in second and "CANARY-CODE-7781" not in second
    assert ops(feishu, "doc_blocks", token) == 2
    metas = ops(feishu, "doc_meta", token)
    chat.ask("再确认一下")
    third = text_of(model_requests_with(claude, "再确认一下")[0])
    assert "CANARY-FIXED-9902" in third and "updated_since" not in third
    assert ops(feishu, "doc_blocks", token) == 2 and ops(feishu, "doc_meta", token) == metas + 1  # one check only


# -- 5. the linker may read it, the asker may not: none of it in the asker's request -------------------------

SECRET = "# 薪资调整方案\n\n## 细节\nCANARY-SECRET-5511 只给负责人看。\n"


def test_a_document_the_asker_may_not_view_stays_out_of_their_request(service, feishu, claude, r, keys) -> None:
    token = feishu.add_doc("薪资调整方案", SECRET, members=[("openid", "ou_linker", "view")])
    group = Chat(service, feishu, r, keys, kind="group")
    group.say(f"排查依据在这里 {link('docx', token)}", sender="ou_linker")
    group.ask("上面那个文档说了什么（linker）", sender="ou_linker")  # a collaborator: it is read for them
    assert "CANARY-SECRET-5511" in text_of(model_requests_with(claude, "上面那个文档说了什么（linker）")[0])
    reply = group.ask("上面那个文档说了什么（asker）", sender="ou_asker")
    assert "CANARY-SECRET-5511" not in text_of(model_requests_with(claude, "上面那个文档说了什么（asker）")[0])
    assert "需要查看权限" in reply_text(reply) and token in reply_text(reply)
    # The same in a shared topic: the linker's turn used it; the asker's next turn of the topic may not.
    topic = Chat(service, feishu, r, keys, kind="topic")
    topic.ask(f"看看这个 {link('docx', token)}", sender="ou_linker")
    assert "CANARY-SECRET-5511" in text_of(model_requests_with(claude, "看看这个")[0])
    reply = topic.ask("那结论是什么", sender="ou_asker")
    assert "CANARY-SECRET-5511" not in text_of(model_requests_with(claude, "那结论是什么")[0])
    assert "需要查看权限" in reply_text(reply)


def test_a_chat_collaborator_counts_for_its_members(service, feishu, claude, r, keys) -> None:
    group = Chat(service, feishu, r, keys, kind="group")
    feishu.add_chat(group.chat, members=["ou_member"])
    token = feishu.add_doc("群协作文档", "CANARY-CHAT-3141", members=[("openchat", group.chat, "view")])
    group.ask(f"群成员看看 {link('docx', token)}", sender="ou_member")
    assert "CANARY-CHAT-3141" in text_of(model_requests_with(claude, "群成员看看")[0])
    group.ask(f"外人看看 {link('docx', token)}", sender="ou_stranger")
    assert "CANARY-CHAT-3141" not in text_of(model_requests_with(claude, "外人看看")[0])


# -- 6. not shared with the app: a one-line how-to, the rest answered, no pause ------------------------------

def test_a_document_not_shared_with_the_app_gets_a_how_to_and_no_pause(service, feishu, claude, r, keys) -> None:
    before = requests.get(f"{service.url}/readyz", timeout=10).json()
    token = feishu.add_doc("内部文档", GUIDE, link_share="tenant_readable", app_access=False)
    chat = Chat(service, feishu, r, keys)
    reply = reply_text(chat.ask(f"根据这份文档看看原因，另外今天几号 {link('docx', token)}"))
    assert "添加文档应用" in reply and reply.count("添加文档应用") == 1
    assert "今天几号" in reply  # the rest of the question was answered (the stand-in quotes it)
    sent = text_of(model_requests_with(claude, "另外今天几号")[0])
    assert "not shared with the app" in sent and "CANARY-CODE-7781" not in sent
    after = requests.get(f"{service.url}/readyz", timeout=10).json()
    assert after.get("status") == before.get("status") and after.get("paused") == before.get("paused")
    chat.ask("只是问个别的问题")  # other work goes on
    assert "只是问个别的问题" in text_of(model_requests_with(claude, "只是问个别的问题")[0])


# -- 8. sheets: the linked range as a table; no range: the first sheet, bounded -----------------------------

def test_a_sheet_link_reads_its_range_or_the_first_sheet_bounded(service, feishu, claude, r, keys) -> None:
    big = [[f"列{c}" for c in range(30)]] + [[f"r{i}c{c}" for c in range(30)] for i in range(300)]
    small = [["指标", "数值"], ["失败率", "3.2%"], ["重试", "17"], ["超时", "4"]]
    token = feishu.add_sheet("运营指标", {"明细": big, "汇总": small}, link_share="tenant_readable")
    sheet_ids = feishu.sheet_ids(token)
    chat = Chat(service, feishu, r, keys)
    chat.ask(f"第二张表前两行 {link('sheets', token, '?sheet=' + sheet_ids['汇总'] + '&range=A1:B2')}")
    ranged = text_of(model_requests_with(claude, "第二张表前两行")[0])
    assert "| 指标 | 数值 |" in ranged and "| 失败率 | 3.2% |" in ranged and "重试" not in ranged
    chat.ask(f"整张表 {link('sheets', token)}")
    whole = text_of(model_requests_with(claude, "整张表")[0])
    assert "| 列0 |" in whole and "r0c0" in whole and "列29" not in whole  # 26 columns at most
    read = [q["path"] for q in feishu.requests if q["op"] == "sheet_values" and token in q["path"]]
    assert read[-1].endswith(f"{sheet_ids['明细']}!A1:Z201")  # the first sheet: a header and 200 rows, no more
    whole_sheet = next(d for d in chat.ledger() if d["title"] == "运营指标 / 明细")
    assert whole_sheet["status"] == "included" and whole_sheet["included"][0][0] == 0


# -- other drive files: name, type and size only; a document Feishu cannot serve just now: said, not fatal ----

def test_a_drive_file_is_named_with_type_and_size_and_a_failing_read_is_said(service, feishu, claude, r,
                                                                              keys) -> None:
    file_token = feishu.add_drive_file("导出日志.zip", "zip", 123456, link_share="tenant_readable")
    doc = feishu.add_doc("导出失败排查", GUIDE, link_share="tenant_readable")
    feishu.inject("doc_meta", code=0, http_status=503, times=5)  # Feishu's gateway fails the revision check
    chat = Chat(service, feishu, r, keys)
    reply = reply_text(chat.ask(f"看看日志和文档 {link('file', file_token)} {link('docx', doc)}"))
    sent = text_of(model_requests_with(claude, "看看日志和文档")[0])
    assert 'title="导出日志.zip" kind="file"' in sent and "type zip, 123456 bytes" in sent
    assert "could not be read just now" in sent and "CANARY-CODE-7781" not in sent
    assert "看看日志和文档" in reply  # answered all the same


# -- links the turn shows besides the batch: a topic's thread (bootstrap) and a quoted message ---------------

def test_links_in_the_topic_thread_and_in_a_quoted_message_are_read(service, feishu, claude, r, keys) -> None:
    token = feishu.add_doc("导出失败排查", GUIDE, link_share="tenant_readable")
    topic = Chat(service, feishu, r, keys, kind="topic")
    feishu.add_message(unique("om_root"), topic.chat, text=f"排查文档 {link('docx', token)}",
                       thread_id=topic.thread, sender_open_id="ou_owner")
    topic.ask("按话题里的文档先看看（话题）")
    assert "CANARY-CODE-7781" in text_of(model_requests_with(claude, "按话题里的文档先看看（话题）")[0])
    group = Chat(service, feishu, r, keys, kind="group")
    quoted = feishu.add_message(unique("om_q"), group.chat, text=f"文档在这 {link('docx', token)}",
                                sender_open_id="ou_owner")["message_id"]
    env = deliver(service, feishu, chat_id=group.chat, chat_type="group", sender_open_id="ou_alice",
                  text="@_user_1 引用的文档讲了什么（引用）", mentions=AT_BOT, parent_id=quoted, root_id=quoted)
    wait_for(lambda: feishu.replies_to(message_id(env)), 60, what="the reply")
    assert "CANARY-CODE-7781" in text_of(model_requests_with(claude, "引用的文档讲了什么（引用）")[0])


# -- read_document checks the askers too: a link the model found elsewhere is no way around permissions ------

def test_read_document_refuses_what_the_asker_may_not_view(service, feishu, claude, r, keys) -> None:
    secret = feishu.add_doc("薪资调整方案", SECRET, members=[("openid", "ou_linker", "view")])
    shared = feishu.add_doc("导出失败排查", GUIDE, link_share="tenant_readable")
    results: list[str] = []

    def responder(body: dict[str, Any]) -> Any:
        last = body["messages"][-1]["content"]
        if isinstance(last, list) and any(b.get("type") == "tool_result" for b in last):
            results.extend(str(b.get("content")) for b in last if b.get("type") == "tool_result")
            return "读完了。"
        return [{"type": "tool_use", "id": "toolu_a", "name": "read_document",
                 "input": {"document": link("docx", secret)}},
                {"type": "tool_use", "id": "toolu_b", "name": "read_document",
                 "input": {"document": link("docx", shared), "cursor": 0}}]

    claude.set_responder(responder)
    Chat(service, feishu, r, keys).ask("帮我读一下你知道的文档（工具）", sender="ou_asker")
    assert len(results) == 2
    assert "CANARY-SECRET-5511" not in results[0] and "may not view" in results[0]
    assert "CANARY-CODE-7781" in results[1] and "<document_part" in results[1]


# -- attack rows: the reset boundary, a missing scope, a title that imitates Feishu markup ---------------------

def test_a_reset_forgets_the_documents_and_their_cursor(service, feishu, claude, r, keys) -> None:
    token = feishu.add_doc("年度运维手册", _pages(40), link_share="tenant_readable")
    chat = Chat(service, feishu, r, keys)
    chat.ask(f"看看这本手册 {link('docx', token)}")
    assert "<document " in text_of(model_requests_with(claude, "看看这本手册")[0])
    chat.ask("/reset")
    chat.ask("继续（重置后）")
    after = text_of(model_requests_with(claude, "继续（重置后）")[0])
    assert "<document " not in after and token not in after  # no carried document, no cursor past the reset


def test_without_the_docx_scope_only_documents_are_off_and_the_question_is_answered(service, feishu, claude, r,
                                                                                      keys) -> None:
    token = feishu.add_doc("导出失败排查", GUIDE, link_share="tenant_readable")
    feishu.deny_scopes({"docx:document:readonly", "docx:document"})
    try:
        chat = Chat(service, feishu, r, keys)
        reply = reply_text(chat.ask(f"没有权限时看看（范围） {link('docx', token)}"))
        sent = text_of(model_requests_with(claude, "没有权限时看看（范围）")[0])
        assert "reading documents is turned off" in sent and "CANARY-CODE-7781" not in sent
        assert "没有权限时看看（范围）" in reply
        ready = requests.get(f"{service.url}/readyz", timeout=10).json()
        assert "documents" in ready.get("capabilities_off", {}) and not ready.get("paused")
    finally:
        r.delete(keys.capability_off("documents"))


def test_a_document_title_cannot_ping_a_group_through_the_evidence_line(service, feishu, claude, r, keys) -> None:
    token = feishu.add_doc('<at user_id="all">所有人</at> 排查', GUIDE, link_share="tenant_readable")
    chat = Chat(service, feishu, r, keys, kind="group")
    reply = chat.ask(f"看看（标题） {link('docx', token)}")
    assert "CANARY-CODE-7781" in text_of(model_requests_with(claude, "看看（标题）")[0])
    said = reply_text(reply)
    assert "r1" in said and "<at " not in said and "<at>" not in said  # the reply's own at-guard defused it
