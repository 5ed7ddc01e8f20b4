"""A timer as data: who set it, for which route and item, why, when it is due. Pure.

Kinds: `followup` (the model's schedule_followup tool), `digest` (a chat's daily list of open items) and
`triage` (a topic's quiet-period check). The scheduler only turns a due timer into an inbox event of its
route; the run decides what, if anything, to say (timers/fire.py).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields
from typing import Any

FOLLOWUP, DIGEST, TRIAGE = "followup", "digest", "triage"
PENDING, FIRED, CANCELLED = "pending", "fired", "cancelled"
ENDED_TTL_S = 7 * 86400  # an ended timer's hash stays this long (admin, /followups history, the fire run)


@dataclass(frozen=True)
class Timer:
    id: str
    kind: str
    route_key: str
    due: float  # service clock (core/clock.py), epoch seconds
    chat_id: str = ""
    thread_id: str = ""
    item_id: str = ""
    what: str = ""
    understood: str = ""  # the time as the reply stated it
    created_by: str = ""
    created_at: float = 0.0
    source_message_id: str = ""  # the request that set it (a recall cancels it); replies go under it
    root_id: str = ""  # the topic's root message, where a reminder goes when the request is gone
    source_time_ms: int = 0  # Feishu's create_time of that request: "the thread since the timer was set"
    gen: int = 0  # the route's generation when set: a later /reset makes it void
    state: str = PENDING
    ended_at: float = 0.0
    end_reason: str = ""
    fired_note: str = ""  # what the fire run did (posted / why nothing)
    told: str = ""  # what it posted unasked, in words (the route's transcript keeps it: the next turn knows)

    def to_hash(self) -> dict[str, str]:
        return {k: str(v) for k, v in asdict(self).items()}

    @classmethod
    def from_hash(cls, raw: dict[Any, Any]) -> Timer | None:
        data = {str(k): str(v) for k, v in raw.items()}
        if not data.get("id") or not data.get("route_key"):
            return None
        out: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in data:
                continue
            value = data[f.name]
            out[f.name] = float(value or 0) if f.type == "float" else int(float(value or 0)) if f.type == "int" \
                else value
        return cls(**out)

    def public(self) -> dict[str, Any]:
        """For /admin/api/timers and logs: everything but nothing secret (there is nothing secret)."""
        return asdict(self)

    def event_content(self) -> str:
        return json.dumps({"timer_id": self.id, "kind": self.kind, "due": self.due}, separators=(",", ":"))


def followup_id(route_key: str, batch_id: str, n: int) -> str:
    """Same (route, batch, call) → same id: a turn rerun after a crash sets the same follow-up, not a second."""
    return "f_" + hashlib.sha256(f"{route_key}|{batch_id}|{n}".encode()).hexdigest()[:10]


def digest_id(chat_id: str, slot: str) -> str:
    """One digest per chat and cron slot ("2026-12-01T0900", local): two slots a day are two digests."""
    return f"dg_{chat_id}_{slot}"


def triage_id(route_key: str, period: int) -> str:
    return "tr_" + hashlib.sha256(f"{route_key}|{period}".encode()).hexdigest()[:12]


def dedupe_key(timer_id: str, due: float) -> str:
    """The inbox dedupe id of a timer's event: (timer id, due time) delivers once, whoever schedules it."""
    return f"timer:{timer_id}:{due:.3f}"
