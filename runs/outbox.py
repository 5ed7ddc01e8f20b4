"""The fenced outbox: every reply chunk (rendered) carries a deterministic uuid, is paced per chat, and is recorded
once delivered; reactions and card patches are paced too."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from core.errors import Retryable
from core.keys import Keys
from feishu.client import FeishuApi, Sent
from feishu.pacing import IN_FLIGHT_MS, PACE_DONE, PACE_POLL_S, PACE_TAKE, PACE_WINDOW_MS
from feishu.render import Chunk, render
from runs.inbox import Inbox

BATCH_CACHE_TTL_S = 2 * 86400  # a batch's caches expire on their own even if it never commits
INLINE_WAIT_MAX_S = 10.0  # a rate-limit wait up to this long happens in the run; longer ones go back to the queue
SEND_TRIES = 3
# Reply, create, PATCH and reactions also allow 1,000 calls per minute each (besides 50/s per app): a sustained
# second-level pace would allow ~2,700 a minute. Each API gets its own minute window.
MINUTE_MS = 60_000
# CardKit: 10 operations a second on one card entity, whatever the op; ops on a card in streaming mode do not count
# against the API's tier (feishu/cardkit.py cites both).
CARD_OPS_PER_WINDOW = 10
Scope = tuple[str, int, int]  # (pacing key's scope, limit, window ms)

T = TypeVar("T")


@dataclass(frozen=True)
class Destination:
    """Where a run's posts go and what fences them (the outbox takes this one value): the route whose ledger and
    uuids make a rerun post nothing twice, the chat, the message replied to ("" = a new message in the chat), whether
    a reply stays in the message's thread (a topic), and the fence checked right before every send."""

    route_key: str
    chat_id: str
    target: str = ""
    in_thread: bool = False
    fence: Callable[[], bool] = lambda: True


class LeaseLost(Exception):
    """The run no longer owns its route; it must not touch the outside world."""


class Superseded(Exception):
    """A user reset moved the route to a newer generation while this segment was being worked on."""


def reply_uuid(route_key: str, batch_id: str, chunk: int) -> str:
    """Same (route, batch, chunk) → same uuid, so Feishu posts a retried reply at most once."""
    return hashlib.sha256(f"{route_key}|{batch_id}|{chunk}".encode()).hexdigest()[:40]


@dataclass(frozen=True)
class Limits:
    """How the outbox paces and cuts: reply chunk size, Feishu's per-chat and per-app send rates, each API's minute."""

    chunk_chars: int
    chat_qps: int
    app_qps: int
    api_qpm: int = 1000
    minute_ms: int = MINUTE_MS


