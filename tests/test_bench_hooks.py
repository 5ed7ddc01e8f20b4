"""bench.hooks' decision (issue 33): the floor, and no failed request on any target."""

from __future__ import annotations

from bench.hooks import FLOOR, passed


def test_the_webhooks_benchmark_fails_below_the_floor_or_on_any_error() -> None:
    clean = {"hooks": 0, "feishu": 0, "baseline": 0}
    assert passed(FLOOR, clean) and passed(1.02, clean)
    assert not passed(FLOOR - 0.001, clean)
    assert not passed(None, clean)  # a target answered nothing
    assert not passed(1.02, {**clean, "hooks": 7})  # a throughput of failures is no throughput
    assert not passed(1.02, {**clean, "baseline": 1})
