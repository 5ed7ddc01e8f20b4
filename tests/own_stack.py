"""A deployment of its own for a test module: web, worker supervisor and sweeper under a bot profile of its
own, on the session's Redis and emulators, with the env the test needs (production timers, streaming, …)."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import redis
import requests

from core.clock import Clock
from core.keys import Keys
from tests.harness import Proc, WebServer, settings_from, stop_all, unique, wait_for


@dataclass
class OwnStack:
    web: WebServer
    env: dict[str, str]
    workdir: Path
    procs: list[Proc] = field(default_factory=list)

    @classmethod
    def start(cls, env: dict[str, str], workdir: Path, prefix: str, clock: datetime | None = None,
              **overrides: str) -> OwnStack:
        """`clock`: the service clock reads this from before the first process starts (no test step then depends
        on the real hour or date)."""
        own = {k: v for k, v in {**env, "BOT_PROFILE": unique(prefix), **overrides}.items() if v != ""}  # "" = unset
        if clock is not None and "MEMORY_DREAM_CRON" not in overrides:
            own.pop("MEMORY_DREAM_CRON", None)  # a pinned clock meets the product's slot when its test moves it
        port = urlsplit(own.get("CONSOLE_URL", "")).port or 0  # the console's public URL names the port
        stack = cls(WebServer(settings_from(own), port), own, workdir)
        if clock is not None:
            stack.set_clock(redis.Redis.from_url(own["REDIS_URL"], decode_responses=True), clock)
        stack.start_processes()
        state = redis.Redis.from_url(own["REDIS_URL"], decode_responses=True)
        wait_for(lambda: state.get(stack.keys.bot_open_id), timeout=60, what="the sweeper to learn the bot's id")
        wait_for(stack.serving, timeout=120, interval=0.2, what="the stack's worker to register")
        return stack

    @classmethod
    def with_items(cls, env: dict[str, str], workdir: Path, feishu: Any, prefix: str, clock: datetime | None = None,
                   **overrides: str) -> OwnStack:
        """A stack with the items table of tests/test_items.py (created first: the sweeper checks it at start)."""
        from tests.test_items import APP, TABLE

        feishu.add_table(APP, TABLE)
        return cls.start(env, workdir, prefix, clock, BITABLE_APP_TOKEN=APP, BITABLE_TABLE_ID=TABLE, **overrides)

    def ready_for_test(self, feishu: Any) -> None:
        """Before each test: the emulator was reset (the table again), and a process a test killed is back."""
        from tests.test_items import APP, TABLE

        feishu.add_table(APP, TABLE)
        self.healthy()

    @property
    def profile(self) -> str:
        return self.env["BOT_PROFILE"]

    @property
    def keys(self) -> Keys:
        return Keys(self.profile)

    @property
    def supervisor(self) -> Proc:
        return self.procs[0]

    def start_processes(self) -> None:
        for module in ("jobs.worker", "jobs.sweeper"):
            self.procs.append(Proc(["-m", module], self.env, str(self.workdir),
                                   self.workdir / f"{self.profile}-{module}.log"))

    def kill_workers(self) -> list[int]:
        """SIGKILL every RQ worker and work-horse under the supervisor; the supervisor lives on (the host's
        process manager here) and starts fresh workers, as after an OOM kill of the workers."""
        pids = self.supervisor.children()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
        return pids

    def crash_restart(self, sweepers: int = 1) -> None:
        """SIGKILL every process (as a host crash would), then start them again with `sweepers` schedulers.

        Returns once the new processes serve (see `serving`): what a test checks next ("not posted again", "not
        fired early") is then checked against the restarted stack, not against processes still importing."""
        for proc in self.procs:
            proc.kill9()
            proc.log.close()
        self.procs.clear()
        self.start_processes()
        for n in range(1, sweepers):
            self.add_sweeper(n)
        wait_for(self.serving, timeout=120, interval=0.2, what="the restarted processes to serve")

    def serving(self) -> bool:
        """The supervisor has a registered RQ worker of its own and every sweeper's loop has started."""
        from rq import Worker

        if not all(p.alive() for p in self.procs):
            return False
        kids = set(self.supervisor.children())
        workers = Worker.all(connection=redis.Redis.from_url(self.env["REDIS_URL"]))
        return any(w.pid in kids for w in workers) and all(p.logged("sweeper started") for p in self.procs[1:])

    def add_sweeper(self, n: int = 1) -> None:
        """One more sweeper (a second scheduler) beside the stack's own."""
        self.procs.append(Proc(["-m", "jobs.sweeper"], self.env, str(self.workdir),
                               self.workdir / f"{self.profile}-sweeper{n + 1}.log"))

    def healthy(self) -> None:
        """Restart the processes if a test left one dead."""
        if not all(p.alive() for p in self.procs):
            stop_all(self.procs)
            self.procs.clear()
            self.start_processes()
            wait_for(self.serving, timeout=120, interval=0.2, what="the restarted processes to serve")

    def stop(self) -> None:
        self.web.stop()
        stop_all(self.procs)

    # -- the service clock and the admin API (issue 17's scenario tests) ---------------------------------

    def set_clock(self, r: redis.Redis, when: datetime) -> None:
        """Every process's service clock reads `when` now (CLOCK_ADJUSTABLE: the offset lives in Redis)."""
        clock = Clock(r, self.keys, adjustable=True)
        clock.reset()
        clock.advance(when.timestamp() - time.time())

    def admin(self, method: str, path: str) -> requests.Response:
        return requests.request(method, f"{self.web.url}/admin/api/{path}", timeout=10,
                                headers={"Authorization": f"Bearer {self.env.get('ADMIN_TOKEN', '')}"})

    def dead_letters(self, rk: str) -> list[dict[str, Any]]:
        return [d for d in self.admin("GET", "deadletters").json()["deadletters"] if d["route_key"] == rk]
