"""Route keys from stable ids only (contract): p2p, group + sender, group + real topic."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bot.envelope import Inbound
from routing.policy import Policy

Kind = Literal["p2p", "group", "topic"]


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


def kind_of(route_key: str) -> Kind:
    """Route keys carry their kind (`feishu:<profile>:<kind>:…`), so it never needs storing."""
    kind = route_key.split(":")[2]
    if kind not in ("p2p", "group", "topic"):
        raise ValueError(f"not a route key: {route_key!r}")
    return kind  # type: ignore[return-value]


def route_for(inbound: Inbound, policy: Policy, profile: str) -> Route:
    kind = route_kind(inbound)
    rules = policy.for_chat(inbound.chat_id)
    base = f"feishu:{profile}:{kind}:{inbound.chat_id}"
    if kind == "p2p":
        key = base
    elif kind == "topic":
        key = f"{base}:{inbound.thread_id}"
        if rules.topic_scope == "per_sender":
            key = f"{key}:{inbound.sender_open_id}"
    else:
        key = f"{base}:{inbound.sender_open_id}" if rules.group_scope == "per_sender" else base
    return Route(key=key, kind=kind, queue=policy.queues[kind])
