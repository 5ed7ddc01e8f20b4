"""tests/forkserver.py, the suite's way of starting service processes, against a fresh `python -m`: the same exit
status and output for the same entry point and env, a session of its own in the given working directory, and a
SIGKILL reported as `Popen` reports it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.harness import Proc, subprocess_env, unique, wait_for
from tests.test_config import BAD


def test_a_forked_entry_point_exits_as_a_fresh_one_does(tmp_path: Path) -> None:
    env = {"VAR_DIR": str(tmp_path / "var"), **BAD}
    fresh = subprocess.run([sys.executable, "-m", "jobs.sweeper"], env=subprocess_env(env), cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    proc = Proc(["-m", "jobs.sweeper"], env, str(tmp_path), tmp_path / "forked.log")
    assert type(proc.p).__name__ == "Forked"  # it did come from the fork server
    code = proc.p.wait(timeout=60)
    proc.stop()
    forked = (tmp_path / "forked.log").read_text()
    assert code == fresh.returncode != 0
    for name in ("FEISHU_ENCRYPT_KEY", "CONTEXT_BUDGET_TOKENS", "ROUTING_GROUP_SCOPE"):
        assert name in forked and name in fresh.stdout + fresh.stderr


def test_a_forked_service_leads_its_session_in_its_directory_and_a_sigkill_reads_as_popen_says(
        env: dict[str, str], workdir: Path) -> None:
    own = {**env, "BOT_PROFILE": unique("fork")}
    proc = Proc(["-m", "jobs.sweeper"], own, str(workdir), workdir / f"{own['BOT_PROFILE']}.log")
    try:
        wait_for(lambda: proc.logged("sweeper"), 60, what="the sweeper's first log line")
        pid = proc.p.pid
        assert os.getsid(pid) == pid and os.readlink(f"/proc/{pid}/cwd") == str(workdir)
        assert proc.p.poll() is None
        os.kill(pid, signal.SIGKILL)
        assert proc.p.wait(timeout=10) == -signal.SIGKILL == proc.p.returncode
    finally:
        proc.stop()
