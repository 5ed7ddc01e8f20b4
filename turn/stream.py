"""A streaming answer (REPLY_STREAMING=card): one CardKit card per turn that grows with the model's text, then
shows the complete rendered answer; the rest of a long answer follows as ordinary replies.

The card is created when the first text arrives and sent as the reply to the batch's last message. Its ids go
into the batch's reply ledger (`sent:{rk}:<batch>`) before the card message is posted, under the same uuid a
rerun uses: a run killed mid-stream leaves a card the rerun finds and finishes — never a second card, never the
same text twice. Sequence numbers come from the ledger too (HINCRBY), so they keep increasing across runs.

Updates are paced per card: at most one per STREAM_UPDATE_SECONDS, and only when the card's second has room
(Feishu allows 10 operations a second on one card; updates to a card in streaming mode do not count against the
app's API tier, feishu/cardkit.py): otherwise the next delta tries again. Streaming that closed by itself
(10 minutes after it was turned on, 200850) is turned on again with one settings call and the text goes on.
A rerun never shows less than the card did: the ledger keeps the length of the longest text sent to the card
(`stream:shown`, written before the push), and a rerun pushes only text longer than that. A question recalled
while its answer streams (every message of the batch) stops the answer: `recalled` is checked before every push
and before the card is finished, and raises `Recalled`; the caller closes the card as a reset does.
Streaming never fails a turn: without the scope (the capability turns off, loudly once), or when CardKit
refuses, the turn falls back to today's rendered reply. Only a lost lease stops it (nothing more is sent).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace

from core.errors import AdapterError, Permanent, Retryable
from feishu import cardkit
from feishu.cardkit import CardKit, streaming_card
from feishu.cardmd import (
    CARD_TABLES_MAX,
    MARKDOWN_TABLES_MAX,
    before_table,
    dedent_fences,
    plain_summary,
    split_tables,
)
from feishu.render import RICH_LIMIT_BYTES, card_markdown, split_markdown
from runs.outbox import BATCH_CACHE_TTL_S, Destination, LeaseLost, reply_uuid
from runs.runtime import Runtime

log = logging.getLogger(__name__)
ELEMENT = "answer"
CARD = "stream:card"  # ledger fields: the card entity, its message, the sequence counter, finished
MESSAGE = "stream:message"
SEQ = "stream:seq"
DONE = "stream:done"
SHOWN = "stream:shown"  # the length of the longest text sent to the card (a rerun never pushes shorter)
FELL_BACK = "stream:plain"  # the card could not be finished: the answer went out as plain replies
SEQUENCE_SKIP = 1000  # a sequence conflict (a counter lost with Redis) jumps ahead once
NO_ROOM_RETRY_S = 0.5
_loud: set[str] = set()  # CardKit failures already logged at ERROR by this process


class Recalled(Exception):
    """The batch's messages were recalled while the answer was being written: it must not be finished."""


def enabled(rt: Runtime) -> bool:
    return rt.settings.reply_streaming == "card" and not rt.state.exists(rt.keys.capability_off(cardkit.CAPABILITY))


