"""Polls and their votes in Redis, under the feature's own keys (`fb:<profile>:f:polls:<poll id>:…`). Every write is
one script: a poll is created once, a vote counts only while the poll is open and the voters are within the bound,
a poll closes once. Both hashes expire a week after the poll closes."""

from __future__ import annotations

import json
from dataclasses import dataclass

import redis

from core.keys import Keys

NAME = "polls"
KEEP_AFTER_CLOSE_S = 7 * 86400
VOTED, SAME, CLOSED, FULL, BAD = "voted", "same", "closed", "full", "bad"

# KEYS: meta, votes   ARGV: ttl, field/value pairs. Once per poll id (a rerun of the command finds it).
_CREATE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 1
"""
# KEYS: meta, votes   ARGV: voter, option index, max voters. A changed vote replaces the voter's last one.
_VOTE = """
if redis.call('HGET', KEYS[1], 'state') ~= 'open' then return 'closed' end
local n = tonumber(redis.call('HGET', KEYS[1], 'options_n'))
local o = tonumber(ARGV[2])
if o == nil or o < 0 or o >= n then return 'bad' end
local old = redis.call('HGET', KEYS[2], ARGV[1])
if old == ARGV[2] then return 'same' end
if not old and redis.call('HLEN', KEYS[2]) >= tonumber(ARGV[3]) then return 'full' end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('EXPIRE', KEYS[2], redis.call('TTL', KEYS[1]))
return 'voted'
"""
# KEYS: meta   ARGV: closed at. open → closed, once.
_CLOSE = """
if redis.call('HGET', KEYS[1], 'state') ~= 'open' then return 0 end
redis.call('HSET', KEYS[1], 'state', 'closed', 'closed_at', ARGV[1])
return 1
"""


@dataclass(frozen=True)
class Poll:
    id: str
    question: str
    options: tuple[str, ...]
    closes_at: float
    route_key: str
    chat_id: str
    source_message_id: str
    created_by: str
    state: str
    card_message_id: str = ""

    def meta(self) -> dict[str, str]:
        return {"question": self.question, "options": json.dumps(self.options, ensure_ascii=False),
                "options_n": str(len(self.options)), "closes_at": repr(self.closes_at), "route_key": self.route_key,
                "chat_id": self.chat_id, "source_message_id": self.source_message_id, "created_by": self.created_by,
                "state": self.state}


class Polls:
    def __init__(self, r: redis.Redis, keys: Keys) -> None:
        self.r, self.keys = r, keys
        self._create, self._vote, self._close = (r.register_script(s) for s in (_CREATE, _VOTE, _CLOSE))

    def meta_key(self, poll_id: str) -> str:
        return self.keys.feature(NAME, poll_id, "meta")

    def votes_key(self, poll_id: str) -> str:
        return self.keys.feature(NAME, poll_id, "votes")

    def create(self, poll: Poll, now: float) -> bool:
        ttl = max(int(poll.closes_at - now), 0) + KEEP_AFTER_CLOSE_S
        pairs = [x for kv in poll.meta().items() for x in kv]
        return bool(self._create([self.meta_key(poll.id), self.votes_key(poll.id)], [ttl, *pairs]))

    def get(self, poll_id: str) -> Poll | None:
        raw = {str(k): str(v) for k, v in self.r.hgetall(self.meta_key(poll_id)).items()}
        if not raw:
            return None
        return Poll(id=poll_id, question=raw["question"], options=tuple(json.loads(raw["options"])),
                    closes_at=float(raw["closes_at"]), route_key=raw["route_key"], chat_id=raw["chat_id"],
                    source_message_id=raw["source_message_id"], created_by=raw["created_by"], state=raw["state"],
                    card_message_id=raw.get("card_message_id", ""))

    def set_card(self, poll_id: str, message_id: str) -> None:
        self.r.hset(self.meta_key(poll_id), "card_message_id", message_id)  # the hash exists: its TTL stays

    def vote(self, poll_id: str, voter: str, option: int, max_voters: int) -> str:
        return str(self._vote([self.meta_key(poll_id), self.votes_key(poll_id)], [voter, option, max_voters]))

    def close(self, poll_id: str, now: float) -> bool:
        return bool(self._close([self.meta_key(poll_id)], [repr(now)]))

    def tally(self, poll: Poll) -> list[int]:
        counts = [0] * len(poll.options)
        for v in self.r.hvals(self.votes_key(poll.id)):
            if str(v).isdigit() and int(v) < len(counts):
                counts[int(v)] += 1
        return counts
