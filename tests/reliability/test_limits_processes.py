"""Global concurrency and rate limits across worker processes (``flow.py``), measured from the handlers'
own event log (``tests/helpers/proc_tasks.py``), which lives outside Redis: three worker processes of
ten threads each, a kill -9 while a slot is held."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from queuecore import Client, ConnectionConfig, Inspector
from tests.conftest import wait_until
from tests.core.test_processes import read_events, task_events, wait_registered  # spawn: tests/reliability/conftest.py

pytestmark = pytest.mark.slow

Q = "default"
LIMIT_SETTINGS = dict(concurrency=10, lease=1.5, heartbeat=0.3, recover=0.5, forward=0.05, fetch_poll=0.1)


def most_at_once(path: Path, type_tag: str, killed: dict[str, float] | None = None) -> int:
    """The most handlers of tasks tagged ``type_tag`` running at once, from start/end/abort lines; a
    task whose worker was killed mid-run ends at the kill (``killed``: task id -> time)."""
    edges: list[tuple[float, int]] = []
    open_ids: dict[tuple[str, int], float] = {}
    for e in read_events(path):
        if e["event"] == "boot" or e.get("tag") != type_tag:
            continue
        key = (e["id"], e["pid"])
        if e["event"] == "start":
            open_ids[key] = e["t"]
            edges.append((e["t"], 1))
        else:
            open_ids.pop(key, None)
            edges.append((e["t"], -1))
    for (task_id, _), _ in list(open_ids.items()):
        if killed and task_id in killed:
            edges.append((killed[task_id], -1))
    edges.sort(key=lambda edge: (edge[0], edge[1]))  # an end at the same instant as a start comes first
    best = now = 0
    for _, step in edges:
        now += step
        best = max(best, now)
    return best


def max_in_window(starts: list[float], window: float) -> int:
    starts = sorted(starts)
    best = j = 0
    for i, t in enumerate(starts):
        while starts[j] <= t - window:
            j += 1
        best = max(best, i - j + 1)
    return best


@pytest.fixture
def client(redis_url: str, key_prefix: str):
    c = Client(connection=ConnectionConfig(redis_url=redis_url, key_prefix=key_prefix))
    yield c
    c.close()


@pytest.fixture
def ops(redis_url: str, key_prefix: str):
    i = Inspector(connection=ConnectionConfig(redis_url=redis_url, key_prefix=key_prefix))
    yield i
    i.close()


def test_a_limit_of_two_holds_across_three_processes_of_ten_threads(spawn, client, ops, tmp_path):
    workers = [spawn(**LIMIT_SETTINGS) for _ in range(3)]
    for w in workers:
        wait_registered(ops, w)
    ids = [client.enqueue("proc.limited", {"seconds": 0.05, "tag": "lim"}, queue=Q).id for _ in range(40)]
    log = workers[0].log
    wait_until(lambda: len(task_events(log, "end")) >= 40, 30, interval=0.05, message="every limited task to end")
    wait_until(lambda: ops.queue_info(Q).size == 0, 10, message="the queue to empty")
    assert most_at_once(log, "lim") == 2  # never more, and the limit was used
    ends = task_events(log, "end")
    assert sorted(e["id"] for e in ends) == sorted(ids)  # each ran once, to its end
    assert all(e["attempt"] == 0 for e in ends)  # held back: no attempt used
    assert len({e["pid"] for e in ends}) >= 2  # spread over the processes


def test_kill_9_frees_the_slot_within_the_lease(spawn, client, ops, tmp_path):
    holder = spawn(**LIMIT_SETTINGS)
    wait_registered(ops, holder)
    gate_first, gate_second = tmp_path / "first.open", tmp_path / "second.open"
    gate_second.touch()
    first = client.enqueue("proc.limited_gate", {"path": str(gate_first), "tag": "gate"}, queue=Q).id
    log = holder.log
    wait_until(lambda: task_events(log, "start", task_id=first), 10, message="the first task to take the slot")
    other = spawn(**LIMIT_SETTINGS)
    wait_registered(ops, other)
    second = client.enqueue("proc.limited_gate", {"path": str(gate_second), "tag": "gate"}, queue=Q).id
    wait_until(lambda: (ops.get_task(Q, second).waiting or "").startswith("concurrency limit"), 10,
               message="the second task to be held back")
    assert not task_events(log, "start", task_id=second)
    killed_at = time.time()
    holder.kill9()
    gate_first.touch()  # the first task completes when it runs again
    wait_until(lambda: [e for e in task_events(log, "start") if e["pid"] == other.pid], 10, interval=0.02,
               message="a held-back task to start after the kill")
    freed_after = min(e["t"] for e in task_events(log, "start") if e["pid"] == other.pid) - killed_at
    assert freed_after <= 1.5 + 0.5  # the slot came back with the lease (1.5 s), plus a forward tick
    wait_until(lambda: ops.queue_info(Q).size == 0, 15, message="both tasks to complete")
    assert most_at_once(log, "gate", killed={first: killed_at}) == 1
    assert task_events(log, "end", task_id=second)
    (limit,) = [lim for lim in ops.limits() if lim.type == "proc.limited_gate"]
    assert [(u.running, u.waiting) for u in limit.usage] == [(0, 0)]  # nothing leaked
    print(f"kill -9 -> held-back task started {freed_after:.2f}s later (lease 1.5 s)")


def test_a_rate_of_20_per_second_holds_over_100_tasks(spawn, client, ops):
    workers = [spawn(**LIMIT_SETTINGS) for _ in range(3)]
    for w in workers:
        wait_registered(ops, w)
    began = time.time()
    client.enqueue_many([("proc.rated", {"tag": "rate"}) for _ in range(100)], queue=Q)
    log = workers[0].log
    wait_until(lambda: len(task_events(log, "end")) >= 100, 30, interval=0.05, message="every rated task to run")
    starts = [e["t"] for e in task_events(log, "start")]
    took = max(starts) - began
    assert len(starts) == 100
    assert max_in_window(starts, 0.95) <= 20  # any window of the rate, less the clocks' jitter
    assert 4.0 <= took <= 9.0  # 100 at 20/s: the first 20 at once, then 4 more windows
    assert all(e["attempt"] == 0 for e in task_events(log, "end"))
    print(f"100 tasks at 20/s over 3 processes: {took:.2f}s, at most {max_in_window(starts, 1.0)} in any 1 s")


def test_a_stale_attempt_frees_only_its_own_slot(spawn, client, ops, tmp_path):
    """A review: worker A, stopped past its lease, lost T1 to worker B, which took a fresh slot for it;
    resumed, A's stale attempt ended and its release freed the slot by the task's name, B's, so the
    held-back T2 ran beside T1 under a limit of 1. Each slot is now its attempt's ("<queue> <id>
    <lease>")."""
    import signal

    from tests.core.test_processes import wait_heartbeats

    gate_first, gate_second = tmp_path / "first.open", tmp_path / "second.open"
    gate_second.touch()
    a = spawn(**LIMIT_SETTINGS)
    wait_registered(ops, a)
    log = a.log
    first = client.enqueue("proc.limited_gate", {"path": str(gate_first), "tag": "gate"}, queue=Q).id
    wait_until(lambda: task_events(log, "start", task_id=first), 10, message="T1 to start on A")
    b = spawn(**LIMIT_SETTINGS)
    wait_registered(ops, b)
    a.signal(signal.SIGSTOP)
    try:
        wait_until(lambda: [e for e in task_events(log, "start", task_id=first) if e["pid"] == b.pid], 15,
                   message="T1 taken back and started on B")
        second = client.enqueue("proc.limited_gate", {"path": str(gate_second), "tag": "gate"}, queue=Q).id
        wait_until(lambda: (ops.get_task(Q, second).waiting or "").startswith("concurrency limit"), 10,
                   message="T2 held back")
    finally:
        a.signal(signal.SIGCONT)
    wait_until(lambda: [e for e in read_events(log) if e.get("id") == first and e["pid"] == a.pid
                        and e["event"] != "start"], 15, message="A's stale attempt of T1 to end")
    wait_heartbeats(ops, a.pid, beats=3)  # A has run on since: its release went out
    wait_heartbeats(ops, b.pid, beats=3)
    assert not task_events(log, "start", task_id=second)  # still held back: B's T1 keeps the one slot
    (limit,) = [lim for lim in ops.limits() if lim.type == "proc.limited_gate"]
    assert [(u.running, u.waiting) for u in limit.usage] == [(1, 1)]
    gate_first.touch()
    wait_until(lambda: ops.queue_info(Q).size == 0, 15, message="both tasks to complete")
    (t1_end,) = [e["t"] for e in task_events(log, "end", task_id=first) if e["pid"] == b.pid]
    (t2_start,) = [e["t"] for e in task_events(log, "start", task_id=second)]
    assert t2_start >= t1_end  # T2 took the slot only once B's T1 gave it back
