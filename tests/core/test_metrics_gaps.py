"""Gaps a probe found in metrics and per-type statistics: a malformed statistics value costs that value
only (never a scrape, an alert round or a type page), and a scrape filtered by name (``?name[]=``)
gets its samples."""

from __future__ import annotations

import urllib.request
from datetime import timedelta

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from queuecore.core import typestats
from queuecore.core.client import Client
from queuecore.core.clock import FakeClock
from queuecore.core.config import ConnectionConfig
from queuecore.core.inspector import Inspector
from queuecore.metrics import QueuecoreCollector, make_registry, render, serve
from tests.core.test_alerts import Pair, once

BAD = "garbage,x,,"  # the probe's value


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.mark.parametrize("value", [BAD, "1,x", "1.5", "-1", "nan", "inf", "1,,-3", b"\xff\xfe", "1 2"])
def test_a_value_that_is_not_a_packed_vector_reads_as_malformed_zeros(value: str | bytes) -> None:
    assert typestats.parse(value) is None
    vector = typestats.unpack(value)
    assert typestats.malformed(vector) and vector == [0] * typestats.VECTOR_LENGTH


def test_packed_vectors_still_read_exactly() -> None:
    assert typestats.unpack("3,1,,2")[:5] == [3, 1, 0, 2, 0]
    assert typestats.unpack(b"") == typestats.unpack(None) == [0] * typestats.VECTOR_LENGTH
    assert typestats.unpack("1e+15")[0] == 10**15  # what Lua's tostring writes past 10^14
    assert typestats.unpack(",".join(["1"] * 30)) == [1] * typestats.VECTOR_LENGTH  # longer: cut
    assert not any(typestats.malformed(typestats.unpack(v)) for v in ("", "0", "5,4,3", None))