class Outbox:
    def __init__(self, inbox: Inbox, keys: Keys, feishu: FeishuApi, limits: Limits) -> None:
        self.inbox, self.r, self.k, self.feishu = inbox, inbox.r, keys, feishu
        self.chunk_chars, self.chat_qps, self.app_qps = limits.chunk_chars, limits.chat_qps, limits.app_qps
        self.api_qpm, self.minute_ms = limits.api_qpm, limits.minute_ms
        self._take, self._done = self.r.register_script(PACE_TAKE), self.r.register_script(PACE_DONE)

    def reply(self, to: Destination, batch_id: str, text: str, *, uuid_key: str | None = None,
              people: Mapping[str, str] | None = None) -> list[str]:
        """Post `text` (Markdown rendered, feishu/render.py) as replies to `to.target`, skipping chunks an earlier
        run of this batch delivered. `people`: open_id → name of those an @mention may reach."""
        sent = []
        ledger = self.k.sent(to.route_key, batch_id)
        for i, chunk in enumerate(render(text, people, chunk_chars=self.chunk_chars)):
            uid = reply_uuid(to.route_key, uuid_key or batch_id, i)
            done = self.r.hget(ledger, uid)
            if done:
                sent.append(str(done))
                continue
            message_id = self._send(to, chunk, uid)
            self.record(ledger, uid, message_id)
            sent.append(message_id)
        return sent

    def _send(self, to: Destination, chunk: Chunk, uid: str) -> str:
        """One chunk, paced per chat and per app; short rate-limit waits are sat out here."""
        if chunk.msg_type == "text":
            return self._paced(to.chat_id, to.fence, lambda: self.feishu.reply_text(
                to.target, str(chunk.content["text"]), uuid=uid, in_thread=to.in_thread))
        return self._paced(to.chat_id, to.fence, lambda: self.feishu.reply(
            to.target, chunk.msg_type, chunk.content, uuid=uid, in_thread=to.in_thread))

    def record(self, ledger: str, field: str, value: str) -> None:
        pipe = self.r.pipeline()
        pipe.hset(ledger, field, value)
        pipe.expire(ledger, BATCH_CACHE_TTL_S)
        pipe.execute()

    def react(self, to: Destination, message_id: str, emoji_type: str) -> str:
        """Add a reaction, paced by the app's API tier: Feishu's 5/s per chat counts messages, not reactions, so
        reactions never take a reply's place in a busy chat."""
        return self._paced(to.chat_id, to.fence, lambda: self.feishu.add_reaction(message_id, emoji_type),
                           per_chat=False, api="reaction_add")

    def unreact(self, to: Destination, message_id: str, reaction_id: str) -> None:
        self._paced(to.chat_id, to.fence, lambda: self.feishu.remove_reaction(message_id, reaction_id),
                    per_chat=False, api="reaction_remove")

    def card(self, to: Destination, key: str, card: dict[str, Any]) -> str:
        """Post a card as a reply to `to.target` once per (route, key): a rerun finds it in the ledger, or Feishu's
        uuid window returns the card posted the first time."""
        return self.card_sent(to, key, card).message_id

    def card_sent(self, to: Destination, key: str, card: dict[str, Any]) -> Sent:
        """As `card`, with the AppLink Feishu answered the post with (kept in the ledger beside the id)."""
        ledger, uid = self.k.sent(to.route_key, key), reply_uuid(to.route_key, key, 0)
        done, link = self.r.hmget(ledger, [uid, f"{uid}:link"])
        if done:
            return Sent(str(done), str(link or ""))
        sent = self._paced(to.chat_id, to.fence, lambda: self.feishu.reply_card(to.target, card, uuid=uid,
                                                                                in_thread=to.in_thread))
        if sent.app_link:
            self.record(ledger, f"{uid}:link", sent.app_link)
        self.record(ledger, uid, sent.message_id)
        return sent

    def post_card(self, to: Destination, key: str, card: dict[str, Any]) -> str:
        """Post a card as a new message in `to.chat_id` once per (route, key), as `card` does for replies."""
        return self.post_card_sent(to, key, card).message_id

    def post_card_sent(self, to: Destination, key: str, card: dict[str, Any]) -> Sent:
        """As `post_card`, with the AppLink Feishu answered the post with (kept in the ledger beside the id)."""
        ledger, uid = self.k.sent(to.route_key, key), reply_uuid(to.route_key, key, 0)
        done, link = self.r.hmget(ledger, [uid, f"{uid}:link"])
        if done:
            return Sent(str(done), str(link or ""))
        sent = self._paced(to.chat_id, to.fence, lambda: self.feishu.send_sent(to.chat_id, "interactive", card,
                                                                                uuid=uid))
        if sent.app_link:
            self.record(ledger, f"{uid}:link", sent.app_link)
        self.record(ledger, uid, sent.message_id)
        return sent

    def post(self, to: Destination, key: str, text: str, *, people: Mapping[str, str] | None = None) -> list[str]:
        """Post `text` (rendered) as new messages in `to.chat_id`, once per (route, key, chunk), like `reply` does
        for replies: for when there is nothing left to reply to (a follow-up whose request was recalled)."""
        sent = []
        ledger = self.k.sent(to.route_key, key)
        for i, chunk in enumerate(render(text, people, chunk_chars=self.chunk_chars)):
            uid = reply_uuid(to.route_key, key, i)
            done = self.r.hget(ledger, uid)
            if done is None:
                done = self._send_new(to, chunk, uid)
                self.record(ledger, uid, done)
            sent.append(str(done))
        return sent

    def _send_new(self, to: Destination, chunk: Chunk, uid: str) -> str:
        return self._paced(to.chat_id, to.fence, lambda: self.feishu.send(to.chat_id, chunk.msg_type, chunk.content,
                                                                          uuid=uid))

    def patch(self, to: Destination, message_id: str, card: dict[str, Any]) -> None:
        """Replace a card in place (idempotent: the same card twice shows the same thing)."""
        self._paced(to.chat_id, to.fence, lambda: self.feishu.patch_card(message_id, card), api="patch")

    def paced(self, to: Destination, call: Callable[[], T], *, per_chat: bool = True, api: str = "reply",
              card: str | None = None) -> T:
        """`call` once its pacing slots are free (waiting for them), fenced, with short rate-limit retries.
        `card`: a CardKit op on that card entity, which also takes a slot of the card's second."""
        return self._paced(to.chat_id, to.fence, call, per_chat, api, card)

    def try_paced(self, to: Destination, call: Callable[[], object], *, card: str) -> bool:
        """`call` only if the card's second has room right now (an update to a card in streaming mode: exempt from
        the API's tier, skipped rather than waited for, the next one carries the text); True when it was made."""
        held: list[tuple[str, str, int]] = []
        for scope, limit, window in [_card_scope(card)]:
            key, token = self.k.pace(scope), os.urandom(8).hex()
            if int(self._take([key], [window, limit, token, IN_FLIGHT_MS])) > 0:
                for k, t, _ in held:
                    self.r.zrem(k, t)  # not used: give the slot back
                return False
            held.append((key, token, window))
        try:
            if not to.fence():
                raise LeaseLost(to.chat_id)
            call()
            return True
        finally:
            self._release(held)

    def _paced(self, chat_id: str, fence: Callable[[], bool], call: Callable[[], T], per_chat: bool = True,
               api: str = "reply", card: str | None = None) -> T:
        scopes = [*self._scopes(chat_id, per_chat, api), *([_card_scope(card)] if card else [])]
        for attempt in range(1, SEND_TRIES + 1):
            try:
                return self._once(chat_id, fence, call, scopes)
            except Retryable as exc:
                wait = _inline_wait(exc)
                if wait is None or attempt == SEND_TRIES:
                    raise
                time.sleep(wait)  # exactly what Feishu asked (x-ogw-ratelimit-reset), holding no slot meanwhile
        raise AssertionError("unreachable")

    def _scopes(self, chat_id: str, per_chat: bool, api: str) -> list[Scope]:
        """The API's minute first (its wait is the longest: no other slot is held meanwhile), then the chat's
        second (messages only), then the app's second."""
        chat: list[Scope] = [(f"chat:{chat_id}", self.chat_qps, PACE_WINDOW_MS)] if per_chat else []
        return [(f"minute:{api}", self.api_qpm, self.minute_ms), *chat, ("app", self.app_qps, PACE_WINDOW_MS)]

    def _once(self, chat_id: str, fence: Callable[[], bool], call: Callable[[], T], scopes: list[Scope]) -> T:
        held = self._take_slots(scopes)
        try:
            if not fence():  # checked last, right before the side effect
                raise LeaseLost(chat_id)
            return call()
        finally:
            self._release(held)

    def _release(self, held: list[tuple[str, str, int]]) -> None:
        """The calls returned: each slot counts from now (a window after Feishu's answer, not our grant)."""
        for key, token, window in held:
            self._done([key], [token, window + IN_FLIGHT_MS])

    def _take_slots(self, scopes: list[Scope]) -> list[tuple[str, str, int]]:
        """A slot in each scope, in order, waiting for each; returns them to be released."""
        held = []
        for scope, limit, window in scopes:
            key, token = self.k.pace(scope), os.urandom(8).hex()
            while (wait_ms := int(self._take([key], [window, limit, token, IN_FLIGHT_MS]))) > 0:
                time.sleep(min(wait_ms / 1000, PACE_POLL_S))
            held.append((key, token, window))
        return held


def _card_scope(card_id: str) -> Scope:
    return (f"card:{card_id}", CARD_OPS_PER_WINDOW, PACE_WINDOW_MS)


def _inline_wait(exc: Retryable) -> float | None:
    """How long to wait before sending again in this run, or None to hand the batch back to the queue."""
    if exc.code in ("99991400", "230020", "11232"):  # rate limits: Feishu says (or implies) how long
        wait = exc.retry_after if exc.retry_after is not None else 1.0
        return wait if wait <= INLINE_WAIT_MAX_S else None
    if exc.code in ("99991663", "transport", "230049") or exc.code.startswith("-"):
        return 0.5  # a stale token (refetched), a dropped connection or a busy message: soon again, same uuid
    return None
