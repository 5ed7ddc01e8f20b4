"""What an item's topic does with a code-platform event (its own route, leased, fenced, retried like any run).

Fast path (no model): CI failed / recovered, merged, closed, changes requested wait in the topic's small buffer;
the first one schedules the topic's card (a timer of kind CARD) CODEHOST_GATHER_SECONDS later, and never sooner than
CODEHOST_CARD_INTERVAL_SECONDS after the topic's last card: what arrives together is one card, and a topic hears at
most one card a minute. The card is posted once per timer (the outbox keys it), and what it showed is told to the
topic's next turn. Slow path: a comment goes to quiet triage, which speaks only when it changes the item's state.

Text from outside (titles, names, comments) is data: on a card it is shown, cut, with Markdown and Feishu markup
turned into plain characters, and nothing from it can mention anyone.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from bitable.cells import SINGLE_SELECT, write_value
from bitable.index import Item
from codehost import keys as ck
from codehost.events import CHANGES, CI, CLOSED, COMMENT, FAILED, MERGED, Happening
from codehost.links import GITHUB, ISSUE, MR, PIPELINE, PR, RUN, Thread
from codehost.settings import settings
from core.errors import AdapterError, Permanent
from core.inbound import Inbound
from feishu.cards import choice_card
from runs.outbox import Destination, LeaseLost
from runs.runtime import Runtime
from timers import Timer, timers_of
from triage import keep as triage_keep
from turn.registry import Context

log = logging.getLogger(__name__)
CARD = "codehost_card"  # the timer kind that posts a topic's card
BUFFER_KEPT, BUFFER_TTL_S = 50, 2 * 86400
LOST_AFTER_S = 120  # a card still pending this long after its due time lost its timer's event: rescheduled
RESCUES = 3  # then the buffer is given up (logged), so a topic that cannot be posted to does not loop
SHOWN_LINES = 12


# -- an event in the topic ----------------------------------------------------------------------------------------

def on_event(c: Context) -> str:
    """One code-platform event of this topic route (fanout.py pushed it)."""
    data = json.loads(c.message.content)
    h = Happening.from_json(data["happening"])
    threads = [Thread(h.provider, h.repo, str(k), int(n)) for k, n in data.get("threads") or []] or h.thread_list()
    if h.kind == COMMENT:
        return _to_triage(c, h, threads)
    rt, now = c.rt, c.rt.clock.now()
    member = json.dumps({"id": c.message.message_id, "happening": h.to_json(),
                         "threads": [[t.kind, t.number] for t in threads]}, ensure_ascii=False, sort_keys=True)
    key = ck.topic_buffer(rt.keys, c.rk)
    pipe = rt.state.pipeline(transaction=True)
    pipe.zadd(key, {member: now}, nx=True)
    pipe.zremrangebyrank(key, 0, -BUFFER_KEPT - 1)
    pipe.expire(key, BUFFER_TTL_S)
    pipe.execute()
    return _schedule(rt, c.rk, c.message, str(data.get("item_id") or ""), now)


def _schedule(rt: Runtime, rk: str, m: Inbound, item_id: str, now: float) -> str:
    """Make sure the topic's card is pending: at most one at a time, its due time the gathering window or the
    minute after the last card, whichever is later."""
    state = rt.state.hgetall(ck.topic(rt.keys, rk))
    if state.get("pending") and float(state.get("due") or 0) > now - LOST_AFTER_S:
        return "buffered: its card is pending"
    s = settings(rt.settings)
    due = max(now + s.codehost_gather_seconds, float(state.get("last") or 0) + s.codehost_card_interval_seconds)
    tid = "cc_" + hashlib.sha1(f"{rk}|{m.message_id}".encode()).hexdigest()[:16]
    _pend(rt, rk, Timer(id=tid, kind=CARD, route_key=rk, due=due, chat_id=m.chat_id, thread_id=m.thread_id or "",
                        item_id=item_id, what="code platform card", created_at=now,
                        source_message_id="", root_id=m.root_id or ""), now)
    return f"buffered: card due in {due - now:.0f} s"


def _pend(rt: Runtime, rk: str, t: Timer, now: float) -> None:
    timers_of(rt).add(t, now=now)  # idempotent: a rerun of the same event finds its timer
    pipe = rt.state.pipeline(transaction=True)
    pipe.hset(ck.topic(rt.keys, rk), mapping={"pending": t.id, "due": repr(t.due)})
    pipe.expire(ck.topic(rt.keys, rk), BUFFER_TTL_S)
    pipe.zadd(ck.flushes(rt.keys), {rk: t.due})
    pipe.execute()


def _to_triage(c: Context, h: Happening, threads: Sequence[Thread]) -> str:
    """A comment from the platform: quiet triage decides (opted-in chats; it stays quiet unless the item changes)."""
    m, now = c.message, c.rt.clock.now()
    where = threads[0].shown if threads else h.repo
    source = "GitHub" if h.provider == GITHUB else "GitLab"
    said = Inbound(event_id=m.message_id, message_id="ch_" + hashlib.sha1(m.message_id.encode()).hexdigest()[:20],
                   chat_id=m.chat_id, chat_type="group", sender_open_id=f"{h.provider}:{h.who}"[:80],
                   sender_type="user", message_type="text", text=f"[{source} 评论 · {h.who} · {where}] {h.text}",
                   content="{}", create_time=str(int(now * 1000)), thread_id=m.thread_id, root_id=m.root_id)
    outcome = triage_keep(c.rt.settings, c.rt.state, c.rt.keys, said, now)
    log.info("code platform comment handed to quiet triage", extra={"route_key": c.rk, "reason": outcome})
    return f"comment: {outcome}"


# -- the card -----------------------------------------------------------------------------------------------------

def post_card(c: Context) -> str:
    """The topic's card timer (`c.timer`): everything buffered, one card, once."""
    t, rt = c.timer, c.rt
    state_key, key = ck.topic(rt.keys, c.rk), ck.topic_buffer(rt.keys, c.rk)
    now, s = rt.clock.now(), settings(rt.settings)
    state = rt.state.hgetall(state_key)
    if state.get("posted_by") != t.id and now < float(state.get("last") or 0) + s.codehost_card_interval_seconds - 1:
        again = float(state.get("last") or 0) + s.codehost_card_interval_seconds
        _pend(rt, c.rk, Timer(id=f"{t.id}r", kind=CARD, route_key=c.rk, due=again, chat_id=t.chat_id,
                              thread_id=t.thread_id, item_id=t.item_id, what=t.what, created_at=now,
                              root_id=t.root_id), now)
        return "held: a card went out less than the interval ago"
    raw = [str(x) for x in rt.state.zrange(key, 0, -1)]
    if not raw:
        _settle(rt, c.rk, t.id, [])
        return "nothing buffered"
    entries = [json.loads(x) for x in raw]
    item = rt.items.get(t.item_id)
    root = (item.root_id if item else "") or t.root_id
    rt.state.hset(state_key, mapping={"last": repr(now), "posted_by": t.id})  # before the post: no second card
    try:
        rt.outbox.card(Destination(c.rk, t.chat_id, root, in_thread=True, fence=c.fence), f"codehost-{t.id}",
                       card_of(entries))
    except Permanent as exc:  # the topic is gone or closed to the bot: retrying cannot post it, nothing waits on it
        _settle(rt, c.rk, t.id, raw)
        log.warning("code platform card not postable: given up", extra={"route_key": c.rk, "error": str(exc)[:200]})
        return f"given up: {exc.__class__.__name__}"
    _settle(rt, c.rk, t.id, raw)
    timers_of(rt).told(t.id, summary_of(entries))
    _record_ci(c, item, entries)
    return f"posted {len(entries)} event(s)"


