"""Worker: cancelling, timing out and abandoning handlers; leases and fencing.

Handlers here block on events or spin in pure Python; every wait is on a condition.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest

from queuecore import TaskState, current_task, task
from tests.conftest import wait_until
from tests.core.worker_support import SOON, Gates, let_worker_run, steal_lease, task_hash, task_or_none, wait_state

CANCELLED = "cancelled by operator"


@pytest.fixture
def gates() -> Iterator[Gates]:
    with Gates() as g:
        yield g


def spin_forever() -> None:
    """A pure Python busy loop that checks nothing: only an asynchronous exception stops it."""
    x = 0
    while True:
        x += 1


# -- cancel -----------------------------------------------------------------------------------------


def test_operator_cancel_stops_a_busy_sync_handler(make_worker, client, inspector, registry):
    started = threading.Event()

    @task(name="t.spin", registry=registry, max_retry=5)
    def spin():
        started.set()
        spin_forever()

    info = client.enqueue(spin)
    make_worker()
    assert started.wait(SOON)
    wait_state(inspector, "default", info.id, "active")

    inspector.cancel_task("default", info.id)

    archived = wait_state(inspector, "default", info.id, "archived")
    assert archived.last_error == CANCELLED
    assert archived.retried == 0  # not retried, whatever max_retry says
    stats = inspector.queue_info("default")
    assert (stats.active, stats.retry, stats.failed_today) == (0, 0, 0)  # a cancel is not a failure


def test_sync_handler_can_poll_for_cancel_and_stop_itself(make_worker, client, inspector, registry):
    started = threading.Event()
    saw = []

    @task(name="t.poll", registry=registry)
    def poll():
        ctx = current_task()
        started.set()
        deadline = time.monotonic() + SOON
        while not ctx.cancelled and time.monotonic() < deadline:
            time.sleep(0.01)
        saw.append((ctx.cancelled, ctx.cancel_reason))
        ctx.raise_if_cancelled()
        return "not cancelled"

    info = client.enqueue(poll)
    make_worker(cancel_grace=60)  # the supervisor would wait a minute: only the handler's own check counts
    assert started.wait(SOON)

    inspector.cancel_task("default", info.id)

    archived = wait_state(inspector, "default", info.id, "archived")
    assert archived.last_error == CANCELLED
    assert saw == [(True, CANCELLED)]


def test_operator_cancel_stops_an_async_handler_promptly(make_worker, client, inspector, registry):
    started = threading.Event()
    cancelled = threading.Event()

    @task(name="t.async_sleep", registry=registry)
    async def sleeper():
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    info = client.enqueue(sleeper)
    make_worker(cancel_grace=60)  # an async handler is cancelled at once, without the grace
    assert started.wait(SOON)
    wait_state(inspector, "default", info.id, "active")

    inspector.cancel_task("default", info.id)

    archived = wait_state(inspector, "default", info.id, "archived", timeout=3)
    assert archived.last_error == CANCELLED
    assert cancelled.is_set()


def test_async_handler_cleanup_after_cancel_is_not_cancelled_again(make_worker, client, inspector, registry):
    """One cancel request interrupts once: later lease renewals must not cancel the handler's cleanup."""
    started = threading.Event()
    cleanup = []

    @task(name="t.async_cleanup", registry=registry)
    async def tidy():
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cleanup.append("begun")
            await asyncio.sleep(0.6)  # several heartbeats (0.2 s) happen meanwhile
            cleanup.append("finished")
            raise

    info = client.enqueue(tidy)
    make_worker(abandon_grace=5)
    assert started.wait(SOON)
    wait_state(inspector, "default", info.id, "active")

    inspector.cancel_task("default", info.id)

    archived = wait_state(inspector, "default", info.id, "archived")
    assert archived.last_error == CANCELLED
    assert cleanup == ["begun", "finished"]


