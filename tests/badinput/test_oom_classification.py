"""Redis at ``maxmemory`` is reported as Redis being full, never as corrupt data: a fetch refused
for lack of memory raises ``RedisFull`` (not ``WrongKeyType``), the worker logs the spell once at
the default level and its end once, and fetching resumes when Redis has room again."""

from __future__ import annotations

import logging
import time

import pytest

from queuecore import Client, ConnectionConfig, Inspector, RedisFull, Worker, task
from queuecore.core.scripts import Scripts
from tests.badinput.test_maxmemory import BIG, full_redis, stay_full  # noqa: F401  (full_redis: fixture)
from tests.conftest import FAST, PrivateRedis, wait_until


def fill(client: Client) -> int:
    """Enqueue large payloads on another queue until Redis refuses one; returns how many fitted."""
    filled = 0
    with pytest.raises(RedisFull):
        for _ in range(1000):
            client.enqueue("t.fill", {"blob": BIG}, queue="filler")
            filled += 1
    return filled


def test_a_fetch_refused_at_maxmemory_is_redis_full_not_corrupt_data(full_redis: PrivateRedis) -> None:  # noqa: F811
    conn = ConnectionConfig(redis_url=full_redis.url, key_prefix="qct-oomc")
    r = conn.connect()
    client = Client(connection=conn)
    scripts = Scripts(r, conn.keys)
    q = conn.keys.queue("default")
    try:
        ids = [client.enqueue("t.work", {"n": i}).id for i in range(3)]
        fill(client)
        stay_full(r)
        now_ms = int(time.time() * 1000)
        with pytest.raises(RedisFull, match="Redis is full") as refused:
            scripts.dequeue(q, now_ms=now_ms, lease_until_ms=now_ms + 60_000, count=3)
        assert "corrupt" not in str(refused.value)
        # Nothing was written: the tasks are still pending, none active.
        assert sorted(r.lrange(q.pending, 0, -1)) == sorted(ids)
        assert r.zcard(q.active) == 0
        assert {r.hget(q.task(i), "state") for i in ids} == {"pending"}
    finally:
        client.close()
        r.close()


def test_worker_logs_redis_full_once_and_resumes_when_there_is_room(full_redis: PrivateRedis, registry,  # noqa: F811
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    conn = ConnectionConfig(redis_url=full_redis.url, key_prefix="qct-oomw2")
    r = conn.connect()
    ran: list[int] = []

    @task(name="t.work", registry=registry)
    def work(n: int) -> None:
        ran.append(n)

    client, inspector = Client(connection=conn, registry=registry), Inspector(connection=conn)
    worker = Worker(connection=conn, registry=registry, queues={"default": 1}, **{**FAST, "concurrency": 2})
    caplog.set_level(logging.INFO, logger="queuecore")
    try:
        ids = [client.enqueue("t.work", {"n": i}).id for i in range(3)]
        fill(client)
        stay_full(r)
        calls_before = int(r.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))
        worker.start()
        wait_until(lambda: any("Redis is full" in m for m in caplog.messages), 10,
                   message="the worker to log that Redis is full")
        # Let the fetcher be refused several more times: still one line for the whole spell.
        wait_until(lambda: int(r.info("commandstats")["cmdstat_evalsha"]["calls"]) > calls_before + 8, 20,
                   message="more refused fetches")
        assert ran == []
        messages = list(caplog.messages)
        assert sum("Redis is full" in m for m in messages) == 1, messages
        assert not [m for m in messages if "corrupt" in m], messages
        assert not [rec for rec in caplog.records if rec.exc_info], "no traceback for Redis being full"

        r.config_set("maxmemory", "0")  # room again
        wait_until(lambda: sorted(ran) == [0, 1, 2], 20, message="the tasks to run once Redis has room")
        wait_until(lambda: any("Redis has room again" in m for m in caplog.messages), 10,
                   message="the end of the spell in the log")
        assert inspector.queue_info("default").pending == 0 and len(ids) == 3
    finally:
        worker.force_stop()
        worker.shutdown(timeout=2)
        client.close()
        inspector.close()
        r.close()


def test_a_filtered_bulk_job_on_a_full_redis_finds_in_the_state_itself_and_says_so(
        full_redis: PrivateRedis, caplog: pytest.LogCaptureFixture) -> None:  # noqa: F811
    """With no room to copy the state it searches (bulk_snapshot.lua), a filtered job searches the state
    itself, says so at the default level, and still deletes what it found (deleting makes room)."""
    conn = ConnectionConfig(redis_url=full_redis.url, key_prefix="qct-oomb")
    r = conn.connect()
    client = Client(connection=conn)
    inspector = Inspector(connection=conn)
    try:
        wanted = {client.enqueue("t.a" if n % 2 else "t.b", {"n": n}).id for n in range(40)} and {
            t.id for t in inspector.iter_tasks("default", "pending", type="t.a")}
        fill(client)
        stay_full(r)
        with caplog.at_level(logging.WARNING, logger="queuecore.bulk"):
            job = inspector.run_bulk_job(inspector.start_bulk_job("delete", queue="default", state="pending",
                                                                  type="t.a").id)
        assert (job.status, job.total, job.done) == ("done", 20, 20) and len(wanted) == 20
        assert not {t.id for t in inspector.iter_tasks("default", "pending")} & wanted
        assert any("Redis is full, no room to copy the pending tasks of queue default" in m for m in caplog.messages)
    finally:
        client.close()
        inspector.close()
        r.close()
