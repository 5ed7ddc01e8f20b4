"""Admission: the deterministic fast path that decides whether a message reaches a route."""

from __future__ import annotations

from dataclasses import dataclass

from bot.envelope import Inbound
from routing.policy import Policy

IDENTITY_UNKNOWN = "bot identity unknown"


@dataclass(frozen=True)
class Decision:
    admit: bool
    reason: str


def _listed(value: str, allow: frozenset[str], deny: frozenset[str]) -> bool:
    return value not in deny and (not allow or value in allow)


def admit(inbound: Inbound, policy: Policy, bot_open_id: str | None) -> Decision:
    """Own and (by default) other bots' messages, lists, then the group mention rule."""
    if inbound.sender_type == "app" or (bot_open_id and inbound.sender_open_id == bot_open_id):
        return Decision(False, "own message")
    if inbound.sender_type == "bot" and policy.bot_messages == "ignore":
        return Decision(False, "bot message")
    if not _listed(inbound.chat_id, policy.allow_chats, policy.deny_chats):
        return Decision(False, "chat not allowed")
    if not _listed(inbound.sender_open_id, policy.allow_users, policy.deny_users):
        return Decision(False, "user not allowed")
    if inbound.chat_type == "p2p" or not policy.for_chat(inbound.chat_id).require_mention:
        return Decision(True, "admitted")
    if not bot_open_id:
        return Decision(False, IDENTITY_UNKNOWN)
    if any(m.open_id == bot_open_id for m in inbound.mentions):
        return Decision(True, "mentioned")
    return Decision(False, "mention-all only" if inbound.mentioned_all else "not mentioned")
