"""Several hosts: worker processes on different machines share one Redis.

Each "host" is a Linux network namespace with its own hostname and its own veth link to the root
namespace (``tests/helpers/hosts.py``); a private redis-server in the root namespace listens on every
link, and each host's worker connects through its own link, so its traffic really crosses a network
interface (Redis sees it coming from the host's address). The test process itself (the Client and
the Inspector) talks to Redis over 127.0.0.1: a third machine, as an operator's or a web server's.

What is shared, tested with real processes: one queue drained by both hosts; both heartbeats (each
server named after its host); lease recovery of a host's tasks after its worker is killed with
SIGKILL; an operator's cancel reaching a handler on another host; and a partition (one host's link
cut while it runs a task): the other host takes the task back after the lease, and the cut-off
host's acknowledgement, written once the link is back, is refused (fencing). Two oracles are checked
against each other: Redis (through the Inspector) and the handlers' own JSON event log
(``tests/helpers/proc_tasks.py``), a file outside Redis that every host writes to. Waits poll a
condition with a deadline; nothing sleeps to synchronise, nothing asserts on timings.
"""

from __future__ import annotations

import re
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from queuecore import Client, ConnectionConfig, Inspector, TaskRegistry, TaskState
from queuecore.core.reasons import CANCELLED_BY_OPERATOR, WORKER_LOST
from tests.conftest import wait_until
from tests.helpers.hosts import Host, Hosts, WorkerProcess, read_events, task_events

pytestmark = pytest.mark.slow

Q = "default"
NAMES = ["host-a", "host-b"]
# Leases expire quickly and the recoverer looks often (as tests/core/test_processes.py's kill -9 tests).
FAST_RECOVERY = dict(lease=1.5, heartbeat=0.3, recover=0.5)


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hosts]:
    """Two hosts and their Redis, for the whole module; everything is torn down at its end."""
    with Hosts(2, tmp_path_factory.mktemp("hosts"), names=NAMES) as hosts:
        yield hosts


class Site:
    """One test's view: a fresh key prefix on the hosts' Redis, a Client and an Inspector in the root
    namespace, and a handler log shared by every host."""

    def __init__(self, net: Hosts, tmp_path: Path) -> None:
        self.net = net
        self.tmp = tmp_path
        self.prefix = f"qch-{uuid.uuid4().hex[:8]}"
        self.log = tmp_path / "events.jsonl"
        connection = ConnectionConfig(redis_url=net.local_url, key_prefix=self.prefix)
        self.client = Client(connection=connection, registry=TaskRegistry())
        self.inspector = Inspector(connection=connection)
        self.redis = redis.Redis.from_url(net.local_url, decode_responses=True)
        self.started: list[WorkerProcess] = []

    @property
    def a(self) -> Host:
        return self.net.hosts[0]

    @property
    def b(self) -> Host:
        return self.net.hosts[1]

    def spawn(self, host: Host, **options: object) -> WorkerProcess:
        worker = self.net.spawn_worker(host, prefix=self.prefix, log=self.log, **options)
        self.started.append(worker)
        return worker

    def enqueue(self, name: str, payload: dict[str, Any]) -> str:
        return self.client.enqueue(name, payload, retention=60).id

    def server_of(self, worker: WorkerProcess) -> Any:
        return next((s for s in self.inspector.servers() if s.pid == worker.pid), None)

    def wait_registered(self, worker: WorkerProcess) -> Any:
        def check() -> Any:
            if not worker.alive:
                pytest.fail(f"worker on {worker.host.name} exited ({worker.proc.returncode})\n{worker.stderr()}")
            return self.server_of(worker)

        return wait_until(check, 20, interval=0.02, message=f"the heartbeat of the worker on {worker.host.name}")

    def wait_event(self, event: str, task_id: str, worker: WorkerProcess, timeout: float = 15) -> dict[str, Any]:
        found = wait_until(lambda: task_events(self.log, event, task_id, worker.pid), timeout,
                           message=f"{event!r} of task {task_id} on {worker.host.name}")
        return found[0]  # type: ignore[index]

    def state(self, task_id: str) -> TaskState:
        return self.inspector.get_task(Q, task_id).state

    def wait_state(self, task_ids: list[str], state: TaskState, timeout: float = 20) -> None:
        wait_until(lambda: all(self.state(t) is state for t in task_ids), timeout,
                   message=f"{len(task_ids)} task(s) to be {state.value}")

    def wait_held(self, task_ids: list[str], host: str) -> None:
        """Wait until the Inspector says ``host`` holds these active tasks (it reads a running task's
        worker from that worker's heartbeat, published every heartbeat interval)."""
        wait_until(lambda: all((self.inspector.get_task(Q, t).worker or "").startswith(f"{host}:") for t in task_ids),
                   10, message=f"{host}'s heartbeat to list {len(task_ids)} task(s)")

    def counts(self) -> dict[str, int]:
        info = self.inspector.queue_info(Q)
        return {"pending": info.pending, "active": info.active, "retry": info.retry, "scheduled": info.scheduled,
                "archived": info.archived}

    def close(self) -> None:
        for worker in self.started:
            if worker.alive:
                worker.proc.kill()
            worker.proc.wait(10)
        try:  # the module's Redis outlives each test; a Redis already gone (Ctrl-C) has nothing to clean
            keys = list(self.redis.scan_iter(match=f"{self.prefix}:*", count=1000))
            if keys:
                self.redis.unlink(*keys)
        except redis.ConnectionError:
            pass
        self.client.close()
        self.inspector.close()
        self.redis.close()


