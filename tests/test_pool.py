"""The elastic pool's arithmetic (jobs/pool.py): default sizes, validation, the grow decision."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobs.pool import (
    MIB,
    PoolConfigError,
    PoolSize,
    core_slots,
    default_max,
    mem_total_bytes,
    size_pool,
    to_start,
)

GIB = 1024 * MIB


def sized(**kw: object) -> PoolSize:
    args: dict = {"queues": 1, "concurrency": None, "minimum": None, "maximum": None, "idle_seconds": 30.0,
                  "mem_bytes": 4 * GIB}
    args.update(kw)
    return size_pool(**args)


@pytest.mark.parametrize(("mem", "expected"), [(512 * MIB, 4), (GIB, 4), (2 * GIB, 8), (4 * GIB, 16),
                                               (16 * GIB, 64), (64 * GIB, 256), (1024 * GIB, 256)])
def test_default_max_is_a_quarter_of_memory_at_64_mb_a_run_clamped(mem: int, expected: int) -> None:
    assert default_max(mem) == expected


def test_meminfo_is_read_in_kb_and_a_missing_line_falls_back() -> None:
    assert mem_total_bytes("MemTotal:        8048576 kB\nMemFree: 1 kB\n") == 8048576 * 1024
    assert mem_total_bytes("nothing here") == 2 * GIB
    assert mem_total_bytes() > 0  # this host's


def test_defaults_keep_two_warm_and_size_max_from_memory() -> None:
    assert sized() == PoolSize(2, 16, 30.0)
    assert sized().elastic


def test_fixed_concurrency_is_per_queue_and_not_elastic() -> None:
    size = sized(concurrency=8, queues=3, minimum=1, maximum=100)
    assert (size.min, size.max, size.fixed, size.elastic) == (24, 24, True, False)
    assert core_slots(["group", "p2p", "topic"], size) == ["group"] * 8 + ["p2p"] * 8 + ["topic"] * 8


@pytest.mark.parametrize(("kw", "needle"), [
    ({"minimum": 10, "maximum": 4}, "WORKER_MIN=10 is above WORKER_MAX=4"),
    ({"minimum": 40}, "WORKER_MAX=16 (the default for this host's memory)"),
    ({"maximum": 2, "queues": 3}, "below the 3 queues"),
    ({"concurrency": 0}, "WORKER_CONCURRENCY=0"),
    ({"idle_seconds": 0}, "WORKER_IDLE_SECONDS"),
])
def test_impossible_sizes_are_refused_with_the_variables_to_fix(kw: dict, needle: str) -> None:
    with pytest.raises(PoolConfigError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        sized(**kw)


def test_every_queue_keeps_a_worker_and_the_minimum_is_spread() -> None:
    size = sized(queues=3, minimum=1)
    assert size.min == 3
    assert core_slots(["a", "b", "c"], sized(queues=3, minimum=5)) == ["a", "a", "b", "b", "c"]


def test_grow_starts_one_worker_per_run_no_idle_worker_will_take() -> None:
    assert to_start(alive={"runs": 2}, busy={"runs": 2}, waiting={"runs": 62}, maximum=64) == {"runs": 62}
    assert to_start(alive={"runs": 5}, busy={"runs": 2}, waiting={"runs": 3}, maximum=64) == {}
    assert to_start(alive={"runs": 5}, busy={"runs": 2}, waiting={"runs": 4}, maximum=64) == {"runs": 1}
    assert to_start(alive={"runs": 60}, busy={"runs": 60}, waiting={"runs": 10}, maximum=64) == {"runs": 4}
    assert to_start(alive={"runs": 64}, busy={"runs": 64}, waiting={"runs": 10}, maximum=64) == {}


def test_grow_shares_the_last_places_between_queues_by_need() -> None:
    plan = to_start(alive={"a": 1, "b": 1}, busy={"a": 1, "b": 1}, waiting={"a": 30, "b": 10}, maximum=10)
    assert plan == {"a": 6, "b": 2}


queues = st.lists(st.sampled_from(["runs", "p2p", "group", "topic"]), min_size=1, max_size=4, unique=True)


@given(queues.flatmap(lambda qs: st.tuples(
    st.just(qs),
    st.fixed_dictionaries({q: st.integers(0, 300) for q in qs}),
    st.fixed_dictionaries({q: st.integers(0, 300) for q in qs}),
    st.fixed_dictionaries({q: st.integers(0, 1000) for q in qs}),
    st.integers(1, 300))))
def test_grow_never_exceeds_the_maximum_nor_what_waits(case: tuple) -> None:
    qs, alive, busy_raw, waiting, maximum = case
    busy = {q: min(busy_raw[q], alive[q]) for q in qs}
    plan = to_start(alive=alive, busy=busy, waiting=waiting, maximum=maximum)
    room = max(0, maximum - sum(alive.values()))
    assert sum(plan.values()) <= room
    for q, n in plan.items():
        assert 0 < n <= waiting[q] - (alive[q] - busy[q])
    needed = sum(max(0, waiting[q] - (alive[q] - busy[q])) for q in qs)
    assert sum(plan.values()) == min(room, needed)  # never holds back while there is room


@given(st.integers(1, 8), st.integers(1, 300), st.integers(0, 300), st.integers(1 * GIB, 512 * GIB))
def test_a_valid_pool_has_min_le_max_and_a_worker_per_queue(n: int, low: int, extra: int, mem: int) -> None:
    size = sized(queues=n, minimum=low, maximum=max(low, n) + extra, mem_bytes=mem)
    assert n <= size.min <= size.max
    slots = core_slots([f"q{i}" for i in range(n)], size)
    assert len(slots) == size.min and set(slots) == {f"q{i}" for i in range(n)}
