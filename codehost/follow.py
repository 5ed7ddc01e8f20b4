"""Where watches come from: links in the item's record (the materials column and BITABLE_FIELD_LINKS), read whenever
a run reads the record; links people post in the item's topic, from a turn's batch or a message the web overheard;
and `/watch` (commands.py). A record whose status is closed ends its item's watches CODEHOST_KEEP_AFTER_CLOSE_DAYS
later; an open one renews them.

Who may add a watch: anyone who may post in the item's topic or edit its record. What a watch can disclose: only
what a repository whose webhook the operator connected says about that thread (its title, state, who, a link),
posted into the topic that named it; CODEHOST_REPOS narrows the repositories.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from bitable.client import Record
from bitable.index import Item, Items
from codehost.fanout import threads_of, watches_of
from codehost.links import SHOWN, Thread, find
from codehost.settings import CodehostSettings, settings
from codehost.watches import ADDED, RECORD, TOPIC, Bounds, Watch, Watches
from core.inbound import Inbound
from core.keys import Keys
from core.settings import Settings
from items import item_of_turn, item_settings
from runs.runtime import Runtime
from turn.registry import Context, Part

SOURCE_ZH = {RECORD: "记录", TOPIC: "话题", "command": "/watch"}
BLOCK_WATCHES = 8


def bounds(s: CodehostSettings) -> Bounds:
    return Bounds(s.codehost_watches_per_item, s.codehost_watches_max, s.codehost_watch_days * 86400)


def follow(store: Watches, item_id: str, text: str, *, by: tuple[str, str], s: CodehostSettings,
           now: float) -> list[Thread]:
    """Watch every thread the text links (known ones renewed), `by` (source, who); returns the ones newly added."""
    (source, who), limits = by, bounds(s)
    found = find(text, s.codehost_github_hosts)
    return [t for t in found if store.add(item_id, t, source=source, who=who, now=now, bounds=limits) == ADDED]


# -- the record -------------------------------------------------------------------------------------------------

def record_read(rt: Runtime, item: Item, record: Record) -> None:
    """An item's record was read fresh (Feature.record_read): its links are watched, its status times them."""
    if rt.bitable is None:
        return
    s, now, store = settings(rt.settings), rt.clock.now(), watches_of(rt)
    status = record.text(rt.bitable.schema().name("status")).strip()
    if status and status in item_settings(rt.settings).item_closed_statuses:
        store.retime(item.item_id, now + s.codehost_keep_after_close_days * 86400, sooner=True)
        return
    columns = [name for name in (rt.settings.bitable_field_materials, s.bitable_field_links)
               if name and name in record.fields]
    text = " ".join(" ".join([record.text(name), *record.links(name)]) for name in columns)
    follow(store, item.item_id, text, by=(RECORD, ""), s=s, now=now)
    store.retime(item.item_id, now + bounds(s).ttl_s, sooner=False)


# -- the topic ----------------------------------------------------------------------------------------------------

def overheard(core: Settings, r: Any, keys: Keys, m: Inbound, now: float) -> str:
    """A topic message that did not address the bot (Feature.overheard, in the web: a few Redis commands)."""
    if not m.thread_id or "://" not in m.text or m.sender_type != "user":
        return ""
    s = settings(core)
    if not find(m.text, s.codehost_github_hosts):
        return ""
    item = Items(r, keys).by_thread(m.thread_id)
    if item is None:
        return ""
    added = follow(Watches(r, keys), item.item_id, m.text, by=(TOPIC, m.sender_id), s=s, now=now)
    return f"watching {len(added)} more code platform link(s)" if added else ""


class WatchesPart(Part):
    """A turn in an item's topic: the links its people posted are watched; the request shows what is watched and
    the last CI outcome of each (data the platforms sent, never instructions)."""

    def __init__(self, watches: list[Watch], states: Mapping[str, Mapping[str, str]], tz: Any) -> None:
        self.watches, self.states, self.tz = watches, states, tz

    def block(self) -> str:
        lines = []
        for w in self.watches[:BLOCK_WATCHES]:
            ci = ", ".join(f"{name} {state}" for name, state in sorted(self.states.get(w.id, {}).items())[:5])
            since = datetime.fromtimestamp(w.added_at, self.tz).strftime("%m-%d %H:%M")
            lines.append(f"{SHOWN[w.thread.kind]} {w.thread.shown} (watched since {since}, from the "
                         f"{w.source}){'; CI: ' + ci if ci else ''}")
        text = html.escape("\n".join(lines), quote=False)
        return (f'<code_threads note="what the item watches on code platforms; their cards come by themselves">'
                f"\n{text}\n</code_threads>\n")


def start(turn: Context, _parts: Mapping[str, Part]) -> Part | None:
    if turn.kind != "topic":
        return None
    item_id = item_of_turn(turn)
    if not item_id:
        return None
    store, now = watches_of(turn.rt), turn.rt.clock.now()
    for m in turn.batch:
        if m.sender_type == "user" and "://" in m.text:
            follow(store, item_id, m.text, by=(TOPIC, m.sender_id), s=settings(turn.rt.settings), now=now)
    watches = store.of_item(item_id)
    if not watches:
        return None
    known = threads_of(turn.rt)
    states = {w.id: known.ci_states(w.thread) for w in watches[:BLOCK_WATCHES]}
    return WatchesPart(watches, states, turn.rt.settings.tz)
