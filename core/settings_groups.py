"""Settings grouped by concern, built from the contract's flat env names (core/settings.py keeps those: they are what
operators set). A room reads the group it needs — `settings.timers.digest_cron`, `settings.feishu_limits.chat_qps`
— instead of reaching across dozens of flat fields. Pure, frozen."""

from __future__ import annotations

from dataclasses import dataclass
from zoneinfo import ZoneInfo


@dataclass(frozen=True)
class FeishuLimits:
    """What Feishu allows and how long we wait for it (feishu.md §3): the outbox paces to these."""

    chat_qps: int  # FEISHU_CHAT_QPS: sends per chat per second (Feishu: 5, shared by the chat's bots)
    app_qps: int  # FEISHU_APP_QPS: calls per app per second (50)
    api_qpm: int  # FEISHU_API_QPM: calls per API per minute (1,000)
    timeout_seconds: float  # FEISHU_TIMEOUT_SECONDS
    reply_chunk_chars: int  # REPLY_CHUNK_CHARS: one reply message's text at most


@dataclass(frozen=True)
class FollowupCaps:
    """Bounds on pending follow-ups (FOLLOWUPS_*): per conversation, per person there, per person, in all."""

    per_route: int
    per_route_person: int
    per_person: int
    max_pending: int


@dataclass(frozen=True)
class TimerSettings:
    """Wake-ups nobody typed (README: Follow-ups, digests and quiet triage)."""

    timezone: str  # BOT_TIMEZONE
    check_seconds: float  # TIMER_CHECK_SECONDS
    followups: FollowupCaps
    digest_chats: tuple[str, ...]  # DIGEST_CHATS
    digest_cron: str  # DIGEST_CRON
    triage_chats: tuple[str, ...]  # TRIAGE_CHATS
    triage_model: str | None  # TRIAGE_MODEL (None: ANTHROPIC_MODEL)
    triage_quiet_seconds: float
    triage_post_period_seconds: float
    triage_budget_tokens: int
    closed_statuses: tuple[str, ...]  # ITEM_CLOSED_STATUSES: an item in one of these needs no reminder, no digest

    @property
    def tz(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)


@dataclass(frozen=True)
class MemorySettings:
    """Who the assistant is and what it keeps between sessions (README: Memory)."""

    persona: str | None  # ASSISTANT_PERSONA
    persona_file: str | None  # ASSISTANT_PERSONA_FILE
    team_notes_file: str | None  # TEAM_NOTES_FILE
    scope: str  # MEMORY_SCOPE: who shared the old save_note notes (still shown until migrated)
    admins: tuple[str, ...]  # MEMORY_ADMINS: may change any chat's shared memory
    budget_share: float  # MEMORY_BUDGET_SHARE: of the input budget, what loaded memory may take
    max_files: int  # MEMORY_MAX_FILES: per scope
    max_chars: int  # MEMORY_MAX_CHARS: per scope
    file_chars: int  # MEMORY_FILE_CHARS: per file
    dream_cron: str  # MEMORY_DREAM_CRON: when changed scopes are consolidated
    dream_model: str  # MEMORY_DREAM_MODEL


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
