"""The service's settings, with the contract's flat env names, loaded once per process; grouped views by concern in
core/settings_groups.py (`settings.feishu_limits`, `settings.item_columns`). A feature's own settings are a model in
its room (`timers/settings.py`, flat env names too) that `Settings.feature` reads from the same sources."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import fields
from typing import Annotated, Any, Literal, TypeVar, cast
from zoneinfo import ZoneInfo

from pydantic import (
    BaseModel,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from core.settings_groups import FeishuLimits, ItemColumns

# Sandbox mode (FEISHU_APP_ID unset): fixed, obviously fake credentials shared by the service,
# the bundled emulators and `python -m sandbox say`. They protect nothing real.
SANDBOX_APP_ID = "cli_sandbox"
SANDBOX_SECRETS = {
    "feishu_app_secret": "sandbox-app-secret",
    "feishu_verification_token": "sandbox-verification-token",
    "feishu_encrypt_key": "sandbox-encrypt-key",
}
SANDBOX_API_KEY = "sk-sandbox"
SANDBOX_CONSOLE_ADMIN = "ou_sandbox_admin"  # who signs in to the console in sandbox mode (README: Operator console)

FeatureSettingsT = TypeVar("FeatureSettingsT", bound=BaseSettings)
CsvList = Annotated[tuple[str, ...], NoDecode]  # "a, b" in the environment; split by `split_csv`
Scope = Literal["per_sender", "shared"]


def split_csv(value: object) -> object:
    """A comma-separated env value as a tuple (a CsvList field's `mode="before"` validator)."""
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return value


def cron_field(value: str, info: ValidationInfo) -> str:
    """A cron expression, checked now: a bad one stops the process at start, naming its variable."""
    from core.cron import Cron

    Cron.parse(value, name=str(info.field_name).upper())  # a ValueError names the bad field
    return value


def chat_ids_field(value: tuple[str, ...]) -> tuple[str, ...]:
    bad = [v for v in value if not v.startswith("oc_")]
    if bad:
        raise ValueError(f"chat ids start with oc_: {', '.join(bad)}")
    return value


class ChatOverride(BaseModel):
    """Per-chat routing override (ROUTING_CHAT_OVERRIDES, a JSON object keyed by chat_id)."""

    model_config = {"extra": "forbid"}
    group_scope: Scope | None = None
    topic_scope: Scope | None = None
    require_mention: bool | None = None


class Settings(BaseSettings):
    """Every variable the code reads. `.env.example` documents each one."""

    model_config = SettingsConfigDict(
        env_file=None, env_ignore_empty=True, extra="ignore", validate_default=True  # dotenv: see load_settings
    )

    feishu_app_id: str | None = None
    feishu_app_secret: SecretStr | None = None
    feishu_verification_token: SecretStr | None = None
    feishu_encrypt_key: SecretStr | None = None
    feishu_domain: str = "https://open.feishu.cn"
    # How events arrive: webhook (POST /feishu/events) or websocket (the `ws` process's long connection)
    feishu_connection_mode: Literal["webhook", "websocket"] = "webhook"
    anthropic_api_key: SecretStr | None = None
    anthropic_base_url: str | None = None
    anthropic_model: str = "claude-sonnet-5-5"
    redis_url: str | None = None
    # Redis through Sentinel instead of REDIS_URL: "host:port,host:port" and the master's name (README: Sentinel)
    redis_sentinels: CsvList = ()
    redis_sentinel_master: str | None = None
    redis_password: SecretStr | None = None  # for a Sentinel-managed primary (REDIS_URL carries its own)
    bitable_app_token: str | None = None
    bitable_table_id: str | None = None
    bitable_field_title: str = "标题"
    bitable_field_description: str = "描述"
    bitable_field_reporter: str = "提出人"
    bitable_field_owner: str = "负责人"
    bitable_field_status: str = "状态"
    bitable_field_chat: str = "来源群"
    bitable_field_topic_link: str = "话题链接"
    bitable_field_item_id: str = "事项ID"
    bitable_field_answer_link: str = "首答链接"
    bitable_field_answer_status: str = "首答状态"
    bitable_field_answer_version: str = "首答版本"
    bitable_field_materials: str = "材料链接"  # optional column of material links (documents/)
    # Who may approve any record change, cancel anyone's follow-up, and (without CONSOLE_ADMINS) sign in to the
    # console; the rest of the items' settings are the items feature's (items/settings.py)
    item_admins: CsvList = ()  # open_ids
    feishu_web_origin: str = "https://feishu.cn"  # where record and topic links point (your tenant's origin)
    admin_token: SecretStr | None = None
    bot_profile: str = Field("default", pattern=r"^[A-Za-z0-9_-]{1,32}$")
    context_budget_tokens: int = Field(24000, ge=6000)  # the system prompt and tools alone take ~4,400 (estimate)

    # Routing policy (README: "Routing policy")
    routing_group_scope: Scope = "per_sender"
    routing_topic_scope: Scope = "shared"
    routing_require_mention: bool = True
    routing_bot_messages: Literal["ignore", "allow"] = "ignore"
    routing_allow_chats: CsvList = ()
    routing_deny_chats: CsvList = ()
    routing_allow_users: CsvList = ()
    routing_deny_users: CsvList = ()
    routing_chat_overrides: dict[str, ChatOverride] = {}
    routing_queue_p2p: str = Field("runs", pattern=r"^[A-Za-z0-9_-]+$")
    routing_queue_group: str = Field("runs", pattern=r"^[A-Za-z0-9_-]+$")
    routing_queue_topic: str = Field("runs", pattern=r"^[A-Za-z0-9_-]+$")

    # Runtime tuning
    app_factory: str = Field("app:build_app", pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")  # module:function → App
    port: int = Field(8000, ge=1, le=65535)
    var_dir: str = "var"
    max_body_bytes: int = Field(262144, ge=1024)
    signature_window_seconds: int = Field(300, ge=10)
    run_lease_seconds: float = Field(6.0, gt=0)  # renewed every third by the living run; a dead run's route is
    # taken over once it lapses (the sweeper's recovery pass looks every RECOVERY_CHECK_SECONDS)
    recovery_check_seconds: float = Field(1.0, gt=0, le=10)
    run_retry_delays: CsvList = ("2", "10", "30", "60", "120")
    dead_letter_after: int = Field(5, ge=1)
    run_budget_seconds: float = Field(600.0, gt=0)
    worker_concurrency: int | None = Field(None, ge=1, le=256)  # a fixed pool; else WORKER_MIN..WORKER_MAX
    worker_min: int | None = Field(None, ge=1, le=1024)  # default: see jobs/pool.py (sized from memory)
    worker_max: int | None = Field(None, ge=1, le=1024)
    worker_idle_seconds: float = Field(30.0, gt=0)  # an elastic worker idle this long exits (down to WORKER_MIN)
    sweep_interval_seconds: float = Field(15.0, gt=0, le=20)  # the sweep renews kick leases (45 s)
    pause_probe_seconds: float = Field(30.0, gt=0)
    admin_chat_id: str | None = None
    feishu_chat_qps: int = Field(5, ge=1)
    feishu_app_qps: int = Field(50, ge=1)
    feishu_api_qpm: int = Field(1000, ge=1)  # reply, create, PATCH, reactions: each API's calls per minute
    transcript_turns: int = Field(20, ge=0)  # only seeds a route's first session from the old transcript
    session_retention_days: float = Field(30.0, ge=0)  # ended sessions' logs; 0 = keep forever
    route_retention_days: float = Field(90.0, ge=0)  # an idle route's state and current log; 0 = keep forever
    assistant_persona: str | None = None  # who the assistant is, in a sentence or two (or a file:)
    assistant_persona_file: str | None = None
    team_notes_file: str | None = None  # standing team notes (markdown), part of the cached system prefix
    session_idle_hours_p2p: float = Field(0.0, ge=0)  # 0 = no idle boundary: sessions resume across days
    session_idle_hours_group: float = Field(0.0, ge=0)
    session_idle_hours_topic: float = Field(0.0, ge=0)
    max_output_tokens: int = Field(2048, ge=64)
    llm_timeout_seconds: float = Field(120.0, gt=0)
    feishu_timeout_seconds: float = Field(10.0, gt=0)
    reply_chunk_chars: int = Field(3500, ge=100, le=30000)
    reply_streaming: Literal["card", "off"] = "card"  # answers grow in a CardKit streaming card
    stream_update_seconds: float = Field(1.0, ge=0.2, le=2.0)  # how often a streaming card shows new text
    bot_timezone: str = "Asia/Shanghai"  # times people say ("后天上午十点") and schedules
    # The service clock's offset (`python -m sandbox clock +2d`) is honoured in sandbox mode; tests and staging
    # rigs against emulators may turn it on. Never in production: it moves every timer.
    clock_adjustable: bool = False
    sandbox_feishu_port: int = Field(9901, ge=1, le=65535)
    sandbox_model_port: int = Field(9902, ge=1, le=65535)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_format: Literal["text", "json"] | None = None  # None: text on a terminal, JSON otherwise (core/logs.py)
    # Operator console (README: "Operator console"): /console/, Feishu sign-in for these open_ids
    console_admins: CsvList = ()  # open_ids who may sign in with Feishu; empty = ITEM_ADMINS
    console_url: str | None = None  # the console's public origin (https://bot.example.com) for the OAuth redirect
    console_session_hours: float = Field(12.0, gt=0, le=24 * 30)  # a sign-in lasts this long
    # Reverse proxies in front of the web process that append to X-Forwarded-For: wrong ADMIN_TOKENs are counted
    # per client as the outermost of them reports it (0: per socket address; README: Operator console)
    console_trusted_proxies: int = Field(0, ge=0, le=10)

    _given: dict[str, Any] = PrivateAttr(default_factory=dict)  # what this was built from, besides the environment
    _features: dict[type, Any] = PrivateAttr(default_factory=dict)

    def __init__(self, **values: Any) -> None:
        super().__init__(**values)
        self._given = dict(values)

    def feature(self, model: type[FeatureSettingsT]) -> FeatureSettingsT:
        """A feature's own settings (a `BaseSettings` in its room, flat env names as the contract's), read from what
        these were read from — the same dotenv file and environment, and the same values given in code (a test's
        env) — once per Settings. A bad value exits(2) naming it, as `load_settings` does."""
        got = self._features.get(model)
        if got is None:
            got = self._features[model] = _or_exit(lambda: model(**self._given))
        return cast(FeatureSettingsT, got)

    @field_validator(
        "routing_allow_chats", "routing_deny_chats", "routing_allow_users", "routing_deny_users",
        "run_retry_delays", "item_admins", "redis_sentinels", "console_admins",
        mode="before",
    )
    @classmethod
    def _split_csv(cls, value: object) -> object:
        return split_csv(value)

    @field_validator("routing_chat_overrides", mode="before")
    @classmethod
    def _overrides_json(cls, value: object) -> object:
        """JSON text, as the environment holds it, also when the settings are built from strings directly."""
        if isinstance(value, str):
            try:
                return json.loads(value) if value.strip() else {}
            except ValueError:
                raise ValueError("must be a JSON object, e.g. {\"oc_x\":{\"group_scope\":\"shared\"}}") from None
        return value

    @field_validator("run_retry_delays")
    @classmethod
    def _delays_are_numbers(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value or not all(v.isdigit() for v in value):
            raise ValueError("must be a comma-separated list of whole seconds, e.g. 2,10,30")
        return value

    @field_validator(*[f"bitable_field_{n}" for n in (
        "title", "description", "reporter", "owner", "status", "chat", "topic_link", "item_id", "answer_link",
        "answer_status", "answer_version")])
    @classmethod
    def _field_name(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("a Bitable field name cannot be empty")
        return value  # exact: Bitable matches field names character for character

    @field_validator("bot_timezone")
    @classmethod
    def _known_timezone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown timezone {value!r}; use an IANA name such as Asia/Shanghai") from None
        return value

    @field_validator("feishu_domain", "anthropic_base_url", "feishu_web_origin")
    @classmethod
    def _bare_origin(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must be an origin such as https://open.feishu.cn")
        return value.rstrip("/") if value else value

    @field_validator(
        "feishu_app_secret", "feishu_verification_token", "feishu_encrypt_key", "anthropic_api_key"
    )
    @classmethod
    def _required_outside_sandbox(cls, value: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        app_id = info.data.get("feishu_app_id")
        if app_id and app_id != SANDBOX_APP_ID and not _has_secret(value):
            raise ValueError("required when FEISHU_APP_ID is set (outside sandbox mode)")
        return value

    @model_validator(mode="after")
    def _redis_target(self) -> Settings:
        """Sentinel settings come as a pair and replace REDIS_URL (README: Redis high availability)."""
        from core.sentinel_url import SentinelConfigError, is_sentinel_url, parse_url, target_of

        try:
            if self.redis_sentinels or self.redis_sentinel_master:
                if self.redis_url:
                    raise SentinelConfigError("set either REDIS_URL or REDIS_SENTINELS/REDIS_SENTINEL_MASTER")
                target_of(self.redis_sentinels, self.redis_sentinel_master)
            elif self.redis_url and is_sentinel_url(self.redis_url):
                parse_url(self.redis_url)
        except SentinelConfigError as exc:
            raise ValueError(str(exc)) from None
        return self

    @model_validator(mode="after")
    def _sandbox_defaults(self) -> Settings:
        if self.sandbox:
            self._fill_sandbox_defaults()
        return self

    def _fill_sandbox_defaults(self) -> None:
        self.feishu_app_id = None
        for name, value in SANDBOX_SECRETS.items():
            if getattr(self, name) is None:
                setattr(self, name, SecretStr(value))
        if "feishu_domain" not in self.model_fields_set:
            self.feishu_domain = f"http://127.0.0.1:{self.sandbox_feishu_port}"
        if self.anthropic_base_url is None:
            self.anthropic_base_url = f"http://127.0.0.1:{self.sandbox_model_port}"
        if self.anthropic_api_key is None:
            self.anthropic_api_key = SecretStr(SANDBOX_API_KEY)

    @property
    def sandbox(self) -> bool:
        return not self.feishu_app_id or self.feishu_app_id == SANDBOX_APP_ID

    @property
    def adjustable_clock(self) -> bool:
        return self.sandbox or self.clock_adjustable

    @property
    def console_operators(self) -> tuple[str, ...]:
        """Who may sign in to the console with Feishu: CONSOLE_ADMINS, else ITEM_ADMINS (contract); in sandbox mode
        with neither, the sandbox's own operator (the emulator's sign-in page offers it)."""
        if self.console_admins or self.item_admins:
            return self.console_admins or self.item_admins
        return (SANDBOX_CONSOLE_ADMIN,) if self.sandbox else ()

    @property
    def tz(self) -> ZoneInfo:
        return ZoneInfo(self.bot_timezone)

    @property
    def items_enabled(self) -> bool:
        return bool(self.bitable_app_token and self.bitable_table_id)

    @property
    def app_id(self) -> str:
        return self.feishu_app_id or SANDBOX_APP_ID

    @property
    def session_retention_s(self) -> int:
        return int(self.session_retention_days * 86400)

    @property
    def route_retention_s(self) -> int:
        return max(int(self.route_retention_days * 86400), 1) if self.route_retention_days else 0

    def session_idle_s(self, route_kind: str) -> float:
        """The idle boundary of a route kind in seconds; 0 = none."""
        hours = {"p2p": self.session_idle_hours_p2p, "group": self.session_idle_hours_group,
                 "topic": self.session_idle_hours_topic}.get(route_kind, 0.0)
        return hours * 3600

    def secret(self, name: str) -> str:
        """The plain value of a secret field; call only where the value is used, never to log."""
        value = getattr(self, name)
        return value.get_secret_value() if value is not None else ""

    @property
    def retry_delays(self) -> list[int]:
        return [int(v) for v in self.run_retry_delays]

    # -- groups (core/settings_groups.py): what each room reads -------------------------------------------------

    @property
    def feishu_limits(self) -> FeishuLimits:
        return FeishuLimits(self.feishu_chat_qps, self.feishu_app_qps, self.feishu_api_qpm,
                            self.feishu_timeout_seconds, self.reply_chunk_chars)

    @property
    def item_columns(self) -> ItemColumns:
        return ItemColumns(*(getattr(self, f"bitable_field_{f.name}") for f in fields(ItemColumns)))


def _has_secret(value: SecretStr | None) -> bool:
    return value is not None and bool(value.get_secret_value().strip())


def describe_errors(error: ValidationError) -> list[str]:
    """One line per bad field, naming the env variable, never echoing its value."""
    lines = []
    for item in error.errors(include_input=False, include_url=False):
        loc = "_".join(str(p) for p in item["loc"]).upper()
        where = f"{loc}: " if loc else ""
        lines.append(f"{where}{item['msg']}")
    return lines


def load_feature_settings(model: type[FeatureSettingsT]) -> FeatureSettingsT:
    """A feature's own settings (a `BaseSettings` of its room, flat env names as the contract's), read from the
    environment and the dotenv file as `load_settings` reads the service's; bad values exit(2) the same way."""
    return _or_exit(lambda: model(_env_file=os.environ.get("ENV_FILE") or ".env"))  # type: ignore[call-arg]


def _or_exit(build: Callable[[], FeatureSettingsT]) -> FeatureSettingsT:
    try:
        return build()
    except ValidationError as exc:
        print("Configuration error — fix these environment variables:", file=sys.stderr)
        for line in describe_errors(exc):
            print(f"  - {line}", file=sys.stderr)
        raise SystemExit(2) from None


def load_settings(**overrides: object) -> Settings:
    """Load from the environment and the dotenv file; on bad config print every problem and exit(2).

    The dotenv file is `ENV_FILE` (default `.env` in the working directory; a missing file is skipped),
    so tests and tools can point it away from a developer's real credentials. Real env vars win over it.
    """
    env_file = os.environ.get("ENV_FILE") or ".env"
    return _or_exit(lambda: Settings(_env_file=env_file, **overrides))  # type: ignore[arg-type,call-arg]
