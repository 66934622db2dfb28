"""kill -9 of real worker processes: under load, repeatedly, with restarts; and at the two edges of a
run — between dequeue and the handler's start, and between the handler's return and the ack.

Oracle: ``tests/reliability/oracle.py`` (Redis state + the handlers' own log outside Redis).
"""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path

import pytest

from queuecore import Client, Inspector, TaskState
from tests.conftest import wait_until
from tests.core.test_processes import task_events, wait_event
from tests.reliability.oracle import check_invariants, check_structure

pytestmark = pytest.mark.slow

Q = "default"
FAST_PROC = dict(lease=1.5, heartbeat=0.3, recover=0.5)


def drained(inspector: Inspector) -> bool:
    info = inspector.queue_info(Q)
    return info.pending + info.active + info.retry + info.scheduled == 0


def test_kill9_random_workers_under_load_repeatedly(spawn, client: Client, inspector: Inspector, redis_client,
                                                    connection, log: Path) -> None:
    rng = random.Random(1234)
    ids = [client.enqueue("proc.sleep", {"seconds": rng.choice([0.02, 0.05, 0.1, 0.2]), "tag": f"L{i}"},
                          retention=600 if i % 2 else 0).id for i in range(300)]
    workers = [spawn(concurrency=4, **FAST_PROC) for _ in range(3)]
    killed: set[int] = set()
    for round_ in range(6):
        # let some work happen, then kill a random live worker mid-flight and start a new one
        target = len(task_events(log, "end")) + 25
        wait_until(lambda t=target: len(task_events(log, "end")) >= t or drained(inspector), 30,
                   message=f"progress before kill {round_}")
        if drained(inspector):
            break
        victim = rng.choice([w for w in workers if w.alive])
        victim.kill9()
        killed.add(victim.pid)
        check_structure(redis_client, connection.keys)  # consistent even right after a crash
        workers.append(spawn(concurrency=4, **FAST_PROC))
    started = time.monotonic()
    wait_until(lambda: drained(inspector), 60, interval=0.05, message="the queue to drain")
    print(f"\n{len(killed)} kill -9s; drained {time.monotonic() - started:.2f}s after the last one")

    def rerun_allowed(task_id: str, runs: list[dict]) -> bool:
        return any(r["pid"] in killed for r in runs[:-1])  # every run but the last was on a killed worker

    summary = check_invariants(redis_client, connection.keys, ids, log, allow_reruns_for=rerun_allowed)
    print(f"final states {summary['counts']}; {len(summary['reruns'])} task(s) ran twice (held by a killed worker)")
    assert summary["counts"].get("completed") == len(ids)
    for w in workers:
        if w.alive:
            w.signal(signal.SIGTERM)
            assert w.wait_exit(15) == 0


def test_kill9_between_dequeue_and_handler_start(spawn, client: Client, inspector: Inspector, redis_client,
                                                 connection, tmp_path: Path, log: Path) -> None:
    gate = tmp_path / "gate-{attempt}"
    running = client.enqueue("proc.gate_pid", {"path": str(gate), "tag": "running"}, retention=600).id
    prefetched = client.enqueue("proc.noop", {"tag": "prefetched"}, retention=600).id
    # one handler slot, one prefetched task: the second task is leased but its handler never starts
    a = spawn(concurrency=1, prefetch=1, **FAST_PROC)
    wait_event(log, "start", running, a.pid)
    wait_until(lambda: inspector.get_task(Q, prefetched).state is TaskState.ACTIVE, 10,
               message="the second task to be prefetched (leased)")
    assert not task_events(log, task_id=prefetched)  # leased, not started
    a.kill9()
    killed_at = time.time()
    assert not task_events(log, task_id=prefetched)

    (tmp_path / "gate-1").touch()  # the rerun of the gated task may finish
    b = spawn(concurrency=1, prefetch=1, **FAST_PROC)
    second = wait_event(log, "end", prefetched, b.pid, timeout=20)
    print(f"\nprefetched task lost by kill -9 ran {second['t'] - killed_at:.2f}s after the kill")
    wait_until(lambda: drained(inspector), 20, message="drain")
    summary = check_invariants(redis_client, connection.keys, [running, prefetched], log,
                               allow_reruns_for={running})
    runs = summary["runs"]
    assert [r["pid"] for r in runs[prefetched]] == [b.pid]  # ran once: it never started on A
    assert runs[prefetched][0]["attempt"] == 1  # the lost lease counted as an attempt
    assert [r["pid"] for r in runs[running]] == [a.pid, b.pid]
    assert inspector.get_task(Q, running).result == {"pid": b.pid}


def test_kill9_between_handler_return_and_ack_runs_twice_never_zero(spawn, client: Client, inspector: Inspector,
                                                                    redis_client, connection, log: Path) -> None:
    ids = [client.enqueue("proc.ack_gap", {"stop": i == 0, "tag": f"g{i}"}, retention=600).id for i in range(3)]
    a = spawn(concurrency=1, prefetch=0, **FAST_PROC)
    # the first task's handler ran to its end, then the process stopped itself before returning
    stopping = wait_event(log, "stopping", ids[0], a.pid)
    assert [e["event"] for e in task_events(log, task_id=ids[0])] == ["start", "end", "stopping"]
    assert inspector.get_task(Q, ids[0]).state is TaskState.ACTIVE  # not acknowledged
    a.kill9()

    b = spawn(concurrency=1, prefetch=0, **FAST_PROC)
    wait_until(lambda: drained(inspector), 30, message="drain")
    summary = check_invariants(redis_client, connection.keys, ids, log, allow_reruns_for={ids[0]})
    runs = summary["runs"][ids[0]]
    assert [(r["pid"], r["attempt"], r["outcome"]) for r in runs] == [(a.pid, 0, "end"), (b.pid, 1, "end")]
    print(f"\nreturn→ack crash: task re-ran {runs[1]['start'] - stopping['t']:.2f}s after its first run ended")
    # A held nothing else (prefetch 0): the other two ran once, on B
    for task_id in ids[1:]:
        assert [r["pid"] for r in summary["runs"][task_id]] == [b.pid]
    assert all(inspector.get_task(Q, i).state is TaskState.COMPLETED for i in ids)


@pytest.mark.soak
def test_kill9_soak(spawn, client: Client, inspector: Inspector, redis_client, connection, log: Path) -> None:
    """Opt-in (QUEUECORE_SOAK=1): thousands of tasks, a kill every second for a minute."""
    rng = random.Random()
    ids = [client.enqueue("proc.sleep", {"seconds": rng.random() * 0.1, "tag": f"S{i}"}).id for i in range(3000)]
    workers = [spawn(concurrency=8, **FAST_PROC) for _ in range(4)]
    killed: set[int] = set()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not drained(inspector):
        time.sleep(1.0)  # the pace of the faults, not a synchronisation
        victim = rng.choice([w for w in workers if w.alive])
        victim.kill9()
        killed.add(victim.pid)
        workers.append(spawn(concurrency=8, **FAST_PROC))
    wait_until(lambda: drained(inspector), 120, interval=0.1, message="drain")
    summary = check_invariants(redis_client, connection.keys, ids, log,
                               allow_reruns_for=lambda i, runs: any(r["pid"] in killed for r in runs[:-1]))
    print(summary["counts"], len(summary["reruns"]))
