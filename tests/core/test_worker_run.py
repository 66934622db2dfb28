"""Worker: running handlers, results, retries, archiving, scheduling and bad task data.

Real Redis, in-process ``Worker`` objects with fast intervals (see ``make_worker``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time

import pytest

from queuecore import Client, SkipRetry, TaskRegistry, TaskState, current_task, default_retry_delay, task
from tests.conftest import wait_until
from tests.core.worker_support import SOON, let_worker_run, task_hash, task_or_none, wait_state


def fast_retry(n: int, error: BaseException | None) -> float:
    return 0.05


# -- running handlers -------------------------------------------------------------------------------


def test_sync_handler_gets_its_payload_as_keyword_arguments_and_its_context(make_worker, client, inspector,
                                                                              registry):
    seen = []

    @task(name="t.add", registry=registry)
    def add(a, b, *, label="none"):
        ctx = current_task()
        seen.append({"id": ctx.id, "queue": ctx.queue, "type": ctx.type, "retried": ctx.retried,
                     "args": (a, b, label), "thread": threading.current_thread().name})
        return {"sum": a + b, "label": label}

    info = client.enqueue(add, {"a": 2, "b": 3, "label": "hi"}, queue="emails", retention=60)
    make_worker(queues={"emails": 1})

    done = wait_state(inspector, "emails", info.id, "completed")
    assert done.result == {"sum": 5, "label": "hi"}
    assert done.completed_at is not None
    assert len(seen) == 1
    assert seen[0]["id"] == info.id
    assert seen[0]["queue"] == "emails"
    assert seen[0]["type"] == "t.add"
    assert seen[0]["retried"] == 0
    assert seen[0]["args"] == (2, 3, "hi")
    assert seen[0]["thread"].startswith("queuecore-handler")
    stats = inspector.queue_info("emails")
    assert (stats.processed_today, stats.failed_today, stats.completed) == (1, 0, 1)


def test_async_handler_runs_on_the_event_loop_with_its_context(make_worker, client, inspector, registry):
    seen = []

    @task(name="t.async_mul", registry=registry)
    async def mul(x, y):
        await asyncio.sleep(0.01)
        ctx = current_task()
        seen.append((ctx.id, ctx.queue, ctx.retried, x, y, threading.current_thread().name))
        return x * y

    info = client.enqueue(mul, {"x": 6, "y": 7}, retention=60)
    make_worker()

    done = wait_state(inspector, "default", info.id, "completed")
    assert done.result == 42
    assert seen == [(info.id, "default", 0, 6, 7, "queuecore-asyncio")]


def test_concurrent_async_handlers_each_see_their_own_context(make_worker, client, inspector, registry):
    both_started = threading.Barrier(2, timeout=SOON)
    seen = {}

    @task(name="t.async_ctx", registry=registry)
    async def who(tag):
        before = current_task().id
        await asyncio.get_running_loop().run_in_executor(None, both_started.wait)
        seen[tag] = (before, current_task().id)

    a = client.enqueue(who, {"tag": "a"}, retention=60)
    b = client.enqueue(who, {"tag": "b"}, retention=60)
    make_worker(concurrency=2)

    wait_state(inspector, "default", a.id, "completed")
    wait_state(inspector, "default", b.id, "completed")
    assert seen == {"a": (a.id, a.id), "b": (b.id, b.id)}


def test_an_async_failure_is_recorded_while_handlers_fill_the_to_thread_executor(make_worker, client, inspector,
                                                                                 registry):
    """The worker writes an async attempt's failure from a thread of its own: handlers blocked in
    ``asyncio.to_thread`` (as many as the loop's default executor has threads) do not hold it up."""
    executor_size = min(32, (os.cpu_count() or 1) + 4)  # asyncio's default executor
    release = threading.Event()
    blocked = []

    def wait_for_release() -> None:
        blocked.append(1)
        release.wait(3 * SOON)  # longer than any wait below: it ends when released

    @task(name="t.to_thread", registry=registry)
    async def in_thread():
        await asyncio.to_thread(wait_for_release)

    @task(name="t.async_fail", registry=registry, max_retry=0)
    async def fail():
        raise ValueError("at once")

    try:
        make_worker(concurrency=executor_size + 2)
        for _ in range(executor_size):
            client.enqueue(in_thread)
        wait_until(lambda: len(blocked) == executor_size, SOON, message="the default executor full")
        failed = client.enqueue(fail)
        archived = wait_state(inspector, "default", failed.id, "archived")
        assert len(blocked) == executor_size and not release.is_set()  # still blocked meanwhile
    finally:
        release.set()
    assert archived.last_error.startswith("ValueError: at once")


def test_a_dequeue_cut_short_by_its_byte_budget_is_followed_by_another(make_worker, client, registry):
    """A dequeue stops once it has read 4 MB of messages (nine of 500 KB here), leaving tasks pending.
    The worker must ask again at once, not take the short batch for an empty queue and wait for a
    wake-up that never comes (the list never turned empty) or its poll (an hour here): the 20 handlers
    wait for each other, so none finishes until all 20 have started."""
    started: list[int] = []
    all_started = threading.Event()

    @task(name="t.big", registry=registry)
    def big(n: int, pad: str) -> None:
        started.append(n)
        if len(started) == 20:
            all_started.set()
        all_started.wait(SOON)

    client.enqueue_many([big.request(n=n, pad="x" * 500_000) for n in range(20)])
    make_worker(concurrency=20, prefetch=0, fetch_poll_interval=3600)
    wait_until(all_started.is_set, SOON, message="all 20 handlers started")
    assert sorted(started) == list(range(20))


def test_without_retention_a_completed_task_is_deleted(make_worker, client, inspector, registry, redis_client):
    ran = threading.Event()

    @task(name="t.noop", registry=registry)
    def noop():
        ran.set()
        return "ignored"

    info = client.enqueue(noop)
    make_worker()

    wait_until(lambda: ran.is_set() and not task_hash(redis_client, inspector, "default", info.id),
               SOON, message="task hash deleted")
    stats = inspector.queue_info("default")
    assert (stats.processed_today, stats.completed, stats.active, stats.pending) == (1, 0, 0, 0)


def test_completed_task_is_deleted_by_the_janitor_after_its_retention(make_worker, client, inspector, registry,
                                                                      redis_client):
    @task(name="t.kept", registry=registry)
    def kept():
        return 1

    info = client.enqueue(kept, retention=0.5)
    make_worker()

    assert wait_state(inspector, "default", info.id, "completed").result == 1
    wait_until(lambda: not task_hash(redis_client, inspector, "default", info.id), SOON,
               message="the janitor to delete the completed task")
    assert inspector.count("default", "completed") == 0


def test_current_task_outside_a_handler_raises():
    with pytest.raises(RuntimeError, match="outside a running queuecore task"):
        current_task()


# -- retries ----------------------------------------------------------------------------------------


def test_failing_handler_is_retried_then_archived_with_its_last_error(make_worker, client, inspector, registry):
    attempts = []
    delays = []

    def retry_delay(n, error):
        delays.append((n, error))
        return 0.05

    @task(name="t.fail", registry=registry, max_retry=3)
    def fail(n):
        attempts.append(current_task().retried)
        raise ValueError(f"boom {n}")

    info = client.enqueue(fail, {"n": 7})
    make_worker(retry_delay=retry_delay)

    archived = wait_state(inspector, "default", info.id, "archived")
    assert attempts == [0, 1, 2, 3]
    assert [n for n, _ in delays] == [0, 1, 2]
    assert all(isinstance(e, ValueError) and str(e) == "boom 7" for _, e in delays)
    assert archived.retried == 3
    assert archived.last_error.startswith("ValueError: boom 7")
    assert "raise ValueError" in archived.last_error  # the handler's traceback is kept
    stats = inspector.queue_info("default")
    assert (stats.processed_today, stats.failed_today, stats.archived, stats.retry) == (4, 4, 1, 0)


def test_retry_waits_for_the_configured_delay_and_is_forwarded(make_worker, client, inspector, registry,
                                                               redis_client):
    starts = []

    @task(name="t.once", registry=registry)
    def once():
        starts.append(time.time())
        if len(starts) == 1:
            raise RuntimeError("first attempt fails")
        return "second"

    info = client.enqueue(once, retention=60)
    worker = make_worker(retry_delay=lambda n, e: 0.75)

    retrying = wait_state(inspector, "default", info.id, "retry")
    assert retrying.retried == 1
    assert retrying.last_error.startswith("RuntimeError: first attempt fails")
    due_ms = redis_client.zscore(worker.keys.queue("default").retry, info.id)
    failed_ms = int(task_hash(redis_client, worker, "default", info.id)["failed_at"])
    assert abs(due_ms - (failed_ms + 750)) <= 1

    done = wait_state(inspector, "default", info.id, "completed")
    assert done.result == "second"
    assert len(starts) == 2
    assert starts[1] >= due_ms / 1000 - 0.005  # not run before it was due


def test_task_retry_delay_overrides_the_worker_policy(make_worker, client, inspector, registry):
    calls = []

    def per_task(n, error):
        calls.append((n, str(error)))
        return 0.05

    @task(name="t.flaky", registry=registry, retry_delay=per_task)
    def flaky():
        if current_task().retried < 2:
            raise OSError("not yet")
        return "ok"

    info = client.enqueue(flaky, retention=60)
    make_worker(retry_delay=lambda n, e: 3600)  # would park the task for an hour

    done = wait_state(inspector, "default", info.id, "completed")
    assert done.result == "ok"
    assert done.retried == 2
    assert calls == [(0, "not yet"), (1, "not yet")]


def test_skip_retry_archives_at_once(make_worker, client, inspector, registry):
    runs = []

    @task(name="t.skip", registry=registry, max_retry=5)
    def skip():
        runs.append(1)
        raise SkipRetry("permanent failure")

    info = client.enqueue(skip)
    make_worker(retry_delay=fast_retry)

    archived = wait_state(inspector, "default", info.id, "archived")
    assert runs == [1]
    assert archived.retried == 0
    assert "SkipRetry: permanent failure" in archived.last_error
    assert inspector.queue_info("default").failed_today == 1


def test_error_handler_is_called_with_context_and_error(make_worker, client, inspector, registry):
    raised = []
    calls = []

    def on_error(ctx, error):
        calls.append((ctx.id, ctx.retried, error))

    @task(name="t.err", registry=registry, max_retry=1)
    def err():
        exc = KeyError(f"missing {len(raised)}")
        raised.append(exc)
        raise exc

    info = client.enqueue(err)
    make_worker(retry_delay=fast_retry, error_handler=on_error)

    wait_state(inspector, "default", info.id, "archived")
    assert [(task_id, retried) for task_id, retried, _ in calls] == [(info.id, 0), (info.id, 1)]
    assert [error for _, _, error in calls] == raised
    assert all(calls[i][2] is raised[i] for i in range(2))


@pytest.mark.parametrize("broken", [RuntimeError("hook is broken"), SystemExit(3)], ids=["exception", "SystemExit"])
def test_an_error_handler_that_raises_does_not_stop_the_retry(make_worker, client, inspector, registry, broken):
    """Even a BaseException from the hook (a review: SystemExit skipped the outcome's write, and the task
    waited for its lease to expire to be recovered as lost)."""
    def on_error(ctx, error):
        raise broken

    @task(name="t.err2", registry=registry, max_retry=1)
    def err2():
        if current_task().retried == 0:
            raise ValueError("first")
        return "fine"

    info = client.enqueue(err2, retention=60)
    make_worker(retry_delay=fast_retry, error_handler=on_error)

    done = wait_state(inspector, "default", info.id, "completed")
    assert done.result == "fine"
    first = done.attempts[0]  # written by its worker, not recovered as lost
    assert (first.result, first.error, first.worker is not None) == ("retry", "ValueError: first", True)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 5, 10])
