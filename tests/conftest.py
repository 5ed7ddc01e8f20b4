"""Shared fixtures: one embedded Redis, the emulators, the web app and real worker processes per session."""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from core import boot
from tests.netguard import sitecustomize as netguard

if TYPE_CHECKING:
    import redis

    from core.keys import Keys
    from sandbox.claude.standin import ClaudeStandin
    from sandbox.feishu.emulator import FeishuEmulator
    from tests.harness import WebServer

# No test may reach the network: this process gets the guard here, every process a test starts gets it
# from tests/netguard/sitecustomize.py (harness.subprocess_env). And no process reads a dotenv file:
# in-process load_settings() calls see ENV_FILE too, so a developer's .env in the repo root is never used.
netguard.install()
os.environ["ENV_FILE"] = os.devnull  # harness.NO_ENV_FILE

# Written into the service processes' working directory: if ENV_FILE were not honoured, every worker
# and sweeper would read it and stop at start-up with a configuration error naming these variables.
POISONED_DOTENV = "CONTEXT_BUDGET_TOKENS=read-from-a-dotenv-file\nTRANSCRIPT_TURNS=read-from-a-dotenv-file\n"

# The longest modules first (measured with --durations, 2 cores): pytest-xdist's loadfile hands files out in
# collection order, so the longest ones start at once and the short ones fill the gaps, instead of one long
# module starting last and running alone at the end. The short fault suite (test_chaos.py, a stack of its own,
# mostly waiting on it) is the longest and starts first.
# The two whose checks count runs side by side (the pool must grow meanwhile) start once the first wave is done.
LONGEST_FIRST = ("test_chaos.py", "test_recovery.py", "test_always_on.py", "test_crash.py", "test_seams.py",
                 "test_streaming_limits.py", "test_elastic.py", "test_eval.py", "test_streaming.py",
                 "test_failures.py", "test_followups.py", "test_sentinel.py", "test_rotation.py", "test_items.py",
                 "test_codehost.py", "test_memories.py", "test_documents_grants.py", "test_config.py",
                 "test_run_e2e.py", "test_progress.py", "test_longconn.py", "test_doctor.py",
                 "test_console_browser.py", "test_items_attack.py", "test_recall.py", "test_share.py",
                 "test_model_view.py", "test_isolation.py", "test_console.py", "test_sandbox_cli.py",
                 "test_pacing.py", "test_documents.py", "test_fast_recovery.py", "test_documents_items.py",
                 "test_sessions.py", "test_card_limits.py", "test_pipeline.py", "test_layout.py")


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist 3 re-sorts loadfile's files by their number of tests unless told not to: the one-test modules
    # (the end-to-end run, the elastic pool, 30 streams at once) would start last and run alone at the end.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    # A process that runs tests imports every feature module before collection, as each service process does. An
    # xdist controller runs none: it skips the service's imports (lark-oapi, anthropic: seconds of CPU that would
    # come before its workers start).
    if hasattr(config, "workerinput") or getattr(config.option, "dist", "no") == "no" or config.option.collectonly:
        gc.disable()  # until collection is done: imports create only objects that live on (core/boot.py)
        import app  # noqa: F401  (the product's feature modules: imported, nothing registered)
        from tests import harness  # noqa: F401


def pytest_collection_finish(session: pytest.Session) -> None:
    import hypothesis  # noqa: F401  (before the freeze: its plugin hooks look for referrers, which skip frozen objects)

    boot.started()  # the imported modules stay out of every later collection's walk


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: n for n, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file keeps its own order


@pytest.fixture(scope="session")
def workdir() -> Iterator[Path]:
    # Short path: unix socket paths are limited to ~107 bytes.
    path = Path(tempfile.mkdtemp(prefix="fb-"))
    (path / ".env").write_text(POISONED_DOTENV)
    yield path
    if os.environ.get("KEEP_WORKDIR"):  # service logs of a failed run: KEEP_WORKDIR=1 make test
        print(f"\nworkdir kept: {path}")
    else:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_url(workdir: Path) -> Iterator[str]:
    from state.embedded import ensure_server, stop_server

    url = ensure_server(str(workdir / "var"))
    yield url
    stop_server(str(workdir / "var"))


@pytest.fixture(scope="session")
def r(redis_url: str) -> redis.Redis:
    import redis

    return redis.Redis.from_url(redis_url, decode_responses=True)


@pytest.fixture(scope="session")
def feishu() -> Iterator[FeishuEmulator]:
    from sandbox.feishu.emulator import FeishuEmulator
    from tests.harness import APP_ID, APP_SECRET, BOT_OPEN_ID

    emu = FeishuEmulator(app_id=APP_ID, app_secret=APP_SECRET, bot_open_id=BOT_OPEN_ID).start()
    yield emu
    emu.stop()


@pytest.fixture(scope="session")
def claude() -> Iterator[ClaudeStandin]:
    from sandbox.claude.standin import ClaudeStandin

    standin = ClaudeStandin().start()
    yield standin
    standin.stop()


@pytest.fixture(scope="session")
def env(redis_url: str, feishu: FeishuEmulator, claude: ClaudeStandin) -> dict[str, str]:
    from datetime import UTC, datetime

    from tests.harness import dream_cron_far_from, service_env

    return service_env(redis_url, feishu.url, claude.url, MEMORY_DREAM_CRON=dream_cron_far_from(datetime.now(UTC)))


@pytest.fixture(scope="session")
def keys() -> Keys:
    from core.keys import Keys

    return Keys("test")


@pytest.fixture(scope="session")
def service(env: dict[str, str], workdir: Path, r: redis.Redis, keys: Keys) -> Iterator[WebServer]:
    """Web app + two workers + the sweeper, all real, all on the session's Redis."""
    import redis

    from tests.harness import BOT_OPEN_ID, Proc, WebServer, settings_from, stop_all, wait_for, worker_count

    procs = [
        Proc(["-m", "jobs.worker", "--name", f"w{i}"], env, str(workdir), workdir / f"worker{i}.log")
        for i in range(2)
    ]
    procs.append(Proc(["-m", "jobs.sweeper"], env, str(workdir), workdir / "sweeper.log"))
    web = WebServer(settings_from(env))
    rq = redis.Redis.from_url(env["REDIS_URL"])
    wait_for(lambda: all(p.alive() for p in procs) and worker_count(rq, "test-runs") >= 2, 120, what="workers")
    wait_for(lambda: r.get(keys.bot_open_id) == BOT_OPEN_ID, 60, what="bot identity cached by the sweeper")
    yield web
    web.stop()
    stop_all(procs)


@pytest.fixture(autouse=True)
def _fresh_emulators(request: pytest.FixtureRequest) -> None:
    """Each test starts with empty emulators (faults, delays, recorded requests)."""
    if "feishu" in request.fixturenames:
        request.getfixturevalue("feishu").reset(keep_tokens=True)  # token expiry has its own test
    if "claude" in request.fixturenames:
        request.getfixturevalue("claude").reset()
