"""Alerts: rules validated, each rule fires and resolves exactly once with two evaluators on their
own connections, the evaluator lease (held, renewed, taken over), and the once-only script."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import redis

from queuecore.core import typestats
from queuecore.core.alerts import (
    Alert,
    AlertEvaluator,
    AlertEvent,
    Dispatcher,
    RuleEvaluator,
    WebhookSender,
    active_alerts,
    parse_alerts,
    parse_rules,
)
from queuecore.core.clock import FakeClock, to_ms
from queuecore.core.config import ConnectionConfig
from queuecore.core.errors import ConfigurationError
from queuecore.core.inspector import Inspector
from queuecore.core.keys import stats_minute
from queuecore.core.periodic import parse_entries
from queuecore.core.scripts import Scripts
from tests.badinput.test_maxmemory import full_redis  # noqa: F401 - Redis 7 and 6.2 at maxmemory
from tests.conftest import wait_until
from tests.core.test_processes import spawn  # noqa: F401 - the worker-process fixture

LEASE = 30.0


class Pair:
    """Two evaluators, each on a connection of its own, sharing one fake clock and rule set."""

    def __init__(self, connection: ConnectionConfig, clock: FakeClock, rules: dict[str, object]) -> None:
        self.clients: list[redis.Redis] = []
        self.evaluators: list[AlertEvaluator] = []
        self.events: list[AlertEvent] = []
        parsed = parse_rules(rules)
        for n in range(2):
            client = connection.connect()
            self.clients.append(client)
            ins = Inspector(connection=connection, redis_client=client, clock=clock)
            self.evaluators.append(AlertEvaluator(Scripts(client, connection.keys), clock,
                                                  RuleEvaluator(ins, parsed, clock), holder=f"worker-{n}",
                                                  lease=LEASE, deliver=self.events.extend))

    def rounds(self, n: int = 3) -> list[AlertEvent]:
        """``n`` rounds of both evaluators; the events made in them."""
        before = len(self.events)
        for _ in range(n):
            for e in self.evaluators:
                e.run_once()
        return self.events[before:]

    def close(self) -> None:
        for c in self.clients:
            c.close()


@pytest.fixture
def pair(connection: ConnectionConfig, fake_clock: FakeClock) -> Iterator[Callable[[dict[str, object]], Pair]]:
    made: list[Pair] = []

    def factory(rules: dict[str, object]) -> Pair:
        p = Pair(connection, fake_clock, rules)
        made.append(p)
        return p

    yield factory
    for p in made:
        p.close()


def once(events: list[AlertEvent], action: str, alert_id: str) -> None:
    assert [(e.action, e.alert.id) for e in events] == [(action, alert_id)]


def test_rules_are_validated_naming_the_rule() -> None:
    cases = {
        "bad": {"kind": "nope"},
        "lat": {"kind": "latency"},
        "fr": {"kind": "failure_rate", "above": 2},
        "mem": {"kind": "memory", "above": 0.5, "queue": "x"},
        "q": {"kind": "backlog", "above": 1, "queue": "a{b}"},
        "sev": {"kind": "no_worker", "severity": "loud"},
        "for": {"kind": "no_worker", "for": -1},
        "for2": {"kind": "no_worker", "for": float("nan")},
    }
    for name, rule in cases.items():
        with pytest.raises(ConfigurationError, match=repr(name)):
            parse_rules({name: rule})
    with pytest.raises(ConfigurationError, match="unknown key"):
        parse_alerts({"RULES": {}, "OOPS": 1})
    with pytest.raises(ConfigurationError, match="alert sender"):
        parse_alerts({"SENDERS": [{"kind": "pigeon"}]})
    settings = parse_alerts({"RULES": {"b": {"kind": "backlog", "above": 5, "queue": "default"}}, "INTERVAL": 2})
    assert settings.rules[0].above == 5.0 and settings.rules[0].queue == "default" and settings.interval == 2


def test_backlog_and_latency_fire_and_resolve_once(pair, client, inspector, fake_clock) -> None:
    p = pair({"big": {"kind": "backlog", "queue": "q1", "above": 2},
              "slow": {"kind": "latency", "queue": "*", "above": 60}})
    assert p.rounds() == []
    for n in range(3):
        client.enqueue("t.x", {"n": n}, queue="q1")
    events = p.rounds()
    assert sorted((e.action, e.alert.id) for e in events) == [("fired", "big/q1"), ("fired", "slow/q1")]
    assert set(active_alerts(p.evaluators[0]._scripts)) == {"big/q1", "slow/q1"}
    fake_clock.advance(LEASE * 2)  # the first evaluator's lease lapses: renewed each round anyway
    assert p.rounds() == []
    inspector.delete_all("q1", "pending")
    events = p.rounds()
    assert sorted((e.action, e.alert.id) for e in events) == [("resolved", "big/q1"), ("resolved", "slow/q1")]
    assert p.rounds() == [] and active_alerts(p.evaluators[1]._scripts) == {}


def test_a_rule_with_for_fires_only_once_its_alert_held_that_long(pair, client, inspector, fake_clock) -> None:
    """``for``: an alert holds pending first (since its first round, kept in Redis so another evaluator
    goes on counting from it); it fires once it held that long, and a gap in between starts over."""
    p = pair({"big": {"kind": "backlog", "queue": "q1", "above": 0, "for": 60},
              "now": {"kind": "backlog", "queue": "q1", "above": 0}})
    client.enqueue("t.x", {}, queue="q1")
    once(p.rounds(1), "fired", "now/q1")  # the rule without "for" fires at once
    state = p.clients[0].hgetall(p.evaluators[0]._scripts.keys.alerts)
    assert state["p:big/q1"] == str(to_ms(fake_clock.now())) and "a:big/q1" not in state
    fake_clock.advance(59)
    assert p.rounds() == []
    fake_clock.advance(1)
    p.evaluators[0].release()  # the other evaluator goes on from the same pending mark
    once(p.rounds(1), "fired", "big/q1")
    assert "p:big/q1" not in p.clients[0].hgetall(p.evaluators[0]._scripts.keys.alerts)
    inspector.delete_all("q1", "pending")
    assert sorted(e.alert.id for e in p.rounds() if e.action == "resolved") == ["big/q1", "now/q1"]
    client.enqueue("t.x", {}, queue="q1")  # holds again for 30 s, stops, holds again: starts over
    p.rounds(1)
    fake_clock.advance(30)
    inspector.delete_all("q1", "pending")
    p.rounds(1)
    assert "p:big/q1" not in p.clients[0].hgetall(p.evaluators[0]._scripts.keys.alerts)
    client.enqueue("t.x", {}, queue="q1")
    since = fake_clock.now()
    p.rounds(1)
    fake_clock.advance(45)  # 75 s after it first held, 45 s since it holds again
    assert p.rounds() == []
    fake_clock.advance(15)
    once(p.rounds(), "fired", "big/q1")
    assert active_alerts(p.evaluators[1]._scripts)["big/q1"].since == since + 60


def test_a_pending_alert_says_what_holds_since_when_and_when_it_fires(pair, client, inspector, fake_clock,
                                                                       caplog) -> None:
    """While a rule's ``for`` runs, the inspector shows the pending alert: what it says as of the last
    round, since when it holds (the pending mark, whichever evaluator wrote it) and when it fires if it
    still holds; the worker logs it once. Firing or ending the alert removes it from the list."""
    p = pair({"big": {"kind": "backlog", "queue": "q1", "above": 0, "for": 60, "severity": "critical"}})
    assert inspector.pending_alerts() == []
    client.enqueue("t.x", {}, queue="q1")
    since = fake_clock.now()
    with caplog.at_level(logging.INFO, logger="queuecore.alerts"):
        assert p.rounds(1) == []
    assert [r.getMessage() for r in caplog.records if "pending" in r.getMessage()] == [
        "alert big/q1 pending: queue q1: 1 pending tasks (above 0) (fires if it still holds after 60s)"]
    [pending] = inspector.pending_alerts()
    assert (pending.alert.id, pending.alert.severity, pending.alert.since, pending.fires_at) == (
        "big/q1", "critical", since, since + 60)
    assert "1 pending" in pending.alert.message and pending.to_dict()["fires_at"] == pending.fires_at_dt.isoformat()
    client.enqueue("t.x", {}, queue="q1")
    fake_clock.advance(20)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="queuecore.alerts"):
        p.evaluators[0].release()
        assert p.rounds(1) == []  # the other evaluator: same mark, today's figure, logged no more
    assert not [r for r in caplog.records if "pending" in r.getMessage()]
    [pending] = inspector.pending_alerts()
    assert pending.alert.since == since and pending.fires_at == since + 60 and "2 pending" in pending.alert.message
    assert inspector.alerts() == []
    fake_clock.advance(40)
    once(p.rounds(1), "fired", "big/q1")
    assert inspector.pending_alerts() == [] and [a.id for a in inspector.alerts()] == ["big/q1"]
    state = p.clients[0].hgetall(p.evaluators[0]._scripts.keys.alerts)
    assert not [k for k in state if k.startswith(("p:", "d:"))]
    inspector.delete_all("q1", "pending")  # resolved; then pending again, and it ends before it fires
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="queuecore.alerts"):
        once(p.rounds(1), "resolved", "big/q1")
    assert [r.getMessage() for r in caplog.records] == [
        "alert big/q1 resolved: no longer holds (it fired with: queue q1: 2 pending tasks (above 0))"]
    client.enqueue("t.x", {}, queue="q1")
    p.rounds(1)
    assert [a.alert.id for a in inspector.pending_alerts()] == ["big/q1"]
    inspector.delete_all("q1", "pending")
    assert p.rounds(1) == []
    assert inspector.pending_alerts() == []
    state = p.clients[0].hgetall(p.evaluators[0]._scripts.keys.alerts)
    assert not [k for k in state if k.startswith(("p:", "d:"))]


def test_a_pending_mark_without_details_counts_but_is_not_listed(pair, client, inspector, fake_clock) -> None:
    """A pending mark written by an older version (no ``d:`` field) or a damaged detail: the evaluator
    still counts from the mark; the list leaves it out rather than fail."""
    p = pair({"big": {"kind": "backlog", "queue": "q1", "above": 0, "for": 60}})
    key = p.evaluators[0]._scripts.keys.alerts
    p.clients[0].hset(key, mapping={"p:big/q1": str(to_ms(fake_clock.now())), "p:old/q9": "1", "d:old/q9": "{bad"})
    assert inspector.pending_alerts() == []
    client.enqueue("t.x", {}, queue="q1")
    fake_clock.advance(60)
    once(p.rounds(1), "fired", "big/q1")


def test_failure_rate_fires_and_resolves_once(pair, redis_client, connection, fake_clock) -> None:
    p = pair({"failing": {"kind": "failure_rate", "queue": "q2", "above": 0.5, "window": 120, "min_tasks": 4}})
    q = connection.keys.queue("q2")
    redis_client.sadd(connection.keys.queues, "q2")
    minute = stats_minute(fake_clock.now())
    redis_client.hset(q.stats, mapping={f"processed:{minute}": 3, f"failed:{minute}": 3})
    assert p.rounds() == []  # fewer than min_tasks
    redis_client.hset(q.stats, mapping={f"processed:{minute}": 10, f"failed:{minute}": 6})
    once(p.rounds(), "fired", "failing/q2")
    fake_clock.advance(180)  # the minute leaves the two-minute window
    once(p.rounds(), "resolved", "failing/q2")


def test_failure_rate_per_type_fires_and_resolves_once(pair, redis_client, connection, fake_clock) -> None:
    p = pair({"type-failing": {"kind": "failure_rate", "queue": "q2", "type": "*", "above": 0.5, "window": 120,
                               "min_tasks": 4}})
    q = connection.keys.queue("q2")
    redis_client.sadd(connection.keys.queues, "q2")
    minute = int(fake_clock.now() // 60)
    for type_name, vector in (("t.bad", "10,6"), ("t.good", "10,1")):  # processed, failed
        redis_client.hset(q.type_stats, type_name, vector)
        redis_client.hset(typestats.minute_key(q.type_stats, type_name, minute // 60), str(minute % 60), vector)
    events = p.rounds()
    once(events, "fired", "type-failing/q2/t.bad")
    assert events[0].alert.message == ("type t.bad in queue q2: 60% of 10 attempts failed in the last 120 s "
                                       "(above 50%)")
    fake_clock.advance(180)
    once(p.rounds(), "resolved", "type-failing/q2/t.bad")


def test_a_failure_rate_window_counts_the_minute_before_too(pair, redis_client, connection, fake_clock) -> None:
    """At 8 s into a minute, a 60 s window read the current minute alone: 10 failures of 12 attempts
    fired "83% failed in the last 60 s" though 30 successes came 11 s earlier (10 of 42, 24%)."""
    p = pair({"q": {"kind": "failure_rate", "queue": "q2", "above": 0.5, "window": 60, "min_tasks": 5},
              "t": {"kind": "failure_rate", "queue": "q2", "type": "*", "above": 0.5, "window": 60, "min_tasks": 5}})
    q = connection.keys.queue("q2")
    redis_client.sadd(connection.keys.queues, "q2")
    fake_clock.advance(60 - fake_clock.now() % 60 + 8)  # 8 s into a minute
    now = fake_clock.now()
    before, current = int(now // 60) - 1, int(now // 60)
    for minute, processed, failed in ((before, 30, 0), (current, 12, 10)):
        redis_client.hset(q.stats, mapping={f"processed:{stats_minute(minute * 60.0)}": processed,
                                            f"failed:{stats_minute(minute * 60.0)}": failed})
        redis_client.hset(typestats.minute_key(q.type_stats, "t.x", minute // 60), str(minute % 60),
                          f"{processed},{failed}")
    redis_client.hset(q.type_stats, "t.x", "42,10")
    assert p.rounds() == []
    redis_client.hset(q.stats, f"failed:{stats_minute(before * 60.0)}", 20)  # now 30 of 42 failed
    redis_client.hset(typestats.minute_key(q.type_stats, "t.x", before // 60), str(before % 60), "30,20")
    events = sorted(p.rounds(), key=lambda e: e.alert.id)
    assert [(e.action, e.alert.id) for e in events] == [("fired", "q/q2"), ("fired", "t/q2/t.x")]
    assert events[0].alert.message == "queue q2: 71% of 42 attempts failed in the last 68 s (above 50%)"


def test_no_worker_fires_and_resolves_once(pair, make_worker, redis_client, connection, fake_clock) -> None:
    p = pair({"nobody": {"kind": "no_worker", "queue": "q3"}})
    redis_client.sadd(connection.keys.queues, "q3")
    once(p.rounds(), "fired", "nobody/q3")
    worker = make_worker(queues={"q3": 1}, clock=fake_clock)
    once(p.rounds(), "resolved", "nobody/q3")
    worker.shutdown(timeout=2)
    once(p.rounds(), "fired", "nobody/q3")


def test_overdue_task_fires_and_resolves_once(pair, client, redis_client, connection, fake_clock) -> None:
    p = pair({"stuck": {"kind": "overdue", "grace": 10}})
    handle = client.enqueue("t.x", {}, queue="q4", timeout=5)
    q = connection.keys.queue("q4")
    scripts = Scripts(redis_client, connection.keys)
    now = fake_clock.now()
    assert scripts.dequeue(q, now_ms=to_ms(now), lease_until_ms=to_ms(now + 3600), count=1)
    fake_clock.advance(14)
    assert p.rounds() == []  # within timeout plus grace
    fake_clock.advance(2)
    events = p.rounds()
    once(events, "fired", "stuck/q4")
    assert events[0].alert.value == 1.0
    redis_client.zrem(q.active, handle.id)
    once(p.rounds(), "resolved", "stuck/q4")


@contextlib.contextmanager
def memory_rule(url: str, key_prefix: str, fake_clock: FakeClock, above: float) -> Iterator[tuple[redis.Redis, Pair]]:
    """A ``memory`` rule's evaluators on the private server at ``url``, and a client to set its
    ``maxmemory`` with (no limit again afterwards)."""
    connection = ConnectionConfig(redis_url=url, key_prefix=key_prefix)
    admin = connection.connect()
    p = Pair(connection, fake_clock, {"mem": {"kind": "memory", "above": above}})
    try:
        yield admin, p
    finally:
        p.close()
        admin.config_set("maxmemory", "0")
        admin.close()


def test_memory_fires_and_resolves_once(private_redis, fake_clock, key_prefix) -> None:
    with memory_rule(private_redis.url, key_prefix, fake_clock, 0.1) as (admin, p):
        used = int(admin.info("memory")["used_memory"])
        admin.config_set("maxmemory", str(used * 2))
        once(p.rounds(), "fired", "mem/redis")
        assert 0.1 < p.events[0].alert.value < 1
        admin.config_set("maxmemory", str(used * 1000))
        once(p.rounds(), "resolved", "mem/redis")


def test_alerts_fire_and_resolve_while_redis_is_full(full_redis, fake_clock, key_prefix) -> None:  # noqa: F811
    """Each round's one write (the lease, then the alerts) begins with a write that never grows memory,
    so Redis at maxmemory (noeviction) lets it through: the memory alert fires while Redis is full (a
    reviewer's reproduction: every round failed with RedisFull, no alert could fire or resolve), and
    resolves once there is room. On Redis 7 and on 6.2."""
    with memory_rule(full_redis.url, key_prefix, fake_clock, 0.8) as (admin, p):
        assert p.rounds() == []  # room to spare: the lease is taken, nothing holds
        admin.config_set("maxmemory", str(int(admin.info("memory")["used_memory"]) - 256 * 1024))
        with pytest.raises(redis.ResponseError, match="maxmemory"):
            admin.set(f"{key_prefix}:probe", "x")  # full: an ordinary write is refused
        once(p.rounds(), "fired", "mem/redis")
        assert p.events[0].alert.value > 1
        admin.config_set("maxmemory", "0")
        once(p.rounds(), "resolved", "mem/redis")


def test_periodic_missed_fires_and_resolves_once(pair, scripts, connection, fake_clock) -> None:
    p = pair({"missed": {"kind": "periodic_missed", "grace": 60}})
    entry = parse_entries({"tick": {"task": "t.x", "every": 10}})[0]
    q = connection.keys.queue(entry.queue)

    def declare(next_in: float) -> None:
        now = fake_clock.now()
        scripts.periodic_register([f"tick/{entry.queue}"], lapsed_before_ms=to_ms(now), until_ms=to_ms(now + 3600))
        scripts.periodic_sync(q, "tick", now_ms=to_ms(now), definition=entry.definition(),
                              next_ms=to_ms(now + next_in))

    declare(10)
    assert p.rounds() == []
    fake_clock.advance(75)  # the next fire is 65 s overdue: no worker fired it
    once(p.rounds(), "fired", "missed/tick")
    declare(10)  # a worker runs the entry again
    once(p.rounds(), "resolved", "missed/tick")


# -- a key of the wrong Redis type -----------------------------------------------------------------


def unreadable_logs(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The messages of the 'cannot be read' warnings; fails on any record with a traceback."""
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    return [r.getMessage() for r in caplog.records
            if r.name == "queuecore.alerts" and r.levelno == logging.WARNING and "cannot be read" in r.getMessage()]


def test_a_key_of_the_wrong_type_skips_its_subject_and_keeps_its_alerts(
        pair, client, redis_client, connection, fake_clock, caplog) -> None:
    """A queue's stats HASH replaced by a string: every round raised WRONGTYPE, so no alert of any
    queue fired and none resolved. Now that queue alone is left out, its alert neither fired nor
    resolved while it lasts, logged once (no traceback); the other queues and rules go on."""
    p = pair({"big": {"kind": "backlog", "queue": "default", "above": 0},
              "failing": {"kind": "failure_rate", "queue": "*", "above": 0.5, "window": 120}})
    minute = stats_minute(fake_clock.now())
    for name in ("other", "q2"):
        redis_client.sadd(connection.keys.queues, name)
        redis_client.hset(connection.keys.queue(name).stats, mapping={f"processed:{minute}": 4, f"failed:{minute}": 4})
    assert sorted(e.alert.id for e in p.rounds()) == ["failing/other", "failing/q2"]
    stats = connection.keys.queue("other").stats
    redis_client.delete(stats)
    redis_client.set(stats, "corrupt")
    client.enqueue("t.x", {}, queue="default")
    redis_client.delete(connection.keys.queue("q2").stats)  # q2 no longer fails
    with caplog.at_level(logging.INFO, logger="queuecore"):
        events = p.rounds(5)
    assert sorted((e.action, e.alert.id) for e in events) == [("fired", "big/default"), ("resolved", "failing/q2")]
    assert set(active_alerts(p.evaluators[0]._scripts)) == {"big/default", "failing/other"}  # kept
    assert unreadable_logs(caplog) == [
        f"alerts: queue other cannot be read (key {stats} holds a string, expected a hash): its alerts are "
        "neither fired nor resolved until it can"]
    redis_client.delete(stats)  # readable again, and no failures now: it resolves
    once(p.rounds(), "resolved", "failing/other")


def test_each_read_of_a_round_skips_only_what_it_cannot_read(
        pair, client, redis_client, scripts, connection, fake_clock, caplog) -> None:
    """The per-type statistics (``ts``), the active ZSET and an active task's HASH of one queue each,
    then the queue list itself, of the wrong type: the subject (or every subject of a rule over every
    queue) keeps its alerts' state, logged once; the others are evaluated as usual."""
    p = pair({"types": {"kind": "failure_rate", "queue": "*", "type": "*", "above": 0.5, "window": 120},
              "stuck": {"kind": "overdue", "grace": 10},
              "big": {"kind": "backlog", "queue": "*", "above": 0},
              "stuck-ok": {"kind": "overdue", "queue": "ok", "grace": 10}})
    names = ("ts-bad", "active-bad", "task-bad", "ok")
    keys = {name: connection.keys.queue(name) for name in names}
    minute = int(fake_clock.now() // 60)
    active: dict[str, str] = {}
    for name, q in keys.items():
        for _ in range(2):
            client.enqueue("t.x", {}, queue=name, timeout=5)
        now = fake_clock.now()
        assert scripts.dequeue(q, now_ms=to_ms(now), lease_until_ms=to_ms(now + 3600), count=1)
        [active[name]] = redis_client.zrange(q.active, 0, -1)
        redis_client.hset(q.type_stats, "t.x", "4,4")
        redis_client.hset(typestats.minute_key(q.type_stats, "t.x", minute // 60), str(minute % 60), "4,4")
    fake_clock.advance(20)  # past the timeout (5 s) plus grace (10 s)
    everything = {f"{rule}/{name}{suffix}" for rule, suffix in (("types", "/t.x"), ("stuck", ""), ("big", ""))
                  for name in names} | {"stuck-ok/ok"}
    assert {e.alert.id for e in p.rounds()} == everything
    for key in (keys["ts-bad"].type_stats, keys["active-bad"].active, keys["task-bad"].task(active["task-bad"])):
        redis_client.delete(key)
        redis_client.set(key, "corrupt")
    redis_client.delete(keys["ok"].active)  # ok's task is no longer active: resolves
    with caplog.at_level(logging.INFO, logger="queuecore"):
        events = p.rounds(5)
    assert sorted(e.alert.id for e in events if e.action == "resolved") == ["stuck-ok/ok", "stuck/ok"]
    assert len(events) == 2
    # active-bad's sizes (all_queue_info) cannot be read either: its backlog alert is kept too
    assert set(active_alerts(scripts)) == everything - {"stuck/ok", "stuck-ok/ok"}
    assert sorted(unreadable_logs(caplog)) == [
        f"alerts: queue active-bad cannot be read (key {keys['active-bad'].active} holds a string, expected a "
        "zset): its alerts are neither fired nor resolved until it can",
        f"alerts: queue task-bad cannot be read (key {keys['task-bad'].task(active['task-bad'])} holds a string, "
        "expected a hash): its alerts are neither fired nor resolved until it can",
        f"alerts: queue ts-bad cannot be read (key {keys['ts-bad'].type_stats} holds a string, expected a hash): "
        "its alerts are neither fired nor resolved until it can"]
    # the queue list: the rules over every queue keep their alerts; one over a named queue goes on
    redis_client.delete(connection.keys.queues)
    redis_client.set(connection.keys.queues, "corrupt")
    redis_client.zadd(keys["ok"].active, {active["ok"]: to_ms(fake_clock.now()) + 3_600_000})
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="queuecore"):
        once(p.rounds(5), "fired", "stuck-ok/ok")  # not stuck/ok: "*" needs the queue list
    assert set(active_alerts(scripts)) == everything - {"stuck/ok"}
    assert unreadable_logs(caplog) == [
        f"alerts: the queue list cannot be read (key {connection.keys.queues} holds a string, expected a set): "
        "its alerts are neither fired nor resolved until it can"]


def test_the_lease_keeps_one_evaluator_and_passes_on_when_it_lapses(scripts, fake_clock) -> None:
    now = to_ms(fake_clock.now())
    assert scripts.alerts_apply("a", now_ms=now, lease_until_ms=now + 1000)[0]
    assert not scripts.alerts_apply("b", now_ms=now + 999, lease_until_ms=now + 2000)[0]
    assert scripts.alerts_apply("a", now_ms=now + 999, lease_until_ms=now + 3000)[0]  # renewed
    assert not scripts.alerts_apply("b", now_ms=now + 2999, lease_until_ms=now + 4000)[0]
    assert scripts.alerts_apply("b", now_ms=now + 3001, lease_until_ms=now + 4000)[0]  # a died: taken over
    scripts.alerts_apply("b", now_ms=now + 3002, lease_until_ms=0)  # given up on shutdown
    assert scripts.alerts_apply("a", now_ms=now + 3003, lease_until_ms=now + 5000)[0]


def test_the_script_fires_and_resolves_each_alert_once(scripts, redis_client, connection) -> None:
    alert = Alert(id="r/q", rule="r", kind="backlog", subject="q", severity="warning", message="m", value=3.0,
                  threshold=2.0, since=1.0)
    fire = [(alert.id, alert.to_json())]
    assert scripts.alerts_apply("a", now_ms=1, lease_until_ms=10, fire=fire) == (True, ["r/q"], [])
    assert scripts.alerts_apply("a", now_ms=2, lease_until_ms=10, fire=fire) == (True, [], [])
    assert scripts.alerts_apply("b", now_ms=3, lease_until_ms=20, fire=fire, resolve=["r/q"]) == (False, [], [])
    assert scripts.alerts_apply("b", now_ms=11, lease_until_ms=20, fire=fire) == (True, [], [])  # still active
    held, fired, resolved = scripts.alerts_apply("b", now_ms=12, lease_until_ms=20, resolve=["r/q"])
    assert (held, fired) == (True, []) and [(i, Alert.from_json(b)) for i, b in resolved] == [("r/q", alert)]
    assert scripts.alerts_apply("b", now_ms=13, lease_until_ms=20, resolve=["r/q"]) == (True, [], [])
    assert redis_client.hgetall(connection.keys.alerts) == {"lease": "b", "lease_until": "20"}


# -- the webhook sender, and whole workers ---------------------------------------------------------


class Hook:
    """A local HTTP server (http.server in a thread) that records each POSTed JSON body; it answers
    500 to the first ``fail_first`` requests."""

    def __init__(self, fail_first: int = 0) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.requests = 0
        self.fail_first = fail_first
        self._lock = threading.Lock()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with hook._lock:
                    hook.requests += 1
                    failing = hook.requests <= hook.fail_first
                    if not failing:
                        hook.bodies.append(json.loads(body))
                self.send_response(500 if failing else 200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def events(self) -> list[tuple[str, str]]:
        with self._lock:
            return [(b["action"], b["alert"]["id"]) for b in self.bodies]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook() -> Iterator[Hook]:
    h = Hook()
    yield h
    h.close()


def test_the_webhook_sender_retries_a_failed_delivery(fake_clock) -> None:
    h = Hook(fail_first=1)
    waits: list[float] = []
    try:
        sender = WebhookSender(h.url, timeout=2, retries=3, backoff=0.5, wait=waits.append)
        alert = Alert(id="r/q", rule="r", kind="backlog", subject="q", severity="critical", message="<b>m</b>",
                      value=3.0, threshold=2.0, since=fake_clock.now())
        sender(AlertEvent("fired", alert, fake_clock.now()))
        assert h.requests == 2 and waits == [0.5]
        assert h.bodies == [{"action": "fired", "at": "2027-01-15T08:00:00+00:00", "alert": {
            "id": "r/q", "rule": "r", "kind": "backlog", "subject": "q", "severity": "critical",
            "message": "<b>m</b>", "value": 3.0, "threshold": 2.0, "since": "2027-01-15T08:00:00+00:00"}}]
        h.fail_first = 10
        with pytest.raises(RuntimeError, match="gave up after 4 attempt"):
            sender(AlertEvent("resolved", alert, fake_clock.now()))
        assert waits == [0.5, 0.5, 1.0, 2.0]
    finally:
        h.close()


@pytest.mark.parametrize("status", [301, 302, 303, 307])
def test_a_webhook_that_redirects_is_not_counted_as_delivered(fake_clock, status: int) -> None:
    """urllib follows a POST's 301/302/303 with a GET without the body: the receiver answered that 200,
    and the alert counted as delivered though nobody had it."""
    seen: list[tuple[str, str]] = []

    class Redirecting(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            seen.append(("POST", self.path))
            self.send_response(status if self.path == "/old" else 200)
            self.send_header("Location", "/new")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:
            seen.append(("GET", self.path))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Redirecting)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        sender = WebhookSender(f"http://127.0.0.1:{server.server_port}/old", timeout=5, retries=1, backoff=0,
                               wait=lambda _s: None)
        alert = Alert(id="r/q", rule="r", kind="backlog", subject="q", severity="warning", message="m", value=None,
                      threshold=None, since=fake_clock.now())
        with pytest.raises(RuntimeError, match=rf"gave up after 2 attempt.*HTTP Error {status}.*redirected to "
                                               rf"http://127\.0\.0\.1:\d+/new"):
            sender(AlertEvent("fired", alert, fake_clock.now()))
        assert seen == [("POST", "/old"), ("POST", "/old")]  # tried again, never followed
    finally:
        server.shutdown()
        server.server_close()


def test_the_webhook_sender_retries_after_a_malformed_reply(fake_clock) -> None:
    """A receiver (or proxy) answering a bad status line raised http.client's BadStatusLine, which the
    sender did not catch: that event was not tried again."""
    import socket

    server = socket.create_server(("127.0.0.1", 0))
    replies = [b"garbage\r\n\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"]

    def serve() -> None:
        for reply in replies:
            conn, _ = server.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    waits: list[float] = []
    try:
        sender = WebhookSender(f"http://127.0.0.1:{server.getsockname()[1]}/hook", timeout=5, retries=1, backoff=0.1,
                               wait=waits.append)
        alert = Alert(id="r/q", rule="r", kind="backlog", subject="q", severity="warning", message="m", value=None,
                      threshold=None, since=fake_clock.now())
        sender(AlertEvent("fired", alert, fake_clock.now()))  # the second try is answered 200
        assert waits == [0.1]
    finally:
        thread.join(5)
        server.close()


def test_a_slow_sender_never_blocks_the_evaluator(scripts, fake_clock) -> None:
    gate = threading.Event()
    got: list[AlertEvent] = []

    def slow(event: AlertEvent) -> None:
        gate.wait(10)
        got.append(event)

    dispatcher = Dispatcher([slow])
    alert = Alert(id="r/q", rule="r", kind="backlog", subject="q", severity="warning", message="m", value=None,
                  threshold=None, since=0.0)
    dispatcher([AlertEvent("fired", alert, 0.0), AlertEvent("resolved", alert, 1.0)])  # returns at once
    assert got == []
    gate.set()
    wait_until(lambda: len(got) == 2)
    dispatcher.close()
    assert [e.action for e in got] == ["fired", "resolved"]


def test_closing_never_waits_past_its_timeout_on_a_receiver_that_does_not_answer(caplog) -> None:
    """A review: with the sender's queue full behind a receiver that does not answer, ``close`` blocked
    on putting its end mark, and the worker's shutdown with it, for good."""
    from queuecore.core.alerts import SenderThread

    stuck = threading.Event()
    sender = SenderThread(lambda event: stuck.wait(60))
    alert = Alert(id="r/q", rule="r", kind="backlog", subject="q", severity="warning", message="m", value=None,
                  threshold=None, since=0.0)
    for _ in range(10_001):  # one taken by the stuck send, 10,000 queued: full
        sender.put(AlertEvent("fired", alert, 0.0))
    assert sender._queue.full()
    closed = threading.Thread(target=sender.close, kwargs={"timeout": 0.2})
    closed.start()
    closed.join(5)
    assert not closed.is_alive()  # it gave up after its timeout, saying how many were not sent
    assert "10000 event(s) not sent by shutdown" in caplog.text
    stuck.set()


def lease_rounds(redis_client: redis.Redis, connection: ConnectionConfig, rounds: int) -> None:
    """Wait until the evaluator lease was renewed ``rounds`` more times (rounds ran)."""
    seen: list[str | None] = [redis_client.hget(connection.keys.alerts, "lease_until")]

    def renewed() -> bool:
        value = redis_client.hget(connection.keys.alerts, "lease_until")
        if value != seen[-1]:
            seen.append(value)
        return len(seen) > rounds

    wait_until(renewed)


def test_two_workers_fire_and_resolve_once(make_worker, client, inspector, redis_client, connection, hook) -> None:
    alerts = {"RULES": {"big": {"kind": "backlog", "queue": "unserved", "above": 0}}, "INTERVAL": 0.02,
              "SENDERS": [{"kind": "webhook", "url": hook.url, "timeout": 2}]}
    workers = [make_worker(queues={"default": 1}, alerts=alerts) for _ in range(2)]
    client.enqueue("t.x", {}, queue="unserved")
    wait_until(lambda: hook.events() == [("fired", "big/unserved")])
    holder = redis_client.hget(connection.keys.alerts, "lease")
    assert holder in {w.server_id for w in workers}
    next(w for w in workers if w.server_id == holder).shutdown(timeout=2)  # the other takes over
    inspector.delete_all("unserved", "pending")
    wait_until(lambda: len(hook.events()) == 2)
    lease_rounds(redis_client, connection, 5)
    assert hook.events() == [("fired", "big/unserved"), ("resolved", "big/unserved")]
    assert redis_client.hget(connection.keys.alerts, "lease") != holder


@pytest.mark.slow
def test_two_worker_processes_fire_and_resolve_once_across_a_kill(
        spawn, client, inspector, redis_client, connection, hook) -> None:  # noqa: F811
    """Two worker processes evaluate one rule; the lease holder is killed with SIGKILL between the
    fire and the resolve: the other takes the lease over, and the hook gets one of each."""
    alerts = {"RULES": {"big": {"kind": "backlog", "queue": "unserved", "above": 0}}, "INTERVAL": 0.05,
              "SENDERS": [{"kind": "webhook", "url": hook.url, "timeout": 2}]}
    procs = [spawn(alerts=json.dumps(alerts)) for _ in range(2)]
    wait_until(lambda: len(inspector.servers()) == 2, timeout=20)
    client.enqueue("t.x", {}, queue="unserved")
    wait_until(lambda: hook.events() == [("fired", "big/unserved")], timeout=20)
    holder = redis_client.hget(connection.keys.alerts, "lease")
    victim = next(p for p in procs if any(s.id == holder and s.pid == p.pid for s in inspector.servers()))
    victim.kill9()
    inspector.delete_all("unserved", "pending")
    wait_until(lambda: len(hook.events()) == 2, timeout=20)  # after the dead holder's lease (0.15 s) lapsed
    lease_rounds(redis_client, connection, 5)
    assert hook.events() == [("fired", "big/unserved"), ("resolved", "big/unserved")]
    assert redis_client.hget(connection.keys.alerts, "lease") not in (None, holder)


@pytest.mark.parametrize("slow", ["answer", "lookup", "proxy", "headers"],
                         ids=["answer", "lookup-then-answer", "proxy-tunnel", "200-then-headers"])
def test_a_webhook_try_ends_at_its_timeout_however_slowly_the_receiver_answers(fake_clock, monkeypatch,
                                                                               slow: str) -> None:
    """A review: urllib's timeout bounds each read, so a receiver sending its reply a byte at a time held
    a try (and the sender's thread) for as long as it went on; and (reviews of that fix) a connection
    still being made when the deadline came (a name lookup slower than the timeout) was not ended, nor
    one whose HTTPS proxy answered the tunnel's CONNECT a byte at a time (the connection was tracked
    only once its tunnel was made); nor (another review) was a "200 OK" status line sent in time whose
    headers trickled past the deadline: the connection's end closed the headers, and it counted as
    delivered."""
    import socket

    url = "http://127.0.0.1:{port}/hook"
    if slow == "proxy":  # an HTTPS webhook through a proxy taken from the environment, as urlopen's are
        url = "https://hooks.example.invalid/hook"
        for name in ("no_proxy", "NO_PROXY", "HTTPS_PROXY"):
            monkeypatch.delenv(name, raising=False)
    if slow == "lookup":  # the deadline passes while the name is looked up (a slow resolver)
        lookup = socket.getaddrinfo

        def slow_getaddrinfo(*args: Any, **kwargs: Any) -> Any:
            time.sleep(0.8)
            return lookup(*args, **kwargs)

        monkeypatch.setattr(socket, "getaddrinfo", slow_getaddrinfo)

    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def trickle() -> None:  # a status line (or headers) that never ends: one byte every 50 ms, until the test is over
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            if slow == "headers":
                conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            while not stop.wait(0.05):
                try:
                    conn.sendall(b"H")
                except OSError:
                    return

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    outcome: list[BaseException] = []
    if slow == "proxy":
        monkeypatch.setenv("https_proxy", f"http://127.0.0.1:{server.getsockname()[1]}")

    def send() -> None:
        sender = WebhookSender(url.format(port=server.getsockname()[1]), timeout=0.5, retries=0)
        alert = Alert(id="r/q", rule="r", kind="backlog", subject="q", severity="warning", message="m", value=None,
                      threshold=None, since=fake_clock.now())
        try:
            sender(AlertEvent("fired", alert, fake_clock.now()))
        except BaseException as exc:
            outcome.append(exc)

    try:
        sending = threading.Thread(target=send, daemon=True)
        sending.start()
        sending.join(30)  # without the deadline it never ends
        assert not sending.is_alive(), "the try outlasted its timeout"
        assert len(outcome) == 1 and "no reply within 0.5s" in str(outcome[0])
    finally:
        stop.set()
        thread.join(5)
        server.close()
