"""The suite's service processes, forked from one interpreter that has already imported them.

Each `python -m jobs.worker | jobs.sweeper | bot.longconn` a test starts spends ~3 CPU-s importing lark-oapi's
10,600 modules and anthropic before its first line of work, and the suite starts ~75 of them on 2 cores. This server
(one per pytest process, started on first use by `tests.harness.Proc`) imports the entry points once, with the
collector paused and then frozen, and forks a child per start: the child takes the test's environment, working
directory and log file, becomes a session leader (as `start_new_session=True`), and runs the same entry point with
`runpy` as `python -m` would (`__main__`, argv). Its exit status comes back to the test process, so `Proc.p` behaves
as a `Popen` does (pid, poll, wait, returncode). `tests/test_run_e2e.py` still starts the Procfile under honcho
with real `exec`s; `TEST_FORKSERVER=0` turns the server off.

Protocol (one JSON object per line): in, `{"module", "args", "env", "cwd", "log"}`; out, `{"pid"}` for each start,
in order, and `{"exited": pid, "code": N}` whenever a child ends (N as `Popen.returncode`: -signal when killed).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import os
import runpy
import select
import signal
import subprocess
import sys
import threading
import traceback
from typing import Any

from core import boot

ENTRY_POINTS = ("jobs.worker", "jobs.sweeper", "bot.longconn")


def preload() -> None:
    gc.disable()
    for name in ENTRY_POINTS:
        __import__(name)  # imports only: the runtime and its clients need the test's settings, built in the child
    gc.collect()
    boot.started()


def child(request: dict[str, Any], keep: list[int]) -> None:
    """In the forked child: become the service process the request describes, then exit with its status."""
    code = 1
    try:
        os.setsid()
        for fd in keep:
            os.close(fd)
        log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(devnull)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = [request["module"], *request["args"]]
        code = run(request["module"])
    finally:
        os._exit(code)


def run(module: str) -> int:
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()  # what a normal interpreter exit runs (logging's flush, multiprocessing's cleanup)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    return code


def serve() -> None:
    preload()
    out = os.fdopen(os.dup(1), "w", buffering=1)
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    signal.set_wakeup_fd(write_end)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    buffer = b""
    while True:
        ready, _, _ = select.select([0, read_end], [], [])
        if read_end in ready:
            os.read(read_end, 4096)
        reap(out)
        if 0 not in ready:
            continue
        data = os.read(0, 65536)
        if not data:
            return  # the test process is gone; its children stop with its fixtures
        buffer += data
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            pid = os.fork()
            if pid == 0:
                child(json.loads(line), [read_end, write_end, out.fileno()])
            out.write(json.dumps({"pid": pid}) + "\n")


def reap(out: Any) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        out.write(json.dumps({"exited": pid, "code": os.waitstatus_to_exitcode(status)}) + "\n")


if __name__ == "__main__":
    serve()


# -- the test process's side ---------------------------------------------------------------------------------------

class Forked:
    """A started child as `subprocess.Popen` shows one: pid, args, poll(), wait(timeout), returncode."""

    def __init__(self, server: Server, pid: int, args: list[str]) -> None:
        self.server, self.pid, self.args = server, pid, args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.server.exit_code(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        code = self.server.wait_exit(self.pid, timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        self.returncode = code
        return code


class Server:
    """The fork server of this pytest process (started on first use, ended when the process exits)."""

    def __init__(self, env: dict[str, str], cwd: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.forkserver"], env=env, cwd=cwd,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
        self.exits: dict[int, int] = {}
        self.pids: list[int] = []
        self.cond = threading.Condition()
        self.send = threading.Lock()
        threading.Thread(target=self._read, daemon=True, name="forkserver-reader").start()
        atexit.register(self.close)

    def start(self, module: str, args: list[str], env: dict[str, str], cwd: str, log: str) -> Forked:
        request = {"module": module, "args": args, "env": env, "cwd": cwd, "log": log}
        with self.send:
            assert self.proc.stdin is not None
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
            with self.cond:
                if not self.cond.wait_for(lambda: self.pids or self.proc.poll() is not None, timeout=60):
                    raise RuntimeError("the fork server did not answer within 60 s")
                if not self.pids:
                    raise RuntimeError(f"the fork server exited with {self.proc.returncode}")
                pid = self.pids.pop(0)
        return Forked(self, pid, ["-m", module, *args])

    def exit_code(self, pid: int) -> int | None:
        with self.cond:
            return self.exits.get(pid)

    def wait_exit(self, pid: int, timeout: float | None) -> int | None:
        with self.cond:
            self.cond.wait_for(lambda: pid in self.exits, timeout=timeout)
            return self.exits.get(pid)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            message = json.loads(line)
            with self.cond:
                if "pid" in message:
                    self.pids.append(message["pid"])
                else:
                    self.exits[message["exited"]] = message["code"]
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def close(self) -> None:
        if self.proc.poll() is None and self.proc.stdin is not None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except Exception:
                self.proc.kill()