@pytest.fixture
def seeded(redis_client: redis.Redis, connection: ConnectionConfig, fake_clock: FakeClock) -> str:
    """Queue "q1" with a good type, a malformed totals value, and malformed per-minute fields."""
    q = connection.keys.queue("q1")
    redis_client.sadd(connection.keys.queues, "q1")
    redis_client.hset(q.type_stats, mapping={"t.good": "10,6", "t.bad": BAD})
    minute = int(fake_clock.now() // 60)
    good_minute = typestats.minute_key(q.type_stats, "t.good", minute // 60)
    redis_client.hset(good_minute, mapping={str(minute % 60): "10,6", "zz": "1,1", "77": "1,1"})
    redis_client.hset(typestats.minute_key(q.type_stats, "t.bad", minute // 60), str(minute % 60), BAD)
    return q.type_stats


def test_a_malformed_value_costs_that_type_only_in_a_scrape(seeded, connection, fake_clock) -> None:
    inspector = Inspector(connection=connection, clock=fake_clock)
    got = samples(render(make_registry(inspector)).decode())
    assert got[("queuecore_up", ())] == 1
    assert got[("queuecore_tasks_processed_total", (("queue", "q1"), ("type", "t.good")))] == 10
    assert got[("queuecore_tasks_failed_total", (("queue", "q1"), ("type", "t.good")))] == 6
    assert not [key for key in got if ("type", "t.bad") in key[1]]  # left out, not reported as zeros
    assert got[("queuecore_queue_size", (("queue", "q1"), ("state", "pending")))] == 0
    assert got[("queuecore_queues_unreadable", ())] == 1  # read in part
    inspector.close()


def test_a_malformed_value_costs_that_value_only_in_the_inspector(seeded, connection, fake_clock) -> None:
    inspector = Inspector(connection=connection, clock=fake_clock)
    assert inspector.task_types("q1") == ["t.bad", "t.good"]
    good = inspector.type_stats("q1", "t.good", timedelta(minutes=5))
    assert (good.processed, good.failed, len(good.points)) == (10, 6, 1)  # "zz" and "77" skipped
    bad = inspector.type_stats("q1", "t.bad", timedelta(minutes=5))
    assert (bad.processed, bad.points) == (0, ())
    day = inspector.type_stats("q1", "t.good", timedelta(days=4))  # per-day records: none, no error
    assert day.processed == 0
    inspector.close()


def test_malformed_day_records_are_skipped(redis_client, connection, fake_clock) -> None:
    q = connection.keys.queue("q1")
    redis_client.sadd(connection.keys.queues, "q1")
    now = fake_clock.now()
    month = typestats._context(int(now // 60))[2]
    day_of_month = int(typestats._context(int(now // 60))[3])
    redis_client.hset(typestats.day_key(q.type_stats, "t", month),
                      mapping={str(day_of_month): "4,1", "0": "1", "32": "1", "x": "1", "1\u00b2": "1"})
    if day_of_month > 1:
        redis_client.hset(typestats.day_key(q.type_stats, "t", month), str(day_of_month - 1), BAD)
    stats = typestats.read(redis_client, q.type_stats, "q1", "t", timedelta(days=30), now)
    assert (stats.processed, stats.failed, len(stats.points)) == (4, 1, 1)


def test_a_malformed_value_never_stops_the_alert_round(seeded, connection, fake_clock, caplog) -> None:
    """The per-type failure rate of the good type fires although another type's value is garbage."""
    p = Pair(connection, fake_clock, {"tf": {"kind": "failure_rate", "queue": "q1", "type": "*", "above": 0.5,
                                             "window": 120, "min_tasks": 4}})
    try:
        once(p.rounds(), "fired", "tf/q1/t.good")
        assert "error in alerts" not in caplog.text
        fake_clock.advance(180)
        once(p.rounds(), "resolved", "tf/q1/t.good")
    finally:
        p.close()


def test_describe_names_every_family_without_reading_redis(connection) -> None:
    inspector = Inspector(redis_url="redis://127.0.0.1:1/0", key_prefix=connection.key_prefix)  # nothing there
    make_registry(inspector, namespace="qc")  # registering describes the collector
    names = {m.name for m in QueuecoreCollector(inspector, "qc").describe()}
    assert {"qc_up", "qc_queue_size", "qc_tasks_processed", "qc_task_duration_seconds", "qc_workers_up",
            "qc_queues_unreadable", "qc_limit_concurrency", "qc_periodic_fires"} <= names
    inspector.close()


def test_a_scrape_filtered_by_name_gets_those_samples(connection) -> None:
    inspector = Inspector(connection=connection)
    registry = make_registry(inspector)
    only = samples(render(registry.restricted_registry(["queuecore_up", "queuecore_queues_unreadable"])).decode())
    assert only == {("queuecore_up", ()): 1.0, ("queuecore_queues_unreadable", ()): 0.0}
    server = serve(0, inspector)
    try:
        port = server.server_address[1]
        url = f"http://127.0.0.1:{port}/metrics?name[]=queuecore_up&name[]=queuecore_workers_up"
        with urllib.request.urlopen(url, timeout=10) as response:
            got = samples(response.read().decode())
        assert got == {("queuecore_up", ()): 1.0, ("queuecore_workers_up", ()): 0.0}
    finally:
        server.shutdown()
        server.server_close()
        inspector.close()


def test_a_corrupt_periodic_or_limit_key_leaves_out_that_part_only(redis_client, connection, fake_clock,
                                                                   client) -> None:
    """A review: a key of the wrong type among the periodic entries' or the limits' made the whole scrape
    "queuecore_up 0" (logged as Redis not answering) with nothing else."""
    from queuecore.core.broker import Broker
    from queuecore.core.health import RedisHealth
    from queuecore.core.periodic import parse_entries
    from queuecore.core.scheduler import Scheduler, message_builder
    from queuecore.core.scripts import Scripts

    client.enqueue("demo.x", {}, queue="default")
    scheduler = Scheduler(Scripts(redis_client, connection.keys), Broker(redis_client, connection.keys),
                          connection.keys, fake_clock, parse_entries({"tick": {"task": "demo.tick", "every": 60}}),
                          message_builder(connection), RedisHealth(), declare_interval=5.0)
    scheduler.run_once()
    inspector = Inspector(connection=connection, clock=fake_clock)
    whole = samples(render(make_registry(inspector)).decode())
    assert whole[("queuecore_scrape_part_unreadable", (("part", "periodic"),))] == 0
    fires = connection.keys.queue("default").periodic_fires("tick")
    redis_client.delete(fires)
    redis_client.set(fires, "oops")
    got = samples(render(make_registry(inspector)).decode())
    assert got[("queuecore_up", ())] == 1
    assert got[("queuecore_queue_size", (("queue", "default"), ("state", "pending")))] == 1  # the rest is there
    assert got[("queuecore_scrape_part_unreadable", (("part", "periodic"),))] == 1
    assert got[("queuecore_scrape_part_unreadable", (("part", "limits"),))] == 0
    assert not [key for key in got if key[0].startswith("queuecore_periodic_fires")]
    redis_client.delete(fires)
    # A counter that is no integer (the scripts HINCRBY it) failed the whole scrape, and the Inspector's reads
    # of the entries (the dashboard's page, adminctl) with it: only that counter is left out.
    redis_client.hset(connection.keys.queue("default").periodic("tick"), "fires_schedule", "1.5")
    got = samples(render(make_registry(inspector)).decode())
    assert got[("queuecore_scrape_part_unreadable", (("part", "periodic"),))] == 0
    assert [key for key in got if key[0].startswith("queuecore_periodic_fires")] == []  # its only counter
    [entry] = inspector.periodic_entries()
    assert entry.name == "tick" and entry.fires == {}
    inspector.close()


def test_queues_left_out_of_a_scrape_give_no_samples_rather_than_zeros(redis_client, connection, fake_clock,
                                                                        client) -> None:
    """A review: with the queues part left out (the queue registry of another type), the scrape said
    queuecore_workers_up 0 and queuecore_queues_unreadable 0, which a "no worker" alert would take as
    true."""
    client.enqueue("demo.x", {}, queue="default")
    redis_client.delete(connection.keys.queues)
    redis_client.set(connection.keys.queues, "oops")
    inspector = Inspector(connection=connection, clock=fake_clock)
    got = samples(render(make_registry(inspector)).decode())
    assert got[("queuecore_up", ())] == 1
    assert got[("queuecore_scrape_part_unreadable", (("part", "queues"),))] == 1
    assert not [key for key in got if key[0].startswith(("queuecore_workers", "queuecore_queue"))]
    inspector.close()


@pytest.mark.parametrize("field", ["processed", "failed"])
def test_a_non_numeric_total_costs_that_total_only_in_a_scrape(redis_client, connection, fake_clock, client,
                                                               field) -> None:
    """A review: a hand-edited ``processed`` or ``failed`` total that is not a number left a hole in the
    metrics script's reply, and every scrape was a 500 with no sample at all."""
    client.enqueue("demo.x", {}, queue="q1")
    q = connection.keys.queue("q1")
    redis_client.hset(q.stats, mapping={"processed": "7", "failed": "2"})
    redis_client.hset(q.stats, field, "lots")
    inspector = Inspector(connection=connection, clock=fake_clock)
    try:
        got = samples(render(make_registry(inspector)).decode())
    finally:
        inspector.close()
    assert got[("queuecore_up", ())] == 1
    assert got[("queuecore_queue_size", (("queue", "q1"), ("state", "pending")))] == 1  # the rest is there
    other = {"processed": "failed", "failed": "processed"}[field]
    assert got[(f"queuecore_queue_{other}_total", (("queue", "q1"),))] == {"processed": 7, "failed": 2}[other]
    assert (f"queuecore_queue_{field}_total", (("queue", "q1"),)) not in got  # left out, not reported as 0
    assert got[("queuecore_queues_unreadable", ())] == 1  # read in part


def test_a_non_numeric_pending_since_reads_from_the_message(redis_client, connection, fake_clock) -> None:
    """A review: a task at the head of pending whose ``pending_since`` was not a number made every
    scrape a 500 (and the dashboard showed no latency). Both read its message's enqueue time."""
    client = Client(connection=connection, clock=fake_clock)
    info = client.enqueue("demo.x", {}, queue="q1")
    redis_client.hset(connection.keys.queue("q1").task(info.id), "pending_since", "soon")
    fake_clock.advance(30)
    inspector = Inspector(connection=connection, clock=fake_clock)
    try:
        got = samples(render(make_registry(inspector)).decode())
        queue = inspector.queue_info("q1")
    finally:
        inspector.close()
        client.close()
    assert got[("queuecore_queue_latency_seconds", (("queue", "q1"),))] == pytest.approx(30, abs=1)
    assert queue.latency == pytest.approx(30, abs=1)
