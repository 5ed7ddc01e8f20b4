"""Start-up refuses bad config outside sandbox mode, naming every bad variable, never a secret (acceptance 10)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.harness import ROOT, free_port, subprocess_env, unique

SECRET = "very-secret-value-123"
BAD = {
    "FEISHU_APP_ID": "cli_real", "FEISHU_APP_SECRET": SECRET, "ANTHROPIC_API_KEY": SECRET,
    "FEISHU_VERIFICATION_TOKEN": SECRET, "CONTEXT_BUDGET_TOKENS": "lots", "ROUTING_GROUP_SCOPE": "everyone",
}


def start(args: list[str], env: dict[str, str], tmp_path, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(args, env=subprocess_env({"VAR_DIR": str(tmp_path / "var"), **env}), cwd=tmp_path,
                          capture_output=True, text=True, timeout=timeout)


ENTRY_POINTS = {
    "web (gunicorn)": lambda port: [sys.executable, "-m",
                                    "gunicorn", "app:app", "-c", str(ROOT / "gunicorn.conf.py"),
                                    "--chdir", str(ROOT), "--bind", f"127.0.0.1:{port}"],
    "worker": lambda port: [sys.executable, "-m", "jobs.worker"],
    "sweeper": lambda port: [sys.executable, "-m", "jobs.sweeper"],
}


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_bad_config_stops_start_up_naming_each_variable(entry: str, tmp_path) -> None:
    result = start(ENTRY_POINTS[entry](free_port()), BAD, tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    for name in ("FEISHU_ENCRYPT_KEY", "CONTEXT_BUDGET_TOKENS", "ROUTING_GROUP_SCOPE"):
        assert name in output
    for fine in ("FEISHU_APP_SECRET", "FEISHU_VERIFICATION_TOKEN", "ANTHROPIC_API_KEY"):
        assert f"{fine}:" not in output
    assert SECRET not in output


@pytest.mark.parametrize("missing", ["FEISHU_APP_SECRET", "FEISHU_ENCRYPT_KEY", "FEISHU_VERIFICATION_TOKEN",
                                     "ANTHROPIC_API_KEY"])
def test_each_required_secret_is_named_when_missing(missing: str, tmp_path) -> None:
    env = {"FEISHU_APP_ID": "cli_real", "FEISHU_APP_SECRET": "a", "FEISHU_ENCRYPT_KEY": "b",
           "FEISHU_VERIFICATION_TOKEN": "c", "ANTHROPIC_API_KEY": "d", "REDIS_URL": "redis://127.0.0.1:1"}
    env[missing] = ""  # an empty value counts as missing
    result = start([sys.executable, "-c", "from core.settings import load_settings; load_settings()"], env, tmp_path)
    assert result.returncode == 2
    assert missing in result.stderr


def test_sandbox_mode_needs_no_secrets(tmp_path) -> None:
    code = "from core.settings import load_settings; s = load_settings(); print(s.sandbox, s.feishu_domain)"
    result = start([sys.executable, "-c", code], {"BOT_PROFILE": unique("sb")}, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "http://127.0.0.1:9901"]


BOGUS_DOTENV = (  # valid values, so a process that reads the file starts fine and shows what it read
    "FEISHU_APP_ID=cli_from_dotenv\nFEISHU_APP_SECRET=dotenv-secret\nFEISHU_VERIFICATION_TOKEN=dotenv-token\n"
    "FEISHU_ENCRYPT_KEY=dotenv-key\nANTHROPIC_API_KEY=dotenv-key\nFEISHU_DOMAIN=http://127.0.0.1:1\n"
    "BOT_PROFILE=from_dotenv\n"
)
SHOW = "from core.settings import load_settings; s = load_settings(); print(s.bot_profile, s.sandbox, s.feishu_domain)"


def test_a_dotenv_file_is_read_only_from_env_file(tmp_path) -> None:
    """ENV_FILE picks the dotenv file; the tests' processes point it away from any `.env` in their cwd."""
    (tmp_path / ".env").write_text(BOGUS_DOTENV)
    guarded = start([sys.executable, "-c", SHOW], {}, tmp_path)  # subprocess_env: ENV_FILE=/dev/null
    assert guarded.returncode == 0, guarded.stderr
    assert guarded.stdout.split() == ["default", "True", "http://127.0.0.1:9901"]

    missing = start([sys.executable, "-c", SHOW], {"ENV_FILE": str(tmp_path / "absent.env")}, tmp_path)
    assert missing.stdout.split() == ["default", "True", "http://127.0.0.1:9901"], missing.stderr

    # Controls: the same file is read when ENV_FILE names it, and by default (`.env` in the cwd).
    named_dir = tmp_path / "elsewhere"
    named_dir.mkdir()
    named = start([sys.executable, "-c", SHOW], {"ENV_FILE": str(tmp_path / ".env")}, named_dir)
    assert named.stdout.split() == ["from_dotenv", "False", "http://127.0.0.1:1"], named.stderr
    default_env = subprocess_env({"VAR_DIR": str(tmp_path / "var")})
    del default_env["ENV_FILE"]
    default = subprocess.run([sys.executable, "-c", SHOW], env=default_env, cwd=tmp_path, capture_output=True,
                             text=True, timeout=60)
    assert default.stdout.split() == ["from_dotenv", "False", "http://127.0.0.1:1"], default.stderr


