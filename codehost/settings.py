"""The feature's settings: the two webhook secrets, the links column and its bounds (flat env names, .env.example)."""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from core.settings import CsvList, Settings


class CodehostSettings(BaseSettings):
    """GITHUB_WEBHOOK_SECRET / GITLAB_WEBHOOK_TOKEN: unset = that endpoint is off (404). The rest bound what is
    kept and how often a topic hears of it."""

    model_config = SettingsConfigDict(env_ignore_empty=True, extra="ignore")
    github_webhook_secret: SecretStr | None = None
    gitlab_webhook_token: SecretStr | None = None
    bitable_field_links: str = "关联链接"  # optional column of watched links (pull/merge requests, issues, CI runs)
    bitable_field_ci: str = "CI状态"  # optional column the last CI state is written to (a table without it works)
    codehost_github_hosts: CsvList = ("github.com",)  # hosts whose links are GitHub's (GitHub Enterprise: add it)
    codehost_repos: CsvList = ()  # repositories (owner/name, group/project) whose deliveries count; empty = any
    codehost_max_body_bytes: int = Field(2 * 1024 * 1024, ge=4096, le=26_214_400)  # GitHub caps payloads at 25 MB
    codehost_watches_per_item: int = Field(20, ge=1, le=200)
    codehost_watches_max: int = Field(5000, ge=10, le=1_000_000)
    codehost_watch_days: float = Field(90.0, gt=0, le=3650)  # a watch nobody names again ends after this
    codehost_keep_after_close_days: float = Field(3.0, ge=0, le=365)  # watches outlive their item's closing so long
    codehost_gather_seconds: float = Field(2.0, ge=0, le=60)  # events arriving together share one card
    codehost_card_interval_seconds: float = Field(60.0, ge=1, le=3600)  # at most one card per topic per this
    codehost_public_url: str | None = None  # the service's public origin, for the URLs the doctor says to paste

    def secret(self, name: str) -> str:
        value = getattr(self, name)
        return value.get_secret_value() if value is not None else ""


def settings(core: Settings) -> CodehostSettings:
    """The feature's settings, read from where the service's came from (build_app reads them first: a bad value
    stops the process at start)."""
    return core.feature(CodehostSettings)