def test_default_retry_delay_follows_the_sidekiq_curve(n):
    base = n**4 + 15
    values = [default_retry_delay(n, RuntimeError("x")) for _ in range(400)]
    assert all(base <= v <= base + 29 * (n + 1) for v in values)
    assert all((v - base) % (n + 1) == 0 for v in values)  # rand(30) * (n + 1)
    assert len(set(values)) > 10  # jittered, not a constant
    assert min(values) < base + 10 * (n + 1) and max(values) > base + 19 * (n + 1)


def test_negative_max_retry_retries_forever(make_worker, client, inspector, registry):
    attempts = []

    @task(name="t.forever", registry=registry, max_retry=-1)
    def forever():
        attempts.append(current_task().retried)
        raise RuntimeError("again")

    info = client.enqueue(forever)
    make_worker(retry_delay=lambda n, e: 0.01)

    wait_until(lambda: len(attempts) > 8, SOON, message="more than 8 attempts")
    assert attempts[:9] == list(range(9))
    current = inspector.get_task("default", info.id)
    assert current.state != TaskState.ARCHIVED
    assert current.retried >= 8
    assert inspector.count("default", "archived") == 0


# -- archive bounds ---------------------------------------------------------------------------------


def test_archive_keeps_at_most_max_archive_size_tasks(make_worker, client, inspector, registry, redis_client):
    @task(name="t.dead", registry=registry)
    def dead(i):
        raise SkipRetry(f"dead {i}")

    ids = [client.enqueue(dead, {"i": i}).id for i in range(8)]
    worker = make_worker(max_archive_size=5)

    wait_until(lambda: inspector.queue_info("default").failed_today == 8, SOON, message="8 failures")
    archived = set(redis_client.zrange(worker.keys.queue("default").archived, 0, -1))
    existing = {i for i in ids if task_hash(redis_client, worker, "default", i)}
    assert len(archived) == 5
    assert existing == archived  # trimmed tasks have their hashes deleted too


