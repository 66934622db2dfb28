"""Periodic tasks: schedule maths (cron, every, DST), entry validation, and the Scheduler against a
real Redis with the FakeClock: exactly once across schedulers, restarts, missed-fire policies, pause,
forgetting entries no worker declares, and a real Worker running a fire."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
import redis

from queuecore.core.broker import Broker
from queuecore.core.clock import FakeClock, to_ms
from queuecore.core.config import ConnectionConfig
from queuecore.core.errors import ConfigurationError
from queuecore.core.health import RedisHealth
from queuecore.core.periodic import (
    Cron,
    Every,
    PeriodicEntry,
    describe_cron,
    fire_task_id,
    parse_entries,
)
from queuecore.core.registry import TaskRegistry
from queuecore.core.scheduler import STATE_KEPT, Scheduler, message_builder
from queuecore.core.scripts import Scripts
from queuecore.core.task import task
from queuecore.core.worker import Worker
from tests.conftest import free_port, wait_until


def ts(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp())


def iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def fires(schedule: Every | Cron, start: str, n: int) -> list[str]:
    out, t = [], float(ts(start))
    for _ in range(n):
        t = schedule.next_after(t)
        out.append(iso(t))
    return out


# -- schedule maths -------------------------------------------------------------------------------


def test_every_fires_at_multiples_of_its_period() -> None:
    assert Every(5).next_after(100) == 105
    assert Every(5).next_after(102.7) == 105
    assert Every(1).next_after(10.5) == 11
    assert [Every(n).describe() for n in (1, 30, 60, 90, 3600, 7200, 86400)] == [
        "every second", "every 30 seconds", "every minute", "every 90 seconds", "every hour", "every 2 hours",
        "every day"]


def test_cron_with_and_without_seconds_in_utc() -> None:
    assert fires(Cron.parse("*/15 * * * *"), "2026-01-01T00:07:00+00:00", 3) == [
        "2026-01-01T00:15:00", "2026-01-01T00:30:00", "2026-01-01T00:45:00"]
    assert fires(Cron.parse("*/20 * * * * *"), "2026-01-01T00:00:05+00:00", 3) == [  # seconds come first
        "2026-01-01T00:00:20", "2026-01-01T00:00:40", "2026-01-01T00:01:00"]
    assert fires(Cron.parse("@daily"), "2026-01-01T12:00:00+00:00", 1) == ["2026-01-02T00:00:00"]


def test_cron_in_a_time_zone() -> None:
    assert fires(Cron.parse("0 9 * * 1-5", "Europe/Paris"), "2026-01-02T12:00:00+00:00", 2) == [
        "2026-01-05T08:00:00", "2026-01-06T08:00:00"]  # 09:00 in Paris (UTC+1), Monday to Friday


def test_dst_fixed_hour_fires_once_at_the_jump_and_once_in_the_repeated_hour() -> None:
    daily = Cron.parse("30 2 * * *", "Europe/Paris")
    # 2026-03-29: 02:00 CET jumps to 03:00 CEST (01:00 UTC); 02:30 does not exist: fires at the jump.
    assert fires(daily, "2026-03-28T12:00:00+00:00", 3) == [
        "2026-03-29T01:00:00", "2026-03-30T00:30:00", "2026-03-31T00:30:00"]
    # 2026-10-25: 03:00 CEST falls back to 02:00 CET (01:00 UTC); 02:30 happens twice: fires once.
    assert fires(daily, "2026-10-24T12:00:00+00:00", 3) == [
        "2026-10-25T00:30:00", "2026-10-26T01:30:00", "2026-10-27T01:30:00"]


def test_dst_every_hour_expressions_follow_real_time() -> None:
    half_hourly = Cron.parse("*/30 * * * *", "Europe/Paris")
    # Spring: 02:00 and 02:30 local do not exist and do not fire; real time goes on.
    assert fires(half_hourly, "2026-03-29T00:00:00+00:00", 4) == [
        "2026-03-29T00:30:00", "2026-03-29T01:00:00", "2026-03-29T01:30:00", "2026-03-29T02:00:00"]
    # Autumn: 02:00 and 02:30 local happen twice and fire twice: every 30 real minutes.
    assert fires(half_hourly, "2026-10-24T23:50:00+00:00", 6) == [
        "2026-10-25T00:00:00", "2026-10-25T00:30:00", "2026-10-25T01:00:00", "2026-10-25T01:30:00",
        "2026-10-25T02:00:00", "2026-10-25T02:30:00"]


def test_describe_common_expressions() -> None:
    assert describe_cron("* * * * *") == "every minute"
    assert describe_cron("*/5 * * * *") == "every 5 minutes"
    assert describe_cron("*/10 * * * * *") == "every 10 seconds"
    assert describe_cron("30 2 * * *") == "every day at 02:30"
    assert describe_cron("0 9 * * 1-5") == "every weekday at 09:00"
    assert describe_cron("0 9 * * 1") == "every Monday at 09:00"
    assert describe_cron("0 0 1 * *") == "every month on day 1 at 00:00"
    assert describe_cron("5 4 1-7 * 2") == "cron 5 4 1-7 * 2"
    assert Cron.parse("30 2 * * *", "Europe/Paris").describe() == "every day at 02:30 (Europe/Paris)"


# -- validation -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "spec", "message"), [
    ("bad name!", {"task": "t", "every": 5}, "invalid periodic entry name"),
    ("a", {"every": 5}, "'task' (a task type name) is required"),
    ("a", {"task": "t"}, "exactly one of 'cron'"),
    ("a", {"task": "t", "every": 5, "cron": "* * * * *"}, "exactly one of 'cron'"),
    ("a", {"task": "t", "every": 0}, "every is out of range"),
    ("a", {"task": "t", "every": "5"}, "every must be a whole number"),
    ("a", {"task": "t", "cron": "61 * * * *"}, "invalid cron expression '61 * * * *'"),
    ("a", {"task": "t", "cron": "* * *"}, "five fields"),
    ("a", {"task": "t", "cron": "* * * * *", "timezone": "Mars/Olympus"}, "unknown timezone 'Mars/Olympus'"),
    ("a", {"task": "t", "every": 5, "timezone": "Europe/Paris"}, "'timezone' applies to 'cron' schedules only"),
    ("a", {"task": "t", "every": 5, "missed": "all"}, "missed must be 'once' (run once late) or 'skip'"),
    ("a", {"task": "t", "every": 5, "queue": "a b"}, "invalid queue name"),
    ("a", {"task": "t", "every": 5, "max_retry": "3"}, "max_retry must be a whole number"),
    ("a", {"task": "t", "every": 5, "timeout": -1}, "timeout is out of range"),
    ("a", {"task": "t", "every": 5, "payload": [1]}, "payload must be a JSON object"),
    # Empty but not an object: refused too (they were once read as {}).
    ("a", {"task": "t", "every": 5, "payload": []}, "payload must be a JSON object"),
    ("a", {"task": "t", "every": 5, "payload": ""}, "payload must be a JSON object"),
    ("a", {"task": "t", "every": 5, "payload": 0}, "payload must be a JSON object"),
    ("a", {"task": "t", "every": 5, "unique_for": 5}, "unknown key(s) unique_for"),
    ("a", "every 5", "must be a dict"),
])
def test_entries_are_validated_with_a_clear_message(name: str, spec: object, message: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        PeriodicEntry.from_spec(name, spec)
    assert message in str(info.value)
    if name == "a":
        assert str(info.value).startswith("periodic entry 'a': ")


def test_a_payload_of_none_or_absent_is_the_empty_object() -> None:
    assert PeriodicEntry.from_spec("a", {"task": "t", "every": 5, "payload": None}).payload == {}
    assert PeriodicEntry.from_spec("a", {"task": "t", "every": 5}).payload == {}


def test_parse_entries_accepts_dicts_and_entries_and_refuses_duplicates() -> None:
    entry = PeriodicEntry.from_spec("b", {"task": "t", "every": timedelta(minutes=5), "queue": "low"})
    entries = parse_entries({"a": {"task": "t", "cron": "0 3 * * *", "timezone": "Europe/Paris"}, "b": entry})
    assert [(e.name, e.queue) for e in entries] == [("a", "default"), ("b", "low")]
    assert entries[1].schedule == Every(300)
    with pytest.raises(ConfigurationError, match="duplicate periodic entry name"):
        parse_entries([entry, entry])
    with pytest.raises(ConfigurationError, match="PERIODIC must be a dict"):
        parse_entries("a")


def test_fire_task_ids_derive_from_entry_and_fire_time() -> None:
    assert fire_task_id("nightly", ts("2026-01-02T03:04:05+00:00")) == "periodic:nightly:20260102T030405Z"


# -- the scheduler against Redis, with the FakeClock --------------------------------------------------


@pytest.fixture
def make_scheduler(redis_client: redis.Redis, connection: ConnectionConfig, fake_clock: FakeClock):

    def factory(spec: dict, clock: FakeClock = fake_clock, grace: float = 60.0) -> Scheduler:
        return Scheduler(Scripts(redis_client, connection.keys), Broker(redis_client, connection.keys),
                         connection.keys, clock, parse_entries(spec), message_builder(connection), RedisHealth(),
                         declare_interval=5.0, grace=grace)

    return factory


def pending_ids(redis_client: redis.Redis, connection: ConnectionConfig, queue: str = "default") -> list[str]:
    return list(reversed(redis_client.lrange(connection.keys.queue(queue).pending, 0, -1)))  # oldest first


EVERY_SECOND = {"tick": {"task": "demo.tick", "every": 1, "payload": {"n": 1}}}


def test_three_schedulers_enqueue_each_fire_exactly_once(make_scheduler, redis_client, connection, fake_clock) -> None:
    start = fake_clock.now()
    schedulers = [make_scheduler(EVERY_SECOND) for _ in range(3)]
    for step in range(45):
        fake_clock.advance(0.5 if step % 3 else 0.7)
        for s in schedulers[step % 3:] + schedulers[:step % 3]:  # a different one goes first each time
            s.run_once()
    ids = pending_ids(redis_client, connection)
    expected = [fire_task_id("tick", t) for t in range(int(start) + 1, int(fake_clock.now()) + 1)]
    assert ids == expected
    q = connection.keys.queue("default")
    h = redis_client.hgetall(q.task(ids[0]))
    assert h["state"] == "pending" and '"payload":{"n":1}' in h["msg"].replace(" ", "")
    entry = redis_client.hgetall(q.periodic("tick"))
    assert entry["last_id"] == ids[-1] and entry["last_kind"] == "schedule"
    assert int(entry["mark"]) == int(fake_clock.now()) * 1000
    assert len(redis_client.lrange(q.periodic_fires("tick"), 0, -1)) == min(20, len(ids))  # recent fires, capped


def test_an_entry_whose_fire_cannot_be_enqueued_does_not_stop_the_others(redis_client, connection, fake_clock,
                                                                         caplog) -> None:
    """A review: one entry's refused fire raised out of the round, so no entry after it ever fired and
    each round logged a traceback. Now the others fire, and the failure is logged once while it lasts."""
    import logging

    from queuecore.core.errors import InvalidPayload

    build = message_builder(connection)
    refusing = {"a_bad"}

    def prepare(task_type: str, payload: dict, options: dict, task_id: str, now: float) -> str:
        if task_id.startswith("periodic:a_bad:") and refusing:
            raise InvalidPayload("payload is 208 bytes, over the limit of 100 bytes")
        return build(task_type, payload, options, task_id, now)

    entries = parse_entries({"a_bad": {"task": "demo.a", "every": 1}, "b_good": {"task": "demo.b", "every": 1}})
    scheduler = Scheduler(Scripts(redis_client, connection.keys), Broker(redis_client, connection.keys),
                          connection.keys, fake_clock, entries, prepare, RedisHealth(), declare_interval=5.0)
    caplog.set_level(logging.INFO, logger="queuecore.scheduler")
    for _ in range(4):
        fake_clock.advance(1.0)
        scheduler.run_once()
        assert scheduler.next_wait() > 0  # the refused entry is tried again later, not in a busy loop
    ids = pending_ids(redis_client, connection)
    assert ids == [fire_task_id("b_good", int(fake_clock.now()) - n) for n in (2, 1, 0)]  # after it was declared
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.getMessage().split(" (")[0] for r in errors] == ["periodic entry a_bad: its fire cannot be enqueued"]
    assert not errors[0].exc_info and "over the limit of 100 bytes" in errors[0].getMessage()
    refusing.clear()  # fixed (a deploy): it fires again, and says so
    fake_clock.advance(1.0)
    scheduler.run_once()
    assert any(i.startswith("periodic:a_bad:") for i in pending_ids(redis_client, connection))
    assert "periodic entry a_bad fires again" in caplog.text


def test_a_restarted_scheduler_never_fires_twice(make_scheduler, redis_client, connection, fake_clock) -> None:
    first = make_scheduler(EVERY_SECOND)
    first.run_once()
    fake_clock.advance(3)
    assert first.run_once() == 3
    again = make_scheduler(EVERY_SECOND)  # a new process: no local state
    assert again.run_once() == 0
    fake_clock.advance(1)
    assert again.run_once() == 1 and first.run_once() == 0
    assert len(pending_ids(redis_client, connection)) == 4


def test_a_new_entry_does_not_fire_for_times_before_it_was_declared(make_scheduler, redis_client, connection,
                                                                    fake_clock) -> None:
    s = make_scheduler({"hourly": {"task": "demo.tick", "cron": "0 * * * *"}})
    fake_clock.set(ts("2026-01-01T10:59:30+00:00"))
    assert s.run_once() == 0
    fake_clock.set(ts("2026-01-01T11:00:00+00:00"))
    assert s.run_once() == 1
    assert pending_ids(redis_client, connection) == ["periodic:hourly:20260101T110000Z"]


def test_missed_fires_run_once_late_by_default(make_scheduler, redis_client, connection, fake_clock) -> None:
    spec = {"rep": {"task": "demo.tick", "cron": "*/10 * * * *"}}
    fake_clock.set(ts("2026-01-01T10:05:00+00:00"))
    make_scheduler(spec).run_once()
    fake_clock.set(ts("2026-01-01T11:03:00+00:00"))  # every worker was down for an hour: 6 fires missed
    s = make_scheduler(spec)
    assert s.run_once() == 1
    assert pending_ids(redis_client, connection) == ["periodic:rep:20260101T101000Z"]  # the first missed fire
    q = connection.keys.queue("default")
    assert redis_client.hget(q.periodic("rep"), "last_kind") == "late"
    # counted in fire times (a review: the run counted once, so an hour away read as one miss)
    assert redis_client.hget(q.periodic("rep"), "fires_late") == "6"
    assert s.run_once() == 0  # and only once
    fake_clock.set(ts("2026-01-01T11:10:00+00:00"))
    assert s.run_once() == 1  # then on schedule again
    assert pending_ids(redis_client, connection)[-1] == "periodic:rep:20260101T111000Z"


def test_missed_fires_can_be_skipped(make_scheduler, redis_client, connection, fake_clock) -> None:
    spec = {"rep": {"task": "demo.tick", "cron": "*/10 * * * *", "missed": "skip"}}
    fake_clock.set(ts("2026-01-01T10:05:00+00:00"))
    make_scheduler(spec).run_once()
    fake_clock.set(ts("2026-01-01T11:03:00+00:00"))
    s = make_scheduler(spec)
    assert s.run_once() == 0
    assert pending_ids(redis_client, connection) == []
    q = connection.keys.queue("default")
    assert redis_client.lrange(q.periodic_fires("rep"), 0, -1)[0].split(" ")[2] == "skip"
    assert redis_client.hget(q.periodic("rep"), "fires_skip") == "6"  # 10:10 to 11:00, in fire times
    fake_clock.set(ts("2026-01-01T11:10:00+00:00"))
    assert s.run_once() == 1


def test_count_fires_counts_fire_times_up_to_a_cap() -> None:
    from queuecore.core.periodic import Cron, Every, count_fires

    start = ts("2026-01-01T10:10:00+00:00")
    assert count_fires(Cron("*/10 * * * *"), int(start), ts("2026-01-01T11:02:00+00:00")) == 6
    assert count_fires(Every(600), int(start), ts("2026-01-01T11:02:00+00:00")) == 6
    assert count_fires(Every(600), int(start), start) == 1 and count_fires(Every(600), int(start), start - 1) == 0
    assert count_fires(Every(1), int(start), start + 86_400, cap=10_000) == 10_000
    assert count_fires(Cron("* * * * *"), int(start), start + 86_400, cap=50) == 50


def test_fires_within_the_grace_all_run(make_scheduler, redis_client, connection, fake_clock) -> None:
    s = make_scheduler(EVERY_SECOND)
    s.run_once()
    fake_clock.advance(10)  # a stall shorter than the grace: each fire still runs
    assert s.run_once() == 10


def test_dst_with_the_fake_clock(make_scheduler, redis_client, connection, fake_clock) -> None:
    spec = {"night": {"task": "demo.tick", "cron": "30 2 * * *", "timezone": "Europe/Paris"}}
    fake_clock.set(ts("2026-03-28T12:00:00+00:00"))
    s = make_scheduler(spec)
    while fake_clock.now() < ts("2026-03-30T12:00:00+00:00"):
        s.run_once()
        fake_clock.advance(300)
    fake_clock.set(ts("2026-10-24T12:00:00+00:00"))
    s = make_scheduler({"fall": spec["night"]})
    while fake_clock.now() < ts("2026-10-26T12:00:00+00:00"):
        s.run_once()
        fake_clock.advance(300)
    assert pending_ids(redis_client, connection) == [
        "periodic:night:20260329T010000Z",  # 02:30 did not exist: at the jump to 03:00 CEST
        "periodic:night:20260330T003000Z",  # 02:30 CEST
        "periodic:fall:20261025T003000Z",  # the first of the two 02:30s (CEST); not the second
        "periodic:fall:20261026T013000Z",  # 02:30 CET
    ]


def test_a_paused_entry_skips_its_fires_and_resumes_without_catching_up(make_scheduler, scripts, redis_client,
                                                                         connection, fake_clock) -> None:
    s = make_scheduler(EVERY_SECOND)
    s.run_once()
    q = connection.keys.queue("default")
    assert scripts.admin_periodic_pause(q, "tick", pause=True, actor="ops", now_ms=0) == 1
    assert scripts.admin_periodic_pause(q, "tick", pause=True, actor="ops", now_ms=0) == 0
    fake_clock.advance(5)
    assert s.run_once() == 0
    assert scripts.admin_periodic_pause(q, "tick", pause=False, actor="ops", now_ms=0) == 1
    assert s.run_once() == 0  # the paused fires are gone, not late
    fake_clock.advance(1)
    assert s.run_once() == 1
    assert scripts.admin_periodic_pause(q, "nope", pause=True, actor="ops", now_ms=0) == -1


def test_entries_no_worker_declares_leave_the_list_and_their_state(make_scheduler, redis_client, connection,
                                                                   fake_clock) -> None:
    both = {**EVERY_SECOND, "other": {"task": "demo.tick", "every": 60, "queue": "low"}}
    old = make_scheduler(both)
    old.run_once()
    keys = connection.keys
    assert set(redis_client.zrange(keys.periodic, 0, -1)) == {"tick/default", "other/low"}
    new = make_scheduler(EVERY_SECOND)  # the new deploy dropped "other"; the old worker stopped
    for _ in range(4):
        fake_clock.advance(5)
        new.run_once()
    live = redis_client.zrangebyscore(keys.periodic, to_ms(fake_clock.now()), "+inf")
    assert live == ["tick/default"]  # "other" left the list; its state is kept a week (STATE_KEPT)
    assert redis_client.exists(keys.queue("low").periodic("other"))
    fake_clock.advance(STATE_KEPT)
    new.run_once()
    assert redis_client.zrange(keys.periodic, 0, -1) == ["tick/default"]
    assert not redis_client.exists(keys.queue("low").periodic("other"))
    assert redis_client.exists(keys.queue("default").periodic("tick"))


def test_a_worker_runs_its_periodic_entries(make_worker, inspector, registry, redis_client, connection) -> None:
    ran: list[int] = []

    @task(name="demo.tick", registry=registry)
    def tick(n: int) -> None:
        ran.append(n)

    worker = make_worker(periodic={"tick": {"task": "demo.tick", "every": 1, "payload": {"n": 7}}})
    assert [e.name for e in worker.scheduler.entries] == ["tick"]
    wait_until(lambda: len(ran) >= 2, timeout=5)
    assert set(ran) == {7}


def test_a_worker_refuses_an_entry_whose_payload_does_not_fit_its_handler(make_worker, registry) -> None:
    @task(name="demo.tick", registry=registry)
    def tick(n: int) -> None:
        pass

    with pytest.raises(ConfigurationError, match="periodic entry 'tick': payload"):
        make_worker(start=False, periodic={"tick": {"task": "demo.tick", "every": 1, "payload": {"m": 1}}})


def test_an_entry_takes_its_handlers_defaults_under_its_own(make_worker, registry) -> None:
    @task(name="demo.report", registry=registry, queue="low", max_retry=2, timeout=60)
    def report(n: int = 0) -> None:
        pass

    worker = make_worker(start=False, periodic={"r": {"task": "demo.report", "every": 60, "max_retry": 5}})
    [entry] = worker.scheduler.entries
    assert (entry.queue, entry.options) == ("low", {"queue": "low", "max_retry": 5, "timeout": 60})


def test_an_entry_takes_a_handlers_timedelta_defaults_as_seconds(make_worker, registry) -> None:
    """A review: ``@task(timeout=timedelta(minutes=5))`` is accepted (a duration is seconds or a
    timedelta), but a periodic entry for that type took the raw timedelta, and the worker did not
    start (TypeError: a timedelta is not JSON serializable) though ``manage.py check`` said nothing."""
    from datetime import timedelta

    @task(name="demo.nightly", registry=registry, timeout=timedelta(minutes=5), retention=timedelta(hours=1))
    def nightly() -> None:
        pass

    worker = make_worker(periodic={"n": {"task": "demo.nightly", "every": 300}})
    [entry] = worker.scheduler.entries
    assert entry.options == {"timeout": 300.0, "retention": 3600.0}
    assert json.loads(entry.definition())["options"] == {"timeout": 300.0, "retention": 3600.0}


def test_a_worker_without_the_handler_refuses_an_entry_that_names_no_queue(make_worker, registry) -> None:
    """Its queue would be "default" there and the handler's own where the handler is registered: two
    entries, every fire enqueued twice (a reviewer's reproduction). An entry that names its queue is
    the same everywhere, so a worker without the handler still schedules it."""

    @task(name="demo.report", registry=registry, queue="low")
    def report() -> None:
        pass

    named = {"named": {"task": "demo.report", "every": 60, "queue": "low"}}
    spec = {"r": {"task": "demo.report", "every": 60}, **named}
    with_handler = make_worker(start=False, periodic=spec)
    assert [(e.name, e.queue) for e in with_handler.scheduler.entries] == [("r", "low"), ("named", "low")]
    with pytest.raises(ConfigurationError, match=re.escape("periodic entry 'r': task type 'demo.report' is not "
                                                           "registered in this worker, so the queue its @task names")):
        Worker(connection=with_handler.connection, registry=TaskRegistry(), periodic=spec)
    without = Worker(connection=with_handler.connection, registry=TaskRegistry(), periodic=named)
    try:
        assert [(e.name, e.queue) for e in without.scheduler.entries] == [("named", "low")]
    finally:
        without.redis.close()


def test_a_cron_entry_without_croniter_says_how_to_install_it(monkeypatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "croniter", None)  # as if the periodic extra were not installed
    with pytest.raises(ConfigurationError, match=r"pip install 'queuecore\[periodic\]'"):
        PeriodicEntry.from_spec("a", {"task": "t", "cron": "* * * * *"})
    assert PeriodicEntry.from_spec("b", {"task": "t", "every": 5}).schedule == Every(5)  # every needs nothing


def test_the_scheduler_sleeps_until_its_next_fire_but_an_interval_after_a_failed_round(
        make_scheduler, connection: ConnectionConfig, fake_clock: FakeClock) -> None:
    scheduler = make_scheduler(EVERY_SECOND)
    scheduler.run_once()
    assert scheduler.next_wait() == pytest.approx(1.0)  # the next fire, sooner than the declare interval (5 s)
    unreachable = redis.Redis(port=free_port(), socket_connect_timeout=0.2)  # nothing listens there
    failing = Scheduler(Scripts(unreachable, connection.keys), Broker(unreachable, connection.keys), connection.keys,
                        fake_clock, parse_entries(EVERY_SECOND), message_builder(connection), RedisHealth(),
                        declare_interval=5.0)
    failing.start()
    try:
        wait_until(lambda: failing.rounds >= 1, 10, message="a failed round")
        assert failing.last_round_failed and failing.next_wait() == 5.0  # no fast retries while Redis is away
    finally:
        failing.shutdown()
        unreachable.close()