def test_cancel_flag_is_picked_up_by_lease_renewal_without_pubsub(make_worker, client, inspector, registry,
                                                                   redis_client):
    started = threading.Event()
    stopped = []

    @task(name="t.spin2", registry=registry)
    def spin2():
        started.set()
        try:
            spin_forever()
        except BaseException as exc:
            stopped.append(type(exc).__name__)
            raise

    info = client.enqueue(spin2)
    worker = make_worker(lease_duration=60)  # the lease never expires here: the recoverer plays no part
    assert started.wait(SOON)
    wait_state(inspector, "default", info.id, "active")

    # What admin_cancel_task does, minus the PUBLISH: as if the worker missed the message.
    redis_client.hset(worker.keys.queue("default").task(info.id), "cancel", "1")

    archived = wait_state(inspector, "default", info.id, "archived")
    assert archived.last_error == CANCELLED
    assert stopped == ["TaskCancelled"]


@pytest.mark.parametrize("by", ["pubsub", "lease renewal"])
def test_a_cancel_stops_only_the_task_of_its_queue_not_one_with_the_same_id_elsewhere(
        make_worker, client, inspector, registry, redis_client, gates, by):
    """A review: a task id is unique within its queue only, but the worker matched a cancel by id alone,
    so cancelling ``a:job-1`` also archived ``b:job-1`` as cancelled by operator."""
    release = gates.new()
    running: list[str] = []

    @task(name="t.blocks", registry=registry, max_retry=5)
    def blocks():
        running.append(current_task().queue)
        release.wait(30)

    worker = make_worker(queues={"a": 1, "b": 1}, lease_duration=60, cancel_grace=0.2)
    client.enqueue(blocks, queue="a", task_id="job-1")
    client.enqueue(blocks, queue="b", task_id="job-1")
    wait_until(lambda: sorted(running) == ["a", "b"], SOON, message="both tasks to run")
    if by == "pubsub":
        inspector.cancel_task("a", "job-1")
    else:  # what admin_cancel_task does, minus the PUBLISH
        redis_client.hset(worker.keys.queue("a").task("job-1"), "cancel", "1")
    archived = wait_state(inspector, "a", "job-1", "archived")
    assert archived.last_error == CANCELLED
    (other,) = [r for r in worker.processor.held.snapshot() if (r.queue, r.id) == ("b", "job-1")]
    # a cancel matched by id alone reached it in the same call as a's
    assert other.ctx.cancel_reason is None
    assert inspector.get_task("b", "job-1").state == TaskState.ACTIVE
    assert "cancel" not in task_hash(redis_client, worker, "b", "job-1")
    release.set()
    wait_until(lambda: task_or_none(inspector, "b", "job-1") is None, SOON, message="b's task to complete")


@pytest.mark.parametrize("ending", ["fails", "snoozes"])
def test_a_cancelled_task_whose_handler_fails_or_snoozes_within_its_grace_is_archived(
        make_worker, client, inspector, registry, gates, ending):
    """A review: an accepted cancel was lost when the handler, not checking ``cancelled``, ended on its
    own within ``cancel_grace`` by failing or snoozing: the task was retried or parked (and the stored
    cancel flag dropped), so it ran again and again."""
    from queuecore import Snooze

    cancelled = gates.new()
    runs: list[str | None] = []

    @task(name="t.ends_on_its_own", registry=registry, max_retry=5)
    def ends_on_its_own():
        runs.append(current_task().cancel_reason)
        cancelled.wait(30)  # the test's cancel has reached the worker
        if ending == "fails":
            raise ValueError("upstream not ready")
        raise Snooze(0.05)

    worker = make_worker(cancel_grace=30)
    info = client.enqueue(ends_on_its_own)
    wait_until(lambda: runs, SOON, message="the handler to start")
    inspector.cancel_task("default", info.id)
    wait_until(lambda: [r for r in worker.processor.held.snapshot() if r.ctx.cancel_reason], SOON,
               message="the cancel to reach the worker")
    cancelled.set()
    archived = wait_state(inspector, "default", info.id, "archived")
    assert archived.last_error == CANCELLED and archived.retried == 0
    assert runs == [None]