def test_an_archive_an_operator_filled_is_trimmed_to_max_archive_size(make_worker, client, inspector,
                                                                      redis_client):
    """archive_all writes no trim of its own: the worker's janitor brings the archive back to its bound,
    deleting the oldest (their hashes too)."""
    ids = [h.id for h in client.enqueue_many([("t.later", {"i": i}) for i in range(30)])]
    assert inspector.archive_all("default", "pending").count == 30
    worker = make_worker(max_archive_size=10, janitor_interval=0.2)
    archived_key = worker.keys.queue("default").archived
    wait_until(lambda: redis_client.zcard(archived_key) == 10, SOON, message="the archive trimmed to 10")
    kept = set(redis_client.zrange(archived_key, 0, -1))
    assert {i for i in ids if task_hash(redis_client, worker, "default", i)} == kept


def test_janitor_deletes_archived_tasks_older_than_archive_max_age(make_worker, client, inspector, registry,
                                                                   redis_client):
    @task(name="t.dead2", registry=registry)
    def dead2(i):
        raise SkipRetry("dead")

    old = client.enqueue(dead2, {"i": 1})
    fresh = client.enqueue(dead2, {"i": 2})
    worker = make_worker(archive_max_age=3600)
    wait_state(inspector, "default", old.id, "archived")
    wait_state(inspector, "default", fresh.id, "archived")

    archived_key = worker.keys.queue("default").archived
    two_hours_ago_ms = int((time.time() - 7200) * 1000)
    redis_client.zadd(archived_key, {old.id: two_hours_ago_ms}, xx=True)

    wait_until(lambda: not task_hash(redis_client, worker, "default", old.id), SOON,
               message="the janitor to delete the old archived task")
    assert redis_client.zscore(archived_key, old.id) is None
    assert inspector.get_task("default", fresh.id).state == TaskState.ARCHIVED
    assert redis_client.zscore(archived_key, fresh.id) is not None


