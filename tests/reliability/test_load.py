"""Load: 100,000 no-op tasks through one worker with every invariant holding, and bulk actions on
50,000 tasks done in bounded chunks (each script call moves at most one chunk; SLOWLOG's longest
call is printed as a measurement, not asserted: timings belong in bench/)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from queuecore import Client, ConnectionConfig, Inspector, Worker, default_registry
from queuecore.core.inspector import BULK_CHUNK
from tests.conftest import FAST, wait_until
from tests.helpers import proc_tasks
from tests.reliability.oracle import check_invariants


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_100k_tasks_through_one_worker_keep_every_invariant(connection, redis_client, tmp_path: Path):
    log = tmp_path / "handlers.log"
    log.touch()
    proc_tasks.configure(str(log))
    client = Client(connection=connection)
    inspector = Inspector(connection=connection)
    n = 100_000
    ids: list[str] = []
    started = time.perf_counter()
    for start in range(0, n, 1000):
        ids += [t.id for t in client.enqueue_many([("proc.noop", {"tag": str(i)}) for i in range(start, start + 1000)])]
    enqueued = time.perf_counter()
    worker = Worker(connection=connection, registry=default_registry,
                    **{**FAST, "lease_duration": 30.0, "heartbeat_interval": 1.0, "concurrency": 10})
    worker.start()
    try:
        wait_until(lambda: not inspector.queue_info("default").pending and not inspector.queue_info("default").active,
                   180, interval=0.2, message="100,000 tasks to drain")
    finally:
        worker.shutdown(timeout=5)
        proc_tasks.configure("")
    drained = time.perf_counter()
    summary = check_invariants(redis_client, connection.keys, ids, log)
    assert summary["counts"] == {"completed": n}
    assert summary["reruns"] == []
    print(f"\nenqueued {n} in {enqueued - started:.1f}s ({n / (enqueued - started):,.0f}/s), "
          f"drained in {drained - enqueued:.1f}s ({n / (drained - enqueued):,.0f}/s) with the handler log on")
    client.close()
    inspector.close()


@pytest.mark.slow
def test_bulk_actions_on_50k_tasks_run_in_bounded_chunks(private_redis, key_prefix):
    connection = ConnectionConfig(redis_url=private_redis.url, key_prefix=key_prefix)
    admin = redis.Redis.from_url(private_redis.url, decode_responses=True)
    client = Client(connection=connection)
    inspector = Inspector(connection=connection)
    n = 50_000
    for start in range(0, n, 1000):
        client.enqueue_many([("load.noop", {"i": i}) for i in range(start, start + 1000)], process_in=3600)
    # SLOWLOG also records the commands run inside scripts; log calls over 1 ms, which every chunk
    # that comes near the limit is, and count all script calls from INFO commandstats.
    admin.config_set("slowlog-max-len", 100_000)
    admin.config_set("slowlog-log-slower-than", 1000)
    admin.slowlog_reset()
    admin.config_resetstat()
    timings = {}
    calls = 0
    for action, state in (("run_all", "scheduled"), ("archive_all", "pending"), ("run_all", "archived"),
                          ("delete_all", "pending")):
        t0 = time.perf_counter()
        result = getattr(inspector, action)("default", state)
        timings[f"{action} {state}"] = time.perf_counter() - t0
        assert result.count == n
        total = admin.info("commandstats")["cmdstat_evalsha"]["calls"]
        # Per chunk, one script call that moves it and one that records the bulk job's progress
        # (bulkjobs.py), plus a few of bookkeeping (the job's creation and first step, the empty call
        # that ends the loop, the audit entry, a first call's script load): no call moved more than a
        # chunk, so none held Redis for longer than a chunk's work.
        chunks = n // BULK_CHUNK
        assert 2 * chunks <= total - calls <= 2 * chunks + 12, (action, state, total - calls)
        calls = total
    entries = admin.slowlog_get(100_000)
    def command(entry: dict) -> str:
        raw = entry["command"]
        return raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)

    scripts = [e for e in entries if command(e).upper().startswith("EVAL")]
    longest = max((e["duration"] for e in scripts), default=0)
    assert inspector.queue_info("default").size == 0
    print(f"\n{calls} script calls, {len(scripts)} over 1 ms, longest {longest / 1000:.1f} ms; "
          + ", ".join(f"{k}: {v:.2f}s" for k, v in timings.items()))
    admin.close()
    client.close()
    inspector.close()
