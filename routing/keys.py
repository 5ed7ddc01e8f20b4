"""Route keys from stable ids only (contract): p2p, group + sender, group + real topic."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from core.inbound import Inbound
from routing.policy import Policy

Kind = Literal["p2p", "group", "topic"]
# Internal routes of the item machinery (items/claim.py): `feishu:<profile>:item:<item_id>` runs an item's
# analysis, `feishu:<profile>:item:<record_id>` a record-changed event. Never derived from a message.
ITEM = "item"
# `feishu:<profile>:digest:<chat_id>` runs a chat's digest (timers/digest_run.py): a wake-up, never a message.
DIGEST = "digest"
# `feishu:<profile>:memory:<kind>:<id>` consolidates one memory scope (memory/scopes/dream.py): a wake-up, never a
# message.
MEMORY = "memory"


@dataclass(frozen=True)
class Route:
    key: str
    kind: Kind
    queue: str


def route_kind(inbound: Inbound) -> Kind:
    """A topic is a group message carrying `thread_id`; root/parent ids alone are a quoted reply."""
    if inbound.chat_type == "p2p":
        return "p2p"
    return "topic" if inbound.thread_id else "group"


_KIND = re.compile(r"^[a-z][a-z0-9_]{0,23}$")  # a feature's internal kind (`hook`): its RouteWork runs it


def kind_of(route_key: str) -> str:
    """Route keys carry their kind (`feishu:<profile>:<kind>:…`), so it never needs storing: one of the contract's,
    the item machinery's, or an internal kind a feature declares (its `RouteWork`)."""
    parts = route_key.split(":")
    if len(parts) < 4 or parts[0] != "feishu" or not _KIND.match(parts[2]):
        raise ValueError(f"not a route key: {route_key!r}")
    return parts[2]


def item_route(profile: str, subject: str) -> str:
    """The internal route of an item (`itm_…`) or of a Bitable record (`rec…`)."""
    return f"feishu:{profile}:{ITEM}:{subject}"


def digest_route(profile: str, chat_id: str) -> str:
    return f"feishu:{profile}:{DIGEST}:{chat_id}"


def memory_route(profile: str, scope: str) -> str:
    """The internal route that consolidates a memory scope (`people/<id>`, `chats/<id>`, `items/<id>`)."""
    kind, _, ident = scope.partition("/")
    return f"feishu:{profile}:{MEMORY}:{kind}:{ident}"


def route_for(inbound: Inbound, policy: Policy, profile: str) -> Route:
    """Per-sender routes end in `Inbound.sender_id`: the raw open_id, else union_id (`on_…`), else user_id."""
    kind = route_kind(inbound)
    rules = policy.for_chat(inbound.chat_id)
    key = f"feishu:{profile}:{kind}:{inbound.chat_id}"
    if kind == "topic":
        key = f"{key}:{inbound.thread_id}"
    if (kind, rules.topic_scope) == ("topic", "per_sender") or (kind, rules.group_scope) == ("group", "per_sender"):
        if not inbound.sender_id:  # admission refuses these; an empty suffix would merge strangers' histories
            raise ValueError("a per-sender route needs a sender id")
        key = f"{key}:{inbound.sender_id}"
    return Route(key=key, kind=kind, queue=policy.queues[kind])
