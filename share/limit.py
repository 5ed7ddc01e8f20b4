"""At most SHARE_PER_PERSON_HOUR deliveries a person in any hour (a sliding window), one script per decision.

A delivery holds its slot by its id: a rerun of the same command or tool call (a crash, a redelivery) finds its slot
and takes no second one. Refused deliveries keep theirs (each one asked Feishu about chats and members), except when
the app lacks a scope (`release`: the person could not have done better). The set expires an hour after its newest
entry and holds at most the limit's number of ids.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from core.keys import Keys
from share import keys as share_keys

WINDOW_S = 3600

# KEYS: the person's slots   ARGV: now, window, limit, delivery id  →  {1, 0} taken (or held already) | {0, oldest}
_TAKE = """
if redis.call('ZSCORE', KEYS[1], ARGV[4]) then return {1, '0'} end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. (tonumber(ARGV[1]) - tonumber(ARGV[2])))
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  return {0, redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2]}
end
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[4])
redis.call('EXPIRE', KEYS[1], ARGV[2])
return {1, '0'}
"""


@dataclass(frozen=True)
class Slot:
    taken: bool
    free_in_s: float = 0.0  # when refused: how long until the oldest slot of the window frees


class Slots:
    def __init__(self, r: redis.Redis, keys: Keys) -> None:
        self.r, self.keys = r, keys
        self._take = r.register_script(_TAKE)

    def take(self, person: str, delivery: str, limit: int, now: float) -> Slot:
        taken, oldest = self._take([share_keys.slots(self.keys, person)], [repr(now), WINDOW_S, limit, delivery])
        if int(taken):
            return Slot(True)
        return Slot(False, max(0.0, float(oldest) + WINDOW_S - now))

    def release(self, person: str, delivery: str) -> None:
        self.r.zrem(share_keys.slots(self.keys, person), delivery)