# -- timeouts and deadlines -------------------------------------------------------------------------


def test_timeout_interrupts_a_busy_handler_and_retries_it(make_worker, client, inspector, registry):
    attempts = []

    @task(name="t.slowpoke", registry=registry, timeout=0.3, max_retry=1)
    def slowpoke():
        attempts.append(current_task().retried)
        spin_forever()

    info = client.enqueue(slowpoke)
    make_worker(retry_delay=lambda n, e: 0.05)

    archived = wait_state(inspector, "default", info.id, "archived")
    assert attempts == [0, 1]
    assert archived.retried == 1
    assert archived.last_error.startswith("TaskTimeout: timed out after 0.3s")
    assert inspector.queue_info("default").failed_today == 2


def test_timeout_with_no_retries_left_archives_at_once(make_worker, client, inspector, registry):
    runs = []

    @task(name="t.slowpoke0", registry=registry, timeout=0.3, max_retry=0)
    def slowpoke0():
        runs.append(1)
        spin_forever()

    info = client.enqueue(slowpoke0)
    make_worker(retry_delay=lambda n, e: 0.05)

    archived = wait_state(inspector, "default", info.id, "archived")
    assert runs == [1]
    assert "timed out after 0.3s" in archived.last_error


def test_async_handler_times_out(make_worker, client, inspector, registry):
    @task(name="t.async_slow", registry=registry, timeout=0.3, max_retry=0)
    async def async_slow():
        await asyncio.sleep(60)

    info = client.enqueue(async_slow)
    make_worker()

    archived = wait_state(inspector, "default", info.id, "archived", timeout=5)
    assert archived.last_error.startswith("TaskTimeout: timed out after 0.3s")


def test_deadline_bounds_an_attempt(make_worker, client, inspector, registry):
    """An attempt the task's deadline stops is archived at once, whatever retries are left (a review: it
    was retried, and the retry, starting after the deadline, archived it a retry delay later)."""
    seen = []

    @task(name="t.deadline", registry=registry, max_retry=5)
    def deadline_bound():
        seen.append(current_task().deadline)
        spin_forever()

    deadline = time.time() + 0.5
    info = client.enqueue(deadline_bound, deadline=deadline, retention=60)
    make_worker(retry_delay=lambda retried, error: 30.0)

    archived = wait_state(inspector, "default", info.id, "archived")
    assert seen == [pytest.approx(deadline, abs=1e-3)]
    assert archived.last_error.startswith("DeadlinePassed: the task's deadline was reached after 0.")
    assert archived.retried == 0 and len(archived.attempts) == 1


def test_a_timeout_shorter_than_the_deadline_is_still_retried(make_worker, client, inspector, registry):
    @task(name="t.timeout_first", registry=registry, max_retry=1, timeout=0.3)
    def timeout_first():
        spin_forever()

    info = client.enqueue(timeout_first, deadline=time.time() + 600, retention=60)
    make_worker(retry_delay=lambda retried, error: 0.0)
    archived = wait_state(inspector, "default", info.id, "archived")
    assert archived.retried == 1 and archived.last_error.startswith("TaskTimeout: timed out after 0.3s")


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_task_past_its_deadline_is_archived_without_running(make_worker, client, inspector, registry, kind):
    """The deadline is when an attempt must be over: one that would start after it does not call the
    handler (whose side effects would come too late), and is not retried (a retry starts later still)."""
    ran = []

    if kind == "sync":
        @task(name="t.late", registry=registry, max_retry=5)
        def late() -> str:
            ran.append(1)
            return "ran"
    else:
        @task(name="t.late", registry=registry, max_retry=5)
        async def late() -> str:
            ran.append(1)
            return "ran"

    past = client.enqueue("t.late", {}, deadline=time.time() - 100, retention=60)
    future = client.enqueue("t.late", {}, deadline=time.time() + 600, retention=60)
    make_worker()
    archived = wait_state(inspector, "default", past.id, "archived")
    assert archived.retried == 0
    assert archived.last_error.startswith("DeadlinePassed: the task's deadline passed 1m 4")  # 100 s and a little
    assert "its handler was not run" in archived.last_error
    assert wait_state(inspector, "default", future.id, "completed").result == "ran"
    assert ran == [1]  # the task in time only


