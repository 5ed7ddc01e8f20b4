"""The item index in Redis: item id ↔ record ↔ origin chat, topic and root message ↔ sessions ↔ first answer.

Items are found only through these stored ids (thread, record, item id), never by title, name or time.
Every write is idempotent: claiming a topic twice gives the same item, a version is added once.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import redis

from bitable import keys as item_keys
from bitable.lock import TableLock
from core.keys import Keys

PLACEHOLDER, SUMMARY, FULL, FAILED = "placeholder", "summary", "full", "failed"
COMPLETE = (SUMMARY, FULL)  # versions that carry findings; a placeholder never does
BODY_KEPT = 60_000  # characters of a version's body kept for follow-ups (a card holds ≤30 KB anyway)

# KEYS: by_thread, by_record, order, item(new id)   ARGV: new id, thread, record, fields JSON, now
# Returns the item id that owns the thread (or record): the existing one, or the new one.
_CLAIM = """
local existing = false
if ARGV[2] ~= '' then existing = redis.call('HGET', KEYS[1], ARGV[2]) end
if not existing and ARGV[3] ~= '' then existing = redis.call('HGET', KEYS[2], ARGV[3]) end
if existing then return existing end
local f = cjson.decode(ARGV[4])
for k, v in pairs(f) do redis.call('HSET', KEYS[4], k, v) end
redis.call('HSET', KEYS[4], 'item_id', ARGV[1], 'created_at', ARGV[5])
if ARGV[2] ~= '' then redis.call('HSET', KEYS[1], ARGV[2], ARGV[1]) end
if ARGV[3] ~= '' then redis.call('HSET', KEYS[2], ARGV[3], ARGV[1]) end
redis.call('ZADD', KEYS[3], ARGV[5], ARGV[1])
return ARGV[1]
"""

# KEYS: item, by_record   ARGV: record id. 1 linked (or already this record), 0 the item has another record,
# -1 the record belongs to another item.
_LINK_RECORD = """
local owner = redis.call('HGET', KEYS[2], ARGV[1])
local current = redis.call('HGET', KEYS[1], 'record_id')
if owner and owner ~= redis.call('HGET', KEYS[1], 'item_id') then return -1 end
if current and current ~= '' and current ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'record_id', ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], redis.call('HGET', KEYS[1], 'item_id'))
return 1
"""

# KEYS: versions   ARGV: version JSON, version number. Appends only the next number; returns the stored
# version with that number (the one just added, or the one an earlier run added).
_ADD_VERSION = """
local n = tonumber(ARGV[2])
local len = redis.call('LLEN', KEYS[1])
if n <= len then return redis.call('LINDEX', KEYS[1], n - 1) end
if n ~= len + 1 then return redis.error_reply('version gap') end
redis.call('RPUSH', KEYS[1], ARGV[1])
return ARGV[1]
"""


def new_item_id() -> str:
    return "itm_" + os.urandom(6).hex()


def body_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class Version:
    version: int
    status: str
    body_hash: str
    created_at: float
    coverage: list[str] = field(default_factory=list)  # message ids of the materials it covered
    body: str = ""

    @property
    def complete(self) -> bool:
        return self.status in COMPLETE

    def public(self) -> dict[str, Any]:
        return {"version": self.version, "status": self.status, "body_hash": self.body_hash,
                "created_at": self.created_at, "coverage": self.coverage}


@dataclass(frozen=True)
class Item:
    item_id: str
    record_id: str
    chat_id: str
    thread_id: str
    root_id: str
    reporter: str
    origin: str
    created_at: float
    answer_message_id: str
    analysis: str  # "" | queued | done | failed
    answer_link: str = ""  # the message_app_link Feishu answered the first answer's post with
    title: str = ""  # the record's title as the analysis wrote it (the console lists items by it)

    @classmethod
    def of(cls, raw: dict[str, str]) -> Item:
        return cls(item_id=raw.get("item_id", ""), record_id=raw.get("record_id", ""), chat_id=raw.get("chat_id", ""),
                   thread_id=raw.get("thread_id", ""), root_id=raw.get("root_id", ""),
                   reporter=raw.get("reporter", ""), origin=raw.get("origin", ""),
                   created_at=float(raw.get("created_at") or 0), answer_message_id=raw.get("answer_message_id", ""),
                   analysis=raw.get("analysis", ""), answer_link=raw.get("answer_link", ""),
                   title=raw.get("title", ""))


class Items:
    def __init__(self, r: redis.Redis, keys: Keys) -> None:
        self.r, self.k = r, keys
        self._claim = r.register_script(_CLAIM)
        self._link = r.register_script(_LINK_RECORD)
        self._add = r.register_script(_ADD_VERSION)

    # -- identity ------------------------------------------------------------------------------------

    def claim(self, *, thread_id: str = "", record_id: str = "", chat_id: str = "", root_id: str = "",
              reporter: str = "", origin: str) -> tuple[Item, bool]:
        """The item of this topic (or record), created when there is none. (item, created)."""
        if not thread_id and not record_id:
            raise ValueError("an item is claimed by a topic or a record")
        new_id = new_item_id()
        fields = {"chat_id": chat_id, "thread_id": thread_id, "root_id": root_id, "reporter": reporter,
                  "origin": origin, "record_id": record_id}
        k = self.k
        got = self._claim([item_keys.items_by_thread(k), item_keys.items_by_record(k), item_keys.items_order(k),
                           item_keys.item(k, new_id)],
                          [new_id, thread_id, record_id, json.dumps(fields), round(time.time(), 3)])
        item = self.get(str(got))
        assert item is not None
        return item, str(got) == new_id

    def guard(self, item_id: str, ttl_s: float) -> AbstractContextManager[None]:
        """Held while a run decides the item's record, so two runs never give one item two records."""
        return TableLock(self.r, item_keys.item_guard(self.k, item_id), ttl_s=ttl_s, wait_s=ttl_s + 10).held()

    def link_record(self, item_id: str, record_id: str) -> int:
        """1 linked, 0 the item already has another record, -1 the record belongs to another item."""
        return int(self._link([item_keys.item(self.k, item_id), item_keys.items_by_record(self.k)], [record_id]))

    def set(self, item_id: str, **fields: str) -> None:
        self.r.hset(item_keys.item(self.k, item_id), mapping=dict(fields))  # type: ignore[arg-type]

    def get(self, item_id: str) -> Item | None:
        raw = self.r.hgetall(item_keys.item(self.k, item_id))
        return Item.of({str(k): str(v) for k, v in raw.items()}) if raw else None

    def by_thread(self, thread_id: str) -> Item | None:
        item_id = self.r.hget(item_keys.items_by_thread(self.k), thread_id) if thread_id else None
        return self.get(str(item_id)) if item_id else None

    def by_record(self, record_id: str) -> Item | None:
        item_id = self.r.hget(item_keys.items_by_record(self.k), record_id) if record_id else None
        return self.get(str(item_id)) if item_id else None

    # -- first answer ---------------------------------------------------------------------------------

    def versions(self, item_id: str) -> list[Version]:
        return [Version(**json.loads(v)) for v in self.r.lrange(item_keys.item_versions(self.k, item_id), 0, -1)]

    def add_version(self, item_id: str, number: int, status: str, body: str, coverage: list[str]) -> Version:
        v = Version(version=number, status=status, body_hash=body_hash(body), created_at=round(time.time(), 3),
                    coverage=coverage, body=body[:BODY_KEPT])
        stored = self._add([item_keys.item_versions(self.k, item_id)],
                           [json.dumps(v.__dict__, ensure_ascii=False), number])
        return Version(**json.loads(stored))

    def latest_complete(self, item_id: str) -> Version | None:
        complete = [v for v in self.versions(item_id) if v.complete]
        return complete[-1] if complete else None

    # -- who worked on it -----------------------------------------------------------------------------

    def touch(self, item_id: str, route_key: str, session_id: str | None) -> None:
        now = time.time()
        pipe = self.r.pipeline(transaction=False)
        if session_id:
            pipe.zadd(item_keys.item_sessions(self.k, item_id), {session_id: now}, nx=True)
        pipe.zadd(item_keys.item_routes(self.k, item_id), {route_key: now})
        pipe.hset(item_keys.items_by_route(self.k), route_key, item_id)
        pipe.execute()

    def last_activity(self, item_ids: Sequence[str]) -> dict[str, float]:
        """item id → when a conversation last worked on it (the newest route touch), for those that have one."""
        pipe = self.r.pipeline(transaction=False)
        for item_id in item_ids:
            pipe.zrevrange(item_keys.item_routes(self.k, item_id), 0, 0, withscores=True)
        return {i: float(top[0][1]) for i, top in zip(item_ids, pipe.execute(), strict=True) if top}

    def of_route(self, route_key: str) -> Item | None:
        """The item a route follows: a topic route its topic's item, any other the item it last worked on."""
        parts = route_key.split(":")
        if len(parts) >= 5 and parts[2] == "topic":
            found = self.by_thread(parts[4])
            if found:
                return found
        item_id = self.r.hget(item_keys.items_by_route(self.k), route_key)
        return self.get(str(item_id)) if item_id else None

    def public(self, item: Item) -> dict[str, Any]:
        """The admin view of an item (GET /admin/api/items/<item_id>)."""
        versions = self.versions(item.item_id)
        return {
            "item_id": item.item_id, "title": item.title or None, "record_id": item.record_id or None,
            "chat_id": item.chat_id,
            "thread_id": item.thread_id or None, "root_message_id": item.root_id or None,
            "reporter": item.reporter or None, "origin": item.origin, "created_at": item.created_at,
            "analysis": item.analysis or None, "session_ids": self.session_ids(item.item_id),
            "route_keys": [str(r) for r in self.r.zrange(item_keys.item_routes(self.k, item.item_id), 0, -1)],
            "runs": self.runs(item.item_id),
            "first_answer": {"message_id": item.answer_message_id or None,
                             "versions": [v.public() for v in versions]},
        }

    def session_ids(self, item_id: str) -> list[str]:
        return [str(s) for s in self.r.zrange(item_keys.item_sessions(self.k, item_id), 0, -1)]

    def add_run(self, item_id: str, run: dict[str, Any]) -> None:
        self.r.rpush(item_keys.item_runs(self.k, item_id), json.dumps(run, ensure_ascii=False))

    def runs(self, item_id: str) -> list[dict[str, Any]]:
        return [json.loads(x) for x in self.r.lrange(item_keys.item_runs(self.k, item_id), 0, -1)]
