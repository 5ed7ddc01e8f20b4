"""bench.ingest's decision (issue 32): the run fails when a throughput ratio falls below 0.9 × the bare handler."""

from __future__ import annotations

from typing import Any

from bench.ingest import FLOOR_RATIO, verdict


def report(python: float | None, keepalive: float | None = None, close: float | None = None) -> dict[str, Any]:
    wrk = {"keepalive": {"throughput_ratio": keepalive}, "close": {"throughput_ratio": close}}
    return {"throughput_ratio": python, "wrk": wrk}


def test_the_benchmark_exits_1_when_any_ratio_is_below_the_floor() -> None:
    assert FLOOR_RATIO == 0.9
    assert verdict(report(0.96, 0.95, 0.97))[0] == 0
    assert verdict(report(0.9, 0.9, 0.9))[0] == 0
    code, line = verdict(report(0.96, 0.55, 0.97))
    assert code == 1 and "wrk keepalive 0.550" in line
    assert verdict(report(0.89))[0] == 1
    assert verdict(report(None, None, 0.899))[0] == 1


def test_a_run_that_measured_no_ratio_passes() -> None:
    assert verdict({})[0] == 0  # wrk missing and --driver wrk: nothing was measured
    assert verdict(report(None))[0] == 0