# -- scheduled tasks and waking up ------------------------------------------------------------------


def test_scheduled_task_runs_once_due_and_wakes_an_idle_worker(make_worker, client, inspector, registry):
    started = []

    @task(name="t.later", registry=registry)
    def later():
        started.append(time.time())
        return "ran"

    make_worker(fetch_poll_interval=30)  # only the forwarder's wake-up can start it promptly
    info = client.enqueue(later, process_in=0.3, retention=60)
    assert info.state == TaskState.SCHEDULED
    due = info.next_process_at.timestamp()

    done = wait_state(inspector, "default", info.id, "completed", timeout=3)
    assert done.result == "ran"
    assert len(started) == 1
    assert started[0] >= due - 0.005


def test_tasks_scheduled_or_retried_between_forwarder_rounds_start_at_their_time(make_worker, client, inspector,
                                                                                registry):
    attempts: list[float] = []

    @task(name="t.soon", registry=registry, retry_delay=lambda n, e: 0.3)
    def soon(fail):
        attempts.append(time.time())
        if fail and len(attempts) == 2:
            raise RuntimeError("once")
        return "ran"

    worker = make_worker(forward_interval=3600)  # after its first round the forwarder would sleep an hour
    wait_until(lambda: worker.forwarder.rounds >= 1 and worker.subscriber.subscribed.is_set(), SOON,
               message="the forwarder's first round and the subscription")
    scheduled = client.enqueue(soon, {"fail": False}, process_in=0.3, retention=60)  # told by the enqueue script
    assert wait_state(inspector, "default", scheduled.id, "completed", timeout=10).result == "ran"
    assert attempts[0] >= scheduled.next_process_at.timestamp() - 0.005
    retried = client.enqueue(soon, {"fail": True}, retention=60)  # its retry is told by the worker's recorder
    done = wait_state(inspector, "default", retried.id, "completed", timeout=10)
    assert (done.result, done.retried, len(attempts)) == ("ran", 1, 3)
    assert attempts[2] - attempts[1] >= 0.3 - 0.005


