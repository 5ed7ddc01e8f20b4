"""bench.ingest's decision (issue 32): the run fails when a throughput ratio falls below 0.9 × the bare handler."""

from __future__ import annotations

from typing import Any

from bench.ingest import FLOOR_RATIO, verdict
from bench.wrk import ratio as wrk_ratio


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


def measured(ratio: float | None, ours_errors: int = 0, base_errors: int = 0) -> dict[str, Any]:
    """A wrk keep-alive phase as bench.wrk.summarize reports it (its targets present: it was measured)."""
    targets = {"ours": {"throughput_rps": 0.0 if ratio == 0 else 2000.0, "errors": ours_errors},
               "baseline": {"throughput_rps": 2000.0, "errors": base_errors}}
    return {"wrk": {"keepalive": {"throughput_ratio": ratio, "targets": targets}}}


def test_a_server_that_answered_nothing_or_with_errors_fails_the_run() -> None:
    # A broken server once passed: every request failed, its throughput was 0 and the ratio "not measured".
    assert wrk_ratio(0.0, 2552.4) == 0.0
    code, line = verdict(measured(0.0, ours_errors=3443))
    assert code == 1 and "wrk keepalive: 3443 errors from ours" in line
    assert verdict(measured(None))[0] == 1  # measured, yet no ratio: a target answered nothing
    assert verdict(measured(0.97, base_errors=2))[0] == 1  # a failing baseline is no yardstick either
    assert verdict(measured(0.97))[0] == 0


def test_the_python_drivers_errors_count_in_both_of_its_phases() -> None:
    def python(sat: dict[str, int], fixed: dict[str, int]) -> dict[str, Any]:
        ours = {"saturation": {"errors": sat}, "fixed_rate": {"errors": fixed}}
        base: dict[str, dict[str, dict[str, int]]] = {"saturation": {"errors": {}}, "fixed_rate": {"errors": {}}}
        return {"throughput_ratio": 0.96, "targets": {"ours": ours, "baseline": base}}

    assert verdict(python({}, {}))[0] == 0
    assert verdict(python({"status 503": 4}, {}))[0] == 1
    code, line = verdict(python({}, {"timeout": 1}))
    assert code == 1 and "python: 1 errors from ours" in line
