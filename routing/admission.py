"""Admission: the deterministic fast path that decides whether a message reaches a route."""

from __future__ import annotations

from dataclasses import dataclass

from core.inbound import Inbound
from routing.policy import Policy

IDENTITY_UNKNOWN = "bot identity unknown"
NO_SENDER_ID = "no sender id"


@dataclass(frozen=True)
class Decision:
    admit: bool
    reason: str


def listed(value: str, allow: frozenset[str], deny: frozenset[str]) -> bool:
    return value not in deny and (not allow or value in allow)


def _bot_sender(inbound: Inbound, policy: Policy, bot_open_id: str | None) -> Decision | None:
    """Other bots follow ROUTING_BOT_MESSAGES, but only once we can prove the sender is not this bot."""
    if policy.bot_messages != "allow":
        return Decision(False, "bot message")
    if not inbound.sender_open_id:  # nothing to compare with our open_id: it could be us
        return Decision(False, "bot sender without open_id")
    if not bot_open_id:
        return Decision(False, IDENTITY_UNKNOWN)
    return None


def admit(inbound: Inbound, policy: Policy, bot_open_id: str | None) -> Decision:
    """Sender (missing, ourselves, other bots), chat and user lists, then the group mention rule."""
    if not inbound.sender_id:
        return Decision(False, NO_SENDER_ID)
    if bot_open_id and inbound.sender_open_id == bot_open_id:
        return Decision(False, "own message")
    # Documented types are "user" and "bot" ("app" in the list APIs); anything not a user is treated as a bot.
    if inbound.sender_type != "user" and (verdict := _bot_sender(inbound, policy, bot_open_id)):
        return verdict
    if not listed(inbound.chat_id, policy.allow_chats, policy.deny_chats):
        return Decision(False, "chat not allowed")
    if not listed(inbound.sender_id, policy.allow_users, policy.deny_users):
        return Decision(False, "user not allowed")
    if inbound.chat_type == "p2p" or not policy.for_chat(inbound.chat_id).require_mention:
        return Decision(True, "admitted")
    if not bot_open_id:
        return Decision(False, IDENTITY_UNKNOWN)
    if any(m.open_id == bot_open_id for m in inbound.mentions):
        return Decision(True, "mentioned")
    return Decision(False, "mention-all only" if inbound.mentioned_all else "not mentioned")
