"""The Inspector's periodic operations against a real Redis: list the entries live workers declare
(schedule in words, next and last fire, the last fire's outcome, recent fires), pause, resume and run
now, each audited; an unknown entry is ``PeriodicEntryNotFound``."""

from __future__ import annotations

import json

import pytest
import redis

from queuecore import Inspector, PeriodicEntryNotFound
from queuecore.core.broker import Broker
from queuecore.core.clock import FakeClock, SystemClock
from queuecore.core.config import ConnectionConfig
from queuecore.core.health import RedisHealth
from queuecore.core.periodic import parse_entries
from queuecore.core.scheduler import STATE_KEPT, Scheduler, message_builder
from queuecore.core.scripts import Scripts
from tests.conftest import wait_until

SPEC = {
    "nightly": {"task": "reports.build", "cron": "30 2 * * *", "timezone": "Europe/Paris", "queue": "low",
                "payload": {"report_id": 3}, "max_retry": 2},
    "ping": {"task": "demo.noop", "every": 3600, "missed": "skip"},
}


def declare(redis_client: redis.Redis, connection: ConnectionConfig, spec: dict = SPEC) -> Scheduler:
    """Declare ``spec`` as a live worker's scheduler would (its entries stay listed 15 s)."""
    scheduler = Scheduler(Scripts(redis_client, connection.keys), Broker(redis_client, connection.keys),
                          connection.keys, SystemClock(), parse_entries(spec), message_builder(connection),
                          RedisHealth(), declare_interval=5.0)
    scheduler.run_once()
    return scheduler


def test_entries_list_what_live_workers_declare(redis_client, connection, inspector: Inspector) -> None:
    assert inspector.periodic_entries() == []
    declare(redis_client, connection)
    nightly, ping = inspector.periodic_entries()
    assert (nightly.name, nightly.queue, nightly.task, nightly.schedule) == ("nightly", "low", "reports.build",
                                                                           "30 2 * * *")
    assert nightly.description == "every day at 02:30 (Europe/Paris)" and nightly.timezone == "Europe/Paris"
    assert nightly.payload == {"report_id": 3} and nightly.options == {"queue": "low", "max_retry": 2}
    assert nightly.missed == "once" and not nightly.paused and nightly.next_fire_at is not None
    assert nightly.last_fire_at is None and nightly.recent == []
    assert (ping.description, ping.schedule, ping.missed) == ("every hour", "every 3600 s", "skip")
    json.dumps([e.to_dict() for e in (nightly, ping)])


def test_run_now_enqueues_outside_the_schedule(redis_client, connection, inspector: Inspector) -> None:
    declare(redis_client, connection)
    task_id = inspector.run_periodic("nightly")
    assert task_id.startswith("periodic:nightly:run:")
    task = inspector.get_task("low", task_id)
    assert (task.type, task.payload, task.max_retry, task.state) == ("reports.build", {"report_id": 3}, 2, "pending")
    entry = inspector.periodic_entry("nightly")
    assert (entry.last_task_id, entry.last_kind, entry.last_outcome) == (task_id, "manual", "pending")
    assert [(f.kind, f.task_id, f.outcome) for f in entry.recent] == [("manual", task_id, "pending")]
    inspector.delete_task("low", task_id)
    assert inspector.periodic_entry("nightly").last_outcome == "done"  # gone: completed and not kept, or deleted
    [_delete, audit, *_] = inspector.audit_log()
    assert (audit.action, audit.queue, audit.state, audit.task_ids) == ("periodic.run", "low", "nightly", [task_id])


def test_pause_and_resume(redis_client, connection, inspector: Inspector) -> None:
    declare(redis_client, connection)
    ops = inspector.as_actor("alice")
    assert ops.pause_periodic("ping") is True
    assert ops.pause_periodic("ping") is False
    entry = inspector.periodic_entry("ping")
    assert entry.paused and entry.paused_by == "alice" and entry.paused_at is not None
    assert ops.resume_periodic("ping") is True
    assert ops.resume_periodic("ping") is False
    assert not inspector.periodic_entry("ping").paused
    actions = [(a.actor, a.action, a.state) for a in inspector.audit_log()]
    assert actions[:4] == [("alice", "periodic.resume", "ping")] * 2 + [("alice", "periodic.pause", "ping")] * 2


