"""The push hand-over with several worker processes (``tests/core/test_push.py`` has the scripts and one
worker): each task runs once, a killed worker still listed as waiting gets no task, and a task handed
to a worker that is then killed runs again elsewhere, as a fetched one would."""

from __future__ import annotations

import pytest
import redis

from queuecore import Client, Inspector, TaskState
from tests.conftest import wait_until
from tests.core.test_processes import KILL_SETTINGS, server_of, task_events, wait_event, wait_registered


@pytest.mark.slow
def test_two_worker_processes_each_task_runs_once_and_a_killed_one_gets_none(
        spawn, client: Client, inspector: Inspector, redis_client: redis.Redis, tmp_path) -> None:
    log = tmp_path / "events.jsonl"
    q = client.keys.queue("default")
    # A 30 s lease and a 10 s poll: a task that went to a dead worker would start much later than the waits allow.
    workers = [spawn(concurrency=2, lease=30, fetch_poll=10) for _ in range(2)]
    for w in workers:
        wait_registered(inspector, w)
    wait_until(lambda: redis_client.zcard(q.idle) == 2, 10, message="both workers to list themselves")
    ids = []
    for n in range(30):
        ids.append(client.enqueue("proc.noop", {"tag": f"t{n}"}).id)
        wait_event(log, "end", ids[-1], timeout=5)
    starts = task_events(log, "start")
    assert sorted(e["id"] for e in starts) == sorted(ids)  # each once
    assert {e["attempt"] for e in starts} == {0}

    wait_until(lambda: redis_client.zcard(q.idle) == 2, 10, message="both workers to list themselves again")
    survivor = server_of(inspector, workers[1].pid).id
    workers[0].kill9()  # still listed: the next enqueues find it gone and skip it
    later = []
    for n in range(10):
        later.append(client.enqueue("proc.noop", {"tag": f"k{n}"}).id)
        assert wait_event(log, "end", later[-1], timeout=5)["pid"] == workers[1].pid
    assert sorted(e["id"] for e in task_events(log, "start") if e["id"] in later) == sorted(later)
    wait_until(lambda: inspector.queue_info("default").active == 0, 10, message="no task left active")
    # (30 s: under a loaded machine the survivor's listing of itself after its last task took over 10 s once)
    wait_until(lambda: [e.split(" ", 1)[1] for e in redis_client.zrange(q.idle, 0, -1)] == [survivor], 30,
               message="the killed worker to be dropped from the list")


@pytest.mark.slow
def test_a_task_handed_to_a_worker_that_is_then_killed_runs_again_on_another(
        spawn, client: Client, inspector: Inspector, redis_client: redis.Redis, tmp_path) -> None:
    log = tmp_path / "events.jsonl"
    q = client.keys.queue("default")
    a = spawn(concurrency=1, **KILL_SETTINGS)
    wait_registered(inspector, a)
    wait_until(lambda: redis_client.zcard(q.idle) == 1, 10, message="the idle worker to list itself")
    task_id = client.enqueue("proc.sleep", {"seconds": 3, "tag": "pushed"}, retention=60).id
    assert redis_client.zcard(q.idle) == 0 and redis_client.llen(q.pending) == 0  # handed to A by the enqueue
    assert wait_event(log, "start", task_id, a.pid)["attempt"] == 0
    a.kill9()
    b = spawn(concurrency=1, **KILL_SETTINGS)
    assert wait_event(log, "start", task_id, b.pid)["attempt"] == 1  # after A's lease, as any lost task
    wait_event(log, "end", task_id, b.pid)
    info = wait_until(lambda: (i := inspector.get_task("default", task_id)).state is TaskState.COMPLETED and i, 10,
                      message="the task to be completed")
    assert info.retried == 1 and info.last_error == "worker lost (lease expired)"
