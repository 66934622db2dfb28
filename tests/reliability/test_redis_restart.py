"""Redis itself goes away: restarted without persistence (workers, CLI and dashboard survive and
reconnect; enqueue during the outage fails fast with BrokerError), and killed with AOF
``appendfsync always`` (no acknowledged enqueue is lost)."""

from __future__ import annotations

import itertools
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.urls import reverse

from queuecore import BrokerError, Client, ConnectionConfig, Inspector
from tests.adminctl.conftest import ROOT, clean_env
from tests.conftest import wait_until
from tests.core.test_processes import task_events
from tests.reliability.oracle import check_invariants, read_log, runs_by_id

pytestmark = pytest.mark.slow

Q = "default"


def adminctl_stats(url: str, prefix: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "queuecore_adminctl", "--redis-url", url, "--prefix", prefix, "stats",
                           "--json"], cwd=ROOT, env=clean_env(), capture_output=True, text=True, timeout=60)


def test_restart_without_persistence(spawn, private_redis, key_prefix: str, log: Path, settings,
                                     admin_client) -> None:
    server = private_redis
    connection = ConnectionConfig(redis_url=server.url, key_prefix=key_prefix)
    settings.QUEUECORE = {"REDIS_URL": server.url, "KEY_PREFIX": key_prefix}
    client = Client(connection=connection)
    try:
        before = [client.enqueue("proc.noop", {"tag": f"b{i}"}).id for i in range(5)]
        w = spawn(redis_url=server.url, concurrency=2, lease=2, heartbeat=0.2, recover=0.3)
        wait_until(lambda: {e["id"] for e in task_events(log, "end")} >= set(before), 20, message="first batch")
        assert admin_client.get(reverse("queuecore_dashboard:overview")).status_code == 200

        server.kill()  # no persistence: everything in it is gone
        wait_until(lambda: "Redis is unreachable" in w.stderr(), 15, message="the worker to notice")
        for attempt in range(3):
            started = time.monotonic()
            with pytest.raises(BrokerError):
                client.enqueue("proc.noop", {"tag": "during"})
            print(f"\nenqueue during the outage raised BrokerError after {time.monotonic() - started:.3f}s "
                  f"(try {attempt + 1})")
        cli = adminctl_stats(server.url, key_prefix)
        print(f"adminctl stats during the outage: exit {cli.returncode}: {cli.stderr.strip()[:120]}")
        assert cli.returncode == 2
        assert admin_client.get(reverse("queuecore_dashboard:overview")).status_code == 503
        assert w.alive

        server.start()  # same port, empty
        restarted = time.monotonic()
        after = [client.enqueue("proc.noop", {"tag": f"a{i}"}).id for i in range(5)]
        wait_until(lambda: {e["id"] for e in task_events(log, "end")} >= set(after), 30,
                   message="the worker to run tasks enqueued after the restart")
        print(f"worker ran new work {time.monotonic() - restarted:.2f}s after Redis came back")
        assert adminctl_stats(server.url, key_prefix).returncode == 0
        assert admin_client.get(reverse("queuecore_dashboard:overview")).status_code == 200
        assert w.alive
        wait_until(lambda: "Redis is reachable again" in w.stderr(), 15, message="the recovery log line")
        check_invariants(client.redis, connection.keys, before + after, log)
    finally:
        client.close()


