"""`/watch <link>`, `/unwatch <link>` and `/watching` in an item's topic, answered by the service (no model).

Anyone in the topic may use them (the topic is shared, and so are its item's watches); `/unwatch` keeps the thread
off the item for CODEHOST_WATCH_DAYS even when its link is seen again in the record or the topic, until someone
`/watch`es it again.
"""

from __future__ import annotations

import re
from datetime import datetime

from bitable.index import Item
from codehost.fanout import threads_of, watches_of
from codehost.follow import SOURCE_ZH, bounds
from codehost.links import SHOWN, Thread, parse
from codehost.settings import settings
from codehost.watches import ADDED, ALL_FULL, COMMAND, ITEM_FULL, KNOWN, MUTED
from turn.registry import Command, Context, Said, command_argument

WATCH = re.compile(r"^/(?:watch|关注)\s+(\S+)$", re.IGNORECASE)
UNWATCH = re.compile(r"^/(?:unwatch|取消关注)\s+(\S+)$", re.IGNORECASE)
USAGE = "用法：/watch <PR、MR、Issue、Actions 运行或 Pipeline 的链接>；/unwatch <链接>；/watching 列出关注。"
NO_ITEM = "只有已登记为事项的话题才能关注代码平台的链接（先 /登记）。"


def _item(c: Context) -> Item | None:
    thread = c.message.thread_id
    return c.rt.items.by_thread(thread) if c.kind == "topic" and thread and c.rt.bitable is not None else None


def _asked(c: Context, command: Command) -> tuple[Item, Thread] | Said:
    """The topic's item and the link the command names, or the reply saying which is missing."""
    item = _item(c)
    if item is None:
        return Said(NO_ITEM)
    t = parse(command_argument(command, c.message.text), settings(c.rt.settings).codehost_github_hosts)
    return Said(USAGE) if t is None else (item, t)


def watch(c: Context) -> Said:
    asked = _asked(c, WATCH_COMMAND)
    if isinstance(asked, Said):
        return asked
    item, t = asked
    got = watches_of(c.rt).add(item.item_id, t, source=COMMAND, who=c.message.sender_id, now=c.rt.clock.now(),
                               bounds=bounds(settings(c.rt.settings)))
    shown = f"{SHOWN[t.kind]} {t.shown}"
    return Said({
        ADDED: f"已关注 {shown}：CI 失败或恢复、合并、关闭、要求修改会贴到这个话题；评论交给安静分诊。",
        KNOWN: f"{shown} 已在关注中，已续期。",
        ITEM_FULL: f"这个事项已关注 {settings(c.rt.settings).codehost_watches_per_item} 个链接，先 /unwatch 一个再加。",
        ALL_FULL: "关注数已达部署上限（CODEHOST_WATCHES_MAX），请联系管理员。",
        MUTED: f"{shown} 之前被取消关注了。",
    }[got])


def unwatch(c: Context) -> Said:
    asked = _asked(c, UNWATCH_COMMAND)
    if isinstance(asked, Said):
        return asked
    item, t = asked
    store = watches_of(c.rt)
    gone = [w for w in store.of_item(item.item_id) if w.thread in t.aliases()]
    if not gone:
        return Said(f"没有在关注 {t.shown}。")
    now = c.rt.clock.now()
    for w in gone:
        ttl_s = bounds(settings(c.rt.settings)).ttl_s
        store.remove(w, mute_until=now + ttl_s, mute_ttl_s=int(ttl_s))
    return Said(f"已取消关注 {SHOWN[t.kind]} {t.shown}（原来源：{SOURCE_ZH.get(gone[0].source, gone[0].source)}）；"
                "记录或话题里再出现这个链接也不会自动关注，需要时再 /watch。")


def watching(c: Context) -> Said:
    item = _item(c)
    if item is None:
        return Said(NO_ITEM)
    watches = watches_of(c.rt).of_item(item.item_id)
    if not watches:
        return Said("这个事项还没有关注代码平台的链接。把 PR/MR/Issue/CI 链接发在话题里、填进记录，或 /watch <链接>。")
    tz, known = c.rt.settings.tz, threads_of(c.rt)
    lines = [f"事项 {item.item_id} 关注 {len(watches)} 个链接："]
    for w in watches:
        ci = known.ci_states(w.thread)
        failed = sorted(name for name, state in ci.items() if state == "failed")
        state = f"；CI 失败：{', '.join(failed)[:80]}" if failed else ("；CI 通过" if ci else "")
        until = datetime.fromtimestamp(w.expires_at, tz).strftime("%m-%d")
        lines.append(f"- {SHOWN[w.thread.kind]} {w.thread.shown}（{SOURCE_ZH.get(w.source, w.source)}，"
                     f"至 {until}{state}）")
    return Said("\n".join(lines))


WATCH_COMMAND = Command("watch", watch, pattern=WATCH)
UNWATCH_COMMAND = Command("unwatch", unwatch, pattern=UNWATCH)
WATCHING_COMMAND = Command("watching", watching, words=("/watching", "/关注列表"))
