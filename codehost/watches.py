"""Watches: which item follows which code-platform thread. Data, bounded and expiring.

A watch is (item, provider, repo, kind, number) with where it came from (the record, the topic, `/watch`), who and
when; its id is derived from the item and the thread, so seeing the same link again renews it instead of adding
one. Each write is one script: a watch is added only within CODEHOST_WATCHES_PER_ITEM per item and
CODEHOST_WATCHES_MAX per deployment, never over an `/unwatch` (a mute) unless `/watch` asks again. Every watch sits
in one sorted set by its expiry — CODEHOST_WATCH_DAYS after it was last seen, or CODEHOST_KEEP_AFTER_CLOSE_DAYS after
its item closed — which the sweeper trims (`sweep`); the deployment bound keeps everything else bounded.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import redis

from codehost import keys as ck
from codehost.links import Thread
from core.keys import Keys

RECORD, TOPIC, COMMAND = "record", "topic", "command"
ADDED, KNOWN, ITEM_FULL, ALL_FULL, MUTED = 1, 0, -1, -2, -3

# KEYS: watch, item zset, thread set, all zset, muted hash
# ARGV: wid, now, expires at, per-item cap, total cap, source, thread key, mute ttl, field/value pairs…
# A known watch is renewed (its expiry only moves later); a new one needs room on its item and in the deployment,
# and no mute of its thread on the item (a `/watch` lifts the mute).
_ADD = """
local exp = tonumber(ARGV[3])
if redis.call('EXISTS', KEYS[1]) == 1 then
  local cur = tonumber(redis.call('ZSCORE', KEYS[4], ARGV[1]) or '0')
  if exp > cur then redis.call('ZADD', KEYS[4], exp, ARGV[1]) end
  return 0
end
if ARGV[6] == 'command' then
  redis.call('HDEL', KEYS[5], ARGV[7])
elseif tonumber(redis.call('HGET', KEYS[5], ARGV[7]) or '0') > tonumber(ARGV[2]) then
  return -3
end
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[4]) then return -1 end
if redis.call('ZCARD', KEYS[4]) >= tonumber(ARGV[5]) then return -2 end
redis.call('HSET', KEYS[1], unpack(ARGV, 9))
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('SADD', KEYS[3], ARGV[1])
redis.call('ZADD', KEYS[4], exp, ARGV[1])
return 1
"""

# KEYS: watch, item zset, thread set, all zset, muted hash   ARGV: wid, thread key, mute until (0 = no mute), mute ttl
_REMOVE = """
if tonumber(ARGV[3]) > 0 then
  redis.call('HSET', KEYS[5], ARGV[2], ARGV[3])
  redis.call('EXPIRE', KEYS[5], ARGV[4])
