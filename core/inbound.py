"""The neutral message: one admitted user message (or a timer's wake-up) as it travels from the edge through a
route's inbox to a run, JSON-serialisable. Pure."""

from __future__ import annotations

import hashlib
import json

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError

# Message types of entries that are not people's messages, each answered by the service (turn/registry.py Event).
CARD_ACTION_TYPE, RECORD_CHANGED_TYPE, TIMER_TYPE = "card_action", "record_changed", "timer"


class Mention(BaseModel):
    key: str
    open_id: str | None = None
    name: str | None = None


class Inbound(BaseModel):
    """One admitted user message, JSON-serialisable; what travels through the inbox to the worker.

    New fields must have defaults: entries queued by an older release are parsed by this model.
    """

    event_id: str
    message_id: str
    chat_id: str
    chat_type: str
    sender_open_id: str = ""
    sender_union_id: str | None = None
    sender_user_id: str | None = None
    sender_type: str
    message_type: str
    text: str
    content: str
    create_time: str | None = None
    thread_id: str | None = None
    root_id: str | None = None
    parent_id: str | None = None
    mentions: list[Mention] = []
    mentioned_all: bool = False
    # The route's generation when the event was stored: stamped by the PUSH script (never by the web), so
    # a worker can tell messages sent before a user reset. None: from before sessions, or a replay.
    gen: int | None = None

    @property
    def sender_id(self) -> str:
        """Who speaks, for routes, attribution and user lists: open_id, else union_id (`on_`), else user_id.

        Raw ids: the prefixes (`ou_`, `on_`, none) keep the three kinds apart. "" when Feishu sent none.
        """
        return self.sender_open_id or self.sender_union_id or self.sender_user_id or ""

    def content_key(self) -> str:
        """Redeliveries can carry a new message_id; this key is stable across them."""
        parts = [self.sender_id, self.chat_id, self.create_time or "", self.thread_id or "",
                 hashlib.sha256(self.content.encode("utf-8")).hexdigest()]
        return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:32]


def dumps(inbound: Inbound) -> str:
    """The inbox entry: a JSON object without `gen`, which PUSH appends as the object's last member.

    pydantic's serializer writes the same text as `json.dumps(..., ensure_ascii=False, separators=(",", ":"))` of the
    model's dump, in a quarter of the time (the webhook's hot path); text UTF-8 cannot carry (a lone surrogate) it
    refuses, so that takes the slow way, to fail where it always did."""
    try:
        return inbound.model_dump_json(exclude={"gen"})
    except PydanticSerializationError:
        return json.dumps(inbound.model_dump(mode="json", exclude={"gen"}), ensure_ascii=False, separators=(",", ":"))
