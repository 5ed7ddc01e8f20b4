"""How an item comes to be: a topic's opening report, `/登记`, `/item link`, a record that names a topic.

Each path is idempotent (a redelivery, a second click or a second event never makes a second item or a
second record): the topic claims its item in one Redis script, the record is found by the item id before
one is created, its create carries a client_token derived from the item id, and the analysis request is
pushed under a dedupe key of the item.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from bitable.client import Record
from bitable.index import Item
from bitable.refs import openable, record_ids, thread_ids, topic_link
from core.errors import Permanent
from core.inbound import Inbound, dumps
from items import authority
from items.facts import is_member
from items.first_answer import guard_ttl
from items.settings import item_settings
from items.texts import say
from routing.keys import item_route
from runs.outbox import LeaseLost
from runs.runtime import Runtime
from turn.registry import app_of
from turn.thread import list_page

log = logging.getLogger(__name__)
ANALYSIS = "analysis"  # Inbound.message_type of an analysis request on an item route
LINK = re.compile(r"^/item\s+link\s+(\S+)$", re.IGNORECASE)  # `/item link <record link or id>`, the whole text
_TRAILING = re.compile(r"[\s。.!！~～]+$")


class LinkConflict(Permanent):
    """The record and the topic already belong to different items (or the item has another record)."""


def link_argument(text: str) -> str:
    """The record link or id of `/item link <…>` ("" when the text is not that command). Pure."""
    match = LINK.match(_TRAILING.sub("", text.strip()))
    return match.group(1) if match else ""


def opens_topic(item: Inbound) -> bool:
    """The first message of a real topic: it carries the thread id and is (or has no) root. Pure."""
    return bool(item.thread_id) and item.root_id in (None, "", item.message_id)


def _fenced(fence: Callable[[], bool], rk: str) -> None:
    if not fence():
        raise LeaseLost(rk)


def request_analysis(rt: Runtime, item: Item) -> bool:
    """Queue the item's first-answer analysis on its own route; False when it was already queued (24 h)."""
    inbound = Inbound(
        event_id=f"analysis:{item.item_id}", message_id=item.root_id, chat_id=item.chat_id, chat_type="group",
        sender_open_id=item.reporter, sender_type="user", message_type=ANALYSIS, text="",
        content=json.dumps({"item_id": item.item_id}), create_time=str(int(time.time() * 1000)),
        thread_id=item.thread_id or None, root_id=item.root_id or None,
    )
    dedupe = f"analysis:{item.item_id}"
    pushed = rt.inbox.push(item_route(rt.settings.bot_profile, item.item_id), dumps(inbound), message_id=dedupe,
                           content_key=dedupe, queue=rt.policy.queues["item"])
    return not pushed.duplicate


def open_from_topic(rt: Runtime, message: Inbound, origin: str) -> tuple[Item, bool]:
    """The item of the message's topic, created (and its analysis queued) when the topic has none."""
    assert message.thread_id
    root = message.root_id or message.message_id
    item, created = rt.items.claim(thread_id=message.thread_id, chat_id=message.chat_id, root_id=root,
                                   reporter=message.sender_id, origin=origin)
    if item.analysis in ("", "queued"):
        rt.items.set(item.item_id, analysis="queued")
        request_analysis(rt, item)  # also after a crash between the claim and this push
    if created:
        log.info("item opened", extra={"item_id": item.item_id, "message_id": message.message_id, "reason": origin})
    return item, created


def item_command(rt: Runtime, rk: str, message: Inbound, command: str, fence: Callable[[], bool]) -> str:
    """The reply to `/登记` or `/item link …` (the work is done before the reply is sent)."""
    sample = message.text
    if rt.bitable is None:
        return say("items_off", sample)
    if item_settings(rt.settings).item_create_policy == "off":
        return say("items_create_off", sample)
    if not message.thread_id:
        return say("item_needs_topic", sample)
    if command == "item_new":
        item, created = open_from_topic(rt, message, "command")
        return say("item_registered" if created else "item_exists", sample, item_id=item.item_id)
    return _link(rt, rk, message, fence)


def _link(rt: Runtime, rk: str, message: Inbound, fence: Callable[[], bool]) -> str:
    s, sample = rt.settings, message.text
    arg = link_argument(message.text)
    found = record_ids(arg, s.bitable_app_token or "", s.bitable_table_id or "")
    if not found:
        return say("item_link_conflict", sample, why=f"{arg} 不是这张表的记录链接或记录 ID")
    record_id = found[0]
    assert rt.bitable is not None and message.thread_id
    record = rt.bitable.batch_get([record_id]).get(record_id)
    if record is None:
        return say("item_link_conflict", sample, why=f"表里没有记录 {record_id}")
    if not may_link(rt, record, message.sender_id):
        log.info("item link refused", extra={"route_key": rk, "reason": record_id, "message_id": message.message_id})
        return say("item_link_refused", sample, record_id=record_id)
    current = rt.items.by_thread(message.thread_id)
    if current and current.record_id and current.record_id != record_id:
        return say("item_link_conflict", sample, why=f"本话题已是事项 {current.item_id}（记录 {current.record_id}）")
    owner = rt.items.by_record(record_id)
    if owner and owner.thread_id and owner.thread_id != message.thread_id:
        return say("item_link_conflict", sample, why=f"记录 {record_id} 已属于另一个话题的事项 {owner.item_id}")
    try:
        item = link_topic(rt, record, Topic(message.thread_id, message.chat_id, message.root_id or message.message_id,
                                            message.sender_id, "link"), fence, rk)
    except LinkConflict:
        return say("item_link_conflict", sample, why=f"本话题的事项已有另一条记录，记录 {record_id} 未关联")
    return say("item_linked", sample, record_id=record_id, item_id=item.item_id)