def test_kill9_of_redis_with_aof_always_loses_no_acknowledged_enqueue(spawn, private_redis_factory,
                                                                      key_prefix: str, log: Path) -> None:
    server = private_redis_factory("--appendonly", "yes", "--appendfsync", "always")
    connection = ConnectionConfig(redis_url=server.url, key_prefix=key_prefix, socket_timeout=2.0)
    client = Client(connection=connection)
    acked: list[str] = []
    failed: list[str] = []
    stop = threading.Event()

    def enqueue_forever() -> None:
        for n in itertools.count():
            if stop.is_set():
                return
            task_id = f"e{n}"
            try:
                client.enqueue("proc.sleep", {"seconds": 0.01, "tag": task_id}, task_id=task_id)
                acked.append(task_id)
            except BrokerError:
                failed.append(task_id)
                time.sleep(0.05)  # pace of retries while Redis is down

    w = spawn(redis_url=server.url, concurrency=4, lease=10, heartbeat=0.3, recover=0.5)
    producer = threading.Thread(target=enqueue_forever, daemon=True)
    producer.start()
    try:
        wait_until(lambda: len(acked) >= 200, 30, message="200 acknowledged enqueues")
        server.kill()  # SIGKILL: no shutdown save; only the fsynced AOF survives
        acked_at_kill = len(acked)
        wait_until(lambda: len(failed) >= 3, 15, message="enqueues to fail")
        server.start()
        wait_until(lambda: len(acked) >= acked_at_kill + 100, 30, message="enqueues to succeed again")
        stop.set()
        producer.join(10)
        inspector = Inspector(connection=connection)
        try:
            wait_until(lambda: (i := inspector.queue_info(Q)).pending + i.active + i.retry == 0, 60,
                       message="drain")
        finally:
            inspector.close()
        ran = set(runs_by_id(read_log(log)))
        # a failed enqueue may still have been stored (its reply was lost): count those as enqueued
        maybe = [i for i in failed if i in ran or client.redis.exists(connection.keys.queue(Q).task(i))]
        summary = check_invariants(client.redis, connection.keys, acked + maybe, log,
                                   allow_reruns_for=lambda i, runs: True)  # the Redis crash is the fault
        print(f"\nAOF always: {len(acked)} acknowledged enqueues, none lost; {len(failed)} failed during the "
              f"outage ({len(maybe)} of them stored anyway); {len(summary['reruns'])} re-run(s)")
        assert w.alive
    finally:
        stop.set()
        client.close()
        server.stop()


def test_outage_past_the_lease_with_idle_workers_beside_reruns_nothing(
        spawn, private_redis_factory, key_prefix: str, log: Path, tmp_path: Path) -> None:
    """Worker A runs 8 tasks; 3 idle workers watch the same queue with quicker recoverers. Redis (AOF
    always) goes away for longer than the lease while the tasks finish, and comes back on the same
    files. A's acknowledgements must land: no task runs twice, none runs on an idle worker."""
    server = private_redis_factory("--appendonly", "yes", "--appendfsync", "always")
    connection = ConnectionConfig(redis_url=server.url, key_prefix=key_prefix)
    client = Client(connection=connection)
    inspector = Inspector(connection=connection)
    lease = 2.0
    try:
        gates = [tmp_path / f"gate-{i}" for i in range(8)]
        ids = [client.enqueue("proc.gate", {"path": str(g), "tag": f"o{i}"}, retention=600).id
               for i, g in enumerate(gates)]
        a = spawn(redis_url=server.url, concurrency=8, prefetch=0, lease=lease, heartbeat=0.4, recover=0.5)
        wait_until(lambda: {e["id"] for e in task_events(log, "start", pid=a.pid)} == set(ids), 20,
                   message="A to start all 8 tasks")
        idle = [spawn(redis_url=server.url, concurrency=8, prefetch=0, lease=lease, heartbeat=0.4, recover=0.1)
                for _ in range(3)]
        wait_until(lambda: len(inspector.servers()) == 4, 20, message="the idle workers' heartbeats")

        server.stop()  # SHUTDOWN: the AOF (fsynced on every write) is what comes back
        down_at = time.monotonic()
        for g in gates:
            g.touch()  # the tasks finish while Redis is away; their outcomes wait to be written
        wait_until(lambda: len(task_events(log, "end", pid=a.pid)) == 8, 20, message="the 8 tasks to end")
        # The outage must outlast the lease (and the outage threshold): wall-clock time is the fault here.
        wait_until(lambda: time.monotonic() - down_at > lease + 1.0, 10, interval=0.05,
                   message="the outage to outlast the lease")
        server.start()
        wait_until(lambda: all(inspector.get_task(Q, i).state == "completed" for i in ids), 30,
                   message="A's acknowledgements after the outage")
        runs = runs_by_id(read_log(log))
        assert {i: len(runs[i]) for i in ids} == {i: 1 for i in ids}, "a task ran twice"
        assert {r["pid"] for i in ids for r in runs[i]} == {a.pid}
        assert all(inspector.get_task(Q, i).retried == 0 for i in ids)
        check_invariants(client.redis, connection.keys, ids, log)
        graced = [w for w in (a, *idle) if "of grace for their owners to renew them" in w.stderr()]
        print(f"\nRedis away {time.monotonic() - down_at:.1f}s with lease {lease}s: 8 tasks acknowledged once; "
              f"{len(graced)} worker(s) logged the grace")
        assert graced, "the grace is logged"
        assert all(w.alive for w in (a, *idle))
    finally:
        client.close()
        inspector.close()
        server.stop()
