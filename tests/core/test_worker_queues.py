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


def test_strict_priority_holds_when_a_fetch_is_cut_short_by_its_byte_budget(make_worker, client, registry):
    """A fetch stops after 4 MB of messages (nine of 500 KB): the high queue still has tasks, so the
    worker must fetch from it again, not go on to the low queue in the same round (it took the low
    tasks into the slots the high ones needed). The high handlers wait until all 20 have started, so a
    low one can start only while some high task is still waiting, unless all 20 came first."""
    high_started: list[int] = []
    low_saw: list[int] = []
    all_high = threading.Event()

    @task(name="t.high", registry=registry)
    def high(n: int, pad: str) -> None:
        high_started.append(n)
        if len(high_started) == 20:
            all_high.set()
        all_high.wait(SOON)

    @task(name="t.low", registry=registry)
    def low() -> None:
        low_saw.append(len(high_started))

    client.enqueue_many([high.request(n=n, pad="x" * 500_000) for n in range(20)], queue="high")
    client.enqueue_many([low.request() for _ in range(5)], queue="low")
    make_worker(queues={"high": 1, "low": 1}, strict_priority=True, concurrency=20, prefetch=0)
    wait_until(lambda: len(low_saw) == 5, SOON, message="every low task run")
    assert sorted(high_started) == list(range(20))
    assert low_saw == [20] * 5  # each low task started after every high one


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "weighted"])
def test_a_queue_that_cannot_be_read_holds_up_no_other(make_worker, client, registry, redis_client, connection,
                                                        inspector, caplog, strict: bool) -> None:
    """A review: a queue whose pending key held a string stopped every fetch round there; with strict
    priority a healthy queue after it ran nothing, weighted it slowed to the error backoff. The queue
    is set aside a few seconds at a time, said once at ERROR; the others are fetched as usual."""
    import logging

    ran: list[int] = []

    @task(name="t.hello", registry=registry)
    def hello(i: int) -> None:
        ran.append(i)

    redis_client.set(connection.keys.queue("alpha").pending, "not a list")
    caplog.set_level(logging.INFO, logger="queuecore.worker")
    make_worker(queues={"alpha": 2, "beta": 1}, strict_priority=strict)
    for i in range(20):
        client.enqueue("t.hello", {"i": i}, queue="beta")
    wait_until(lambda: len(ran) == 20, 10, message="beta's 20 tasks to run")
    said = [r.getMessage() for r in caplog.records if "queue alpha: its tasks cannot be fetched" in r.getMessage()]
    assert len(said) == 1 and "WrongKeyType" in said[0] and "holds a string, expected a list" in said[0]
    assert inspector.count("beta", "pending") == 0
