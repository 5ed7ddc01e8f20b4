"""The timers' settings (README: Follow-ups, digests and quiet triage): how often due timers are looked for, the
bounds on pending follow-ups, and the digest's chats and schedule. Flat env names, as the contract has them."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from core.settings import CsvList, Settings, chat_ids_field, cron_field, split_csv


@dataclass(frozen=True)
class FollowupCaps:
    """Bounds on pending follow-ups (FOLLOWUPS_*): per conversation, per person there, per person, in all."""

    per_route: int
    per_route_person: int
    per_person: int
    max_pending: int


class TimerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_ignore_empty=True, extra="ignore", validate_default=True)
    timer_check_seconds: float = Field(0.5, gt=0, le=5)  # how often the sweeper looks for due timers
    followups_per_route: int = Field(50, ge=1)  # pending follow-ups one route may hold
    followups_per_route_person: int = Field(10, ge=1)  # ... of them one person's (nobody fills a shared topic)
    followups_per_person: int = Field(50, ge=1)  # pending follow-ups one person may hold across every route
    followups_max_pending: int = Field(100_000, ge=1)  # pending timers of the whole deployment (/readyz shows it)
    digest_chats: CsvList = ()  # chats (oc_…) that get a digest of their open items
    digest_cron: str = "30 9 * * 1-5"  # when, in BOT_TIMEZONE
    # TRIAGE_MODEL: a follow-up's check of its item asks the small model quiet triage uses (triage/settings.py reads
    # it too; triage needs timers, so timers does not import triage)
    triage_model: str | None = None

    _csv = field_validator("digest_chats", mode="before")(split_csv)
    _chats = field_validator("digest_chats")(chat_ids_field)
    _cron = field_validator("digest_cron")(cron_field)

    @property
    def followups(self) -> FollowupCaps:
        return FollowupCaps(self.followups_per_route, self.followups_per_route_person, self.followups_per_person,
                            self.followups_max_pending)


def timer_settings(settings: Settings) -> TimerSettings:
    return settings.feature(TimerSettings)
