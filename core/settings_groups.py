"""The service's settings grouped by concern, built from the contract's flat env names (core/settings.py keeps those:
they are what operators set). A room reads the group it needs — `settings.feishu_limits.chat_qps` — instead of
reaching across dozens of flat fields. Pure, frozen. (A feature's settings are its own: `Settings.feature`.)"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FeishuLimits:
    """What Feishu allows and how long we wait for it (feishu.md §3): the outbox paces to these."""

    chat_qps: int  # FEISHU_CHAT_QPS: sends per chat per second (Feishu: 5, shared by the chat's bots)
    app_qps: int  # FEISHU_APP_QPS: calls per app per second (50)
    api_qpm: int  # FEISHU_API_QPM: calls per API per minute (1,000)
    timeout_seconds: float  # FEISHU_TIMEOUT_SECONDS
    reply_chunk_chars: int  # REPLY_CHUNK_CHARS: one reply message's text at most


@dataclass(frozen=True)
class ItemColumns:
    """The items table's column names (BITABLE_FIELD_*), by what each column means."""

    title: str
    description: str
    reporter: str
    owner: str
    status: str
    chat: str
    topic_link: str
    item_id: str
    answer_link: str
    answer_status: str
    answer_version: str
    materials: str
