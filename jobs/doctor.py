"""`python -m bot.doctor`: the configured app checked against every enabled feature, printed as a table.

Each row is a feature and what it needs (a scope, an event, a callback, the items table's fields), with a
verdict — present, missing or unknown — and how to fix it. Scopes are read from Feishu
(`GET /open-apis/application/v6/scopes`, the app's own tenant scopes and their grant status); the console's
event and callback subscriptions have no read API, so those rows say how to check them by hand. Exit status 1
when something the bot needs to reply is missing. The sweeper runs the same checks at start-up and stores the
summary that `/readyz` shows under `preflight`.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from typing import Any

import redis
from lark_oapi.api.application.v6 import ListScopeRequest

from core import boot
from core.errors import AdapterError
from core.keys import Keys
from core.settings import Settings, load_settings
from feishu.capabilities import CAPABILITIES
from feishu.client import FeishuApi
from timers import timer_settings
from triage import triage_settings
from turn.registry import App, load_app

PRESENT, MISSING, UNKNOWN = "present", "missing", "unknown"
CONSOLE = "开发者后台 / Developer Console"


@dataclass(frozen=True)
class Need:
    feature: str
    kind: str  # scope | event | callback | fields | config
    names: tuple[str, ...]  # any one is enough
    required: bool
    fix: str
    also: tuple[str, ...] = ()  # and one of these too (an API documented to need two grants)

    @property
    def shown(self) -> str:
        return " | ".join(self.names) + (" + " + " | ".join(self.also) if self.also else "")


def needs(settings: Settings) -> list[Need]:
    """Everything the enabled features need. Pure."""
    rows = [
        Need("reply in chats and topics", "scope", ("im:message:send_as_bot", "im:message", "im:message:send"), True,
             f"{CONSOLE} → 权限管理: grant im:message:send_as_bot, then publish a new version"),
        Need("receive private messages", "scope", ("im:message.p2p_msg:readonly", "im:message.p2p_msg"), True,
             "grant im:message.p2p_msg:readonly"),
        Need("receive @bot in groups", "scope", ("im:message.group_at_msg:readonly", "im:message.group_at_msg"),
             True, "grant im:message.group_at_msg:readonly"),
        Need("messages", "event", ("im.message.receive_v1",), True,
             f"{CONSOLE} → 事件与回调 → 事件配置: add im.message.receive_v1"),
        Need("recalled and edited messages", "event", ("im.message.recalled_v1", "im.message.updated_v1"), False,
             "add im.message.recalled_v1 and im.message.updated_v1 (event configuration)"),
    ]
    rows += [Need(cap.what, "scope", cap.scopes, False, _grant(cap.scopes, cap.also), cap.also)
             for cap in CAPABILITIES.values() if _enabled(cap.name, settings)]
    if settings.items_enabled:
        rows += [
            Need("items table", "scope", ("bitable:app", "base:record:retrieve"), True, "grant bitable:app"),
            Need("items table fields", "fields", ("BITABLE_FIELD_*",), True,
                 "rename the columns or set BITABLE_FIELD_* to the table's names"),
            Need("record events", "event", ("drive.file.bitable_record_changed_v1",), False,
                 "add drive.file.bitable_record_changed_v1; the base's owner or a manager must allow the subscription"),
            Need("approval buttons", "callback", ("card.action.trigger",), False,
                 f"{CONSOLE} → 事件与回调 → 回调配置 (callback configuration, not event configuration): "
                 "add card.action.trigger with the same request URL"),
        ]
    triage, timers = triage_settings(settings), timer_settings(settings)
    if triage.triage_chats:
        rows.append(Need("quiet triage (TRIAGE_CHATS)", "scope", ("im:message.group_msg",
                                                                  "im:message.group_msg:readonly"), True,
                         "grant im:message.group_msg (sensitive: every group message reaches the bot); without it "
                         "messages that do not @mention the bot never arrive and triage stays silent"))
    if (timers.digest_chats or triage.triage_chats) and not settings.items_enabled:
        rows.append(Need("digests and triage need items", "config", ("BITABLE_APP_TOKEN", "BITABLE_TABLE_ID"), True,
                         "set BITABLE_APP_TOKEN and BITABLE_TABLE_ID: digests list open items, triage watches item "
                         "topics"))
    return rows


def _grant(names: tuple[str, ...], also: tuple[str, ...]) -> str:
    both = f"grant {names[0]} and {also[0]}" if also else f"grant {names[0]}"
    return both + " (then publish a new version)"


def _enabled(capability: str, settings: Settings) -> bool:
    """Rows for capabilities whose feature is on: record events need items, streaming needs REPLY_STREAMING=card."""
    if capability == "record_events":
        return settings.items_enabled
    if capability == "streaming":
        return settings.reply_streaming == "card"
    return True


def granted_scopes(api: FeishuApi) -> set[str] | None:
    """The app's granted tenant scopes; None when Feishu would not say (then every scope row is unknown).
    The list also holds user-identity scopes (`scope_type` "user"): a grant the app's own calls cannot use."""
    try:
        resp = api._call(api.client.application.v6.scope.list, ListScopeRequest.builder().build())
    except AdapterError:
        return None
    body = json.loads(resp.raw.content) or {}
    scopes = (body.get("data") or {}).get("scopes") or []
    return {str(s.get("scope_name")) for s in scopes
            if isinstance(s, dict) and s.get("grant_status") == 1 and (s.get("scope_type") or "tenant") == "tenant"}