end
local gone = redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('SREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
return gone
"""

# KEYS: item zset, all zset   ARGV: until, mode
# `later`: every watch of the item expires no sooner than `until` (its item is open and was seen); `sooner`: none
# later than `until` (its item closed: a later read of the closed record moves nothing on).
_RETIME = """
local n, u = 0, tonumber(ARGV[1])
for _, wid in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local cur = tonumber(redis.call('ZSCORE', KEYS[2], wid) or '-1')
  if cur >= 0 and ((ARGV[2] == 'later' and u > cur) or (ARGV[2] == 'sooner' and u < cur)) then
    redis.call('ZADD', KEYS[2], u, wid)
    n = n + 1
  end
end
return n
"""


@dataclass(frozen=True)
class Watch:
    id: str
    item_id: str
    thread: Thread
    source: str
    added_by: str
    added_at: float
    expires_at: float = 0.0

    @classmethod
    def of(cls, wid: str, raw: dict[str, str], expires_at: float = 0.0) -> Watch | None:
        try:
            thread = Thread(raw["provider"], raw["repo"], raw["kind"], int(raw["number"]))
            return cls(wid, raw["item_id"], thread, raw.get("source", ""), raw.get("added_by", ""),
                       float(raw.get("added_at") or 0), expires_at)
        except (KeyError, ValueError):
            return None


def watch_id(item_id: str, thread: Thread) -> str:
    return hashlib.sha1(f"{item_id}|{thread.key}".encode()).hexdigest()[:20]


@dataclass(frozen=True)
class Bounds:
    per_item: int
    total: int
    ttl_s: float  # a watch lasts this long after it was last seen


class Watches:
    def __init__(self, r: redis.Redis, keys: Keys) -> None:
        self.r, self.k = r, keys
        self._add, self._remove, self._retime = (r.register_script(s) for s in (_ADD, _REMOVE, _RETIME))

    def add(self, item_id: str, thread: Thread, *, source: str, who: str, now: float, bounds: Bounds) -> int:
        """ADDED, KNOWN (renewed), or refused: ITEM_FULL, ALL_FULL, MUTED."""
        wid, k = watch_id(item_id, thread), self.k
        fields = {"item_id": item_id, "provider": thread.provider, "repo": thread.repo, "kind": thread.kind,
                  "number": str(thread.number), "thread_key": thread.key, "source": source, "added_by": who,
                  "added_at": repr(now)}
        keys = [ck.watch(k, wid), ck.item_watches(k, item_id), ck.thread_watchers(k, thread.key), ck.watches_all(k),
                ck.muted(k, item_id)]
        args: list[str | int] = [wid, repr(now), repr(now + bounds.ttl_s), bounds.per_item, bounds.total, source,
                                 thread.key, int(bounds.ttl_s), *(x for kv in fields.items() for x in kv)]
        return int(self._add(keys, args))

    def remove(self, w: Watch, *, mute_until: float = 0.0, mute_ttl_s: int = 0) -> bool:
        """Take a watch away; `mute_until`: and keep its thread off the item until then (an `/unwatch`)."""
        k = self.k
        keys = [ck.watch(k, w.id), ck.item_watches(k, w.item_id), ck.thread_watchers(k, w.thread.key),
                ck.watches_all(k), ck.muted(k, w.item_id)]
        return bool(self._remove(keys, [w.id, w.thread.key, repr(mute_until), max(mute_ttl_s, 1)]))

    def of_item(self, item_id: str) -> list[Watch]:
        return self._load([str(w) for w in self.r.zrange(ck.item_watches(self.k, item_id), 0, -1)])

    def on(self, threads: Sequence[Thread], now: float) -> list[Watch]:
        """The live watches of any of these threads."""
        pipe = self.r.pipeline(transaction=False)
        for t in threads:
            pipe.smembers(ck.thread_watchers(self.k, t.key))
        wids = sorted({str(w) for got in pipe.execute() for w in got})
        return [w for w in self._load(wids) if w.expires_at > now]

    def _load(self, wids: list[str]) -> list[Watch]:
        if not wids:
            return []
        pipe = self.r.pipeline(transaction=False)
        for wid in wids:
            pipe.hgetall(ck.watch(self.k, wid))
        pipe.zmscore(ck.watches_all(self.k), wids)
        *raws, scores = pipe.execute()
        found = [Watch.of(wid, {str(a): str(b) for a, b in raw.items()}, float(score or 0))
                 for wid, raw, score in zip(wids, raws, scores, strict=True) if raw]
        return [w for w in found if w is not None]

    def retime(self, item_id: str, until: float, *, sooner: bool) -> int:
        """Every watch of the item: expires no sooner (`sooner=False`) or no later (`sooner=True`) than `until`."""
        keys = [ck.item_watches(self.k, item_id), ck.watches_all(self.k)]
        return int(self._retime(keys, [repr(until), "sooner" if sooner else "later"]))

    def sweep(self, now: float, most: int = 200) -> int:
        """Remove watches past their expiry (the sweeper, about once a second); returns how many went."""
        wids = [str(w) for w in self.r.zrangebyscore(ck.watches_all(self.k), "-inf", now, start=0, num=most)]
        found = self._load(wids)
        for wid in set(wids) - {w.id for w in found}:  # an entry whose hash is gone: the entry goes too
            self.r.zrem(ck.watches_all(self.k), wid)
        return sum(self.remove(w) for w in found)

    def count(self) -> int:
        return int(self.r.zcard(ck.watches_all(self.k)))