def test_handler_blocked_in_c_is_abandoned_and_its_slot_freed(make_worker, client, inspector, registry, gates):
    release = gates.new()
    finished = threading.Event()

    @task(name="t.stuck", registry=registry, timeout=0.3, max_retry=0)
    def stuck():
        try:
            release.wait(30)  # blocks in C: the timeout's asynchronous exception cannot land
        finally:
            finished.set()

    @task(name="t.next", registry=registry)
    def next_one():
        return "ran"

    blocked = client.enqueue(stuck)
    worker = make_worker(concurrency=1, abandon_grace=0.5)
    wait_state(inspector, "default", blocked.id, "active")
    after = client.enqueue(next_one, retention=60)

    archived = wait_state(inspector, "default", blocked.id, "archived")
    assert "timed out after 0.3s" in archived.last_error
    assert "abandoned" in archived.last_error
    assert not finished.is_set()  # its thread still runs, but no longer holds the slot
    assert wait_state(inspector, "default", after.id, "completed").result == "ran"

    release.set()  # the abandoned handler returns at last: its outcome is ignored
    assert finished.wait(SOON)
    pool = worker.processor.pool  # the abandoned thread leaves the pool once its (ignored) outcome is handled
    wait_until(lambda: pool.threads == 1, SOON, message="the abandoned thread to exit")
    assert inspector.get_task("default", blocked.id).state == TaskState.ARCHIVED
    assert inspector.queue_info("default").failed_today == 1


# -- leases and fencing -----------------------------------------------------------------------------


def test_long_cpu_bound_handler_keeps_its_lease_and_completes_once(make_worker, client, inspector, registry):
    runs = []

    @task(name="t.cpu", registry=registry)
    def cpu():
        runs.append(current_task().retried)
        end = time.monotonic() + 2.5
        x = 0
        while time.monotonic() < end:
            x += 1
        return "done"

    info = client.enqueue(cpu, retention=60)
    make_worker(lease_duration=1.0, heartbeat_interval=0.2, recover_interval=0.1)

    done = wait_state(inspector, "default", info.id, "completed")
    assert done.result == "done"
    assert runs == [0]
    assert done.retried == 0 and done.last_error is None
    stats = inspector.queue_info("default")
    assert (stats.processed_today, stats.failed_today) == (1, 0)


def test_ack_after_a_stolen_lease_is_refused(make_worker, client, inspector, registry, redis_client, gates):
    first_release = gates.new()
    second_release = gates.new()
    runs = []
    attempts = iter(range(1, 100))

    @task(name="t.fenced", registry=registry)
    def fenced():
        n = next(attempts)
        runs.append(f"start {n} retried={current_task().retried}")
        (first_release if n == 1 else second_release).wait(SOON)
        runs.append(f"end {n}")
        return f"run {n}"

    info = client.enqueue(fenced, retention=60)
    # Slow heartbeats: the worker does not notice the theft itself, so its first ack reaches Redis.
    worker = make_worker(concurrency=1, prefetch=0, heartbeat_interval=30, lease_duration=60)
    q = worker.keys.queue("default")
    wait_until(lambda: runs == ["start 1 retried=0"], SOON, message="first run")
    first_lease = int(task_hash(redis_client, worker, "default", info.id)["lease"])

    # The lease "expires": the recoverer hands the task back to pending (as it would for a dead worker).
    steal_lease(redis_client, worker, "default", info.id)
    stolen = task_hash(redis_client, worker, "default", info.id)
    assert (stolen["state"], stolen["retried"]) == ("pending", "1")

    first_release.set()  # the first run returns; its ack carries lease 1 and must be refused
    wait_until(lambda: "start 2 retried=1" in runs, SOON, message="second run")
    assert runs[:3] == ["start 1 retried=0", "end 1", "start 2 retried=1"]
    during = task_hash(redis_client, worker, "default", info.id)
    assert during["state"] == "active" and int(during["lease"]) > first_lease
    assert "result" not in during and "completed_at" not in during
    assert redis_client.zcard(q.completed) == 0

    second_release.set()
    done = wait_state(inspector, "default", info.id, "completed")
    assert done.result == "run 2"
    assert runs == ["start 1 retried=0", "end 1", "start 2 retried=1", "end 2"]
    stats = inspector.queue_info("default")
    assert (stats.processed_today, stats.failed_today) == (2, 1)  # the recovery counted as a failure


