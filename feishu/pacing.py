"""Per-app pacing of the Feishu APIs that have limits of their own, shared by every process through Redis.

The scheme the outbox uses too (runs/outbox.py, with these Lua scripts): one slot per call in a Redis ZSET per API and
window, held "in flight" from the grant until the call returns and then counted from its answer, so no window ever
holds more calls than Feishu allows, wherever between our grant and its answer Feishu counted each one.

Limits, as the API reference states them:
- docx v1 document get, blocks list, block children get: "单个应用调用频率上限为每秒 5 次，超过该频率限制，接口将返回
  HTTP 状态码 400 及错误码 99991400" (open.feishu.cn …/document-docx/docx-v1/document/get, document-block/list,
  document-block-children/get).
- drive v1 files download: "该接口调用频率上限为 5 QPS，10000 次/天。否则会返回 1061045 错误码"
  (…/reference/drive-v1/file/download). The day is a rolling 24 hours here (never more in any calendar day), and
  it is never waited out: a call with no room left today is not made (`NoRoom`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import redis

from core.keys import Keys

# Feishu counts a send when it arrives, somewhere between our grant and the answer. So a slot is held "in
# flight" (scored IN_FLIGHT_MS ahead) from the grant until the call returns, then scored at its end: the
# sixth send of a window is granted only a full window after the first one's answer, wherever in between
# Feishu counted it. (Scoring at the grant alone let 8 sends land in one second under load.)
PACE_WINDOW_MS = 1100
IN_FLIGHT_MS = 15_000  # a send still unanswered after this (a worker killed mid-call) stops holding its slot
PACE_POLL_S = 0.1  # a full window of in-flight slots frees up when their answers come, not at a known time
PACE_WINDOW_MS = 1100
IN_FLIGHT_MS = 15_000  # a send still unanswered after this (a worker killed mid-call) stops holding its slot
PACE_POLL_S = 0.1  # a full window of in-flight slots frees up when their answers come, not at a known time
DAY_MS = 86_400_000

# KEYS[1]: the scope's slots (zset token → ms). ARGV: window_ms, limit, token, in_flight_ms. → ms to wait, or 0.
PACE_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[4]), ARGV[3])
  redis.call('PEXPIRE', KEYS[1], window + tonumber(ARGV[4]))
  return 0
end
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return math.max(1, tonumber(oldest[2]) + window - now)
"""
# KEYS[1]: the scope's slots. ARGV: token, ttl_ms. The call returned: its slot counts from now.
PACE_DONE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
return 0
"""


@dataclass(frozen=True)
class Limit:
    calls: int
    window_ms: int
    wait: bool = True  # False: no room now means no call (a daily cap is never sat out)


DOCX_PER_SECOND = (Limit(5, PACE_WINDOW_MS),)
LIMITS: dict[str, tuple[Limit, ...]] = {
    "docx_get": DOCX_PER_SECOND,
    "docx_blocks": DOCX_PER_SECOND,
    "docx_children": DOCX_PER_SECOND,
    "drive_download": (Limit(10_000, DAY_MS, wait=False), Limit(5, PACE_WINDOW_MS)),
}


class NoRoom(Exception):
    """The API's cap that is never waited out (a day's downloads) is reached: the call is not made."""


class Pacer:
    def __init__(self, r: redis.Redis, keys: Keys, limits: Mapping[str, tuple[Limit, ...]] = LIMITS) -> None:
        self.r, self.keys, self.limits = r, keys, limits
        self._take, self._done = r.register_script(PACE_TAKE), r.register_script(PACE_DONE)

    @contextmanager
    def slot(self, api: str) -> Iterator[None]:
        """Hold a slot in each of the API's windows (waiting for room, or NoRoom) while the call runs."""
        held: list[tuple[str, str, int]] = []
        try:
            for limit in self.limits.get(api, ()):
                key, token = self.keys.pace(f"api:{api}:{limit.window_ms}"), os.urandom(8).hex()
                while (wait_ms := int(self._take([key], [limit.window_ms, limit.calls, token, IN_FLIGHT_MS]))) > 0:
                    if not limit.wait:
                        raise NoRoom(api)
                    time.sleep(min(wait_ms / 1000, PACE_POLL_S))
                held.append((key, token, limit.window_ms))
            yield
        finally:
            for key, token, window in held:  # the call returned: each slot counts from now
                self._done([key], [token, window + IN_FLIGHT_MS])