def test_idle_worker_starts_a_new_task_promptly_via_pubsub_wake(make_worker, client, inspector, registry):
    @task(name="t.wake", registry=registry)
    def wake(i):
        return i

    worker = make_worker(fetch_poll_interval=30)
    first = client.enqueue(wake, {"i": 1}, retention=60)
    wait_state(inspector, "default", first.id, "completed", timeout=3)
    wait_until(worker.subscriber.subscribed.is_set, SOON, message="subscribed")

    # Every later task arrives while the fetcher sleeps in its 30 s poll.
    for i in range(2, 5):
        let_worker_run(inspector, worker, beats=2)  # the fetcher has long found nothing and gone to sleep
        info = client.enqueue(wake, {"i": i}, retention=60)
        assert wait_state(inspector, "default", info.id, "completed", timeout=3).result == i


def test_an_idle_worker_takes_a_woken_task_on_the_subscribers_thread(make_worker, client, inspector, registry,
                                                                     redis_client):
    """While the fetcher is parked (every queue drained), the wake-up's own thread fetches: the task
    starts a thread hop sooner. Tasks are not taken on that thread while the fetcher is busy. (The
    worker is taken off the list of waiting workers, so that the task is not pushed to it:
    tests/core/test_push.py.)"""
    ran_on: list[str] = []

    @task(name="t.woken", registry=registry)
    def woken() -> None:
        ran_on.append(threading.current_thread().name)

    worker = make_worker(fetch_poll_interval=30)
    wait_until(lambda: worker.subscriber.subscribed.is_set() and worker.processor._parked, SOON,
               message="the fetcher parked, waiting for a wake-up")
    idle = worker.keys.queue("default").idle
    wait_until(lambda: redis_client.zcard(idle) == 1, SOON, message="the worker to list itself as waiting")
    redis_client.delete(idle)  # listed again only when a handler ends, or at the next poll (30 s)
    let_worker_run(inspector, worker, beats=2)  # the start-up's fetches are over
    assert redis_client.zcard(idle) == 0
    before = worker.processor.fetched_on_wake
    info = client.enqueue(woken, retention=60)
    wait_state(inspector, "default", info.id, "completed", timeout=3)
    assert worker.processor.fetched_on_wake == before + 1 and worker.processor.pushed == 0
    assert ran_on and ran_on[0].startswith("queuecore-handler")


def test_a_wake_up_bringing_more_tasks_than_free_slots_runs_them_all(make_worker, client, inspector, registry):
    """The subscriber's thread takes what the free slots hold; the parked fetcher is woken for the rest
    (with a 30 s poll, a task left behind would wait 30 s)."""
    release = threading.Event()
    ran: list[int] = []

    @task(name="t.many", registry=registry)
    def many(i: int) -> None:
        release.wait(10)
        ran.append(i)

    worker = make_worker(fetch_poll_interval=30, concurrency=2, prefetch=0)
    wait_until(lambda: worker.subscriber.subscribed.is_set() and worker.processor._parked, SOON,
               message="the fetcher parked, waiting for a wake-up")
    client.enqueue_many([(many.name, {"i": i}) for i in range(10)])  # one wake-up: the list turned non-empty
    wait_until(lambda: worker.processor.fetched_on_wake >= 1, SOON, message="a fetch on the subscriber's thread")
    release.set()
    wait_until(lambda: len(ran) == 10, 5, message="all ten tasks")
    assert sorted(ran) == list(range(10))


# -- bad task data ----------------------------------------------------------------------------------


