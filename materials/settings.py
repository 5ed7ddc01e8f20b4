"""The materials' settings (README: Materials): how long a rendered document and a document's viewers are kept, and
how much of one document a turn shows inline. Flat env names, as the contract has them."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from core.settings import Settings


class MaterialsSettings(BaseSettings):
    model_config = SettingsConfigDict(env_ignore_empty=True, extra="ignore", validate_default=True)
    document_cache_seconds: float = Field(7 * 86400.0, gt=0)  # rendered text per (document, revision)
    document_acl_cache_seconds: float = Field(300.0, ge=0)  # who may view a document (link share, collaborators)
    document_inline_tokens: int = Field(3000, ge=200)  # one document inline at most; read_document reads on


def materials_settings(settings: Settings) -> MaterialsSettings:
    return settings.feature(MaterialsSettings)
