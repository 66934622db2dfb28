"""Network faults through our own TCP proxy (tests/reliability/proxy.py): latency, blackhole and
reset between a worker and Redis; and Redis stalling (CLIENT PAUSE, DEBUG SLEEP)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from queuecore import BrokerError, Client, ConnectionConfig, Inspector
from tests.conftest import wait_until
from tests.core.test_processes import task_events
from tests.reliability.oracle import check_invariants, check_structure
from tests.reliability.proxy import FaultProxy

pytestmark = pytest.mark.slow

Q = "default"
FAST_PROC = dict(lease=1.5, heartbeat=0.3, recover=0.5, socket_timeout=0.5)


@pytest.fixture(scope="module")
def redis_url(keyspace_of_its_own: str) -> str:
    """A Redis of these tests' own: their structure checks scan the keyspace while the workers race on,
    so what others keep in the shared one must not slow them (with 200,000 other keys there, the
    direct worker had drained the queue before the one behind the proxy came back)."""
    return keyspace_of_its_own


def _drained(inspector: Inspector) -> bool:
    info = inspector.queue_info(Q)
    return info.pending + info.active + info.retry + info.scheduled == 0


def test_proxy_modes(private_redis) -> None:
    proxy = FaultProxy(private_redis.port).start()
    try:
        r = redis.Redis(port=proxy.port, socket_timeout=0.5, decode_responses=True)
        assert r.ping()
        proxy.set_mode("latency", ms=100)
        started = time.monotonic()
        assert r.ping()
        print(f"\nping through 100 ms latency: {time.monotonic() - started:.3f}s")
        proxy.set_mode("blackhole")
        with pytest.raises(redis.TimeoutError):
            r.execute_command("PING")
        proxy.set_mode("reset")
        with pytest.raises(redis.ConnectionError):
            redis.Redis(port=proxy.port, socket_timeout=0.5, retry_on_error=[]).ping()
        proxy.set_mode("pass")
        assert redis.Redis(port=proxy.port, socket_timeout=0.5).ping()
        r.close()
    finally:
        proxy.stop()


def test_worker_behind_latency_blackhole_and_reset_loses_nothing(spawn, redis_url: str, key_prefix: str,
                                                                 client: Client, inspector: Inspector, redis_client,
                                                                 connection, log: Path) -> None:
    upstream_port = redis.connection.parse_url(redis_url).get("port", 6379)
    proxy = FaultProxy(upstream_port).start()
    try:
        ids = [client.enqueue("proc.sleep", {"seconds": 0.05, "tag": f"n{i}"}, retention=600).id for i in range(150)]
        a = spawn(redis_url=proxy.url, concurrency=4, **FAST_PROC)  # behind the proxy
        b = spawn(concurrency=2, **FAST_PROC)  # direct: it takes over what A cannot finish
        a_done = lambda n: len(task_events(log, "end", pid=a.pid)) >= n  # noqa: E731
        wait_until(lambda: a_done(5), 20, message="A to make progress")

        proxy.set_mode("latency", ms=80)
        mark = len(task_events(log, "end", pid=a.pid))
        wait_until(lambda: a_done(mark + 5), 20, message="A to make progress through latency")
        check_structure(redis_client, connection.keys)

        proxy.set_mode("blackhole")  # longer than A's lease: B recovers A's tasks
        blackholed = time.monotonic()
        wait_until(lambda: time.monotonic() - blackholed > 1.5 + 1.0, 10, interval=0.05,
                   message="A's leases to expire")
        proxy.set_mode("pass")
        mark = len(task_events(log, "end", pid=a.pid))
        # fresh work, so that A's coming back is seen however much B has taken over meanwhile
        ids += [client.enqueue("proc.sleep", {"seconds": 0.05, "tag": f"m{i}"}, retention=600).id for i in range(150)]
        wait_until(lambda: a_done(mark + 5), 20, message="A to come back after the blackhole")

        proxy.set_mode("reset")  # RST everything, including reconnects, for a moment
        wait_until(lambda: proxy.resets >= 3, 10, message="connections to be reset")
        proxy.set_mode("pass")
        wait_until(lambda: _drained(inspector), 60, message="drain")
        assert a.alive and b.alive
        summary = check_invariants(redis_client, connection.keys, ids, log,
                                   allow_reruns_for=lambda i, runs: runs[0]["pid"] == a.pid,
                                   allow_concurrent=True)  # the blackhole made A's leases expire
        print(f"\nproxy faults: {summary['counts']}, {len(summary['reruns'])} re-run(s) of A's tasks, "
              f"{proxy.accepted} connections accepted, {proxy.resets} reset")
        assert "Redis is reachable again" in a.stderr()
    finally:
        proxy.stop()


def test_enqueue_through_a_blackhole_fails_within_the_socket_timeout(redis_url: str, key_prefix: str) -> None:
    port = redis.connection.parse_url(redis_url).get("port", 6379)
    with FaultProxy(port) as proxy:
        c = Client(connection=ConnectionConfig(redis_url=proxy.url, key_prefix=key_prefix, socket_timeout=1.0))
        try:
            c.enqueue("proc.noop", {})
            proxy.set_mode("blackhole")
            started = time.monotonic()
            with pytest.raises(BrokerError):
                c.enqueue("proc.noop", {})
            print(f"\nenqueue into a blackhole raised BrokerError after {time.monotonic() - started:.2f}s "
                  "(socket_timeout 1 s)")
            proxy.set_mode("reset")
            started = time.monotonic()
            with pytest.raises(BrokerError):
                c.enqueue("proc.noop", {})
            print(f"enqueue into resets raised BrokerError after {time.monotonic() - started:.2f}s")
        finally:
            c.close()


@pytest.mark.parametrize("stall", ["CLIENT PAUSE", "DEBUG SLEEP"])
def test_redis_stalls_lose_nothing(spawn, private_redis_factory, key_prefix: str, log: Path, stall: str) -> None:
    server = private_redis_factory("--enable-debug-command", "yes")
    connection = ConnectionConfig(redis_url=server.url, key_prefix=key_prefix)
    client = Client(connection=connection)
    inspector = Inspector(connection=connection)
    admin = redis.Redis(port=server.port, socket_timeout=10)
    try:
        ids = [client.enqueue("proc.sleep", {"seconds": 0.05, "tag": f"p{i}"}).id for i in range(60)]
        w = spawn(redis_url=server.url, concurrency=4, lease=2.0, heartbeat=0.3, recover=0.5, socket_timeout=5)
        wait_until(lambda: len(task_events(log, "end")) >= 10, 20, message="progress")
        started = time.monotonic()
        if stall == "CLIENT PAUSE":
            admin.execute_command("CLIENT", "PAUSE", 1000, "ALL")
            ids += [client.enqueue("proc.noop", {"tag": "paused"}).id]  # waits for the pause to end
        else:
            admin.execute_command("DEBUG", "SLEEP", 1)
        print(f"\n{stall}: stalled {time.monotonic() - started:.2f}s")
        wait_until(lambda: _drained(inspector), 30, message="drain")
        summary = check_invariants(client.redis, connection.keys, ids, log,
                                   allow_reruns_for=lambda i, runs: True, allow_concurrent=True)
        print(f"{stall}: {summary['counts']}, {len(summary['reruns'])} re-run(s)")
        assert w.alive
    finally:
        admin.close()
        client.close()
        inspector.close()
        server.stop()
