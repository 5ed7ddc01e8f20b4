"""What operators see of the feature: the doctor's rows (the secrets, the URLs to paste into GitHub and GitLab, the
events to tick) and the console's tables (recent deliveries with their outcome; each item's watches)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from codehost import deliveries
from codehost.fanout import threads_of, watches_of
from codehost.follow import SOURCE_ZH
from codehost.links import SHOWN
from codehost.settings import settings
from core.settings import Settings
from runs.runtime import Runtime
from turn.registry import Check, Panel

GITHUB_EVENTS = ("Check runs", "Check suites", "Workflow runs", "Pull requests", "Pull request reviews",
                 "Pull request review comments", "Issue comments", "Issues")
GITLAB_EVENTS = ("Pipeline events", "Merge request events", "Comments", "Issues events")


def base_url(core: Settings) -> str:
    origin = settings(core).codehost_public_url or core.console_url or "https://<this service's public origin>"
    return origin.rstrip("/")


def checks(core: Settings) -> Sequence[Check]:
    s, url = settings(core), base_url(core)
    github, gitlab = bool(s.secret("github_webhook_secret")), bool(s.secret("gitlab_webhook_token"))
    rows = [
        Check("GitHub webhooks into item topics", f"GITHUB_WEBHOOK_SECRET; Payload URL {url}/hooks/github",
              "present" if github else "off",
              "GitHub → repository (or organization) Settings → Webhooks → Add webhook: Payload URL "
              f"{url}/hooks/github, Content type application/json, Secret = GITHUB_WEBHOOK_SECRET, SSL verification "
              f"on, \"Let me select individual events\": {', '.join(GITHUB_EVENTS)}"),
        Check("GitLab webhooks into item topics", f"GITLAB_WEBHOOK_TOKEN; URL {url}/hooks/gitlab",
              "present" if gitlab else "off",
              f"GitLab → project (or group) Settings → Webhooks → Add new webhook: URL {url}/hooks/gitlab, Secret "
              f"token = GITLAB_WEBHOOK_TOKEN, SSL verification on, triggers: {', '.join(GITLAB_EVENTS)}"),
    ]
    if (github or gitlab) and not core.items_enabled:
        rows.append(Check("webhooks need items to watch", "BITABLE_APP_TOKEN, BITABLE_TABLE_ID", "missing",
                          "set BITABLE_APP_TOKEN and BITABLE_TABLE_ID: only an item's topic watches links; without "
                          "items every delivery is stored and told to nobody"))
    return rows


def _when(rt: Runtime, ts: float) -> str:
    return datetime.fromtimestamp(ts, rt.settings.tz).strftime("%Y-%m-%d %H:%M:%S") if ts else ""


def delivery_rows(rt: Runtime, _item_id: str) -> Sequence[Mapping[str, Any]]:
    return [{"时间": _when(rt, float(e.get("at") or 0)), "来源": e.get("provider", ""), "事件": e.get("event", ""),
             "投递 ID": e.get("delivery", ""), "仓库": e.get("repo", ""), "结果": e.get("outcome", ""),
             "原因": e.get("reason", "")} for e in deliveries.recent(rt.state, rt.keys)]


def watch_rows(rt: Runtime, item_id: str) -> Sequence[Mapping[str, Any]]:
    known = threads_of(rt)
    rows = []
    for w in watches_of(rt).of_item(item_id):
        ci = known.ci_states(w.thread)
        rows.append({"关注": f"{SHOWN[w.thread.kind]} {w.thread.shown}", "平台": w.thread.provider,
                     "来源": SOURCE_ZH.get(w.source, w.source), "添加人": w.added_by or "—",
                     "添加时间": _when(rt, w.added_at), "到期": _when(rt, w.expires_at),
                     "CI": ", ".join(f"{n}: {s}" for n, s in sorted(ci.items())[:6]) or "—"})
    return rows


PANELS = (Panel("deliveries", "代码平台 webhook 投递（最近）", delivery_rows),
          Panel("watches", "代码平台关注", watch_rows, of_item=True))