def test_unknown_task_type_is_retried_with_an_error_naming_the_type(make_worker, client, inspector, registry):
    @task(name="t.known", registry=registry)
    def known():
        return "known"

    unknown = client.enqueue("t.nobody_handles_this", {"x": 1}, max_retry=1)
    worker = make_worker(retry_delay=fast_retry)

    archived = wait_state(inspector, "default", unknown.id, "archived")
    assert archived.retried == 1
    assert "t.nobody_handles_this" in archived.last_error
    assert "no handler is registered" in archived.last_error

    later = client.enqueue(known, retention=60)  # the worker goes on
    assert wait_state(inspector, "default", later.id, "completed").result == "known"
    assert worker.status == "active"


def test_undecodable_message_is_archived_with_a_decode_error(make_worker, client, inspector, registry,
                                                             redis_client):
    @task(name="t.fine", registry=registry)
    def fine():
        return "fine"

    broken = client.enqueue(fine, max_retry=5)
    q = inspector.keys.queue("default")
    redis_client.hset(q.task(broken.id), "msg", "{not json at all")
    good = client.enqueue(fine, retention=60)
    make_worker()

    archived = wait_state(inspector, "default", broken.id, "archived")
    assert "TaskDecodeError" in archived.last_error
    assert "not valid JSON" in archived.last_error
    assert archived.decode_error is not None
    assert wait_state(inspector, "default", good.id, "completed").result == "fine"


def test_pending_id_without_a_hash_is_logged_and_skipped(make_worker, client, inspector, registry, redis_client,
                                                         caplog):
    caplog.set_level(logging.ERROR, logger="queuecore.worker")

    @task(name="t.after", registry=registry)
    def after():
        return "after"

    q = inspector.keys.queue("default")
    redis_client.sadd(inspector.keys.queues, "default")
    redis_client.lpush(q.pending, "ghost-task")
    real = client.enqueue(after, retention=60)
    make_worker()

    assert wait_state(inspector, "default", real.id, "completed").result == "after"
    wait_until(lambda: any("ghost-task" in r.getMessage() and "data is gone" in r.getMessage()
                           for r in caplog.records), SOON, message="the error log about ghost-task")
    assert redis_client.llen(q.pending) == 0
    assert redis_client.zcard(q.active) == 0
    assert task_or_none(inspector, "default", "ghost-task") is None


# -- more handler outcomes --------------------------------------------------------------------------


@pytest.mark.parametrize(("prefetch", "held"), [(0, 2), (None, 4), (1, 3)])
def test_concurrency_limits_how_many_tasks_run_at_once(make_worker, client, inspector, registry, prefetch, held):
    """At most ``concurrency`` handlers run; the worker leases ``prefetch`` more (default: as many)."""
    release = threading.Event()
    lock = threading.Lock()
    running = []
    most = []

    @task(name="t.limited", registry=registry)
    def limited(i):
        with lock:
            running.append(i)
            most.append(len(running))
        try:
            release.wait(SOON)
        finally:
            with lock:
                running.remove(i)

    infos = [client.enqueue(limited, {"i": i}, retention=60) for i in range(5)]
    worker = make_worker(concurrency=2, prefetch=prefetch)
    try:
        wait_until(lambda: len(running) == 2, SOON, message="two tasks running")
        wait_until(lambda: inspector.queue_info("default").active == held, SOON, message=f"{held} tasks held")
        let_worker_run(inspector, worker)
        stats = inspector.queue_info("default")
        assert (stats.active, stats.pending) == (held, 5 - held)
        assert len(running) == 2
    finally:
        release.set()
    for info in infos:
        wait_state(inspector, "default", info.id, "completed")
    assert max(most) == 2


def test_timeout_counts_from_when_the_handler_starts_not_when_it_was_fetched(make_worker, client, inspector,
                                                                              registry):
    """A task fetched ahead waits for a free handler; its timeout must not tick while it waits."""
    release = threading.Event()

    @task(name="t.hog", registry=registry)
    def hog():
        release.wait(SOON)

    @task(name="t.quick", registry=registry, timeout=0.5)
    def quick():
        return "ok"

    client.enqueue(hog)
    waiting = client.enqueue(quick, retention=60)
    make_worker(concurrency=1, prefetch=1)
    wait_until(lambda: inspector.queue_info("default").active == 2, SOON, message="both tasks held")
    start = time.monotonic()
    wait_until(lambda: time.monotonic() - start > 1.0, 5, message="longer than the waiting task's timeout")
    release.set()
    done = wait_state(inspector, "default", waiting.id, "completed")
    assert (done.retried, done.last_error) == (0, None)


