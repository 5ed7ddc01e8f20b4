"""The items' settings (README: Items): how an item comes to be, how long an approval waits, how long a chat's
membership is trusted, which statuses mean closed. Flat env names, as the contract has them. (The table's columns
are the Bitable adapter's, `settings.item_columns`; ITEM_ADMINS is the service's: the console reads it too.)"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from core.settings import CsvList, Settings, split_csv


class ItemSettings(BaseSettings):
    model_config = SettingsConfigDict(env_ignore_empty=True, extra="ignore", validate_default=True)
    item_create_policy: Literal["topic_root", "command", "off"] = "topic_root"
    item_approval_hours: float = Field(24.0, gt=0)
    item_member_cache_seconds: float = Field(300.0, ge=0)  # chat membership checks for cross-chat references
    item_closed_statuses: CsvList = ("已关闭", "已完成", "已解决", "关闭", "完成", "Closed", "Done")

    _csv = field_validator("item_closed_statuses", mode="before")(split_csv)


def item_settings(settings: Settings) -> ItemSettings:
    return settings.feature(ItemSettings)
