"""Cancel and pause under load, a cancel that arrives while the worker's pub/sub is down, and a
cancel of a task fetched ahead that has not started: every cancel takes effect, nothing is lost."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from queuecore import ConnectionConfig, Inspector, InvalidTaskState, TaskNotFound, Worker, default_registry
from queuecore.core.client import Client
from tests.conftest import FAST, wait_until
from tests.helpers import proc_tasks
from tests.reliability.oracle import check_invariants, read_log

CANCELLED = "cancelled by operator"


@pytest.fixture
def log(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "handlers.log"
    path.touch()
    proc_tasks.configure(str(path))
    yield path
    proc_tasks.configure("")


def start_worker(connection: ConnectionConfig, **options: object) -> Worker:
    worker = Worker(connection=connection, registry=default_registry, **{**FAST, **options})  # type: ignore[arg-type]
    worker.start()
    return worker


def starts(log: Path) -> list[dict]:
    return [e for e in read_log(log) if e["event"] == "start"]


@pytest.mark.slow
def test_cancel_and_pause_under_load_lose_nothing(connection, redis_client, log):
    rng = random.Random(7)
    client = Client(connection=connection)
    inspector = Inspector(connection=connection, actor="test")
    ids = [client.enqueue("proc.sleep", {"seconds": rng.uniform(0.05, 0.25)}, retention=600).id for _ in range(150)]
    # A long lease: this test injects no lease expiry, so no task may run twice.
    worker = start_worker(connection, concurrency=4, prefetch=4, lease_duration=15.0, heartbeat_interval=0.5)
    cancelled: set[str] = set()
    pauses = 0
    try:
        def busy() -> bool:
            info = inspector.queue_info("default")
            return bool(info.pending or info.active)

        seen = 0
        while busy():
            # Pace on progress: act once every ten handler starts.
            target = seen + 10
            wait_until(lambda t=target: len(starts(log)) >= t or not busy(), 15, message="ten more handler starts")
            seen = len(starts(log))
            active = [t.id for t in inspector.list_tasks("default", "active", size=50).tasks]
            for task_id in rng.sample(active, min(1, len(active))):
                try:
                    inspector.cancel_task("default", task_id)
                    cancelled.add(task_id)
                except (InvalidTaskState, TaskNotFound):
                    pass  # it finished first
            if pauses < 3 and seen > 30 * (pauses + 1):
                pauses += 1
                held = {t.id for t in inspector.list_tasks("default", "active", size=50).tasks}
                inspector.pause_queue("default")
                held |= {t.id for t in inspector.list_tasks("default", "active", size=50).tasks}
                before = {e["id"] for e in starts(log)}
                # While paused, only tasks already fetched may start; wait until those are done.
                wait_until(lambda: inspector.queue_info("default").active == 0, 15, message="paused queue to idle")
                started_while_paused = {e["id"] for e in starts(log)} - before
                assert started_while_paused <= held, started_while_paused - held
                assert inspector.queue_info("default").pending > 0
                inspector.unpause_queue("default")
    finally:
        worker.shutdown(timeout=5)
    summary = check_invariants(redis_client, connection.keys, ids, log)
    assert cancelled, "the test never managed to cancel a running task"
    assert pauses == 3
    for task_id in ids:
        task = inspector.get_task("default", task_id)
        if task.state == "archived":
            assert task_id in cancelled and task.last_error == CANCELLED, (task_id, task.last_error)
        else:
            assert task.state == "completed"
    print(f"\n{summary['counts']}; {len(cancelled)} cancel requests, {pauses} pauses, reruns {summary['reruns']}")
    client.close()
    inspector.close()


def test_cancel_while_the_pubsub_connection_is_down_still_takes_effect(private_redis, key_prefix, log, tmp_path):
    """The cancel message is lost (the worker's subscriber is disconnected), but the flag stored on
    the task is seen at the next lease renewal."""
    connection = ConnectionConfig(redis_url=private_redis.url, key_prefix=key_prefix)
    client = Client(connection=connection)
    inspector = Inspector(connection=connection)
    blocked = client.enqueue("proc.block", {})
    worker = start_worker(connection, concurrency=1, heartbeat_interval=0.3)
    try:
        wait_until(lambda: starts(log), 10, message="the task to start")
        admin = private_redis_client(private_redis)
        wait_until(lambda: worker.subscriber.subscribed.is_set(), 10, message="the subscriber")
        # Drop the worker's pub/sub connection and cancel before it is back.
        assert admin.client_kill_filter(_type="pubsub") >= 1
        inspector.cancel_task("default", blocked.id)
        task = wait_until(lambda: (t := inspector.get_task("default", blocked.id)).state == "archived" and t, 10,
                          message="the task to be cancelled")
        assert task.last_error == CANCELLED
        assert [e["event"] for e in read_log(log)] == ["start", "abort"]
        admin.close()
    finally:
        worker.shutdown(timeout=5)
        client.close()
        inspector.close()


def private_redis_client(server):
    import redis

    return redis.Redis.from_url(server.url, decode_responses=True)


def test_cancel_of_a_fetched_task_that_has_not_started_archives_it_without_running(connection, log, tmp_path):
    client = Client(connection=connection)
    inspector = Inspector(connection=connection)
    gate = tmp_path / "open"
    first = client.enqueue("proc.gate", {"path": str(gate)}, retention=600)
    second = client.enqueue("proc.noop", {}, retention=600)
    worker = start_worker(connection, concurrency=1, prefetch=1)
    try:
        wait_until(lambda: inspector.queue_info("default").active == 2, 10, message="both tasks held")
        wait_until(lambda: starts(log), 10, message="the first task to start")
        assert [e["id"] for e in starts(log)] == [first.id]  # the second is fetched ahead, not started
        inspector.cancel_task("default", second.id)
        gate.touch()
        task = wait_until(lambda: (t := inspector.get_task("default", second.id)).state == "archived" and t, 10,
                          message="the fetched task to be cancelled")
        assert task.last_error == CANCELLED
        # the first's acknowledgement is written by the acker (batched), maybe after the cancel
        wait_until(lambda: inspector.get_task("default", first.id).state == "completed", 10,
                   message="the first task's acknowledgement")
        assert second.id not in {e["id"] for e in starts(log)}  # it never ran
    finally:
        worker.shutdown(timeout=5)
        client.close()
        inspector.close()