def test_lease_lost_is_noticed_by_renewal_and_the_handler_is_stopped(make_worker, client, inspector, registry,
                                                                      redis_client):
    runs = []

    @task(name="t.lost", registry=registry)
    def lost():
        ctx = current_task()
        runs.append(("start", ctx.retried))
        if ctx.retried == 0:
            try:
                ctx.wait_cancelled(SOON)  # interrupted (TaskCancelled) as soon as the loss is noticed
                runs.append("not interrupted")
            finally:
                runs.append(("stopped", ctx.cancel_reason))
        return f"retried {ctx.retried}"

    info = client.enqueue(lost, retention=60)
    worker = make_worker(concurrency=1, lease_duration=60, recover_interval=60)
    wait_until(lambda: runs == [("start", 0)], SOON, message="first run")

    steal_lease(redis_client, worker, "default", info.id)

    done = wait_state(inspector, "default", info.id, "completed")
    assert done.result == "retried 1"
    assert runs == [("start", 0), ("stopped", "lease lost"), ("start", 1)]
    stats = inspector.queue_info("default")
    assert (stats.processed_today, stats.failed_today) == (2, 1)  # the recovered attempt, then the success


def test_a_rerun_on_the_same_worker_is_tracked_apart_from_its_stale_run(make_worker, client, inspector, registry,
                                                                         redis_client, gates):
    """After losing a lease, the same worker may fetch the task again while the stale run still goes on.

    The stale run finishing must not make the worker forget the new run (whose lease it must renew).
    """
    first_release = gates.new()
    second_release = gates.new()
    runs = []
    attempts = iter(range(1, 100))

    @task(name="t.rerun", registry=registry)
    def rerun():
        n = next(attempts)
        runs.append(("start", n))
        try:
            (first_release if n == 1 else second_release).wait(SOON)
        finally:
            runs.append(("end", n))
        return f"run {n}"

    info = client.enqueue(rerun, retention=60)
    worker = make_worker(concurrency=2, lease_duration=1.0, recover_interval=0.1)
    wait_until(lambda: runs == [("start", 1)], SOON, message="first run")
    first_lease = int(task_hash(redis_client, worker, "default", info.id)["lease"])

    steal_lease(redis_client, worker, "default", info.id)
    wait_until(lambda: ("start", 2) in runs, SOON, message="the same worker to fetch the task again")

    first_release.set()
    wait_until(lambda: ("end", 1) in runs, SOON, message="the stale run to end")
    let_worker_run(inspector, worker, beats=8)  # 1.6 s: past the 1 s lease unless it is renewed

    assert [entry for entry in runs if entry[0] == "start"] == [("start", 1), ("start", 2)]
    current = task_hash(redis_client, worker, "default", info.id)
    assert (current["state"], current["retried"]) == ("active", "1") and int(current["lease"]) > first_lease
    assert [w.task_id for w in inspector.workers()] == [info.id]

    second_release.set()
    done = wait_state(inspector, "default", info.id, "completed")
    assert done.result == "run 2"
    assert [entry for entry in runs if entry[0] == "start"] == [("start", 1), ("start", 2)]


