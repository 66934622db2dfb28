"""SIGSTOP a worker past its lease, then SIGCONT: its ack is refused (fencing), and the task
completes once, by its new owner."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from queuecore import Client, Inspector, TaskState
from tests.conftest import wait_until
from tests.core.test_processes import wait_event
from tests.reliability.oracle import check_invariants

pytestmark = pytest.mark.slow

Q = "default"
FAST_PROC = dict(lease=1.5, heartbeat=0.3, recover=0.5)


def test_sigstop_past_the_lease_then_sigcont_is_fenced(spawn, client: Client, inspector: Inspector, redis_client,
                                                       connection, tmp_path: Path, log: Path) -> None:
    gate = tmp_path / "gate-{attempt}"
    task_id = client.enqueue("proc.gate_pid", {"path": str(gate), "tag": "fenced"}, retention=600).id
    a = spawn(concurrency=1, prefetch=0, **FAST_PROC)
    wait_event(log, "start", task_id, a.pid)
    first_lease = int(redis_client.hget(connection.keys.queue(Q).task(task_id), "lease"))

    a.signal(signal.SIGSTOP)
    stopped_at = time.time()
    b = spawn(concurrency=1, prefetch=0, **FAST_PROC)
    second = wait_event(log, "start", task_id, b.pid, timeout=20)  # B's recoverer took the lease back
    print(f"\nSIGSTOP: task restarted on B {second['t'] - stopped_at:.2f}s after A was stopped (lease 1.5 s)")
    assert second["attempt"] == 1
    second_lease = redis_client.hget(connection.keys.queue(Q).task(task_id), "lease")
    assert int(second_lease) > first_lease

    # A's attempt finishes the moment it resumes; its outcome carries lease 1 and must be refused.
    (tmp_path / "gate-0").touch()
    a.signal(signal.SIGCONT)
    # Either A's handler returns first and its ack is refused ("discarded"), or A's lease renewer
    # learns first and interrupts the handler ("lost the lease"). The interrupt is asynchronous and
    # may land inside the handler's own event logging, so the worker's log is the oracle here.
    wait_until(lambda: "lease" in a.stderr() and ("discarded" in a.stderr() or "lost the lease" in a.stderr()),
               10, message="A to log that its lease was lost")
    during = inspector.get_task(Q, task_id)
    assert (during.state, during.retried) == (TaskState.ACTIVE, 1)  # still B's; A wrote nothing
    assert redis_client.hget(connection.keys.queue(Q).task(task_id), "lease") == second_lease

    (tmp_path / "gate-1").touch()
    done = wait_until(lambda: (i := inspector.get_task(Q, task_id)).state is TaskState.COMPLETED and i, 10,
                      message="completion by B")
    assert done.result == {"pid": b.pid}  # completed once, by its new owner
    assert inspector.queue_info(Q).processed_today == 2  # B's success + the lost attempt; not A's
    check_invariants(redis_client, connection.keys, [task_id], log, allow_reruns_for={task_id},
                     allow_concurrent=True)
    assert a.alive and b.alive  # A went on working after being fenced
