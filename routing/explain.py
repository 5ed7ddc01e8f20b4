"""Which ROUTING_* rule decided a message's route (the console's routing simulator). Pure.

The route key itself always comes from `routing.keys.route_for`, the function the service uses; this module only
names the setting behind each part of the decision, so an operator can see what to change.
"""

from __future__ import annotations

from core.inbound import Inbound
from routing.keys import route_kind
from routing.policy import Policy


def scope_rule(inbound: Inbound, policy: Policy) -> str:
    """The variable (and its value) that made the route per sender or shared."""
    kind = route_kind(inbound)
    if kind == "p2p":
        return "private chat: one route per chat (fixed)"
    override = policy.overrides.get(inbound.chat_id)
    field = "topic_scope" if kind == "topic" else "group_scope"
    value = getattr(policy.for_chat(inbound.chat_id), field)
    if override is not None and getattr(override, field) is not None:
        return f"ROUTING_CHAT_OVERRIDES[{inbound.chat_id}].{field}={value}"
    return f"ROUTING_{field.upper()}={value}"


def admission_rule(reason: str, inbound: Inbound, policy: Policy) -> str:
    """The setting behind an admission verdict (routing/admission.py's reasons)."""
    if reason == "chat not allowed":
        return "ROUTING_DENY_CHATS" if inbound.chat_id in policy.deny_chats else "ROUTING_ALLOW_CHATS"
    if reason == "user not allowed":
        return "ROUTING_DENY_USERS" if inbound.sender_id in policy.deny_users else "ROUTING_ALLOW_USERS"
    if reason in ("not mentioned", "mention-all only", "mentioned"):
        override = policy.overrides.get(inbound.chat_id)
        if override is not None and override.require_mention is not None:
            return f"ROUTING_CHAT_OVERRIDES[{inbound.chat_id}].require_mention"
        return "ROUTING_REQUIRE_MENTION"
    if reason in ("bot message", "bot sender without open_id"):
        return "ROUTING_BOT_MESSAGES"
    if reason == "admitted" and inbound.chat_type != "p2p":
        return "ROUTING_CHAT_OVERRIDES / ROUTING_REQUIRE_MENTION=false (no mention needed)"
    return "(fixed)"


def queue_rule(inbound: Inbound, policy: Policy) -> str:
    kind = route_kind(inbound)
    return f"ROUTING_QUEUE_{kind.upper()}={policy.queues[kind]}"