def test_an_entry_declared_in_two_queues_is_paused_in_both_and_run_once(redis_client, connection,
                                                                         inspector: Inspector) -> None:
    """A review: a deploy that moves an entry to another queue leaves two copies a while; pause reached
    the first only (the other kept firing), and a second pause said "already paused"."""
    declare(redis_client, connection, {"report": {"task": "reports.build", "every": 3600}})
    declare(redis_client, connection, {"report": {"task": "reports.build", "every": 3600, "queue": "low"}})
    redis_client.hset(connection.keys.queue("low").periodic("report"), "declared", 2**41)  # the newer deploy's
    assert sorted(e.queue for e in inspector.periodic_entries()) == ["default", "low"]
    assert inspector.pause_periodic("report") is True
    assert all(e.paused for e in inspector.periodic_entries())
    assert inspector.pause_periodic("report") is False
    assert [(a.action, a.queue) for a in inspector.audit_log()[2:4]] == [("periodic.pause", "low"),
                                                                         ("periodic.pause", "default")]
    assert inspector.resume_periodic("report") is True and not any(e.paused for e in inspector.periodic_entries())
    task_id = inspector.run_periodic("report")  # once, in the queue declared last
    assert inspector.get_task("low", task_id).state == "pending" and inspector.count("default", "pending") == 0
    assert inspector.periodic_entry("report").queue == "low"


@pytest.mark.parametrize("method", ["periodic_entry", "pause_periodic", "resume_periodic", "run_periodic"])
def test_unknown_entries_are_not_found(redis_client, connection, inspector: Inspector, method: str) -> None:
    declare(redis_client, connection)
    with pytest.raises(PeriodicEntryNotFound, match="no periodic entry named 'nope'"):
        getattr(inspector, method)("nope")


def test_an_entry_whose_declaration_lapsed_is_not_listed(redis_client, connection, inspector: Inspector) -> None:
    declare(redis_client, connection)
    redis_client.zadd(connection.keys.periodic, {"ping/default": 1})  # its last worker went away long ago
    assert [e.name for e in inspector.periodic_entries()] == ["nightly"]
    with pytest.raises(PeriodicEntryNotFound):
        inspector.run_periodic("ping")


def test_fires_are_counted_by_outcome_and_exported(redis_client, connection, inspector: Inspector) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from queuecore.metrics import make_registry, render

    declare(redis_client, connection)
    assert inspector.periodic_entry("nightly").fires == {}
    inspector.run_periodic("nightly")
    scripts, q = Scripts(redis_client, connection.keys), connection.keys.queue("default")
    later = int(SystemClock().now() * 1000) + 60_000
    assert scripts.periodic_fire(q, "ping", now_ms=later, fire_ms=later, mark_ms=later, kind="skip")[0] == 2
    inspector.pause_periodic("ping")
    assert scripts.periodic_fire(q, "ping", now_ms=later, fire_ms=later + 1, mark_ms=later + 1, kind="skip")[0] == -2
    assert inspector.periodic_entry("nightly").fires == {"manual": 1}
    assert inspector.periodic_entry("ping").fires == {"skip": 1, "paused": 1}
    samples = {(s.labels["entry"], s.labels["outcome"]): s.value
               for family in text_string_to_metric_families(render(make_registry(inspector)).decode())
               if family.name == "queuecore_periodic_fires" for s in family.samples}
    assert samples == {("nightly", "manual"): 1.0, ("ping", "skip"): 1.0, ("ping", "paused"): 1.0}


