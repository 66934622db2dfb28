"""Worker: which queue's tasks it fetches (weighted or strict priority, paused queues, quiet mode)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from queuecore import TaskRequest, task
from tests.conftest import wait_until
from tests.core.worker_support import SOON, Gates, let_worker_run, wait_state

PER_QUEUE = 100


@pytest.fixture
def gates() -> Iterator[Gates]:
    with Gates() as g:
        yield g


def fill_two_queues(client, registry):
    """``PER_QUEUE`` tasks in "high" and in "low", each recording its queue when it runs."""
    order: list[str] = []
    lock = threading.Lock()

    @task(name="t.record", registry=registry)
    def record(queue):
        with lock:
            order.append(queue)

    for queue in ("high", "low"):
        client.enqueue_many([TaskRequest("t.record", {"queue": queue}, {"queue": queue})
                             for _ in range(PER_QUEUE)])
    return order


def test_weighted_priority_prefers_heavy_queues_without_starving_light_ones(make_worker, client, registry):
    order = fill_two_queues(client, registry)
    worker = make_worker(start=False, queues={"high": 6, "low": 1}, concurrency=1)
    worker.start()

    wait_until(lambda: len(order) >= 70, SOON, message="70 tasks processed")
    first = order[:70]
    # Expected about 60 high and 10 low; P(no low at all) = (6/7)**70, about 2e-5.
    assert first.count("low") >= 1
    assert first.count("high") > 45
    wait_until(lambda: len(order) == 2 * PER_QUEUE, SOON, message="every task processed")
    assert order.count("low") == order.count("high") == PER_QUEUE


def test_strict_priority_empties_the_heavier_queue_first(make_worker, client, registry):
    order = fill_two_queues(client, registry)
    worker = make_worker(start=False, queues={"high": 6, "low": 1}, concurrency=1, strict_priority=True)
    worker.start()

    wait_until(lambda: len(order) == 2 * PER_QUEUE, SOON, message="every task processed")
    assert order == ["high"] * PER_QUEUE + ["low"] * PER_QUEUE


def test_paused_queue_is_not_fetched_until_unpaused(make_worker, client, inspector, registry):
    ran = []

    @task(name="t.note", registry=registry)
    def note(queue):
        ran.append(queue)

    for _ in range(3):
        client.enqueue(note, {"queue": "held"}, queue="held")
    inspector.pause_queue("held")
    worker = make_worker(queues={"held": 5, "open": 1})

    # The worker keeps serving the other queue meanwhile.
    others = [client.enqueue(note, {"queue": "open"}, queue="open", retention=60) for _ in range(3)]
    for info in others:
        wait_state(inspector, "open", info.id, "completed")
    let_worker_run(inspector, worker)
    held = inspector.queue_info("held")
    assert (held.paused, held.pending, held.active) == (True, 3, 0)
    assert ran == ["open"] * 3

    inspector.unpause_queue("held")
    wait_until(lambda: ran.count("held") == 3, SOON, message="the held tasks to run")
    assert inspector.queue_info("held").pending == 0


def test_quiet_worker_finishes_running_tasks_but_fetches_no_new_ones(make_worker, client, inspector, registry,
                                                                     gates):
    release = gates.new()
    started = threading.Event()

    @task(name="t.slow", registry=registry)
    def slow():
        started.set()
        release.wait(SOON)
        return "slow done"

    @task(name="t.quick", registry=registry)
    def quick():
        return "quick done"

    running = client.enqueue(slow, retention=60)
    worker = make_worker(concurrency=4)
    assert started.wait(SOON)

    worker.stop()
    assert worker.status == "quiet"
    waiting = client.enqueue(quick, retention=60)
    release.set()
    assert wait_state(inspector, "default", running.id, "completed").result == "slow done"

    let_worker_run(inspector, worker)
    assert inspector.get_task("default", waiting.id).state == "pending"
    assert inspector.queue_info("default").pending == 1