def test_middleware_wraps_sync_and_async_handlers(make_worker, client, inspector, registry):
    calls = []

    def outer(ctx, call_next):
        calls.append(("outer", ctx.type))
        return call_next()

    def inner(ctx, call_next):
        calls.append(("inner", ctx.type))
        return call_next()

    @task(name="t.mw_sync", registry=registry)
    def mw_sync():
        calls.append(("handler", "t.mw_sync"))
        return "s"

    @task(name="t.mw_async", registry=registry)
    async def mw_async():
        calls.append(("handler", "t.mw_async"))
        return "a"

    sync_info = client.enqueue(mw_sync, retention=60)
    worker = make_worker(middleware=[outer, inner], concurrency=1)
    assert wait_state(inspector, "default", sync_info.id, "completed").result == "s"
    async_info = client.enqueue(mw_async, retention=60)
    assert wait_state(inspector, "default", async_info.id, "completed").result == "a"
    assert calls == [("outer", "t.mw_sync"), ("inner", "t.mw_sync"), ("handler", "t.mw_sync"),
                     ("outer", "t.mw_async"), ("inner", "t.mw_async"), ("handler", "t.mw_async")]
    assert worker.status == "active"


def test_a_result_that_is_not_json_is_kept_as_its_repr(make_worker, client, inspector, registry):
    @task(name="t.odd_result", registry=registry)
    def odd_result():
        return {1, 2}

    info = client.enqueue(odd_result, retention=60)
    make_worker()
    assert wait_state(inspector, "default", info.id, "completed").result == "{1, 2}"


@pytest.mark.parametrize("exc_type", [SystemExit, KeyboardInterrupt])
def test_handler_raising_system_exit_or_keyboard_interrupt_fails_the_task_not_the_worker(
        make_worker, client, inspector, registry, exc_type):
    @task(name="t.exit", registry=registry, max_retry=0)
    def exits():
        raise exc_type("bye")

    @task(name="t.then", registry=registry)
    def then():
        return "still here"

    info = client.enqueue(exits)
    worker = make_worker(concurrency=1)
    archived = wait_state(inspector, "default", info.id, "archived")
    assert f"handler raised {exc_type.__name__}" in archived.last_error

    later = client.enqueue(then, retention=60)
    assert wait_state(inspector, "default", later.id, "completed").result == "still here"
    assert worker.status == "active"


def test_payload_that_does_not_fit_the_handler_is_archived_at_once(make_worker, connection, inspector, registry):
    @task(name="t.strict_args", registry=registry)
    def strict_args(a):
        return a

    # A producer that does not know the handler's signature cannot check the payload.
    with Client(connection=connection, registry=TaskRegistry()) as producer:
        info = producer.enqueue("t.strict_args", {"b": 1}, max_retry=3)
    make_worker()

    archived = wait_state(inspector, "default", info.id, "archived")  # not retried: it would fail the same way
    assert archived.retried == 0
    assert archived.last_error.startswith("PayloadMismatch: payload does not fit task t.strict_args: ")
    assert "'a'" in archived.last_error


def test_an_error_handlers_time_is_not_the_attempts(make_worker, client, inspector, registry, fake_clock):
    """A review: the attempt's end (its history, its log line, the per-type durations) was taken after
    the error handler ran, so a slow reporter made every failed attempt look that much longer."""
    def on_error(ctx, error):
        fake_clock.advance(100)  # a reporter that takes 100 s

    @task(name="t.fails_fast", registry=registry, max_retry=0)
    def fails_fast():
        raise ValueError("at once")

    info = client.enqueue(fails_fast, retention=3600)
    # a lease longer than the reporter's 100 s: else the recoverer, on the same clock, may find the lease
    # expired and take the task back before the recorder writes (CI's ACL leg: an attempt with no start)
    make_worker(error_handler=on_error, clock=fake_clock, lease_duration=600)
    archived = wait_state(inspector, "default", info.id, "archived")
    (attempt,) = archived.attempts
    assert (attempt.ended_at - attempt.started_at).total_seconds() < 1
