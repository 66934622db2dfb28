"""Per-task-type statistics (typestats.py): written by the scripts that record outcomes, one write per
acknowledgement batch and type; read per minute (72 h) and per day (90 days) through the Inspector."""

from __future__ import annotations

import calendar
from datetime import timedelta

import pytest
import redis

from queuecore import TaskState, task
from queuecore.core import typestats
from queuecore.core.clock import FakeClock
from queuecore.core.inspector import Inspector
from queuecore.core.keys import QueueKeys, stats_day, stats_minute
from queuecore.core.scripts import DoneItem, Scripts
from tests.core.worker_support import wait_state
from tests.helpers.state import seed_task

NOW = 1_800_000_000_000  # unix ms (2027-01-15T08:00:00Z)
DAY, MINUTE = stats_day(NOW / 1000), stats_minute(NOW / 1000)
HOUR, MINUTE_OF_HOUR = divmod(NOW // 60000, 60)


@pytest.fixture
def q(connection) -> QueueKeys:
    return connection.keys.queue("default")


def seed_active(r: redis.Redis, q: QueueKeys, task_id: str, type_name: str, lease: int = 1) -> None:
    seed_task(r, q, task_id, "active", score=NOW + 30_000, lease=lease, type=type_name, started_at=NOW - 1000)


def vector(**counts: int) -> list[int]:
    out = [0] * typestats.VECTOR_LENGTH
    names = {"processed": typestats.PROCESSED, "failed": typestats.FAILED, "retried": typestats.RETRIED,
             "archived": typestats.ARCHIVED, "recovered": typestats.RECOVERED, "timed": typestats.TIMED,
             "sum": typestats.DURATION_SUM}
    for name, n in counts.items():
        if name.startswith("b"):
            out[typestats.FIRST_BUCKET + int(name[1:])] = n
        else:
            out[names[name]] = n
    return out


def test_done_batch_counts_per_type_in_totals_minute_and_day(redis_client, q, scripts: Scripts) -> None:
    r = redis_client
    for i, t in enumerate(["a.t", "a.t", "a.t", "b.t"]):
        seed_active(r, q, f"x{i}", t)
    seed_active(r, q, "stale", "a.t", lease=5)  # lease lost: not counted
    items = [DoneItem("x0", 1, 0, "", type="a.t", duration_ms=3),  # bucket 0 (<= 5 ms)
             DoneItem("x1", 1, 0, "", type="a.t", duration_ms=5),  # bucket 0 (bounds are inclusive)
             DoneItem("x2", 1, 0, "", type="a.t", duration_ms=7200_000),  # +Inf
             DoneItem("x3", 1, 0, "", type="b.t", duration_ms=120),  # bucket 5 (<= 250 ms)
             DoneItem("stale", 4, 0, "", type="a.t", duration_ms=1)]
    assert scripts.done_many(q, items, now_ms=NOW, day=DAY, minute=MINUTE) == [True] * 4 + [False]

    a = vector(processed=3, timed=3, sum=7200_008, b0=2, **{f"b{len(typestats.BUCKETS_MS)}": 1})
    b = vector(processed=1, timed=1, sum=120, b5=1)
    assert typestats.read_totals(r.hgetall(q.type_stats)) == {"a.t": a, "b.t": b}
    minute = r.hgetall(typestats.minute_key(q.type_stats, "a.t", HOUR))
    assert {k: typestats.unpack(v) for k, v in minute.items()} == {str(MINUTE_OF_HOUR): a}
    day = r.hgetall(typestats.day_key(q.type_stats, "b.t", DAY[:7]))
    assert {k: typestats.unpack(v) for k, v in day.items()} == {DAY[8:].lstrip("0"): b}
    # trailing zeros are not stored; the keys expire 72 h after the hour, 90 days after the month
    assert r.hget(q.type_stats, "b.t") == "1,0,0,0,0,1,120,0,0,0,0,0,1"
    assert r.expiretime(typestats.minute_key(q.type_stats, "a.t", HOUR)) == (HOUR + 1 + 72) * 3600
    february = calendar.timegm((2027, 2, 1, 0, 0, 0))
    assert r.expiretime(typestats.day_key(q.type_stats, "b.t", DAY[:7])) == february + 90 * 86400

    # a second batch adds to the same records
    seed_active(r, q, "y", "b.t")
    scripts.done_many(q, [DoneItem("y", 1, 0, "", type="b.t", duration_ms=130)], now_ms=NOW + 10, day=DAY,
                      minute=MINUTE)
    assert typestats.read_totals(r.hgetall(q.type_stats))["b.t"] == vector(processed=2, timed=2, sum=250, b5=2)


def test_retry_archive_and_recover_count_per_type(redis_client, q, scripts: Scripts) -> None:
    r = redis_client
    seed_active(r, q, "r", "c.t")
    seed_active(r, q, "a", "c.t")
    seed_active(r, q, "cancelled", "c.t")
    assert scripts.retry(q, "r", 1, now_ms=NOW, retry_at_ms=NOW + 1000, error="boom", day=DAY, minute=MINUTE,
                         type_name="c.t", duration_ms=40)
    assert scripts.archive(q, "a", 1, now_ms=NOW, error="boom", day=DAY, minute=MINUTE, max_archive_size=100,
                           archive_cutoff_ms=0, type_name="c.t", duration_ms=60)
    assert scripts.archive(q, "cancelled", 1, now_ms=NOW, error="cancelled", day=DAY, minute=MINUTE,
                           max_archive_size=100, archive_cutoff_ms=0, count_failure=False, type_name="c.t")
    # two expired leases: one goes back to pending, one had no retry left
    seed_task(r, q, "lost1", "active", score=NOW - 1, lease=1, type="d.t", max_retry=3)
    seed_task(r, q, "lost2", "active", score=NOW - 1, lease=1, type="d.t", max_retry=0)
    recovery = scripts.recover(q, now_ms=NOW, limit=100, day=DAY, minute=MINUTE)
    assert (recovery.requeued, recovery.archived) == (1, 1)

    totals = typestats.read_totals(r.hgetall(q.type_stats))
    assert totals == {
        "c.t": vector(processed=2, failed=2, retried=1, archived=2, timed=2, sum=100, b3=1, b4=1),
        "d.t": vector(processed=2, failed=2, retried=1, archived=1, recovered=2)}


def test_inspector_reads_a_workload_exactly(make_worker, client, connection, registry) -> None:
    @task(name="ts.ok", registry=registry)
    def ok(n: int) -> int:
        return n

    @task(name="ts.bad", registry=registry, max_retry=1, retry_delay=lambda n, e: 0.01)
    def bad(n: int) -> None:
        raise ValueError(n)

    oks = [client.enqueue(ok, {"n": i}, retention=60) for i in range(7)]
    bads = [client.enqueue(bad, {"n": i}) for i in range(3)]
    make_worker()
    inspector = Inspector(connection=connection)
    for info in oks:
        wait_state(inspector, "default", info.id, TaskState.COMPLETED)
    for info in bads:
        wait_state(inspector, "default", info.id, TaskState.ARCHIVED)

    assert inspector.task_types("default") == ["ts.bad", "ts.ok"]
    got = inspector.type_stats("default", "ts.ok", timedelta(hours=1))
    assert (got.processed, got.failed, got.retried, got.archived, got.timed) == (7, 0, 0, 0, 7)
    assert got.resolution == "minute" and sum(p.processed for p in got.points) == 7
    assert got.p50_ms_estimate is not None and got.p99_ms_estimate is not None
    assert got.p50_ms_estimate <= got.p95_ms_estimate <= got.p99_ms_estimate  # type: ignore[operator]
    bad_stats = inspector.type_stats("default", "ts.bad", timedelta(days=30))
    assert bad_stats.resolution == "day"
    assert (bad_stats.processed, bad_stats.failed, bad_stats.retried, bad_stats.archived) == (6, 6, 3, 3)
    inspector.close()


def test_windows_per_minute_and_per_day(redis_client, q, scripts: Scripts, connection) -> None:
    r = redis_client
    r.sadd(connection.keys.queues, "default")
    for i, minutes_ago in enumerate([0, 1, 59, 61, 60 * 71, 60 * 24 * 10]):
        at = NOW - minutes_ago * 60_000
        seed_active(r, q, f"t{i}", "w.t")
        scripts.done_many(q, [DoneItem(f"t{i}", 1, 0, "", type="w.t", duration_ms=1)], now_ms=at,
                          day=stats_day(at / 1000), minute=stats_minute(at / 1000))
    inspector = Inspector(connection=connection, clock=FakeClock(NOW / 1000 + 30))
    assert inspector.type_stats("default", "w.t", 60).processed == 1
    assert inspector.type_stats("default", "w.t", 120).processed == 2
    assert inspector.type_stats("default", "w.t", timedelta(hours=1)).processed == 3
    assert inspector.type_stats("default", "w.t", timedelta(hours=2)).processed == 4
    assert inspector.type_stats("default", "w.t", timedelta(hours=72)).processed == 5
    week = inspector.type_stats("default", "w.t", timedelta(days=7))
    assert (week.resolution, week.processed) == ("day", 5)
    assert inspector.type_stats("default", "w.t", timedelta(days=11)).processed == 6
    with pytest.raises(Exception, match="window"):
        inspector.type_stats("default", "w.t", timedelta(days=91))
    inspector.close()


def test_a_window_over_72_hours_counts_the_whole_days_that_cover_it(redis_client, q, scripts: Scripts,
                                                                    connection) -> None:
    """A review: past 72 h the read took today and window.days - 1 days before it, which left out up to
    a day: with one task an hour, 73 h read 56 and 168 h read 152."""
    r = redis_client
    r.sadd(connection.keys.queues, "default")
    done_at = [NOW - hours * 3_600_000 - 30_000 for hours in range(200)]  # one task an hour
    for i, at in enumerate(done_at):
        seed_active(r, q, f"h{i}", "h.t")
        scripts.done_many(q, [DoneItem(f"h{i}", 1, 0, "", type="h.t", duration_ms=1)], now_ms=at,
                          day=stats_day(at / 1000), minute=stats_minute(at / 1000))
    inspector = Inspector(connection=connection, clock=FakeClock(NOW / 1000))
    for hours in (73, 96, 119, 168):
        got = inspector.type_stats("default", "h.t", timedelta(hours=hours))
        assert got.resolution == "day" and got.counted_from <= NOW / 1000 - hours * 3600
        assert got.counted_from % 86400 == 0 and NOW / 1000 - got.counted_from < hours * 3600 + 86400
        assert got.processed == sum(1 for at in done_at if at / 1000 >= got.counted_from) >= hours
    report = inspector.type_report("default", "h.t", timedelta(hours=73))  # a rate over the time counted
    assert report.per_minute == pytest.approx(report.stats.processed / ((NOW / 1000 - report.stats.counted_from) / 60))
    assert report.per_minute == pytest.approx(1 / 60, rel=0.05)  # one task an hour, as seeded
    minutes = inspector.type_stats("default", "h.t", timedelta(hours=3))
    assert minutes.counted_from == (NOW // 60_000 - 180 + 1) * 60 and minutes.processed == 3
    inspector.close()


def test_percentile_estimates_interpolate_inside_buckets() -> None:
    buckets = [0] * (len(typestats.BUCKETS_MS) + 1)
    buckets[4] = 100  # all between 50 and 100 ms
    assert typestats.percentile_ms(buckets, 0.5) == 75.0
    assert typestats.percentile_ms(buckets, 0.99) == 99.5
    assert typestats.percentile_ms([0] * len(buckets), 0.5) is None
    buckets[-1] = 1000  # mostly beyond the last bound: reported as that bound
    assert typestats.percentile_ms(buckets, 0.99) == typestats.BUCKETS_MS[-1]


def test_memory_per_type_is_bounded(redis_client, q, scripts: Scripts) -> None:
    """Fill one type's records for every minute of 72 h and every day of 90 (the worst case), with
    large counts and every bucket used, and measure with MEMORY USAGE."""
    r = redis_client
    big = ",".join(str(12345 + i) for i in range(typestats.VECTOR_LENGTH))
    hour0 = HOUR - 72
    for hour in range(hour0, HOUR):
        r.hset(typestats.minute_key(q.type_stats, "m.t", hour), mapping={str(m): big for m in range(60)})
    months = ["2026-10", "2026-11", "2026-12", "2027-01"]
    for month in months:
        r.hset(typestats.day_key(q.type_stats, "m.t", month), mapping={str(d): big for d in range(1, 32)})
    r.hset(q.type_stats, "m.t", big)
    keys = [typestats.minute_key(q.type_stats, "m.t", h) for h in range(hour0, HOUR)]
    keys += [typestats.day_key(q.type_stats, "m.t", m) for m in months]
    worst = sum(int(r.memory_usage(k, samples=0) or 0) for k in keys)
    # a typical record: small counts, a few buckets
    typical_value = "40,0,0,0,0,40,900,31,7,2"
    for hour in range(hour0, HOUR):
        r.hset(typestats.minute_key(q.type_stats, "n.t", hour), mapping={str(m): typical_value for m in range(60)})
    for month in months:
        r.hset(typestats.day_key(q.type_stats, "n.t", month), mapping={str(d): typical_value for d in range(1, 32)})
    typical = sum(int(r.memory_usage(k.replace(":m.t:", ":n.t:"), samples=0) or 0) for k in keys)
    print(f"\nper-type statistics, one type, 72 h of minutes + 90 days: worst case {worst} bytes, "
          f"typical {typical} bytes")
    assert worst < 2_000_000 and typical < worst


def test_the_lua_buckets_are_the_python_buckets() -> None:
    from queuecore.core.scripts import script_source

    source = script_source("done")
    bounds = "{" + ", ".join(str(b) for b in typestats.BUCKETS_MS) + "}"
    assert "bounds = " + bounds.replace(" 900000,", "\n        900000,") in source
    assert typestats.VECTOR_LENGTH == 24 and "for i = 1, 24 do" in source


def test_a_corrupt_statistics_key_never_costs_an_acknowledgement(redis_client, q, scripts: Scripts) -> None:
    r = redis_client
    r.set(q.type_stats, "garbage")
    r.rpush(typestats.minute_key(q.type_stats, "a.t", HOUR), "garbage")
    seed_active(r, q, "x", "a.t")
    assert scripts.done_many(q, [DoneItem("x", 1, 0, "", type="a.t", duration_ms=3)], now_ms=NOW, day=DAY,
                             minute=MINUTE) == [True]
    assert not r.exists(q.task("x")) and r.zcard(q.active) == 0
    assert r.get(q.type_stats) == "garbage"  # left alone; the day record is still written
    day = r.hgetall(typestats.day_key(q.type_stats, "a.t", DAY[:7]))
    assert typestats.unpack(day[DAY[8:].lstrip("0")]) == vector(processed=1, timed=1, sum=3, b0=1)