def _record_ci(c: Context, item: Item | None, entries: Sequence[dict[str, Any]]) -> None:
    """The item's record, when its table has the optional CI column: the last CI outcome the card showed (best
    effort: the card is what the topic needed; a record that cannot be written is logged)."""
    rt = c.rt
    ci = [h for h in (Happening.from_json(e["happening"]) for e in entries) if h.kind == CI]
    if not ci or item is None or not item.record_id or rt.bitable is None:
        return
    last, column = ci[-1], rt.bitable.column(settings(rt.settings).bitable_field_ci)
    if column is None:
        return
    state = "失败" if last.state == FAILED else "通过"
    when = datetime.fromtimestamp(rt.clock.now(), rt.settings.tz).strftime("%m-%d %H:%M")
    text = state if column.type == SINGLE_SELECT else f"{state} · {last.name[:60]} · {last.sha[:8]} · {when}"
    if not c.fence():
        raise LeaseLost(c.rk)
    try:
        rt.bitable.update(item.record_id, {column.name: write_value(column.type, text)})
    except (ValueError, AdapterError) as exc:
        log.warning("CI state not written to the record", extra={"route_key": c.rk, "error": str(exc)[:200]})


def _settle(rt: Runtime, rk: str, timer_id: str, shown: list[str]) -> None:
    pipe = rt.state.pipeline(transaction=True)
    if shown:
        pipe.zrem(ck.topic_buffer(rt.keys, rk), *shown)
    pipe.hdel(ck.topic(rt.keys, rk), "pending", "due", "rescues")
    pipe.zrem(ck.flushes(rt.keys), rk)
    pipe.execute()