def may_link(rt: Runtime, record: Record, who: str) -> bool:
    """Linking shows the record to this chat and makes it the item's home: only the record's owner or reporter
    (read now), an item admin, or a member of the record's 来源群 may do it."""
    assert rt.bitable is not None
    schema = rt.bitable.schema()
    return authority.may_link(who, rt.settings.item_admins,
                              record.users(schema.name("owner")) + record.users(schema.name("reporter")),
                              record.chats(schema.name("chat")), lambda chat_id, person: is_member(rt, chat_id, person))


@dataclass(frozen=True)
class Topic:
    """A topic being tied to a record: where it is, its root, who reported it, and how it came (link, record)."""

    thread_id: str
    chat_id: str
    root_id: str
    reporter: str
    origin: str


def link_topic(rt: Runtime, record: Record, topic: Topic, fence: Callable[[], bool], rk: str) -> Item:
    """Tie `record` and the topic to one item, write the item's ids into the record, queue the analysis."""
    assert rt.bitable is not None
    thread_id, chat_id = topic.thread_id, topic.chat_id
    item, _ = rt.items.claim(thread_id=thread_id, record_id=record.record_id, chat_id=chat_id, root_id=topic.root_id,
                             reporter=topic.reporter, origin=topic.origin)
    with rt.items.guard(item.item_id, guard_ttl(rt)):  # the item's analysis may be choosing its record now
        if rt.items.link_record(item.item_id, record.record_id) != 1:
            raise LinkConflict(f"record {record.record_id} and topic {thread_id} belong to different items",
                               source="items", code="link_conflict")
    schema = rt.bitable.schema()
    values: dict[str, object] = {}
    if record.text(schema.name("item_id")) != item.item_id:
        values["item_id"] = item.item_id
    links = record.links(schema.name("topic_link"))
    if thread_id not in " ".join([*links, record.text(schema.name("topic_link"))]) \
            or any(openable(link) != link for link in links):  # a link of ours that opened the chat, not the topic
        values["topic_link"] = topic_link(rt.settings.feishu_web_origin, chat_id, thread_id)
    if values:
        _fenced(fence, rk)
        rt.bitable.update(record.record_id, schema.encode(values))
    item = rt.items.get(item.item_id) or item
    if item.analysis in ("", "queued"):
        rt.items.set(item.item_id, analysis="queued")
        request_analysis(rt, item)
    return item


def record_changed(rt: Runtime, rk: str, record_id: str, fence: Callable[[], bool]) -> str:
    """A record was added or edited in the table: when it names a topic, link the two (once)."""
    if rt.bitable is None:
        return "items-off"
    record = rt.bitable.batch_get([record_id]).get(record_id)
    if record is None:
        return "absent"
    if (known := rt.items.by_record(record_id)) is not None:  # what other features learn from the edit
        app_of(rt).record_read(rt, known, record)
    schema = rt.bitable.schema()
    cell = " ".join([*record.links(schema.name("topic_link")), record.text(schema.name("topic_link"))])
    threads = thread_ids(cell)
    if not threads:
        return "no-topic"
    thread_id = threads[0]
    current = rt.items.by_thread(thread_id)
    if current and current.record_id and current.record_id != record_id:
        log.warning("record names a topic that has another record", extra={"route_key": rk, "reason": thread_id})
        return "conflict"
    owner = rt.items.by_record(record_id)
    if owner and owner.thread_id and owner.thread_id != thread_id:
        log.warning("record moved to another topic: kept on its first", extra={"route_key": rk, "reason": thread_id})
        return "conflict"
    if owner and owner.thread_id == thread_id:  # already linked (our own writes come back as edits too)
        if owner.analysis in ("", "queued"):
            request_analysis(rt, owner)
        return "known"
    root = _thread_root(rt, thread_id)
    if root is None:
        log.warning("record names a topic the bot cannot read", extra={"route_key": rk, "reason": thread_id})
        return "unreadable"
    reporters = record.users(schema.name("reporter"))
    try:
        link_topic(rt, record, Topic(thread_id, root[1], root[0], reporters[0] if reporters else "", "record"),
                   fence, rk)
    except LinkConflict:  # the topic's item got its record meanwhile (its analysis created it): that one stays
        log.warning("record names a topic that has another record", extra={"route_key": rk, "reason": thread_id})
        return "conflict"
    return "linked"


def _thread_root(rt: Runtime, thread_id: str) -> tuple[str, str] | None:
    """(root message id, chat id) of a topic: its first message."""
    try:
        page = list_page(rt.feishu, thread_id, page_size=1)
    except Permanent:
        return None
    if not page.items:
        return None
    first = page.items[0]
    return str(first.get("message_id") or ""), str(first.get("chat_id") or "")