@pytest.fixture
def site(net: Hosts, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Site]:
    failed_before = request.session.testsfailed
    s = Site(net, tmp_path)
    try:
        yield s
    finally:
        for host in net.hosts:
            host.link_up()  # a test that cut a link and failed leaves it usable for the next
        if request.session.testsfailed > failed_before:
            for worker in s.started:
                print(f"--- worker on {worker.host.name} pid {worker.pid} (exit {worker.proc.returncode})")
                print(worker.stderr()[-4000:])
        s.close()


def started_on(site: Site, task_ids: list[str]) -> dict[str, int]:
    """task id → pid of the worker whose handler started its first attempt."""
    return {e["id"]: e["pid"] for e in task_events(site.log, "start") if e["id"] in task_ids and e["attempt"] == 0}


def gate_tasks(site: Site, count: int, gate: Path) -> list[str]:
    return [site.enqueue("proc.gate", {"path": str(gate), "tag": f"g{i}"}) for i in range(count)]


# -- tests ----------------------------------------------------------------------------------------------


def test_two_hosts_share_a_queue_and_publish_their_heartbeats(site: Site) -> None:
    a = site.spawn(site.a, concurrency=2, prefetch=0)
    b = site.spawn(site.b, concurrency=2, prefetch=0)
    site.wait_registered(a)
    site.wait_registered(b)

    # Heartbeats: two servers, each named after its own host, with its own pid.
    servers = {s.host: s for s in site.inspector.servers()}
    assert set(servers) == set(NAMES)
    for worker in (a, b):
        info = servers[worker.host.name]
        assert info.pid == worker.pid
        assert info.id.startswith(f"{worker.host.name}:{worker.pid}:")
    boots = {e["pid"]: e["server_id"] for e in read_events(site.log) if e["event"] == "boot"}
    assert boots == {a.pid: servers["host-a"].id, b.pid: servers["host-b"].id}

    # Each worker's connections come from its own host's address (they cross its link); the test's
    # own come from 127.0.0.1.
    peers = Counter(c["addr"].rsplit(":", 1)[0] for c in site.redis.client_list())
    assert peers[site.a.ip] >= 1 and peers[site.b.ip] >= 1, peers
    assert set(peers) <= {site.a.ip, site.b.ip, "127.0.0.1"}, peers

    # One queue, enqueued from the root namespace. Each worker runs at most 2 and holds nothing
    # beyond that (prefetch 0), so 4 gated tasks can all start only if both hosts take two.
    gate = site.tmp / "gate"
    ids = gate_tasks(site, 4, gate)
    wait_until(lambda: len(started_on(site, ids)) == 4, 15, message="4 tasks started")
    by_pid = Counter(started_on(site, ids).values())
    assert by_pid == {a.pid: 2, b.pid: 2}

    # The heartbeats list the running tasks of each host.
    def running_per_host() -> dict[str, set[str]] | None:
        seen = {s.host: {w.task_id for w in s.workers} for s in site.inspector.servers()}
        return seen if sum(len(v) for v in seen.values()) == 4 else None

    running = wait_until(running_per_host, 10, message="both heartbeats to list their running tasks")
    on = started_on(site, ids)
    assert running == {"host-a": {t for t in ids if on[t] == a.pid}, "host-b": {t for t in ids if on[t] == b.pid}}

    gate.touch()
    site.wait_state(ids, TaskState.COMPLETED)
    for task_id in ids:
        info = site.inspector.get_task(Q, task_id)
        host = "host-a" if on[task_id] == a.pid else "host-b"
        assert info.retried == 0
        assert [(x.result, (x.worker or "").split(":")[0]) for x in info.attempts] == [("completed", host)]
        assert [e["pid"] for e in task_events(site.log, "end", task_id)] == [on[task_id]]
    assert site.counts() == {"pending": 0, "active": 0, "retry": 0, "scheduled": 0, "archived": 0}