def verdict(need: Need, granted: set[str] | None, fields_error: str | None) -> str:
    """present / missing / unknown for one row. Pure."""
    if need.kind == "scope":
        if granted is None:
            return UNKNOWN
        also = not need.also or any(n in granted for n in need.also)
        return PRESENT if also and any(n in granted for n in need.names) else MISSING
    if need.kind == "fields":
        return UNKNOWN if fields_error is None else (PRESENT if fields_error == "" else MISSING)
    if need.kind == "config":  # listed only when the configuration lacks it
        return MISSING
    return UNKNOWN  # events and callbacks: no API reads the console's subscriptions


def check(settings: Settings, api: FeishuApi, fields_error: str | None = None,
          app: App | None = None) -> list[dict[str, Any]]:
    """Every row: what the enabled features need of Feishu, then each feature's own (`Feature.checks`: a webhook's
    secret and the URL to paste into another system)."""
    granted = granted_scopes(api)
    rows = [{"feature": n.feature, "kind": n.kind, "needs": n.shown, "required": n.required,
             "verdict": verdict(n, granted, fields_error), "fix": n.fix} for n in needs(settings)]
    own = app.checks(settings) if app is not None else []
    return rows + [{"feature": c.what, "kind": "config", "needs": c.needs, "required": c.required,
                    "verdict": c.verdict, "fix": c.fix} for c in own]


def fields_check(settings: Settings, r: redis.Redis, keys: Keys, api: FeishuApi) -> str | None:
    """"" when the items table has every configured field, the error otherwise; None without items."""
    if not settings.items_enabled:
        return None
    from bitable.client import Bitable  # only with items on

    try:
        Bitable(settings, r, keys, api.client).check_now()
    except Exception as exc:
        return str(exc)[:300] or exc.__class__.__name__
    return ""


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What /readyz shows: the missing rows (required ones first) and how many could not be checked; `rows`, every
    row with its verdict and fix, is for the console's overview (/readyz leaves it out). Pure."""
    missing = sorted((r for r in rows if r["verdict"] == MISSING), key=lambda r: not r["required"])
    return {"missing": [{"feature": r["feature"], "needs": r["needs"], "required": r["required"], "fix": r["fix"]}
                        for r in missing],
            "unknown": sum(1 for r in rows if r["verdict"] == UNKNOWN), "at": round(time.time(), 3),
            "rows": rows}


def table(rows: list[dict[str, Any]]) -> str:
    head = ("feature", "needs", "verdict", "how to fix")
    lines = [(r["feature"] + (" (required)" if r["required"] else ""), r["needs"], r["verdict"],
              "" if r["verdict"] == PRESENT else r["fix"]) for r in rows]
    widths = [max(len(str(x[i])) for x in [head, *lines]) for i in range(3)]
    out = []
    for row in [head, *lines]:
        out.append("  ".join(str(v).ljust(widths[i]) for i, v in enumerate(row[:3])) + "  " + row[3])
    return "\n".join(out)


def report(settings: Settings) -> tuple[str, int]:
    """The doctor's table and summary for `settings`, and its exit code (1 when a required row is missing)."""
    from state.store import resolve_url, state_client

    r = state_client(resolve_url(settings))
    keys = Keys(settings.bot_profile)
    api = FeishuApi(settings, r, keys)
    rows = check(settings, api, fields_check(settings, r, keys, api), load_app(settings))
    bad = [row for row in rows if row["required"] and row["verdict"] == MISSING]
    text = (f"{table(rows)}\n\n{len(bad)} required missing, "
            f"{sum(1 for x in rows if x['verdict'] == MISSING)} missing in all, "
            f"{sum(1 for x in rows if x['verdict'] == UNKNOWN)} to check by hand")
    return text, 1 if bad else 0


def main() -> int:
    text, code = report(load_settings())
    print(text)
    return code


if __name__ == "__main__":
    boot.started()  # the imports are done (core/boot.py)
    sys.exit(main())
