"""`python -m bot.doctor` (issue 14 B2): the configured app against every enabled feature, as a table with a
verdict and a fix per row; exit 1 when a scope needed to reply is missing. Run against the emulator, whose
`GET application/v6/scopes` follows its `deny_scopes` profile."""

from __future__ import annotations

import subprocess
import sys

from bot.doctor import MISSING, PRESENT, UNKNOWN, Need, needs, summary, verdict
from tests.harness import ROOT, settings_from, subprocess_env


def _doctor(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bot.doctor"], env=subprocess_env(env), cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_a_full_grant_passes_and_lists_what_only_the_console_shows(env, feishu) -> None:
    out = _doctor(env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "images and files in messages" in out.stdout and "present" in out.stdout
    assert "im.message.receive_v1" in out.stdout and "unknown" in out.stdout  # events: checked by hand
    assert "0 required missing" in out.stdout


def test_missing_scopes_are_named_with_their_fix_and_a_missing_reply_scope_fails(env, feishu) -> None:
    feishu.deny_scopes({"im:resource", "im:message:readonly", "im:message"})
    try:
        out = _doctor(env)
        assert out.returncode == 0, out.stdout + out.stderr  # optional: the bot still answers
        row = next(line for line in out.stdout.splitlines() if line.startswith("images and files"))
        assert "missing" in row and "grant im:resource" in row
        feishu.deny_scopes({"im:message:send_as_bot", "im:message"})
        out = _doctor(env)
        assert out.returncode == 1 and "1 required missing" in out.stdout
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
        out = _doctor(on)
        row = next(line for line in out.stdout.splitlines() if line.startswith("quiet triage"))
        assert "missing" in row and "grant im:message.group_msg" in row and out.returncode == 1
    finally:
        feishu.deny_scopes(())
