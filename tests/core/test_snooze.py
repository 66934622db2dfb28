"""Snooze: a handler raises or returns ``Snooze(seconds)`` to run again later without using a retry."""

from __future__ import annotations

import pytest

from queuecore import task
from queuecore.core.errors import InvalidOption, Snooze
from queuecore.core.outcome import Outcome, classify, decide, returned
from tests.core.worker_support import task_hash, wait_state


def test_snooze_is_an_outcome_that_parks_without_an_attempt() -> None:
    assert classify(Snooze(3), None).kind == "snooze"
    assert returned(Snooze(2.5)).kind == "snooze"
    assert returned({"x": 1}).kind == "success"
    decision = decide(Outcome("snooze", 2.5), retried=0, max_retry=0, retry_delay=lambda n, e: 1.0)
    assert (decision.action, decision.retry_in) == ("park", 2.5)


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), "soon", None, 11 * 365 * 24 * 3600])
def test_snooze_seconds_are_bounded(bad) -> None:
    with pytest.raises(InvalidOption):
        Snooze(bad)


def test_a_raised_snooze_runs_the_task_again_without_using_a_retry(make_worker, client, inspector, registry,
                                                                   redis_client):
    calls = []

    @task(name="t.poll", registry=registry, max_retry=0)  # a snooze counted as a retry would archive it
    def poll(job: str) -> str:
        calls.append(job)
        if len(calls) < 3:
            raise Snooze(0.05)
        return "ready"

    info = client.enqueue(poll, {"job": "j1"}, queue="q", retention=60)
    worker = make_worker(queues={"q": 1})
    done = wait_state(inspector, "q", info.id, "completed")
    assert done.result == "ready"
    assert (done.retried, done.snoozed) == (0, 2)
    assert len(calls) == 3
    results = [a.result for a in done.attempts]
    assert results == ["snoozed", "snoozed", "completed"]
    assert inspector.queue_info("q").failed_today == 0
    assert "waiting" not in task_hash(redis_client, worker, "q", info.id)


def test_a_returned_snooze_parks_the_task_in_scheduled_until_due(make_worker, client, inspector, registry):
    @task(name="t.later", registry=registry, max_retry=0)
    async def later() -> Snooze:
        return Snooze(3600)

    info = client.enqueue(later, {}, queue="q")
    make_worker(queues={"q": 1})
    parked = wait_state(inspector, "q", info.id, "scheduled")
    assert (parked.retried, parked.snoozed, parked.waiting) == (0, 1, None)
    assert parked.next_process_at is not None
    assert parked.next_process_at.timestamp() > parked.attempts[-1].ended_at.timestamp() + 3500
