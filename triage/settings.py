"""Quiet triage's settings (README: Follow-ups, digests and quiet triage): the chats it listens in, its small model
(follow-up checks ask it too), and how often it may think and speak. Flat env names, as the contract has them."""

from __future__ import annotations

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from core.settings import CsvList, Settings, chat_ids_field, split_csv


class TriageSettings(BaseSettings):
    model_config = SettingsConfigDict(env_ignore_empty=True, extra="ignore", validate_default=True)
    triage_chats: CsvList = ()  # chats whose unaddressed topic messages may wake a quiet triage run
    triage_model: str | None = None  # the small model of triage runs (default: ANTHROPIC_MODEL)
    triage_quiet_seconds: float = Field(600.0, gt=0)  # one triage call per topic per quiet period
    triage_post_period_seconds: float = Field(86400.0, gt=0)  # at most one unasked message per topic per period
    triage_budget_tokens: int = Field(2000, ge=300)  # input tokens of one triage request

    _csv = field_validator("triage_chats", mode="before")(split_csv)
    _chats = field_validator("triage_chats")(chat_ids_field)


def triage_settings(settings: Settings) -> TriageSettings:
    return settings.feature(TriageSettings)