def test_env_example_lists_every_variable_the_code_reads() -> None:
    import re

    from app import build_app
    from core.settings import Settings

    listed = set(re.findall(r"^([A-Z][A-Z0-9_]+)=", (ROOT / ".env.example").read_text(), re.MULTILINE))
    read = {name.upper() for name in Settings.model_fields} | {"WEB_CONCURRENCY", "WEB_THREADS", "ENV_FILE"}
    read |= {name.upper() for f in build_app().features if f.settings for name in f.settings.model_fields}
    assert read - listed == set()
    assert listed - read == set()  # nothing documented that the code ignores


def test_a_budget_too_small_for_a_request_is_a_start_up_error_naming_the_minimum(tmp_path) -> None:
    """Issue 14 A13: CONTEXT_BUDGET_TOKENS is the input budget; below 6,000 the system prompt and tools (~4,400
    tokens by the local estimate since issue 34 gave the model its glossary, guidance and full tool descriptions)
    leave no room for a conversation, so the service refuses to start and says the minimum."""
    env = {"BOT_PROFILE": unique("budget"), "CONTEXT_BUDGET_TOKENS": "5000"}
    result = start([sys.executable, "-c", "from core.settings import load_settings; load_settings()"], env, tmp_path)
    assert result.returncode == 2
    assert "CONTEXT_BUDGET_TOKENS" in result.stderr and "6000" in result.stderr


FEATURE_BAD = {"DIGEST_CRON": "every morning", "TRIAGE_CHATS": "ops-group", "MEMORY_BUDGET_SHARE": "0.9",
               "ITEM_CREATE_POLICY": "sometimes", "DOCUMENT_INLINE_TOKENS": "5"}


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_a_features_bad_setting_stops_start_up_naming_it(entry: str, tmp_path) -> None:
    """Timers, triage, memory, items and materials read their own settings (their rooms' models, the contract's flat
    names): each process reads them as it starts, and a bad one stops it as the service's own do."""
    result = start(ENTRY_POINTS[entry](free_port()), {"BOT_PROFILE": unique("fb"), **FEATURE_BAD}, tmp_path,
                   timeout=60)  # a web whose workers crash-loop on it never exits: TimeoutExpired
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "Configuration error" in output
    named = [name for name in FEATURE_BAD if name in output]
    assert named, output[-2000:]  # the first feature read names each of its own bad variables
    assert not (tmp_path / "var" / "redis.sock").exists()  # read before anything started (no embedded Redis left)


def test_a_features_settings_come_from_where_the_services_came_from(tmp_path, monkeypatch) -> None:
    """`Settings.feature`: the values given in code (a test's env) first, then the environment, then the dotenv file
    the service's settings read — and one model per Settings."""
    from core.settings import Settings
    from items import ItemSettings
    from timers import TimerSettings, timer_settings
    from triage import triage_settings

    dotenv = tmp_path / "service.env"
    dotenv.write_text("TRIAGE_QUIET_SECONDS=42\nFOLLOWUPS_PER_ROUTE=7\nDIGEST_CHATS=oc_from_file\n")
    monkeypatch.setenv("FOLLOWUPS_PER_ROUTE", "9")
    s = Settings(_env_file=str(dotenv), digest_chats="oc_given, oc_too")  # type: ignore[call-arg]
    t = timer_settings(s)
    assert t.digest_chats == ("oc_given", "oc_too")  # given in code
    assert t.followups_per_route == 9  # the environment over the file
    assert triage_settings(s).triage_quiet_seconds == 42  # the file
    assert s.feature(TimerSettings) is t and s.feature(ItemSettings).item_create_policy == "topic_root"
    other = Settings(_env_file=None)  # type: ignore[call-arg]
    assert timer_settings(other).digest_chats == () and triage_settings(other).triage_quiet_seconds == 600
