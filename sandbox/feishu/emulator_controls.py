"""The emulator's test-facing controls (faults, profiles, delays, hooks) and its inspection of requests and sends."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from sandbox.faults import Fault, FaultBook, FaultProfile
from sandbox.feishu.rules import check_ops, error_body, fault_kinds_for, fault_options, make_fault

if TYPE_CHECKING:
    from sandbox.feishu.store import FeishuStore

OPS = (
    "token", "bot_info", "scopes", "reply", "create", "get", "list", "chat", "resource", "message_patch",
    "chat_members",
    "drive_subscribe", "bitable_fields", "bitable_search", "bitable_batch_get", "bitable_create", "bitable_update",
    "reaction_add", "reaction_remove", "reaction_list",
)
Hook = Callable[[dict[str, Any]], object]


class Controls:
    """Mixed into FeishuEmulator, whose __init__ makes the state used here."""

    if TYPE_CHECKING:
        store: FeishuStore
        _lock: threading.RLock
        _faults: FaultBook
        _delays: dict[str, float]
        _hooks: dict[str, list[tuple[str, Hook]]]
        _requests: list[dict[str, Any]]
        denied_scopes: frozenset[str]


    def deny_scopes(self, scopes: Iterable[str]) -> None:
        """The app lacks these scopes: an operation none of whose accepted scopes is left answers 99991672
        (a fault profile for a tenant that granted only part of what the app asks for)."""
        self.denied_scopes = frozenset(scopes)

    def clear_faults(self) -> None:
        """Drop queued faults and profiles, keeping messages and tokens (an operator fixed the cause)."""
        self._faults.clear()

    def inject(
        self, op: str, *, code: int, http_status: int = 400, times: int = 1,
        headers: dict[str, str] | None = None, msg: str = "",
    ) -> None:
        """Make the next `times` calls of `op` fail with this JSON error (code 0 + 5xx → gateway error)."""
        _check_op(op)
        self._faults.add(op, Fault(http_status, error_body(code, msg), dict(headers or {}), times))

    def inject_fault(self, op: str, kind: str, *, times: int = 1, **options: float) -> None:
        """Make the next `times` calls of `op` fail with one fault kind (see sandbox.feishu.rules.FAULT_KINDS).

        options: reset_seconds (x-ogw-ratelimit-reset), timeout_seconds (how long a timeout holds the
        response; set it past the client's timeout), gateway_status (5xx for gateway kinds).
        """
        _check_op(op)
        fault_kinds_for(op, {kind: 1.0})
        self._faults.add(op, make_fault(kind, fault_options(options), times))

    def set_profile(
        self, ops: str | Iterable[str], rate: float, mix: Mapping[str, float] | None = None, *,
        seed: int | None = None, **options: float,
    ) -> None:
        """Fail a random `rate` of each op's calls with a weighted `mix` of fault kinds.

        Each op draws from its own generator seeded with (seed, op), so a seed replays the same sequence
        of faults per op. Queued inject/inject_fault faults still come first. Options as inject_fault.
        """
        settings = fault_options(options)
        profiles = {
            op: FaultProfile(rate, fault_kinds_for(op, mix), None if seed is None else f"{seed}:{op}", **settings)
            for op in check_ops(ops, OPS)
        }
        for op, profile in profiles.items():
            self._faults.set_profile(op, profile)

    def clear_profile(self, ops: str | Iterable[str] | None = None) -> None:
        self._faults.clear_profiles(None if ops is None else check_ops(ops, OPS))

    @property
    def profiles(self) -> dict[str, dict[str, Any]]:
        return self._faults.profiles()

    def set_delay(self, op: str, seconds: float) -> None:
        _check_op(op)
        with self._lock:
            self._delays[op] = float(seconds)

    def on(self, op: str, callback: Hook, *, when: str = "after") -> None:
        """Call `callback(record)` on each `op` call.

        when="after": the effect is applied but the response is not sent yet (kill a worker "mid-reply");
        when="before": before delay, auth and handling. After-hooks also see "status" and "response";
        with an injected timeout or reset they run before the wait or the reset.
        """
        _check_op(op)
        if when not in ("before", "after"):
            raise ValueError("when must be 'before' or 'after'")
        with self._lock:
            self._hooks.setdefault(op, []).append((when, callback))

    # -- inspection ---------------------------------------------------------------------------------

    @property
    def requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return copy.deepcopy(self._requests)

    @property
    def messages(self) -> list[dict[str, Any]]:
        with self.store.lock:
            return copy.deepcopy(self.store.messages)

    @property
    def token_requests(self) -> int:
        return self.store.token_requests

    @property
    def dedupe_hits(self) -> int:
        return self.store.dedupe_hits

    @property
    def stats(self) -> dict[str, Any]:
        """Calls per op, faults per op and kind, uuid dedupe hits, 230020 rejections, tokens and sends."""
        with self.store.lock:
            store = {
                "dedupe_hits": self.store.dedupe_hits,
                "chat_limit_rejections": dict(self.store.chat_limit_rejections),
                "token_requests": self.store.token_requests,
                "tokens_revoked": self.store.tokens_revoked,
                "messages": len(self.store.messages),
                "bot_messages": len(self.store.bot_sent),
            }
        return {**self._faults.counters.snapshot(), **store, "peak_sends_per_second": self.store.peak_sends(1.0)}

    def sends(self, chat_id: str | None = None) -> dict[str, list[float]]:
        """Per chat, the time.time() of every message the bot sent (dedupe hits excluded), in order."""
        return self.store.send_log(chat_id)

    def peak_sends(self, window: float = 1.0) -> dict[str, int]:
        """Per chat, the most bot sends within any `window` seconds: check pacing against Feishu's 5/s."""
        return self.store.peak_sends(window)

    def bot_messages(self, chat_id: str | None = None, thread_id: str | None = None) -> list[dict[str, Any]]:
        """Messages the bot sent, in creation order, optionally narrowed to a chat and/or topic."""
        return self.store.bot_messages(chat_id, thread_id)

    def replies_to(self, message_id: str) -> list[dict[str, Any]]:
        """The bot's replies to one message, in creation order."""
        return self.store.replies_to(message_id)

    def feed(self, cursor: int = 0, *, bot_only: bool = True) -> tuple[list[dict[str, Any]], int]:
        """Messages stored since `cursor` (0 = all) and the cursor for the next call: cheap polling."""
        return self.store.feed(cursor, bot_only)

    def requests_since(self, cursor: int = 0) -> list[dict[str, Any]]:
        """Recorded requests from position `cursor` on (the next cursor is cursor + len(result))."""
        with self._lock:
            return copy.deepcopy(self._requests[max(cursor, 0):])

    def describe(self) -> str:
        with self._lock:
            last = [f"{r['method']} {r['path']}" for r in self._requests[-5:]]
        with self.store.lock:
            counts = len(self.store.messages), len(self.store.bot_sent)
        return f"emulator: {counts[0]} messages ({counts[1]} from the bot); last requests: {last}"


def _check_op(op: str) -> None:
    check_ops(op, OPS)
