"""`python -m bot.doctor` (issue 14 B2): the configured app against every enabled feature, as a table with a
verdict and a fix per row; exit 1 when a scope needed to reply is missing. Run against the emulator, whose
`GET application/v6/scopes` follows its `deny_scopes` profile."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

from jobs.doctor import MISSING, PRESENT, UNKNOWN, Need, needs, report, summary, verdict
from tests.harness import ROOT, settings_from, subprocess_env


def _doctor(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`python -m bot.doctor` as an operator runs it (a process start: ~7 s of CPU, so only where the CLI is
    what the test is about)."""
    return subprocess.run([sys.executable, "-m", "bot.doctor"], env=subprocess_env(env), cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


@dataclass
class Report:
    stdout: str
    returncode: int


def _report(env: dict[str, str]) -> Report:
    """The doctor's report in this process (`bot.doctor.report`, what `main` prints), against the emulator."""
    text, code = report(settings_from(env))
    return Report(text + "\n", code)


def test_a_full_grant_passes_and_lists_what_only_the_console_shows(env, feishu) -> None:
    out = _doctor(env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "images and files in messages" in out.stdout and "present" in out.stdout
    assert "im.message.receive_v1" in out.stdout and "unknown" in out.stdout  # events: checked by hand
    assert "0 required missing" in out.stdout


def test_missing_scopes_are_named_with_their_fix_and_a_missing_reply_scope_fails(env, feishu) -> None:
    feishu.deny_scopes({"im:message.history:readonly", "im:message:readonly", "im:message"})
    try:
        out = _report(env)
        assert out.returncode == 0, out.stdout  # optional: the bot still answers
        row = next(line for line in out.stdout.splitlines() if line.startswith("images and files"))
        assert "missing" in row and "grant im:message:readonly" in row
        feishu.deny_scopes({"im:message:send_as_bot", "im:message", "im:message:send"})
        cli = _doctor(env)  # the exit code operators and scripts see
        assert cli.returncode == 1 and "1 required missing" in cli.stdout
    finally:
        feishu.deny_scopes(())


def test_verdicts_and_the_summary_readyz_shows() -> None:
    scope = Need("f", "scope", ("a", "b"), True, "grant a")
    assert [verdict(scope, g, None) for g in ({"b"}, {"c"}, None)] == [PRESENT, MISSING, UNKNOWN]
    assert verdict(Need("e", "event", ("x",), True, ""), {"x"}, None) == UNKNOWN
    rows = [{"feature": "x", "needs": "a", "required": False, "verdict": MISSING, "fix": "f1"},
            {"feature": "y", "needs": "b", "required": True, "verdict": MISSING, "fix": "f2"},
            {"feature": "z", "needs": "c", "required": True, "verdict": UNKNOWN, "fix": "f3"}]
    found = summary(rows)
    assert [m["feature"] for m in found["missing"]] == ["y", "x"] and found["unknown"] == 1


def test_items_add_their_scope_fields_event_and_callback(env) -> None:
    plain = settings_from(env)
    items = settings_from({**env, "BITABLE_APP_TOKEN": "bascnX", "BITABLE_TABLE_ID": "tblX"})
    extra = {n.names for n in needs(items)} - {n.names for n in needs(plain)}
    assert ("card.action.trigger",) in extra and ("drive.file.bitable_record_changed_v1",) in extra
    assert next(n for n in needs(items) if n.kind == "callback").fix.count("回调配置") == 1


def test_triage_needs_the_group_message_scope_and_digests_need_items(env, feishu) -> None:
    """Issue 17: without im:message.group_msg, messages that do not @mention the bot never arrive."""
    on = {**env, "TRIAGE_CHATS": "oc_triage", "DIGEST_CHATS": "oc_digest"}
    names = {n.feature: n for n in needs(settings_from(on))}
    assert "im:message.group_msg" in names["quiet triage (TRIAGE_CHATS)"].names
    assert verdict(names["digests and triage need items"], set(), None) == MISSING
    assert "digests and triage need items" not in {n.feature for n in needs(settings_from(
        {**on, "BITABLE_APP_TOKEN": "bascnX", "BITABLE_TABLE_ID": "tblX"}))}
    assert "quiet triage (TRIAGE_CHATS)" not in {n.feature for n in needs(settings_from(env))}
    feishu.deny_scopes({"im:message.group_msg", "im:message.group_msg:readonly"})
    try:
        out = _report(on)
        row = next(line for line in out.stdout.splitlines() if line.startswith("quiet triage"))
        assert "missing" in row and "grant im:message.group_msg" in row and out.returncode == 1
    finally:
        feishu.deny_scopes(())


def _row(out: Report, feature: str) -> str:
    return next(line for line in out.stdout.splitlines() if line.startswith(feature))


def test_scope_rows_follow_the_documented_lists(env, feishu) -> None:
    """Issue 23 B10: message resources take a message-read scope (not im:resource alone); a reply may also use
    im:message:send; a topic's history needs a read scope AND im:message.group_msg; the app's scopes are its
    tenant grants only (the list also shows users' grants)."""
    rows = {n.feature: n for n in needs(settings_from(env))}
    assert "im:resource" not in rows["images and files in messages"].names
    assert "im:message:send" in rows["reply in chats and topics"].names
    history = next(n for f, n in rows.items() if f.startswith("topic history"))
    assert history.also == ("im:message.group_msg",) and verdict(history, {"im:message:readonly"}, None) == MISSING
    assert verdict(history, {"im:message:readonly", "im:message.group_msg"}, None) == PRESENT
    feishu.deny_scopes({"im:message.group_msg"})
    try:
        out = _report(env)
        assert "missing" in _row(out, "topic history") and "im:message.group_msg" in _row(out, "topic history")
        assert "present" in _row(out, "images and files")
        feishu.deny_scopes({"docx:document:readonly", "docx:document"})  # users may still hold them: not the app
        assert "missing" in _row(_report(env), "reading linked docx")
    finally:
        feishu.deny_scopes(())


def test_the_three_permission_facts_have_a_row_each(env, feishu) -> None:
    """Issue 23 B1: link share, collaborators and the owner (drive metas) are three APIs with their own scopes."""
    facts = {"link-share check": "docs:permission.setting:read",
             "collaborator check": "docs:permission.member:retrieve",
             "names of linked drive files": "drive:drive.metadata:readonly"}
    rows = {n.feature: n for n in needs(settings_from(env))}
    for feature, scope in facts.items():
        assert scope in next(n for f, n in rows.items() if f.startswith(feature)).names
    assert "drive:drive:readonly" not in next(n for f, n in rows.items() if f.startswith("collaborator")).names
    feishu.deny_scopes({"docs:permission.member:retrieve", "docs:doc", "drive:drive", "sheets:spreadsheet",
                        "wiki:wiki", "bitable:app", "bitable:bitable"})
    try:
        out = _report(env)
        assert "missing" in _row(out, "collaborator check") and "present" in _row(out, "link-share check")
        assert "present" in _row(out, "names of linked drive files")
    finally:
        feishu.deny_scopes(())


def test_the_webhook_secrets_and_the_urls_to_paste_have_rows(env, feishu, monkeypatch) -> None:
    """Issue 33: the doctor names each code-platform webhook's secret, the URL to paste and the events to tick; an
    endpoint without its secret is off (not missing: it is optional); secrets set without items are a missing row."""
    monkeypatch.delenv("GITLAB_WEBHOOK_TOKEN", raising=False)
    out = _report({**env, "BITABLE_APP_TOKEN": "", "BITABLE_TABLE_ID": "", "GITHUB_WEBHOOK_SECRET": "s3cr3t-gh",
                   "CODEHOST_PUBLIC_URL": "https://bot.example.com"})  # the feature reads them where the service did
    github, gitlab = _row(out, "GitHub webhooks"), _row(out, "GitLab webhooks")
    assert "https://bot.example.com/hooks/github" in github and "present" in github
    assert "https://bot.example.com/hooks/gitlab" in gitlab and "off" in gitlab and "Pipeline events" in gitlab
    assert "missing" in _row(out, "webhooks need items")
    assert "s3cr3t-gh" not in out.stdout and out.returncode == 0  # optional rows never fail it
