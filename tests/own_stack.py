"""A deployment of its own for a test module: web, worker supervisor and sweeper under a bot profile of its
own, on the session's Redis and emulators, with the env the test needs (production timers, streaming, …)."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field
from pathlib import Path

import redis

from memory.keys import Keys
from tests.harness import Proc, WebServer, settings_from, stop_all, unique, wait_for


@dataclass
class OwnStack:
    web: WebServer
    env: dict[str, str]
    workdir: Path
    procs: list[Proc] = field(default_factory=list)

    @classmethod
    def start(cls, env: dict[str, str], workdir: Path, prefix: str, **overrides: str) -> OwnStack:
        own = {k: v for k, v in {**env, "BOT_PROFILE": unique(prefix), **overrides}.items() if v != ""}  # "" = unset
        stack = cls(WebServer(settings_from(own)), own, workdir)
        stack.start_processes()
        state = redis.Redis.from_url(own["REDIS_URL"], decode_responses=True)
        wait_for(lambda: state.get(stack.keys.bot_open_id), timeout=60, what="the sweeper to learn the bot's id")
        return stack

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

    def healthy(self) -> None:
        """Restart the processes if a test left one dead."""
        if not all(p.alive() for p in self.procs):
            stop_all(self.procs)
            self.procs.clear()
            self.start_processes()

    def stop(self) -> None:
        self.web.stop()
        stop_all(self.procs)
