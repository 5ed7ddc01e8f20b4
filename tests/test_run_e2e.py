"""`make run` in sandbox mode: the Procfile under honcho serves, and a sandbox message gets an answer (acceptance 1);
the pid honcho gives for the worker line is the supervisor, and its SIGKILL leaves no worker behind (issue 32)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from state.embedded import stop_server
from tests.harness import ROOT, free_port, subprocess_env, unique, wait_for
from tests.test_elastic import ORPHAN_LIMIT_S, session_of

pytestmark = pytest.mark.e2e


def _ready(url: str) -> bool:
    try:
        return requests.get(url, timeout=1).status_code == 200
    except requests.RequestException:
        return False


def test_procfile_service_answers_sandbox_messages(tmp_path: Path) -> None:
    port = free_port()
    env = subprocess_env({
        "VAR_DIR": str(tmp_path / "var"), "SANDBOX_FEISHU_PORT": str(free_port()),
        "SANDBOX_MODEL_PORT": str(free_port()), "BOT_PROFILE": unique("e2e"), "PORT": str(port),
        "WEB_CONCURRENCY": "1", "WORKER_CONCURRENCY": "2", "REDIS_URL": "",
    })
    env.pop("REDIS_URL")  # unset: the service must start its own embedded Redis
    # It runs in the repo root, next to a developer's real .env: honcho must not read it (-e), nor any
    # process it starts (ENV_FILE from subprocess_env), or this test would talk to the real Feishu.
    assert env["ENV_FILE"] == os.devnull and env["TEST_NETGUARD"] == "1"
    honcho = Path(sys.executable).parent / "honcho"
    empty_env_file = tmp_path / "empty.env"
    empty_env_file.write_text("")
    proc = subprocess.Popen([str(honcho), "start", "-f", "Procfile", "-p", str(port), "-e", str(empty_env_file)],
                            cwd=ROOT, env=env, stdout=(tmp_path / "honcho.log").open("wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: _ready(f"http://127.0.0.1:{port}/readyz"), timeout=60, what="web ready")
        for args in (["--chat", unique("oc_p2p")], ["--group", "--chat", unique("oc_grp")]):
            said = subprocess.run([sys.executable, "-m", "sandbox", "say", *args, "--wait", "45", "你好，沙盒"],
                                  cwd=ROOT, env=env, capture_output=True, text=True, timeout=90)
            assert said.returncode == 0, said.stdout + said.stderr + (tmp_path / "honcho.log").read_text()[-3000:]
            assert "你好，沙盒" in said.stdout  # the offline model's answer quotes the question
        assert (tmp_path / "var" / "appendonly.aof").exists()  # embedded Redis with AOF under var/
        # webhook mode (the default): the Procfile's ws line idles instead of opening a long connection
        log = (tmp_path / "honcho.log").read_text(errors="replace")
        assert "long connection idle" in log and "ws.1" in log and "ws.1 stopped" not in log
        # What an operator kills as "the worker line": the pid honcho printed. dash runs `sh -c CMD` as a child
        # shell, so without `exec` in the Procfile that pid is a shell and the supervisor lives on, pool and all.
        [line_pid] = [int(p) for p in re.findall(r"worker\.1 started \(pid=(\d+)\)", log)]
        assert len(session_of(line_pid)) >= 3  # the supervisor (a session of its own) and its 2 RQ workers
        os.kill(line_pid, signal.SIGKILL)
        wait_for(lambda: not session_of(line_pid), ORPHAN_LIMIT_S, interval=0.1, what="the worker line's pool to end")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        stop_server(str(tmp_path / "var"))