def test_own_recoverer_renews_instead_of_taking_back_its_running_task(make_worker, client, inspector, registry,
                                                                       redis_client):
    release = threading.Event()
    runs = []

    @task(name="t.own_lease", registry=registry)
    def own_lease():
        runs.append("start")
        release.wait(SOON)
        return "done"

    info = client.enqueue(own_lease, retention=60)
    worker = make_worker(concurrency=1, heartbeat_interval=30, lease_duration=60, recover_interval=60)
    wait_until(lambda: runs == ["start"], SOON, message="the run to start")
    # the worker's own recoverer has had its first round (its next is a minute away): a round of it
    # between the lease expiry below and the test's round would take the task back (seen on a loaded CI)
    wait_until(lambda: worker.recoverer.rounds >= 1, SOON, message="the worker's first recovery round")
    q = worker.keys.queue("default")
    redis_client.zadd(q.active, {info.id: 0}, xx=True)  # as if an outage had outlasted the lease
    assert worker.recoverer.run_once() == (0, 0, 0)
    assert redis_client.zscore(q.active, info.id) > 0  # renewed, not taken back
    release.set()
    assert wait_state(inspector, "default", info.id, "completed").retried == 0
    assert runs == ["start"]


# -- attempts fetched ahead, still waiting for a handler slot ----------------------------------------


@pytest.fixture
def one_slot_hogged(make_worker, client, inspector, registry) -> Iterator[tuple[str, list[int]]]:
    """A worker with one handler slot, taken by a task that waits until the test ends, and one task
    fetched ahead behind it (``prefetch=1``). Yields the hog's id and the list the task type
    ``t.behind`` (max 5 retries) appends to when it runs; ``t.behind`` tasks enqueued by the test
    wait for the slot."""
    release = threading.Event()
    ran: list[int] = []

    @task(name="t.hog", registry=registry)
    def hog():
        release.wait(3 * SOON)  # longer than any wait in a test: it ends when released

    @task(name="t.behind", registry=registry, max_retry=5)
    def behind():
        ran.append(1)

    hogging = client.enqueue(hog)
    make_worker(concurrency=1, prefetch=1, cancel_grace=60, abandon_grace=1.0)
    wait_state(inspector, "default", hogging.id, "active")
    try:
        yield hogging.id, ran
    finally:
        release.set()


def test_a_deadline_passing_while_a_task_waits_for_a_slot_archives_it_without_running(one_slot_hogged, client,
                                                                                      inspector, caplog):
    """Fetched ahead behind a busy handler, a task whose deadline passes has nothing to interrupt: it is
    archived at once (a retry would start later still), not retried as a timeout after its "thread" was
    abandoned."""
    hog_id, ran = one_slot_hogged
    waiting = client.enqueue("t.behind", deadline=time.time() + 0.5)
    archived = wait_state(inspector, "default", waiting.id, "archived")
    assert task_or_none(inspector, "default", hog_id).state == "active"  # still busy
    assert archived.retried == 0
    assert archived.last_error.startswith("DeadlinePassed: the task's deadline passed ")
    assert "before this attempt would have started; its handler was not run" in archived.last_error
    assert ran == []
    assert not [r for r in caplog.records if "did not stop" in r.getMessage()]


def test_an_operator_cancel_of_a_task_waiting_for_a_slot_ends_it_at_once(one_slot_hogged, client, inspector):
    """A cancel grace (a minute here) is for a handler to stop by itself; one that never started ends
    at once."""
    hog_id, ran = one_slot_hogged
    waiting = client.enqueue("t.behind")
    wait_until(lambda: inspector.queue_info("default").active == 2, SOON, message="both tasks held")
    inspector.cancel_task("default", waiting.id)
    archived = wait_state(inspector, "default", waiting.id, "archived")
    assert task_or_none(inspector, "default", hog_id).state == "active"
    assert (archived.last_error, archived.retried) == (CANCELLED, 0)
    assert ran == []


