"""Routing policy: what admins tune through ROUTING_* env variables, resolved per chat."""

from __future__ import annotations

from dataclasses import dataclass, field

from core.settings import ChatOverride, Scope, Settings


@dataclass(frozen=True)
class ChatRules:
    group_scope: Scope
    topic_scope: Scope
    require_mention: bool


@dataclass(frozen=True)
class Policy:
    group_scope: Scope = "per_sender"
    topic_scope: Scope = "shared"
    require_mention: bool = True
    bot_messages: str = "ignore"
    allow_chats: frozenset[str] = frozenset()
    deny_chats: frozenset[str] = frozenset()
    allow_users: frozenset[str] = frozenset()
    deny_users: frozenset[str] = frozenset()
    overrides: dict[str, ChatOverride] = field(default_factory=dict)
    queues: dict[str, str] = field(default_factory=lambda: {"p2p": "runs", "group": "runs", "topic": "runs"})

    def for_chat(self, chat_id: str) -> ChatRules:
        o = self.overrides.get(chat_id) or ChatOverride()
        return ChatRules(
            group_scope=o.group_scope or self.group_scope,
            topic_scope=o.topic_scope or self.topic_scope,
            require_mention=self.require_mention if o.require_mention is None else o.require_mention,
        )

    def queue_of(self, kind: str) -> str:
        """The queue a route kind's runs go to; an internal kind a feature declares shares the topics' queue (its
        work ends in topics, like an item's)."""
        return self.queues.get(kind) or self.queues["topic"]

    @property
    def queue_names(self) -> list[str]:
        return sorted(set(self.queues.values()))


def policy_from(settings: Settings) -> Policy:
    return Policy(
        group_scope=settings.routing_group_scope,
        topic_scope=settings.routing_topic_scope,
        require_mention=settings.routing_require_mention,
        bot_messages=settings.routing_bot_messages,
        allow_chats=frozenset(settings.routing_allow_chats),
        deny_chats=frozenset(settings.routing_deny_chats),
        allow_users=frozenset(settings.routing_allow_users),
        deny_users=frozenset(settings.routing_deny_users),
        overrides=dict(settings.routing_chat_overrides),
        queues={
            "p2p": settings.routing_queue_p2p,
            "group": settings.routing_queue_group,
            "topic": settings.routing_queue_topic,
            "item": settings.routing_queue_topic,  # an item's analysis belongs with its topic's work
            "digest": settings.routing_queue_group,  # a chat's digest: a group's wake-up
            "memory": settings.routing_queue_group,  # a memory scope's consolidation: housekeeping, like a digest
        },
    )
