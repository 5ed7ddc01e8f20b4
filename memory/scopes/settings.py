"""Long-term memory's settings (README: Memory): who may change shared scopes, how much of a request loaded memory
may take, how large a scope grows, when and with which model changed scopes are consolidated, and where the old
save_note notes were shared. Flat env names, as the contract has them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from core.settings import CsvList, Settings, cron_field, split_csv
from memory.scopes.store import Caps


class MemorySettings(BaseSettings):
    model_config = SettingsConfigDict(env_ignore_empty=True, extra="ignore", validate_default=True)
    memory_scope: Literal["profile", "chat", "user"] = "chat"  # where the old save_note notes were shared (read only)
    memory_admins: CsvList = ()  # open_ids who may change any chat's shared memory (besides the chat's owner)
    memory_budget_share: float = Field(0.15, gt=0, le=0.5)  # of the input budget, what loaded memory may take
    memory_max_files: int = Field(20, ge=1, le=500)  # files one scope holds
    memory_max_chars: int = Field(100_000, ge=1000)  # characters one scope holds, all files together
    memory_file_chars: int = Field(8000, ge=200)  # characters one memory file holds
    memory_dream_cron: str = "30 3 * * *"  # when changed scopes are consolidated (cron, BOT_TIMEZONE)
    memory_dream_model: str = "claude-haiku-4-5"  # the small model consolidations ask

    _csv = field_validator("memory_admins", mode="before")(split_csv)
    _cron = field_validator("memory_dream_cron")(cron_field)

    @property
    def caps(self) -> Caps:
        return Caps(files=self.memory_max_files, chars=self.memory_max_chars, file_chars=self.memory_file_chars)


def memory_settings(settings: Settings) -> MemorySettings:
    return settings.feature(MemorySettings)