class Stream:
    """One turn's streaming card. `feed` takes the text so far; `finish` posts the complete answer."""

    def __init__(self, rt: Runtime, to: Destination, batch_id: str, people: Mapping[str, str]) -> None:
        self.rt, self.to, self.batch_id, self.people = rt, to, batch_id, dict(people)
        self.rk, self.target, self.chat_id, self.in_thread, self.fence = (to.route_key, to.target, to.chat_id,
                                                                          to.in_thread, to.fence)
        self.kit = CardKit(rt.feishu)
        self.ledger = rt.keys.sent(to.route_key, batch_id)
        found = {str(k): str(v) for k, v in rt.state.hgetall(self.ledger).items()}
        self.card_id, self.message_id = found.get(CARD), found.get(MESSAGE)
        self.done, self.plain = DONE in found, FELL_BACK in found
        self.on = enabled(rt) and not self.plain
        self.shown, self.next_at = "", 0.0
        self.floor = int(found.get(SHOWN) or 0)  # what the card already shows (a killed run's pushes)
        self.recalled: Callable[[], bool] = lambda: False  # set by the caller: the batch's question was recalled
        self.interval = rt.settings.stream_update_seconds
        self.limit = rt.settings.feishu_limits.reply_chunk_chars

    # -- while the model writes --------------------------------------------------------------------------

    def feed(self, text: str) -> None:
        """The answer so far (the current model request's text). Best effort, except a lost lease."""
        if not self.on or self.done or not text.strip():
            return
        now = time.monotonic()
        if self.message_id and now < self.next_at:
            return
        shown = self._visible(text)
        if shown == self.shown or (self.card_id and len(shown) <= self.floor):
            return  # nothing new, or less than the card already shows (a rerun catching up)
        self._check_recall()
        wait = self.interval
        try:
            if not self.message_id:
                self._open(shown)
            elif not self._push(shown):
                wait = NO_ROOM_RETRY_S  # the card's second was full just now: look again soon, not a whole interval
        except LeaseLost:
            raise
        except Retryable as exc:  # a rate limit or a blip on one update: the next one carries the text
            wait = max(wait, exc.retry_after or 1.0) if self.message_id else wait
            if not self.message_id:
                self._stop(exc)
        except AdapterError as exc:
            self._stop(exc)
        # Keep the cadence: a push that came late (it waits for the model's next delta) does not push the next
        # one later too, so the average interval is the one chosen; after a long silence, count from now.
        self.next_at = (self.next_at if now - self.next_at < wait else now) + wait

    def _visible(self, text: str) -> str:
        """What the card shows while streaming: the first part of a long answer (up to its fifth table: one
        element shows four), tags defused, mentions only for the people in the conversation."""
        head = text if len(text) <= self.limit else text[: self.limit] + "…"
        return card_markdown(before_table(dedent_fences(head), MARKDOWN_TABLES_MAX), self.people)

    def _open(self, shown: str) -> None:
        """Create the card (unless a killed run did), keep its id, then post it under the turn's reply uuid."""
        if not self.card_id:
            self._keep(SHOWN, str(len(shown)))
            card_id = self.rt.outbox.paced(self.to, lambda: self.kit.create(
                streaming_card(shown, element_id=ELEMENT)), per_chat=False, api="card_create")  # the API's tier
            self._keep(CARD, card_id)
            self.card_id = card_id
        elif len(shown) > self.floor:
            self._push(shown)  # a rerun: the card exists; bring it up to date before (re)posting it
        self._post()
        self.shown = shown

    def _post(self) -> None:
        """The card as the reply to the batch's last message; a repost of a killed run's card returns the same
        message (Feishu's uuid window; the ledger's uuid is the turn's)."""
        uid, card_id = reply_uuid(self.rk, self.batch_id, 0), str(self.card_id)
        message_id = self.rt.outbox.paced(self.to, lambda: self.rt.feishu.reply_card_entity(
            self.target, card_id, uuid=uid, in_thread=self.in_thread))
        self._keep(MESSAGE, message_id)
        self.message_id = message_id

    def _push(self, shown: str) -> bool:
        """The text so far, if the card's second has room; streaming that closed by itself is turned on again once
        (a second 200850 right after stops the stream: finish still posts the answer)."""
        card_id = str(self.card_id)
        self._keep(SHOWN, str(len(shown)))  # before the push: a kill right after it leaves the floor behind
        self.floor = len(shown)
        for attempt in (1, 2):
            seq = self._sequence()

            def write(seq: int = seq) -> None:
                self.kit.stream_text(card_id, ELEMENT, shown, sequence=seq, uuid=self._uuid(seq))

            try:
                pushed = self.rt.outbox.try_paced(self.to, write, card=card_id)
            except Permanent as exc:
                if exc.code != cardkit.STREAM_TIMEOUT or attempt == 2:
                    raise
                self._reopen()
                continue
            if pushed:
                self.shown = shown
            return pushed
        return False

    def _check_recall(self) -> None:
        if self.recalled():
            raise Recalled(self.batch_id)

    def _reopen(self) -> None:
        card_id, seq = str(self.card_id), self._sequence()
        self.rt.outbox.paced(self.to, lambda: self.kit.reopen(card_id, sequence=seq,
                                                                                uuid=self._uuid(seq)),
                             per_chat=False, api="card_settings", card=card_id)  # not streaming: the API's tier too
        log.info("streaming reopened after it closed by itself", extra={"route_key": self.rk, "batch": self.batch_id})

    def _stop(self, exc: AdapterError) -> None:
        """Stop streaming for this turn; the answer still goes out when the turn ends (see finish)."""
        self.on = False
        level = logging.WARNING if exc.code in _loud else logging.ERROR
        _loud.add(exc.code)
        log.log(level, "streaming stopped; the answer will be posted as a plain reply if the card cannot be finished",
                extra={"route_key": self.rk, "batch": self.batch_id, "error": f"{exc.__class__.__name__}: {exc}"})

    @property
    def reply_key(self) -> str | None:
        """The uuid key of a plain reply after a card was made: its chunk 0 must not share the card's uuid."""
        return f"{self.batch_id}:plain" if self.card_id else None

    # -- the complete answer -----------------------------------------------------------------------------

    def finish(self, answer: str) -> list[str] | None:
        """Show the complete answer in the card and post the rest; the reply ids, or None when there is no card
        to finish (never streamed, or the card cannot take it): the caller posts the answer as before."""
        if self.plain or not self.card_id:
            return None
        first, rest = _card_parts(answer, self.limit)
        if not self.done:
            self._check_recall()
        try:
            if not self.done:
                self._final(card_markdown(first, self.people), plain_summary(first, self.people))
            if not self.message_id:  # created, but its run died (or failed) before posting it
                self._post()
        except LeaseLost:
            raise
        except Retryable:
            raise  # the turn is retried: its stored answer finishes this same card
        except Permanent as exc:
            self._stop(exc)
            self._keep(FELL_BACK, "1")
            self.plain = True
            return None
        ids = [str(self.message_id)]
        if rest.strip():
            ids += self.rt.outbox.reply(self.to, self.batch_id, rest, uuid_key=f"{self.batch_id}:rest",
                                        people=self.people)
        return ids

    def _final(self, md: str, summary: str) -> None:
        """The complete answer, streaming off, and a plain-text summary for the chat list. Paced by the card's
        second and, as its streaming may have closed by itself, by the API's tier too."""
        card_id = str(self.card_id)
        card = streaming_card(md, element_id=ELEMENT, streaming=False, summary=summary)
        for attempt in (1, 2):
            seq = self._sequence()
            try:
                self.rt.outbox.paced(self.to, lambda seq=seq: self.kit.update(  # type: ignore[misc]
                    card_id, card, sequence=seq, uuid=self._uuid(seq)), per_chat=False, api="card_update",
                    card=card_id)
                break
            except Permanent as exc:
                if exc.code != cardkit.SEQUENCE or attempt == 2:
                    raise
                self.rt.state.hincrby(self.ledger, SEQ, SEQUENCE_SKIP)
        self._keep(DONE, "1")
        self.done = True

    def abandon(self, note: str, fence: Callable[[], bool] | None = None) -> None:
        """Close a card whose answer will never come (the batch was given up, or a user reset overtook the turn):
        it shows `note` instead of a half answer that looks alive ("[生成中...]"). Best effort."""
        if not self.card_id or self.done or self.plain:
            return
        card_id, card = str(self.card_id), streaming_card(note, element_id=ELEMENT, streaming=False)
        seq = self._sequence()
        try:
            self.rt.outbox.paced(replace(self.to, fence=fence or self.fence), lambda: self.kit.update(
                card_id, card, sequence=seq, uuid=self._uuid(seq)), per_chat=False, api="card_update", card=card_id)
            self._keep(DONE, "1")
            self.done = True
        except LeaseLost:
            raise
        except Exception as exc:
            log.warning("unfinished card not closed", extra={"route_key": self.rk, "batch": self.batch_id,
                                                             "error": f"{exc.__class__.__name__}: {exc}"})

    # -- ledger ------------------------------------------------------------------------------------------

    def _sequence(self) -> int:
        pipe = self.rt.state.pipeline()
        pipe.hincrby(self.ledger, SEQ, 1)
        pipe.expire(self.ledger, BATCH_CACHE_TTL_S)
        return int(pipe.execute()[0])

    def _uuid(self, seq: int) -> str:
        return hashlib.sha256(f"{self.rk}|{self.batch_id}|card|{seq}".encode()).hexdigest()[:40]

    def _keep(self, field: str, value: str) -> None:
        self.rt.outbox.record(self.ledger, field, value)


def _card_parts(answer: str, limit: int) -> tuple[str, str]:
    """The answer split as replies split it: the part the card shows (fitting one card: 30 KB with its frame,
    five tables) and the Markdown that follows as ordinary replies."""
    parts = split_markdown(dedent_fences(answer), limit) or [answer]
    first, *more = split_tables(parts[0], CARD_TABLES_MAX)
    rest = [*more, *parts[1:]]
    while _card_bytes(first) > RICH_LIMIT_BYTES - 1024:
        smaller = split_markdown(first, max(len(first) // 2, 50))
        if len(smaller) < 2:
            break
        first, rest = smaller[0], [*smaller[1:], *rest]
    return first, "\n\n".join(rest)


def _card_bytes(md: str) -> int:
    return len(json.dumps(streaming_card(md, streaming=False), ensure_ascii=False).encode())