def scheduler_on(redis_client: redis.Redis, connection: ConnectionConfig, clock: FakeClock,
                 spec: dict) -> Scheduler:
    """A worker's scheduler of ``spec`` on ``clock`` (declaring every 5 s: listed 15 s)."""
    return Scheduler(Scripts(redis_client, connection.keys), Broker(redis_client, connection.keys),
                     connection.keys, clock, parse_entries(spec), message_builder(connection), RedisHealth(),
                     declare_interval=5.0)


def test_an_entry_s_state_outlives_a_restart_of_the_workers_that_declare_it(
        redis_client, connection, inspector: Inspector, fake_clock: FakeClock) -> None:
    """A review: an entry that no worker declared for three heartbeats (15 s) had its state deleted
    by another worker's scheduler, so a restart of its only workers that took longer lost its pause
    (it fired again) and its missed fires (its mark started afresh)."""
    a = scheduler_on(redis_client, connection, fake_clock, {"a-tick": {"task": "t", "every": 60, "queue": "qa"}})
    b_spec = {name: {"task": "t", "every": 60, "queue": "qb"} for name in ("b-paused", "b-tick")}
    a.run_once()
    scheduler_on(redis_client, connection, fake_clock, b_spec).run_once()
    inspector.pause_periodic("b-paused")
    q = connection.keys.queue("qb")
    fake_clock.advance(600)  # B's workers are away ten minutes (a deploy); A's go on
    a.run_once()
    assert redis_client.hget(q.periodic("b-paused"), "paused") == "1"
    scheduler_on(redis_client, connection, fake_clock, b_spec).run_once()  # B is back
    assert [e.name for e in inspector.periodic_entries() if e.paused] == ["b-paused"]
    def kinds(name: str) -> list[str]:
        return [line.split()[2] for line in redis_client.lrange(q.periodic_fires(name), 0, -1)]

    # the fires older than the grace, run once late as missed="once" says; the last minute's on time
    assert kinds("b-tick") == ["schedule", "late"]
    assert not {"schedule", "late"} & set(kinds("b-paused"))  # nothing enqueued for the paused entry


def test_an_entry_no_worker_declares_is_deleted_after_a_week_by_any_worker(
        redis_client, connection, inspector: Inspector, fake_clock: FakeClock) -> None:
    """Its state is kept ``STATE_KEPT`` (7 days) after its last declaration, then deleted by any
    scheduler, one of a worker without entries too: a review found that when no worker declared any
    entry any more, a removed entry's state stayed for good, and re-adding it days later revived its
    pause and fired once for a fire time days old."""
    scheduler_on(redis_client, connection, fake_clock, {"nightly": {"task": "t", "every": 60}}).run_once()
    inspector.pause_periodic("nightly")
    q = connection.keys.queue("default")
    fake_clock.advance(STATE_KEPT)
    idle = scheduler_on(redis_client, connection, fake_clock, {})
    idle.run_once()
    assert redis_client.hget(q.periodic("nightly"), "paused") == "1"  # not yet: lapsed 15 s after its last declaration
    fake_clock.advance(20)
    idle.run_once()
    assert not redis_client.exists(q.periodic("nightly"), q.periodic_fires("nightly"))
    assert redis_client.zscore(connection.keys.periodic, "nightly/default") is None
    scheduler_on(redis_client, connection, fake_clock, {"nightly": {"task": "t", "every": 60}}).run_once()
    [entry] = inspector.periodic_entries()
    assert not entry.paused and entry.recent == []  # a new entry


def test_a_worker_without_periodic_entries_runs_the_scheduler_that_deletes_old_state(
        make_worker, redis_client, connection) -> None:
    """A worker with no entries did not start its scheduler, so nothing ever deleted the state of entries
    removed from every worker's settings."""
    q = connection.keys.queue("default")
    redis_client.hset(q.periodic("gone"), mapping={"declared": 1, "mark": 1, "paused": 1})
    redis_client.zadd(connection.keys.periodic, {"gone/default": 2})  # lapsed in 1970
    make_worker(queues={"default": 1})
    wait_until(lambda: not redis_client.exists(q.periodic("gone")), message="the old entry's state deleted")
    assert redis_client.zscore(connection.keys.periodic, "gone/default") is None
