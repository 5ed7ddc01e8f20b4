"""The Claude stand-in's unauthenticated /_sandbox/ control API, so another process can drive its faults."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Flask, request

from sandbox.claude.faults import FAULT_OPTIONS
from sandbox.server import control_body, guarded


def _options(body: dict[str, Any]) -> dict[str, float]:
    return {k: float(body[k]) for k in FAULT_OPTIONS if k in body}


# `sandbox.claude.standin.ClaudeStandin` is typed Any here: that module imports this one
# (no import cycles: tests/test_layout.py).
def register_control(app: Flask, standin: Any) -> None:
    def delay() -> dict[str, Any]:
        standin.set_delay(float(control_body().get("seconds", 0)))
        return {"ok": True}

    def stream() -> dict[str, Any]:
        standin.set_stream(float(control_body().get("seconds", 0)))
        return {"ok": True}

    def fail() -> dict[str, Any]:
        spec = control_body()
        if "kind" in spec:
            standin.inject_fault(str(spec["kind"]), int(spec.get("times", 1)), **_options(spec))
        else:
            standin.fail(int(spec.get("status", 529)), str(spec.get("error_type", "overloaded_error")),
                         int(spec.get("times", 1)), spec.get("headers"), str(spec.get("message", "")))
        return {"ok": True}

    def reset() -> dict[str, Any]:
        standin.reset()
        return {"ok": True}

    def set_profile() -> dict[str, Any] | None:
        spec = control_body()
        seed = spec.get("seed")
        standin.set_profile(float(spec["rate"]), spec.get("mix"), seed=None if seed is None else int(seed),
                            **_options(spec))
        return standin.profile

    def clear_profile() -> dict[str, Any]:
        standin.clear_profile()
        return {"ok": True}

    def fail_when() -> list[dict[str, Any]]:
        spec = control_body()
        kind = spec.get("kind")
        standin.fail_when(
            str(spec["marker"]), int(spec.get("status", 500)), str(spec.get("error_type", "api_error")),
            kind=None if kind is None else str(kind), message=str(spec.get("message", "")),
            headers=spec.get("headers"), **_options(spec),
        )
        return standin.poison

    def clear_fail_when() -> list[dict[str, Any]]:
        standin.clear_fail_when(request.args.get("marker") or None)
        return standin.poison

    def revoke() -> dict[str, Any]:
        standin.revoke_key(str(control_body()["api_key"]))
        return {"ok": True}

    def restore() -> dict[str, Any]:
        standin.restore_keys()
        return {"ok": True}

    def since() -> int:
        return int(request.args.get("since", 0))

    def overlaps() -> list[tuple[int, int]]:
        include = request.args.get("include_timeouts", "0") not in ("0", "false")
        return standin.overlaps(request.args["pattern"], include_timeouts=include)

    routes: list[tuple[str, str, Callable[[], Any]]] = [
        ("/_sandbox/delay", "POST", delay),
        ("/_sandbox/stream", "POST", stream),
        ("/_sandbox/fail", "POST", fail),
        ("/_sandbox/reset", "POST", reset),
        ("/_sandbox/requests", "GET", lambda: standin.requests_since(since())),
        ("/_sandbox/profile", "POST", set_profile),
        ("/_sandbox/profile", "GET", lambda: standin.profile),
        ("/_sandbox/profile", "DELETE", clear_profile),
        ("/_sandbox/fail_when", "POST", fail_when),
        ("/_sandbox/fail_when", "GET", lambda: standin.poison),
        ("/_sandbox/fail_when", "DELETE", clear_fail_when),
        ("/_sandbox/stats", "GET", lambda: standin.stats),
        ("/_sandbox/timeline", "GET", lambda: standin.timeline_since(since())),
        ("/_sandbox/overlaps", "GET", overlaps),
        ("/_sandbox/revoked_keys", "POST", revoke),
        ("/_sandbox/revoked_keys", "DELETE", restore),
    ]
    for path, method, action in routes:
        app.add_url_rule(path, endpoint=f"sandbox_{method}_{path}", view_func=guarded(action), methods=[method])
