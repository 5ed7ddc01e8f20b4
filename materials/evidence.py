"""The turn's side of materials: documents/ wired to this run's Feishu client, Redis, budget and ledger.

What the batch links (its text with forwarded and quoted content, and related discussion) and what the
records of its items list are read through documents/; the previous turn's ledger says what to carry and where
a reading stopped; the route remembers which revision it last used, so an update is said even across sessions.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from functools import partial
from typing import Any

from core.errors import AdapterError, Paused
from core.inbound import Inbound
from documents.access import read_acl
from documents.links import DocRef, find_refs
from documents.reader import Reader
from documents.selection import Env, Materials
from feishu.docs import DocsApi
from items import is_member
from materials import keys as materials_keys
from materials.settings import materials_settings
from runs.runtime import Runtime
from turn import recall, rotation
from turn.registry import Context
from turn.request import system_of
from turn.thread import get_message, text_of

DOC_SHARE = 0.35  # of the input room, what all inline documents of a turn may take together
MAX_QUOTES = 3  # quoted messages per batch whose links are looked at (one message read each)
SEEN_KEPT = 500  # documents a route remembers the revision of; past that the memory starts over


def materials_for(turn: Context, listed: Sequence[DocRef], previous: Sequence[dict[str, Any]]) -> Materials:
    """The documents `turn` shows (its batch and request text link them). `listed`: the documents the records of the
    turn's items list; `previous`: the ledger of the session's last turn (its recall record's "documents")."""
    rt, rk, sid, batch, request_text = turn.rt, turn.rk, turn.session_id, turn.batch, turn.text
    s, ms = rt.settings, materials_settings(rt.settings)
    docs = DocsApi(rt.feishu)
    b = rotation.budget_of(rt)
    fixed = b.request_cost(system_of(rt), [], recall.tools_for(rt, rk))
    env = Env(reader=Reader(docs, rt.state, rt.keys, ms.document_cache_seconds),
              acl_of=partial(read_acl, docs, rt.state, rt.keys, ttl_s=ms.document_acl_cache_seconds),
              member_of=partial(is_member, rt), budget=b,
              origin=s.feishu_web_origin, inline_tokens=ms.document_inline_tokens,
              room=int(b.input_room(fixed) * DOC_SHARE))
    senders = sorted({m.sender_open_id for m in batch}) if all(m.sender_open_id for m in batch) else [""]
    materials = Materials(env, senders, batch[-1].text if batch else "")
    seen_text = "\n".join([html.unescape(request_text), *_around(rt, rk, sid, batch)])
    linked = find_refs(seen_text, (s.feishu_web_origin,))
    seen = {str(k): int(v) for k, v in rt.state.hgetall(materials_keys.docs_seen(rt.keys, rk)).items()}
    materials.build(linked, listed, previous, seen)
    return materials


def _around(rt: Runtime, rk: str, sid: str, batch: Sequence[Inbound]) -> list[str]:
    """Text the turn shows besides the batch: a topic session's thread bootstrap (in its first turn: later turns
    carry what it linked through the ledger) and the messages the batch quotes."""
    texts = []
    head = [json.loads(e) for e in rt.state.lrange(rt.keys.session_log(rk, sid), 0, 2)]
    if len(head) == 2 and all(e.get("kind") == "bootstrap" for e in head):  # the bootstrap's user + ack entries
        texts.append(html.unescape(str(head[0].get("text") or "")))
    # In a topic every message's parent is structural (the thread is read through bootstrap and read_thread);
    # elsewhere a parent is a quote.
    quoted = list(dict.fromkeys(m.parent_id for m in batch if m.parent_id and not m.thread_id))
    for mid in quoted[:MAX_QUOTES]:
        try:
            item = get_message(rt.feishu, mid)
        except Paused:
            raise
        except AdapterError:  # not readable: the model still sees the quote's id and may read_message it
            continue
        if item and item.get("chat_id") in (None, batch[-1].chat_id):
            texts.append(text_of(item))
    return texts


def remember(rt: Runtime, rk: str, materials: Materials) -> None:
    """The revisions this route used, for "updated since" in later turns (across sessions too)."""
    seen = materials.seen()
    if not seen:
        return
    key = materials_keys.docs_seen(rt.keys, rk)
    pipe = rt.state.pipeline()
    if rt.state.hlen(key) > SEEN_KEPT:  # bounded per route: losing it only loses an "updated since" note
        pipe.delete(key)
    pipe.hset(key, mapping={k: str(v) for k, v in seen.items()})
    if rt.settings.route_retention_s:
        pipe.expire(key, int(rt.settings.route_retention_s))
    pipe.execute()
