"""Worker: heartbeats, quiet mode, graceful shutdown and surviving a Redis outage."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from queuecore import Client, ConnectionConfig, Inspector, TaskState, Worker, task
from tests.conftest import FAST, wait_until
from tests.core.worker_support import SOON, Gates, task_or_none, wait_state


@pytest.fixture
def gates() -> Iterator[Gates]:
    with Gates() as g:
        yield g


# -- heartbeats -------------------------------------------------------------------------------------


def test_heartbeat_describes_the_worker_and_its_running_tasks(make_worker, client, inspector, registry, gates):
    release = gates.new()
    started = threading.Event()

    @task(name="t.hold", registry=registry)
    def hold():
        started.set()
        release.wait(SOON)

    worker = make_worker(queues={"default": 3, "other": 1}, concurrency=4)
    info = client.enqueue(hold, retention=60)
    assert started.wait(SOON)

    def me_with_a_task():
        for server in inspector.servers():
            if server.id == worker.server_id and server.workers:
                return server
        return None

    server = wait_until(me_with_a_task, SOON, message="a heartbeat listing the running task")
    assert (server.host, server.pid) == (socket.gethostname(), os.getpid())
    assert server.concurrency == 4
    assert server.queues == {"default": 3, "other": 1}
    assert server.status == "active"
    assert server.strict_priority is False
    assert [(w.task_id, w.queue, w.type) for w in server.workers] == [(info.id, "default", "t.hold")]
    assert inspector.workers() == server.workers

    release.set()
    wait_state(inspector, "default", info.id, "completed")
    wait_until(lambda: [s.workers for s in inspector.servers()] == [[]], SOON,
               message="a heartbeat without the finished task")

    worker.stop()
    assert [s.status for s in inspector.servers()] == ["quiet"]  # written at once, not at the next beat

    worker.shutdown()
    assert inspector.servers() == []
    assert worker.status == "stopped"


# -- graceful shutdown ------------------------------------------------------------------------------


def test_shutdown_hands_an_unfinished_task_back_to_pending(make_worker, client, inspector, registry, gates):
    release = gates.new()
    started = threading.Event()

    @task(name="t.never", registry=registry)
    def never():
        started.set()
        release.wait(30)  # blocked in C: not even the shutdown interrupt lands

    info = client.enqueue(never)
    worker = make_worker()
    assert started.wait(SOON)
    wait_state(inspector, "default", info.id, "active")

    worker.shutdown(timeout=0.3)

    assert worker.stopped.is_set()
    assert worker.handed_back == 1
    pending = inspector.get_task("default", info.id)
    assert pending.state == TaskState.PENDING
    assert pending.retried == 0 and pending.last_error is None
    stats = inspector.queue_info("default")
    assert (stats.pending, stats.active, stats.failed_today, stats.processed_today) == (1, 0, 0, 0)
    assert inspector.servers() == []


def test_shutdown_interrupts_a_busy_handler_and_hands_its_task_back(make_worker, client, inspector, registry):
    started = threading.Event()
    stopped = []

    @task(name="t.busy", registry=registry)
    def busy():
        started.set()
        x = 0
        try:
            while True:
                x += 1
        except BaseException as exc:
            stopped.append(type(exc).__name__)
            raise

    info = client.enqueue(busy)
    worker = make_worker()
    assert started.wait(SOON)

    worker.shutdown(timeout=0.3)

    assert stopped == ["TaskCancelled"]
    assert worker.handed_back == 1
    assert inspector.get_task("default", info.id).state == TaskState.PENDING
    assert inspector.queue_info("default").failed_today == 0


def test_tasks_handed_back_at_shutdown_keep_their_order_at_the_head(make_worker, client, inspector, registry,
                                                                   gates):
    """A running task and the tasks fetched ahead behind it go back to the head of pending in the order
    they were taken, so the next worker runs them in the order they were enqueued."""
    release = gates.new()
    started = threading.Event()

    @task(name="t.hog", registry=registry)
    def hog():
        started.set()
        release.wait(SOON)  # blocked in C: handed back by the shutdown, not by its interrupt

    @task(name="t.behind", registry=registry)
    def behind(i):
        pass

    infos = [client.enqueue(hog)] + [client.enqueue(behind, {"i": i}) for i in range(3)]
    later = client.enqueue(behind, {"i": 99})  # not fetched: stays behind the handed-back ones
    worker = make_worker(concurrency=1, prefetch=3)
    assert started.wait(SOON)
    wait_until(lambda: inspector.queue_info("default").active == 4, SOON, message="four tasks held")

    worker.shutdown(timeout=0.3)

    assert worker.handed_back == 4
    pending = inspector.list_tasks("default", "pending", size=10, order="oldest").tasks
    assert [t.id for t in pending] == [info.id for info in infos] + [later.id]


def test_shutdown_hands_back_an_async_task(make_worker, client, inspector, registry):
    started = threading.Event()
    cancelled = threading.Event()

    @task(name="t.async_never", registry=registry)
    async def async_never():
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    info = client.enqueue(async_never)
    worker = make_worker()
    assert started.wait(SOON)
    wait_state(inspector, "default", info.id, "active")

    worker.shutdown(timeout=0.3)

    assert cancelled.is_set()
    assert worker.handed_back == 1
    assert inspector.get_task("default", info.id).state == TaskState.PENDING
    assert inspector.queue_info("default").failed_today == 0


def test_shutdown_waits_for_a_task_that_finishes_within_the_timeout(make_worker, client, inspector, registry,
                                                                    gates):
    release = gates.new()
    started = threading.Event()

    @task(name="t.finishing", registry=registry)
    def finishing():
        started.set()
        release.wait(SOON)
        return "finished"

    info = client.enqueue(finishing, retention=60)
    worker = make_worker()
    assert started.wait(SOON)

    stopper = threading.Thread(target=worker.shutdown, kwargs={"timeout": SOON})
    stopper.start()
    wait_until(lambda: worker.status == "stopping", SOON, message="shutdown to begin")
    assert task_or_none(inspector, "default", info.id).state == TaskState.ACTIVE
    release.set()
    stopper.join(SOON)

    assert not stopper.is_alive()
    assert worker.handed_back == 0
    assert inspector.get_task("default", info.id).result == "finished"
    assert inspector.queue_info("default").processed_today == 1


def test_shutdown_fetches_nothing_new(make_worker, client, inspector, registry, gates):
    release = gates.new()
    started = threading.Event()
    ran = []

    @task(name="t.first", registry=registry)
    def first():
        started.set()
        release.wait(SOON)

    @task(name="t.second", registry=registry)
    def second():
        ran.append("second")

    client.enqueue(first)
    worker = make_worker(concurrency=2)
    assert started.wait(SOON)
    stopper = threading.Thread(target=worker.shutdown, kwargs={"timeout": SOON})
    stopper.start()
    wait_until(lambda: worker.status == "stopping", SOON, message="shutdown to begin")

    waiting = client.enqueue(second)
    release.set()
    stopper.join(SOON)

    assert not stopper.is_alive()
    assert ran == []
    assert inspector.get_task("default", waiting.id).state == TaskState.PENDING


# -- Redis going away -------------------------------------------------------------------------------


@pytest.mark.slow
def test_worker_survives_a_redis_restart_without_losing_tasks(private_redis_factory, key_prefix, registry):
    server = private_redis_factory("--appendonly", "yes", "--appendfsync", "always")
    connection = ConnectionConfig(redis_url=server.url, key_prefix=key_prefix)
    release = threading.Event()
    runs = []
    returned = []
    lock = threading.Lock()

    @task(name="t.outage", registry=registry)
    def outage(i):
        with lock:
            runs.append(i)
        release.wait(SOON)
        with lock:
            returned.append(i)
        return i

    client = Client(connection=connection, registry=registry)
    inspector = Inspector(connection=connection)
    worker = Worker(connection=connection, registry=registry, **{**FAST, "concurrency": 5})
    try:
        worker.start()
        infos = [client.enqueue(outage, {"i": i}, retention=600) for i in range(5)]
        wait_until(lambda: len(runs) == 5, SOON, message="all five running")

        server.stop()
        release.set()  # the handlers finish while Redis is away: their outcomes must wait for it
        wait_until(lambda: len(returned) == 5, SOON, message="all five handlers returned")
        assert len(worker.held) == 5  # every outcome is still unwritten
        server.start()  # same port and directory: the append-only file brings the data back

        for info in infos:
            done = wait_state(inspector, "default", info.id, "completed", timeout=20)
            assert done.result == info.payload["i"]
        assert sorted(returned[:5]) == list(range(5))
        assert worker.status == "active"
        assert not worker.stopped.is_set()
        assert all(t.is_alive() for t in worker.processor.threads)
        wait_until(lambda: [s.id for s in inspector.servers()] == [worker.server_id], SOON,
                   message="the worker's heartbeat to be back")

        after = client.enqueue(outage, {"i": 99}, retention=600)  # still fetching after the outage
        assert wait_state(inspector, "default", after.id, "completed", timeout=SOON).result == 99
        stats = inspector.queue_info("default")
        assert (stats.completed, stats.pending, stats.active, stats.retry, stats.archived) == (6, 0, 0, 0, 0)
    finally:
        release.set()
        worker.force_stop()
        worker.shutdown(timeout=2)
        client.close()
        inspector.close()
        server.stop()


@pytest.mark.slow
def test_outcomes_held_through_an_outage_longer_than_the_lease_are_not_run_again(private_redis_factory, key_prefix,
                                                                                  registry):
    """After Redis comes back, the worker renews the leases of outcomes it still has to write before its
    recoverer looks for expired leases, so its own finished tasks are not taken back and run twice."""
    server = private_redis_factory("--appendonly", "yes", "--appendfsync", "always")
    connection = ConnectionConfig(redis_url=server.url, key_prefix=key_prefix)
    release = threading.Event()
    runs: list[int] = []
    lock = threading.Lock()

    @task(name="t.long_outage", registry=registry)
    def long_outage(i):
        with lock:
            runs.append(i)
        release.wait(SOON)
        return i

    client = Client(connection=connection, registry=registry)
    inspector = Inspector(connection=connection)
    options = {**FAST, "concurrency": 3, "lease_duration": 1.0, "heartbeat_interval": 0.2, "recover_interval": 0.2}
    worker = Worker(connection=connection, registry=registry, **options)
    try:
        worker.start()
        infos = [client.enqueue(long_outage, {"i": i}, retention=600) for i in range(3)]
        wait_until(lambda: len(runs) == 3, SOON, message="all three running")
        server.stop()
        release.set()
        wait_until(lambda: all(r.finalized for r in worker.held.snapshot()), SOON,
                   message="all three handlers finished")
        down_since = time.monotonic()
        # The outage must outlast the lease: wall-clock time is the condition here.
        wait_until(lambda: time.monotonic() - down_since > 2 * options["lease_duration"], 10,
                   message="the outage to outlast the lease")
        server.start()
        for info in infos:
            done = wait_state(inspector, "default", info.id, "completed", timeout=20)
            assert done.retried == 0
        assert sorted(runs) == [0, 1, 2]  # each ran once
        assert inspector.queue_info("default").failed_total == 0
    finally:
        release.set()
        worker.force_stop()
        worker.shutdown(timeout=2)
        client.close()
        inspector.close()
        server.stop()


def test_a_worker_pointed_at_a_server_that_does_not_speak_redis_logs_one_outage_line(
        not_redis, key_prefix, registry, caplog: pytest.LogCaptureFixture) -> None:
    """A worker whose URL names a port of something else (a server answering as a web server) is
    in an outage, as with a Redis that is down: one line that says what is wrong, then quiet
    retries; not an error with its traceback from every component on every round."""
    caplog.set_level(logging.INFO, logger="queuecore.worker")
    worker = Worker(connection=ConnectionConfig(redis_url=not_redis.url, key_prefix=key_prefix), registry=registry,
                    **FAST)  # type: ignore[arg-type]
    worker.start()
    try:
        # Every component has met the server by then: each failed call drops its connection.
        wait_until(lambda: len(not_redis.served) >= 30, 20, message="the worker's components retrying")
        assert worker.health.down
    finally:
        worker.force_stop()
        worker.shutdown(timeout=2)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.getMessage().split(" (")[0] for r in errors] == ["Redis is unreachable"], errors
    assert "does not answer in Redis's protocol" in errors[0].getMessage()
    assert not [r for r in caplog.records if r.exc_info]


def test_one_task_key_of_another_type_does_not_stop_the_heartbeat(make_worker, client: Client, registry,
                                                                  inspector: Inspector, redis_client,
                                                                  connection: ConnectionConfig) -> None:
    """A review: a running task whose hash became a string made each lease renewal raise before the
    heartbeat was written, so the worker's heartbeat (and health file) lapsed and it looked dead: a
    liveness probe would have killed it and every task it ran."""
    release = threading.Event()

    @task(name="t.held", registry=registry)
    def held() -> None:
        release.wait(20)

    worker = make_worker(queues={"default": 1})
    handle = client.enqueue("t.held")
    wait_until(lambda: [w.task_id for w in inspector.workers()] == [handle.id], message="the task running")
    key = connection.keys.queue("default").task(handle.id)
    redis_client.delete(key)
    redis_client.set(key, "oops")
    try:
        for _ in range(4):  # past the heartbeat's lifetime (three beats): written again each beat all the same
            before = redis_client.zscore(connection.keys.servers, worker.server_id)
            wait_until(lambda b=before: (redis_client.zscore(connection.keys.servers, worker.server_id) or 0) > b,
                       message="a new heartbeat")
        assert [s.id for s in inspector.servers()] == [worker.server_id]
    finally:
        redis_client.delete(key)
        release.set()