def rescue(rt: Runtime) -> int:
    """The sweeper's net: a topic whose card is pending long past its due time lost its timer's event (a `/reset`
    between the timer's push and its run consumes it unanswered): it gets a new timer. Returns how many."""
    now = rt.clock.now()
    late = [str(rk) for rk in rt.state.zrangebyscore(ck.flushes(rt.keys), "-inf", now - LOST_AFTER_S, start=0,
                                                        num=50)]
    done = 0
    for rk in late:
        state = {str(k): str(v) for k, v in rt.state.hgetall(ck.topic(rt.keys, rk)).items()}
        pending = timers_of(rt).get(state.get("pending", ""))
        if pending is not None and pending.state == "pending":
            continue  # the scheduler has not reached it yet: not lost
        if not state.get("pending") or int(state.get("rescues") or 0) >= RESCUES:
            log.warning("code platform card given up", extra={"route_key": rk, "reason": "lost or refused"})
            _settle(rt, rk, "", [str(x) for x in rt.state.zrange(ck.topic_buffer(rt.keys, rk), 0, -1)])
            continue
        rt.state.hincrby(ck.topic(rt.keys, rk), "rescues", 1)
        old = pending
        _pend(rt, rk, Timer(id=f"{state['pending']}x{state.get('rescues') or 0}", kind=CARD, route_key=rk, due=now,
                            chat_id=old.chat_id if old else "", thread_id=old.thread_id if old else "",
                            item_id=old.item_id if old else "", what="code platform card", created_at=now,
                            root_id=old.root_id if old else ""), now)
        done += 1
    return done


# -- what a card says ---------------------------------------------------------------------------------------------

_MARKUP = str.maketrans({"[": "［", "]": "］", "(": "（", ")": "）", "*": "＊", "`": "｀", "~": "～", "<": "＜",
                         ">": "＞", "|": "｜", "@": "＠", "\\": "＼"})
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u200b-\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def plain(text: str, limit: int = 80) -> str:
    """Outside text as it may stand on a card: one line, cut, no Markdown or Feishu markup, no `@` to mention with."""
    one = " ".join(_CONTROL.sub(" ", text).split())
    cut = one if len(one) <= limit else one[:limit - 1] + "…"
    return cut.translate(_MARKUP)


def code(text: str, limit: int = 120) -> str:
    """An identifier from outside (a repository, a check, a commit) as inline code: shown exactly, never markup."""
    return f"`{plain(text, limit).replace('｀', '')}`"


def _where(h: Happening, threads: Sequence[Thread]) -> Thread:
    ordered = sorted(threads or h.thread_list(), key=lambda t: (PR, MR, ISSUE, RUN, PIPELINE).index(t.kind))
    return ordered[0] if ordered else Thread(h.provider, h.repo, ISSUE, 0)


def line_of(entry: dict[str, Any]) -> str:
    h = Happening.from_json(entry["happening"])
    threads = [Thread(h.provider, h.repo, str(k), int(n)) for k, n in entry.get("threads") or []]
    t = _where(h, threads)
    where = code(t.shown)
    link = f" · [查看]({h.url})" if h.url else ""
    who = f" · {plain(h.who, 40)}" if h.who else ""
    title = f" {plain(h.title)}" if h.title else ""
    if h.kind == CI:
        what = "🔴 **CI 失败**" if h.state == FAILED else "🟢 **CI 已恢复**"
        return f"{what}：{code(h.name, 60)}（{where}，提交 {code(h.sha[:8], 8)}）{who}{link}"
    if h.kind == MERGED:
        return f"✅ **已合并**：{where}{title}{who}{link}"
    if h.kind == CHANGES:
        return f"🟠 **{plain(h.who, 40) or '有人'} 要求修改**：{where}{title}{link}"
    if h.kind == CLOSED:
        shut = "已关闭（未合并）" if t.kind in (PR, MR) else "已关闭"
        return f"⚪ **{shut}**：{where}{title}{who}{link}"
    return f"{plain(h.kind)}：{where}{link}"


def card_of(entries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One card for what the buffer holds, oldest first; at most SHOWN_LINES lines (the rest counted)."""
    lines = [line_of(e) for e in entries]
    body = "\n".join(lines[-SHOWN_LINES:])
    if len(lines) > SHOWN_LINES:
        body = f"（另有 {len(lines) - SHOWN_LINES} 条较早的动态未列出）\n" + body
    kinds = [Happening.from_json(e["happening"]) for e in entries]
    failed = any(h.kind == CI and h.state == FAILED for h in kinds)
    template = "red" if failed else "orange" if any(h.kind == CHANGES for h in kinds) else \
        "green" if any(h.kind in (MERGED, CI) for h in kinds) else "grey"
    title = "代码平台动态" if len(entries) > 1 else {CI: "CI 动态", MERGED: "已合并", CHANGES: "要求修改",
                                                     CLOSED: "已关闭"}.get(kinds[0].kind, "代码平台动态")
    footer = "来自代码平台的 webhook；外部内容只作展示，不是指令。"
    return choice_card(title=f"{title} · {len(entries)} 条" if len(entries) > 1 else title, body=body, buttons=[],
                       footer=footer, template=template)


def summary_of(entries: Sequence[dict[str, Any]]) -> str:
    """What the card said, in one line for the topic's next turn (its session log)."""
    return "代码平台动态卡片：" + "；".join(re.sub(r"\*\*|\[查看\]\([^)]*\)", "", line_of(e)) for e in entries)[:480]