def test_a_slow_error_handler_never_holds_up_other_tasks_timeouts(make_worker, client, inspector, registry, gates):
    """A review: the supervisor wrote an abandoned attempt's outcome itself, error handler included, so
    while that handler (a slow reporter) ran, no other task's timeout was enforced: a 1 s timeout ran
    5.6 s. The outcome writer has its own thread now."""
    release, reporter = gates.new(), gates.new()
    reporting = threading.Event()

    def on_error(ctx, error):
        if ctx.type == "t.stuck2":
            reporting.set()
            reporter.wait(30)  # a reporter that hangs until the test ends

    @task(name="t.stuck2", registry=registry, timeout=0.3, max_retry=0)
    def stuck():
        release.wait(30)  # blocks in C: abandoned

    @task(name="t.loops", registry=registry, timeout=0.5, max_retry=0)
    def loops():
        spin_forever()

    blocked = client.enqueue(stuck)
    make_worker(concurrency=2, abandon_grace=0.5, error_handler=on_error)
    assert reporting.wait(SOON)  # the abandoned attempt's error handler hangs from now on
    looping = client.enqueue(loops, retention=60)
    archived = wait_state(inspector, "default", looping.id, "archived", timeout=10)
    assert archived.last_error.startswith("TaskTimeout: timed out after 0.5s")
    (attempt,) = archived.attempts
    assert (attempt.ended_at - attempt.started_at).total_seconds() < 3  # its timeout, not the reporter's hang
    assert inspector.get_task("default", blocked.id).state == TaskState.ACTIVE  # its outcome waits on the reporter
    reporter.set()
    assert "abandoned" in wait_state(inspector, "default", blocked.id, "archived").last_error


def test_an_async_attempt_cancelled_before_its_first_step_ends_at_once(make_worker, client, inspector, registry,
                                                                       gates, caplog):
    """A review: an async attempt whose cancel came before its coroutine's first step (here: the event
    loop busy when the operator cancelled it) never ran the code that writes its outcome and frees its
    run slot, and waited for the supervisor to abandon it (``abandon_grace``), with an ERROR line."""
    loop_blocked, unblock = threading.Event(), gates.new()

    @task(name="t.hog", registry=registry)
    async def hog() -> None:
        loop_blocked.set()
        unblock.wait(30)  # blocks the event loop itself: no other coroutine takes a step meanwhile

    @task(name="t.victim", registry=registry)
    async def victim() -> None:
        raise AssertionError("never to run")

    worker = make_worker(concurrency=2, abandon_grace=30, cancel_grace=30)
    client.enqueue(hog)
    assert loop_blocked.wait(SOON)
    info = client.enqueue(victim, retention=60)
    wait_until(lambda: worker.processor.held.with_id("default", info.id), SOON, message="the victim to be held")
    assert worker.processor.cancel("default", info.id)  # its coroutine exists only once the loop is free
    unblock.set()
    archived = wait_state(inspector, "default", info.id, "archived", timeout=10)
    assert archived.last_error == CANCELLED
    assert "abandoning" not in caplog.text


def test_a_lost_lease_is_said_once_though_the_attempt_was_cancelled_before(make_worker, client, inspector,
                                                                           registry, gates, caplog):
    """A review: a lost lease found on an attempt already cancelled (its timeout, an operator) kept the
    earlier reason, so each renewal found it again and logged "lost the lease" at every heartbeat."""
    release = gates.new()
    started = threading.Event()

    @task(name="t.stays", registry=registry)
    def stays() -> None:
        started.set()
        release.wait(30)  # blocks in C: it outlives its cancel

    worker = make_worker(cancel_grace=30, abandon_grace=30)
    info = client.enqueue(stays)
    assert started.wait(SOON)
    assert worker.processor.cancel("default", info.id)  # an operator's cancel, not yet enforced (its grace)
    (running,) = worker.processor.held.with_id("default", info.id)
    for _ in range(3):  # three renewals find the lease another's
        worker.processor.lease_lost("default", info.id, running.lease)
    assert caplog.text.count("lost the lease of task") == 1
    release.set()
