"""What a worker reports as running: only tasks whose handler has started. Tasks fetched ahead
(prefetched, waiting for a free slot) are reported apart, busy never exceeds concurrency, and a
task's running time starts when its handler starts (issue 11, item 8)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from queuecore import Client, Inspector, ServerInfo, current_task, task
from tests.conftest import wait_until
from tests.core.worker_support import SOON, Gates


@pytest.fixture
def gates() -> Iterator[Gates]:
    with Gates() as g:
        yield g


def server_of(inspector: Inspector, server_id: str) -> ServerInfo | None:
    return next((s for s in inspector.servers() if s.id == server_id), None)


def test_fetched_tasks_are_reported_apart_from_running_ones(make_worker, client: Client, inspector: Inspector,
                                                            registry, gates: Gates) -> None:
    release = {}
    began: dict[str, float] = {}

    @task(name="t.gate", registry=registry)
    def gate(n: int) -> None:
        began[current_task().id] = time.time()
        release[current_task().id].wait(SOON)

    ids = []
    for n in range(5):
        info = client.enqueue("t.gate", {"n": n})
        release[info.id] = gates.new()
        ids.append(info.id)
    worker = make_worker(concurrency=2, prefetch=3)

    def all_held() -> ServerInfo | None:
        s = server_of(inspector, worker.server_id)
        return s if s is not None and len(s.workers) + len(s.waiting) == 5 and len(began) == 2 else None

    server = wait_until(all_held, SOON, message="a heartbeat with 2 running and 3 fetched tasks")
    assert isinstance(server, ServerInfo)
    running = {w.task_id for w in server.workers}
    assert running == set(began) and server.active_count == 2 <= server.concurrency
    assert {w.task_id for w in server.waiting} == set(ids) - running
    for w in server.workers:  # running since the handler started, not since it was fetched
        assert abs(w.started_at.timestamp() - began[w.task_id]) < 0.05
    for fetched in server.waiting:
        assert fetched.server_id == worker.server_id and fetched.type == "t.gate" and fetched.queue == "default"
        assert fetched.fetched_at.timestamp() <= time.time()
    # The task page says the same: a fetched task has not started; a running one started with its handler.
    waiting_id = server.waiting[0].task_id
    waiting_task = inspector.get_task("default", waiting_id)
    assert waiting_task.state == "active" and waiting_task.started_at is None
    assert waiting_task.worker == worker.server_id and waiting_task.fetched_at is not None
    first = server.workers[0]
    assert inspector.get_task("default", first.task_id).started_at == first.started_at

    # One finishes: a fetched task starts, and its running time starts then, not when it was fetched.
    fetched_at = {w.task_id: w.fetched_at for w in server.waiting}
    release[first.task_id].set()

    def third_running() -> ServerInfo | None:
        s = server_of(inspector, worker.server_id)
        return s if s is not None and len(began) == 3 and set(began) - running <= {w.task_id for w in s.workers} \
            else None

    later = wait_until(third_running, SOON, message="the third task to start and be reported")
    assert isinstance(later, ServerInfo)
    (third,) = [w for w in later.workers if w.task_id not in running]
    assert abs(third.started_at.timestamp() - began[third.task_id]) < 0.05
    assert third.started_at > fetched_at[third.task_id]
    assert later.active_count == 2


def test_sync_and_async_handlers_share_the_concurrency(make_worker, client: Client, inspector: Inspector,
                                                       registry, gates: Gates) -> None:
    """A worker with sync and async handlers runs at most ``concurrency`` of them at once, in all."""
    lock = threading.Lock()
    now_running: list[str] = []
    most = [0]
    release = gates.new()

    def enter(task_id: str) -> None:
        with lock:
            now_running.append(task_id)
            most[0] = max(most[0], len(now_running))

    def leave(task_id: str) -> None:
        with lock:
            now_running.remove(task_id)

    @task(name="t.sync_gate", registry=registry)
    def sync_gate() -> None:
        enter(current_task().id)
        release.wait(SOON)
        leave(current_task().id)

    @task(name="t.async_gate", registry=registry)
    async def async_gate() -> None:
        enter(current_task().id)
        while not release.is_set():
            await asyncio.sleep(0.01)
        leave(current_task().id)

    infos: list[Any] = []
    for _ in range(2):
        infos.append(client.enqueue("t.sync_gate"))
        infos.append(client.enqueue("t.async_gate"))
    worker = make_worker(concurrency=2, prefetch=2)

    def held_all() -> ServerInfo | None:
        s = server_of(inspector, worker.server_id)
        return s if s is not None and len(s.workers) + len(s.waiting) == 4 and len(now_running) == 2 else None

    server = wait_until(held_all, SOON, message="4 tasks held, 2 of them running")
    assert isinstance(server, ServerInfo)
    assert server.active_count == 2 and len(server.waiting) == 2
    release.set()
    wait_until(lambda: all(inspector.count("default", s) == 0 for s in ("pending", "active")), SOON,
               message="every task to finish")
    assert most[0] == 2
