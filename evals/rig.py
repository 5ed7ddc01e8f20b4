"""The stack the scenarios talk to: the whole service as processes (chaos.stack.Stack: gunicorn web, workers, sweeper,
its own Redis) with the Feishu emulator and the Claude stand-in in this process, an items table, people with names,
an adjustable service clock. Scenarios speak through the webhook exactly as Feishu does."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import requests

from chaos.stack import APP_ID, BOT_OPEN_ID, Stack
from sandbox.feishu.events import mention, message_event, signed_request

APP, TABLE = "app_evals", "tbl_evals"
PEOPLE = {"ou_amy": "王芳", "ou_bob": "李明", "ou_cat": "陈静", "ou_dan": "赵强"}


class Rig:
    def __init__(self) -> None:
        self.stack = Stack(workers=2, env={
            "BITABLE_APP_TOKEN": APP, "BITABLE_TABLE_ID": TABLE, "ITEM_CREATE_POLICY": "topic_root",
            "CLOCK_ADJUSTABLE": "1", "LLM_TIMEOUT_SECONDS": "30", "RUN_BUDGET_SECONDS": "120"})
        self.n = 0

    def __enter__(self) -> Rig:
        self.stack.feishu.add_table(APP, TABLE)  # before the sweeper's start-up table check
        for open_id, name in PEOPLE.items():
            self.stack.feishu.add_user(open_id, name)
        self.stack.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stack.close()

    @property
    def requests(self) -> list[dict[str, Any]]:
        return self.stack.claude.requests

    def route(self, kind: str, chat: str, rest: str = "") -> str:
        return ":".join(["feishu", self.stack.profile, kind, chat, *([rest] if rest else [])])

    def say(self, chat: str, text: str, *, sender: str = "ou_amy", kind: str = "p2p", thread: str | None = None,
            root: str | None = None, parent: str | None = None, wait: bool = True) -> str:
        """A message as Feishu delivers it (registered in the emulator first); waits for the route to be idle."""
        self.n += 1
        group = kind != "p2p"
        env = message_event(chat_id=chat, chat_type="group" if group else "p2p", sender_open_id=sender,
                            text=f"@_user_1 {text}" if group else text, thread_id=thread, root_id=root,
                            parent_id=parent, mentions=[mention(BOT_OPEN_ID, "助手")] if group else None,
                            token=self.stack.secrets.verification_token, app_id=APP_ID)
        m = env["event"]["message"]
        self.stack.feishu.add_message(m["message_id"], chat, sender_open_id=sender, thread_id=thread, root_id=root,
                                      parent_id=parent, msg_type="text", content=m["content"],
                                      chat_mode="group" if group else "p2p", mentions=m.get("mentions"))
        body, headers = signed_request(env, encrypt_key=self.stack.secrets.encrypt_key)
        resp = requests.post(f"{self.stack.url}/feishu/events", data=body, headers=headers, timeout=10)
        resp.raise_for_status()
        if wait:
            rk = self.route("topic", chat, thread) if thread else \
                self.route("group", chat, sender) if group else self.route("p2p", chat)
            self.idle(rk)
        return str(m["message_id"])

    def idle(self, rk: str, timeout: float = 90.0) -> None:
        """The route has no stored work, no run and no pending kick, four polls in a row."""
        keys, r = self.stack.keys, self.stack.r
        deadline, streak = time.monotonic() + timeout, 0
        while streak < 4:
            pipe = r.pipeline(transaction=False)
            pipe.llen(keys.inbox(rk))
            pipe.llen(keys.proc(rk))
            pipe.exists(keys.lease(rk))
            pipe.zscore(keys.dirty, rk)
            inbox, proc, lease, dirty = pipe.execute()
            streak = streak + 1 if inbox == 0 and proc == 0 and lease == 0 and dirty is None else 0
            if time.monotonic() > deadline:
                raise TimeoutError(f"route {rk} not idle after {timeout:.0f}s")
            time.sleep(0.1)

    def wait(self, what: Callable[[], Any], timeout: float = 90.0, label: str = "condition") -> Any:
        deadline = time.monotonic() + timeout
        while not (found := what()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {label}")
            time.sleep(0.1)
        return found

    def shift_clock(self, seconds: float) -> None:
        """Move every process's service clock (CLOCK_ADJUSTABLE, as `python -m sandbox clock`)."""
        key = self.stack.keys.clock_offset
        self.stack.r.set(key, float(self.stack.r.get(key) or 0) + seconds)
