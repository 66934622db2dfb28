"""Per-task-type statistics: every bucket bound through an acknowledgement batch (with and without a
lost lease), and the switch that turns the statistics off (``WorkerConfig(type_stats=False)``,
``QUEUECORE['TYPE_STATS']``): the scripts then get nothing per type and write nothing per type."""

from __future__ import annotations

import pytest

from queuecore import TaskState, task
from queuecore.core import typestats
from queuecore.core.config import WorkerConfig
from queuecore.core.errors import ConfigurationError
from queuecore.core.inspector import Inspector
from queuecore.core.scripts import DoneItem, Scripts
from tests.core.test_typestats import DAY, MINUTE, NOW, seed_active, vector
from tests.core.worker_support import wait_state
from tests.helpers.state import seed_task


@pytest.fixture
def q(connection):
    return connection.keys.queue("default")


def ts_keys(r, q) -> list[str]:
    return sorted(r.scan_iter(match=q.type_stats + "*"))


def test_every_bucket_bound_through_a_batch(redis_client, q, scripts: Scripts, connection) -> None:
    r = redis_client
    bounds = typestats.BUCKETS_MS
    items = []
    for i, ms in enumerate([0, *bounds, bounds[-1] + 1, None]):  # every bucket bound, +Inf, not timed
        seed_active(r, q, f"x{i}", "a.t")
        items.append(DoneItem(f"x{i}", 1, 0, "", type="a.t", duration_ms=ms))
    seed_active(r, q, "untyped", "")
    items.append(DoneItem("untyped", 1, 0, "", type="", duration_ms=1))
    assert scripts.done_many(q, items, now_ms=NOW, day=DAY, minute=MINUTE) == [True] * len(items)
    expected = vector(processed=len(bounds) + 3, timed=len(bounds) + 2, sum=sum(bounds) + bounds[-1] + 1, b0=2,
                      **{f"b{i}": 1 for i in range(1, len(bounds) + 1)})
    assert typestats.read_totals(r.hgetall(q.type_stats)) == {"a.t": expected}

    # the same batch with a lost lease in it: the same result
    other = connection.keys.queue("other")
    for item in items:
        seed_task(r, other, item.id, "active", score=NOW + 30_000, lease=1, type=item.type, started_at=NOW - 1000)
    seed_task(r, other, "stale", "active", score=NOW + 30_000, lease=5, type="a.t", started_at=NOW - 1000)
    lost = DoneItem("stale", 4, 0, "", type="a.t", duration_ms=1)
    assert scripts.done_many(other, [lost, *items], now_ms=NOW, day=DAY, minute=MINUTE) == [False] + [True] * len(items)
    assert typestats.read_totals(r.hgetall(other.type_stats)) == {"a.t": expected}


def test_with_statistics_off_the_scripts_write_nothing_per_type(redis_client, q, connection) -> None:
    r = redis_client
    off = Scripts(r, connection.keys, type_stats=False)
    assert off.dedicated().type_stats is False
    for i in range(3):
        seed_active(r, q, f"x{i}", "a.t")
    seed_active(r, q, "stale", "a.t", lease=5)
    items = [DoneItem(f"x{i}", 1, 0, "", type="a.t", duration_ms=3) for i in range(3)]
    items.append(DoneItem("stale", 4, 0, "", type="a.t", duration_ms=3))
    assert off.done_many(q, items, now_ms=NOW, day=DAY, minute=MINUTE) == [True] * 3 + [False]
    seed_active(r, q, "r", "c.t")
    seed_active(r, q, "a", "c.t")
    assert off.retry(q, "r", 1, now_ms=NOW, retry_at_ms=NOW + 1000, error="boom", day=DAY, minute=MINUTE,
                     type_name="c.t", duration_ms=40)
    assert off.archive(q, "a", 1, now_ms=NOW, error="boom", day=DAY, minute=MINUTE, max_archive_size=100,
                       archive_cutoff_ms=0, type_name="c.t", duration_ms=60)
    seed_task(r, q, "lost1", "active", score=NOW - 1, lease=1, type="d.t", max_retry=3)
    seed_task(r, q, "lost2", "active", score=NOW - 1, lease=1, type="d.t", max_retry=0)
    recovery = off.recover(q, now_ms=NOW, limit=100, day=DAY, minute=MINUTE)
    assert (recovery.requeued, recovery.archived) == (1, 1)
    assert ts_keys(r, q) == []
    assert r.hget(q.stats, "processed") is not None  # the queue's own counters are still kept


def test_a_worker_with_type_stats_off_writes_none(make_worker, client, connection, registry, redis_client) -> None:
    @task(name="ts.off", registry=registry)
    def ok(n: int) -> int:
        return n

    infos = [client.enqueue(ok, {"n": i}, retention=60) for i in range(5)]
    make_worker(type_stats=False)
    inspector = Inspector(connection=connection)
    for info in infos:
        wait_state(inspector, "default", info.id, TaskState.COMPLETED)
    inspector.close()
    assert ts_keys(redis_client, connection.keys.queue("default")) == []


def test_type_stats_must_be_a_bool() -> None:
    assert WorkerConfig().type_stats is True
    assert WorkerConfig(type_stats=False).type_stats is False
    with pytest.raises(ConfigurationError, match="type_stats must be True or False") as info:
        WorkerConfig(type_stats="no")  # type: ignore[arg-type]
    assert info.value.field == "type_stats"