def test_a_killed_hosts_tasks_are_recovered_by_the_other_host(site: Site) -> None:
    a = site.spawn(site.a, concurrency=2, prefetch=0, **FAST_RECOVERY)
    b = site.spawn(site.b, concurrency=2, prefetch=0, **FAST_RECOVERY)
    site.wait_registered(a)
    site.wait_registered(b)
    gate = site.tmp / "gate"
    ids = gate_tasks(site, 6, gate)
    wait_until(lambda: len(started_on(site, ids)) == 4, 15, message="4 tasks started")
    on = started_on(site, ids)
    on_a = sorted(t for t in ids if on.get(t) == a.pid)
    assert len(on_a) == 2 and Counter(on.values())[b.pid] == 2

    # Host A's heartbeat says it holds them (the Inspector reads a running task's worker from it).
    site.wait_held(on_a, "host-a")

    a.kill9()  # nobody finishes or hands back host A's two tasks: only their leases can bring them back

    gate.touch()
    site.wait_state(ids, TaskState.COMPLETED, timeout=30)
    assert site.counts() == {"pending": 0, "active": 0, "retry": 0, "scheduled": 0, "archived": 0}
    for task_id in ids:
        info = site.inspector.get_task(Q, task_id)
        ends = task_events(site.log, "end", task_id)
        assert [e["pid"] for e in ends] == [b.pid]  # host A's were taken back; the rest ran on host B
        if task_id in on_a:
            # Taken back by host B's recoverer after the lease, run again there (attempt 2), completed once.
            assert ends[0]["attempt"] == 1
            assert info.retried == 1
            assert info.attempts[0].result == "retry" and info.attempts[0].error == WORKER_LOST
            assert info.attempts[-1].result == "completed" and info.attempts[-1].worker.startswith("host-b:")
        else:
            assert info.retried == 0 and ends[0]["attempt"] == 0
    assert not task_events(site.log, "end", pid=a.pid)
    # Host A's heartbeat expires; host B's stays.
    wait_until(lambda: [s.host for s in site.inspector.servers()] == ["host-b"], 15,
               message="host A's heartbeat to expire")


