"""Helpers shared by the ``test_worker_*`` modules: waiting on task states and worker progress."""

from __future__ import annotations

import threading
import time

import redis

from queuecore import Inspector, TaskInfo, TaskNotFound, Worker
from tests.conftest import wait_until

# Generous upper bounds: a worker with FAST intervals reacts in well under a second.
SOON = 10.0


def task_or_none(inspector: Inspector, queue: str, task_id: str) -> TaskInfo | None:
    try:
        return inspector.get_task(queue, task_id)
    except TaskNotFound:
        return None


def wait_state(inspector: Inspector, queue: str, task_id: str, state: str, timeout: float = SOON) -> TaskInfo:
    """Wait until the task is in ``state``; returns its ``TaskInfo`` as seen then."""

    def check() -> TaskInfo | None:
        info = task_or_none(inspector, queue, task_id)
        return info if info is not None and info.state == state else None

    return wait_until(check, timeout, message=f"task {task_id} to be {state}")  # type: ignore[return-value]


def task_hash(redis_client: redis.Redis, worker_or_inspector: Worker | Inspector, queue: str,
              task_id: str) -> dict[str, str]:
    """The raw task hash ({} when it is gone)."""
    return redis_client.hgetall(worker_or_inspector.keys.queue(queue).task(task_id))


def let_worker_run(inspector: Inspector, worker: Worker, beats: int = 3, timeout: float = SOON) -> None:
    """Wait until ``worker`` has written ``beats`` more heartbeats.

    A positive way to let a worker's loops go round a few times (each heartbeat interval is
    longer than a fetch poll in these tests) before asserting that something did *not* happen.
    """
    seen: set[float] = set()

    def beat_count() -> bool:
        for server in inspector.servers():
            if server.id == worker.server_id:
                seen.add(server.heartbeat_at.timestamp())
        return len(seen) > beats

    wait_until(beat_count, timeout, message=f"{beats} heartbeats of {worker.server_id}")


class Gates:
    """Events for handlers to block on; all are set on exit so no handler thread outlives its test.

    Each test module wraps it in a ``gates`` fixture: ``with Gates() as g: yield g``.
    """

    def __init__(self) -> None:
        self._events: list[threading.Event] = []

    def new(self) -> threading.Event:
        event = threading.Event()
        self._events.append(event)
        return event

    def __enter__(self) -> Gates:
        return self

    def __exit__(self, *exc: object) -> None:
        for event in self._events:
            event.set()


def steal_lease(redis_client, worker, queue: str, task_id: str) -> None:
    """Expire a task's lease and let *another* process's recoverer take it back, as happens when this
    worker stalls past its lease (the worker's own recoverer renews its leases first)."""
    from queuecore.core.clock import to_ms
    from queuecore.core.keys import stats_day, stats_minute
    from queuecore.core.scripts import Scripts

    q = worker.keys.queue(queue)
    redis_client.zadd(q.active, {task_id: 0}, xx=True)
    now = time.time()
    Scripts(redis_client, worker.keys).recover(q, now_ms=to_ms(now), limit=100, day=stats_day(now),
                                               minute=stats_minute(now))
