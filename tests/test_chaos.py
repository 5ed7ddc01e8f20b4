"""The quick chaos scenarios (chaos/, `make chaos` runs the full sizes) against the whole real service: gunicorn,
the worker supervisor and the sweeper as processes, embedded Redis, the emulators over HTTP.

One stack for the module, shared by the scenarios in order; a scenario that leaves it unhealthy gets it
replaced before the next. Each test asserts every invariant its scenario checks except timing bounds
(p99 ingest, pacing jitter), which depend on the machine and are reported by `make chaos` only.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from chaos.__main__ import Suite
from chaos.report import Result, details
from chaos.scenarios import load_all

pytestmark = pytest.mark.timeout(900)  # the first test also pays for starting the stack on a busy machine
SCENARIOS = load_all()
KICK_LEASE_DEFECT = ("defect: a kick lease whose kick record or RQ job is gone (lost record, sweeper or Redis "
                     "crash between pop and enqueue) blocks its route until the lease expires (120 s); the sweep "
                     "only kicks routes without a lease. Fix proposed in the chaos report (jobs/scripts.py KICK).")


@pytest.fixture(scope="module")
def suite() -> Iterator[Suite]:
    s = Suite(argparse.Namespace(quick=True, workers=8, keep=False, seed=7))
    yield s
    s.close()


def run(suite: Suite, num: int) -> Result:
    result = suite.run(SCENARIOS[num])
    failed = result.failures(timed=False)
    assert not result.error and not failed, details([result])
    return result


def test_worker_and_horse_kills_lose_duplicate_and_reorder_nothing(suite: Suite) -> None:
    run(suite, 1)


def test_an_orphaned_horse_keeps_its_route_alone_and_replies_once(suite: Suite) -> None:
    run(suite, 2)


@pytest.mark.xfail(reason=KICK_LEASE_DEFECT, strict=True)
def test_web_killed_mid_burst_and_lost_kicks_are_delivered_within_a_sweep(suite: Suite) -> None:
    run(suite, 3)


@pytest.mark.xfail(reason=KICK_LEASE_DEFECT + " Seen when Redis dies between dequeue and ACQUIRE.", strict=False)
def test_redis_restart_loses_nothing_acknowledged_and_503s_are_redelivered(suite: Suite) -> None:
    run(suite, 4)


def test_open_api_faults_deliver_every_reply_chunk_once_within_pacing(suite: Suite) -> None:
    run(suite, 5)


def test_model_faults_are_retried_and_exhausted_retries_dead_letter_then_replay_once(suite: Suite) -> None:
    run(suite, 6)


def test_a_poison_message_in_a_topic_batch_is_the_only_dead_letter(suite: Suite) -> None:
    run(suite, 7)


def test_fuzzed_requests_never_5xx_never_enqueue_forgeries_never_crash_workers(suite: Suite) -> None:
    run(suite, 8)


def test_canary_secrets_appear_in_no_log_request_or_reply_and_admin_needs_its_token(suite: Suite) -> None:
    run(suite, 9)


def test_sustained_load_drains_with_flat_worker_memory(suite: Suite) -> None:
    run(suite, 10)