def test_an_operator_cancels_a_task_running_on_another_host(site: Site) -> None:
    a = site.spawn(site.a, concurrency=1, prefetch=0)
    b = site.spawn(site.b, concurrency=1, prefetch=0)
    site.wait_registered(a)
    site.wait_registered(b)
    ids = [site.enqueue("proc.block", {"tag": f"c{i}"}) for i in range(2)]
    wait_until(lambda: len(started_on(site, ids)) == 2, 15, message="2 blocking tasks started")
    on = started_on(site, ids)
    assert sorted(on.values()) == sorted([a.pid, b.pid])
    on_b = next(t for t in ids if on[t] == b.pid)
    on_a = next(t for t in ids if on[t] == a.pid)

    # From the root namespace (a third machine): cancel the one host B runs.
    site.inspector.cancel_task(Q, on_b)
    aborted = site.wait_event("abort", on_b, b)
    assert aborted["error"] == "TaskCancelled"
    site.wait_state([on_b], TaskState.ARCHIVED, timeout=10)
    info = site.inspector.get_task(Q, on_b)
    assert info.last_error == CANCELLED_BY_OPERATOR
    assert info.attempts[-1].worker.startswith("host-b:")
    # Only that task: host A's keeps running.
    assert site.state(on_a) is TaskState.ACTIVE
    assert not task_events(site.log, "abort", on_a)
    assert b.alive and site.server_of(b) is not None

    # And one on host A, the same way.
    site.inspector.cancel_task(Q, on_a)
    assert site.wait_event("abort", on_a, a)["error"] == "TaskCancelled"
    site.wait_state([on_a], TaskState.ARCHIVED, timeout=10)
    assert site.inspector.get_task(Q, on_a).last_error == CANCELLED_BY_OPERATOR


def test_a_cut_off_hosts_task_runs_on_the_other_and_its_late_ack_is_refused(site: Site) -> None:
    # socket_timeout 1 s: host A's Redis calls fail within a second of the cut instead of five.
    a = site.spawn(site.a, concurrency=1, prefetch=0, socket_timeout=1, **FAST_RECOVERY)
    site.wait_registered(a)
    fence = site.tmp / "fence-{attempt}"
    task_id = site.enqueue("proc.gate_pid", {"path": str(fence), "tag": "cut"})
    assert site.wait_event("start", task_id, a)["attempt"] == 0
    b = site.spawn(site.b, concurrency=1, prefetch=0, **FAST_RECOVERY)
    site.wait_registered(b)

    site.a.link_down()
    # Host A's handler finishes while cut off: its acknowledgement cannot reach Redis.
    Path(str(fence).format(attempt=0)).touch()
    assert site.wait_event("end", task_id, a)["attempt"] == 0
    # Its lease is no longer renewed: host B takes the task back after it and runs it again.
    assert site.wait_event("start", task_id, b, timeout=20)["attempt"] == 1
    site.wait_held([task_id], "host-b")
    info = site.inspector.get_task(Q, task_id)
    assert info.state is TaskState.ACTIVE and info.retried == 1
    Path(str(fence).format(attempt=1)).touch()
    site.wait_state([task_id], TaskState.COMPLETED)
    assert site.inspector.get_task(Q, task_id).result == {"pid": b.pid}

    # The link comes back: host A writes its acknowledgement, and Redis refuses it (its lease number
    # is no longer the task's), which host A logs.
    site.a.link_up()
    refused = re.compile(rf"task {task_id} finished \(success\) after its lease was lost")
    wait_until(lambda: refused.search(a.stderr()), 20, message="host A's late acknowledgement to be refused")
    info = site.inspector.get_task(Q, task_id)
    assert info.state is TaskState.COMPLETED and info.result == {"pid": b.pid} and info.retried == 1
    assert [x.result for x in info.attempts] == ["retry", "completed"]
    assert info.attempts[0].error == WORKER_LOST and info.attempts[1].worker.startswith("host-b:")
    # Host A is back in the pool.
    site.wait_registered(a)
    assert site.counts() == {"pending": 0, "active": 0, "retry": 0, "scheduled": 0, "archived": 0}
