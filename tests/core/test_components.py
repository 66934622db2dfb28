"""Each worker component built alone, from only what it uses: a real Redis, the FakeClock, and
plain callables where it reports to a sibling. No Worker is constructed in this module."""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

import pytest
import redis

from queuecore.core.acker import Acker
from queuecore.core.broker import Broker
from queuecore.core.bulkrunner import BulkJobRunner
from queuecore.core.clock import FakeClock, to_ms
from queuecore.core.config import ConnectionConfig, WorkerConfig
from queuecore.core.context import TaskContext
from queuecore.core.errors import RedisFull, WrongKeyType
from queuecore.core.flow import LimitGate
from queuecore.core.forwarder import Forwarder
from queuecore.core.handlers import AsyncLoop, DaemonExecutor, HandlerPool
from queuecore.core.health import RedisHealth
from queuecore.core.heartbeat import Heartbeater, ServerState
from queuecore.core.inspector import Inspector
from queuecore.core.janitor import Janitor
from queuecore.core.keys import QueueKeys, stats_day, stats_minute
from queuecore.core.leases import LeaseRenewer
from queuecore.core.message import TaskMessage
from queuecore.core.processor import Processor
from queuecore.core.reasons import LEASE_LOST
from queuecore.core.recorder import Recorder
from queuecore.core.recoverer import Recoverer
from queuecore.core.registry import TaskRegistry
from queuecore.core.runner import Runner
from queuecore.core.running import HeldTasks, Running
from queuecore.core.scripts import LEASE_LOST as LEASE_LOST_CODE
from queuecore.core.scripts import Scripts
from queuecore.core.subscriber import Subscriber
from queuecore.core.task import task
from tests.conftest import wait_until
from tests.helpers.state import make_msg, read_pending, read_task, read_zset, seed_task

LEASE = 30.0


@pytest.fixture
def q(connection: ConnectionConfig) -> QueueKeys:
    return connection.keys.queue("default")


@pytest.fixture
def health() -> RedisHealth:
    return RedisHealth()


@pytest.fixture
def broker(redis_client: redis.Redis, connection: ConnectionConfig) -> Broker:
    return Broker(redis_client, connection.keys)


def held_attempt(r: redis.Redis, q: QueueKeys, task_id: str, *, lease: int, expires: float,
                 **fields: object) -> Running:
    """Seed an active task under ``lease`` and the attempt a worker would hold for it."""
    msg = make_msg(task_id, q.queue)
    seed_task(r, q, task_id, "active", score=to_ms(expires), msg=msg, lease=lease, **fields)
    message = TaskMessage.decode(task_id, q.queue, msg)
    ctx = TaskContext(id=task_id, queue=q.queue, type=message.type, retried=0, max_retry=message.max_retry,
                      payload=message.payload)
    return Running(id=task_id, queue=q.queue, lease=lease, retried=0, message=message, ctx=ctx, started=0.0,
                   deadline=None)


class Calls:
    """Records the calls a component makes to a sibling."""

    def __init__(self, reply: object = None) -> None:
        self.args: list[tuple[object, ...]] = []
        self.reply = reply
        self.event = threading.Event()

    def __call__(self, *args: object) -> object:
        self.args.append(args)
        self.event.set()
        return self.reply


# -- LeaseRenewer ---------------------------------------------------------------------------------

def renewer_for(scripts: Scripts, clock: FakeClock, held: HeldTasks, q: QueueKeys, lost: Calls,
                cancel: Calls) -> LeaseRenewer:
    return LeaseRenewer(scripts, clock, LEASE, held, {q.queue: q}, on_lost=lost, on_cancel=cancel)


def test_lease_renewer_extends_held_leases_and_reports_lost_and_cancelled(
        redis_client: redis.Redis, scripts: Scripts, fake_clock: FakeClock, q: QueueKeys) -> None:
    now = fake_clock.now()
    held = HeldTasks()
    for attempt in (held_attempt(redis_client, q, "ours", lease=3, expires=now + 1),
                    held_attempt(redis_client, q, "flagged", lease=1, expires=now + 1, cancel=1),
                    held_attempt(redis_client, q, "taken", lease=1, expires=now + 1)):
        held.add(attempt)
    redis_client.hset(q.task("taken"), "lease", 2)  # another worker recovered and re-leased it
    lost, cancel = Calls(), Calls()
    renewer_for(scripts, fake_clock, held, q, lost, cancel).renew()
    active = read_zset(redis_client, q.active)
    assert active["ours"] == active["flagged"] == to_ms(now + LEASE)
    assert active["taken"] == to_ms(now + 1)  # not ours: left alone
    assert lost.args == [(q.queue, "taken", 1)] and cancel.args == [(q.queue, "flagged")]


def test_lease_renewer_keeps_two_queues_tasks_of_one_id_and_lease_apart(
        redis_client: redis.Redis, scripts: Scripts, fake_clock: FakeClock, connection: ConnectionConfig) -> None:
    """A review: held attempts were keyed by (id, lease) alone, so two queues' tasks ``job-1`` leased
    in the same millisecond were one entry: the other's lease was never renewed, and the recoverer
    took that task back while it still ran (it ran twice)."""
    now = fake_clock.now()
    a, b = connection.keys.queue("a"), connection.keys.queue("b")
    held = HeldTasks()
    for keys in (a, b):
        held.add(held_attempt(redis_client, keys, "job-1", lease=7, expires=now + 1))
    assert len(held) == 2
    LeaseRenewer(scripts, fake_clock, LEASE, held, {"a": a, "b": b}, on_lost=Calls(), on_cancel=Calls()).renew()
    assert read_zset(redis_client, a.active) == read_zset(redis_client, b.active) == {"job-1": to_ms(now + LEASE)}


def test_lease_renewer_skips_attempts_that_already_lost_their_lease(
        redis_client: redis.Redis, scripts: Scripts, fake_clock: FakeClock, q: QueueKeys) -> None:
    held = HeldTasks()
    attempt = held_attempt(redis_client, q, "gone", lease=1, expires=fake_clock.now() + 1)
    attempt.ctx.request_cancel(LEASE_LOST)
    held.add(attempt)
    lost, cancel = Calls(), Calls()
    renewer_for(scripts, fake_clock, held, q, lost, cancel).renew()
    assert read_zset(redis_client, q.active)["gone"] == to_ms(fake_clock.now() + 1)
    assert lost.args == [] and cancel.args == []


def test_lease_renewer_confirms_one_lease_and_says_when_it_is_no_longer_ours(
        redis_client: redis.Redis, scripts: Scripts, fake_clock: FakeClock, q: QueueKeys) -> None:
    now = fake_clock.now()
    ours = held_attempt(redis_client, q, "ours", lease=1, expires=now - 1)  # ran out, not yet recovered
    taken = held_attempt(redis_client, q, "taken", lease=1, expires=now - 1)
    ours.lease_until = taken.lease_until = now - 1
    redis_client.hset(q.task("taken"), "lease", 2)  # another worker recovered and re-leased it
    renewer = renewer_for(scripts, fake_clock, HeldTasks(), q, Calls(), Calls())
    assert renewer.confirm(ours) != LEASE_LOST_CODE
    assert renewer.confirm(taken) == LEASE_LOST_CODE
    active = read_zset(redis_client, q.active)
    assert active["ours"] == to_ms(now + LEASE) and ours.lease_until == now + LEASE
    assert active["taken"] == to_ms(now - 1) and taken.lease_until == now - 1  # not ours: left alone


# -- Heartbeater ----------------------------------------------------------------------------------

def test_heartbeater_publishes_the_server_state_and_clears_it(
        redis_client: redis.Redis, scripts: Scripts, fake_clock: FakeClock, q: QueueKeys, connection: ConnectionConfig,
        health: RedisHealth, broker: Broker) -> None:
    held = HeldTasks()
    running = held_attempt(redis_client, q, "t1", lease=1, expires=fake_clock.now() + 1)
    running.begun, running.started = True, fake_clock.now() - 1  # its handler runs
    held.add(running)
    fetched = held_attempt(redis_client, q, "t2", lease=1, expires=fake_clock.now() + 1)
    fetched.fetched = fake_clock.now() - 2  # fetched ahead, waiting for a free slot
    held.add(fetched)
    state = ServerState(id="host:1:abc", host="host", pid=1, concurrency=4, queues={"default": 1},
                        strict_priority=False, started_at=fake_clock.now() - 5, status="active")
    renewer = renewer_for(scripts, fake_clock, held, q, Calls(), Calls())
    beater = Heartbeater(scripts, broker, fake_clock, 2.0, state, held, renewer, health)
    beater.run_once()
    assert redis_client.smembers(connection.keys.queues) == {"default"}  # not registered at start: now
    info = json.loads(redis_client.get(connection.keys.server("host:1:abc")))
    assert info["status"] == "active" and info["concurrency"] == 4 and info["queues"] == {"default": 1}
    assert [(w["task_id"], w["started_at"]) for w in info["workers"]] == [("t1", fake_clock.now() - 1)]
    assert [(w["task_id"], w["fetched_at"]) for w in info["waiting"]] == [("t2", fake_clock.now() - 2)]
    assert redis_client.pttl(connection.keys.server("host:1:abc")) <= to_ms(beater.ttl)
    assert read_zset(redis_client, connection.keys.servers) == {"host:1:abc": to_ms(fake_clock.now() + 6.0)}
    assert read_zset(redis_client, q.active)["t1"] == to_ms(fake_clock.now() + LEASE)  # renewed on the beat
    # Probe: a Redis restarted without its data listed no queue until a producer enqueued into each
    # (the workers listed theirs only at start); each heartbeat lists them again
    redis_client.delete(connection.keys.queues)
    beater.run_once()
    assert redis_client.smembers(connection.keys.queues) == {"default"}
    state.status = "quiet"
    beater.beat()
    assert json.loads(redis_client.get(connection.keys.server("host:1:abc")))["status"] == "quiet"
    beater.clear()
    assert redis_client.get(connection.keys.server("host:1:abc")) is None
    assert read_zset(redis_client, connection.keys.servers) == {}


# -- Broker ---------------------------------------------------------------------------------------

def test_broker_registers_queues_directly_or_in_a_pipeline(broker: Broker, redis_client: redis.Redis,
                                                           connection: ConnectionConfig) -> None:
    broker.register_queues(["default", "mail", "default"])
    pipe = broker.pipeline()
    broker.register_queues({"reports"}, client=pipe)
    broker.register_queues([], client=pipe)  # nothing to add: no command (SADD refuses no members)
    assert redis_client.smembers(connection.keys.queues) == {"default", "mail"}  # the pipeline has not run
    assert pipe.execute() == [1]
    assert redis_client.smembers(connection.keys.queues) == {"default", "mail", "reports"}


def test_broker_finds_the_queues_that_hold_a_task(broker: Broker, redis_client: redis.Redis,
                                                  connection: ConnectionConfig) -> None:
    broker.register_queues(["a", "b", "c"])
    for name in ("a", "c"):
        seed_task(redis_client, connection.keys.queue(name), "t-1", "pending")
    assert broker.queues_holding("t-1") == ["a", "c"]
    assert broker.queues_holding("t-2") == []


def test_broker_removes_a_server_and_reads_redis_clock(broker: Broker, redis_client: redis.Redis,
                                                       connection: ConnectionConfig) -> None:
    keys = connection.keys
    redis_client.set(keys.server("h:1:a"), "{}")
    redis_client.set(keys.server_task_types("h:1:a"), "{}")
    redis_client.zadd(keys.servers, {"h:1:a": 1, "h:2:b": 2})
    broker.remove_server("h:1:a")
    assert redis_client.exists(keys.server("h:1:a"), keys.server_task_types("h:1:a")) == 0
    assert redis_client.zrange(keys.servers, 0, -1) == ["h:2:b"]
    seconds, micros = redis_client.time()
    assert abs(broker.time() - (seconds + micros / 1e6)) < 5  # Redis's clock, in seconds


# -- Forwarder, Janitor ---------------------------------------------------------------------------

def test_forwarder_moves_due_scheduled_and_retry_tasks(
        redis_client: redis.Redis, scripts: Scripts, fake_clock: FakeClock, q: QueueKeys, health: RedisHealth) -> None:
    now = fake_clock.now()
    seed_task(redis_client, q, "due", "scheduled", score=to_ms(now - 1))
    seed_task(redis_client, q, "again", "retry", score=to_ms(now))
    seed_task(redis_client, q, "later", "scheduled", score=to_ms(now + 60))
    forwarder = Forwarder(scripts, fake_clock, [q], 0.5, health)
    assert forwarder.run_once() == 2
    assert sorted(read_pending(redis_client, q)) == ["again", "due"]
    assert read_task(redis_client, q, "due")["state"] == "pending"
    assert read_zset(redis_client, q.scheduled) == {"later": to_ms(now + 60)}
    fake_clock.advance(60)
    assert forwarder.run_once() == 1


def test_forwarder_moves_the_other_queues_tasks_when_one_queue_cannot_be_read(
        redis_client: redis.Redis, scripts: Scripts, fake_clock: FakeClock, connection: ConnectionConfig,
        health: RedisHealth) -> None:
    """A review: a queue whose ``retry`` key held a string ended every round there, so a task falling
    due in a healthy queue listed after it stayed scheduled for good."""
    alpha, beta = connection.keys.queue("alpha"), connection.keys.queue("beta")
    redis_client.set(alpha.retry, "not a zset")
    seed_task(redis_client, beta, "due", "scheduled", score=to_ms(fake_clock.now() - 1))
    seed_task(redis_client, beta, "soon", "retry", score=to_ms(fake_clock.now() + 0.2))
    forwarder = Forwarder(scripts, fake_clock, [alpha, beta], 0.5, health)
    with pytest.raises(WrongKeyType, match="retry"):  # the round is reported as failed
        forwarder.run_once()
    assert read_pending(redis_client, beta) == ["due"]
    assert forwarder.next_wait() == pytest.approx(0.2)  # beta's next task still wakes it in time


def test_forwarder_sleeps_until_the_earliest_due_task_when_it_is_sooner_than_its_interval(
        redis_client: redis.Redis, scripts: Scripts, fake_clock: FakeClock, q: QueueKeys, health: RedisHealth) -> None:
    now = fake_clock.now()
    forwarder = Forwarder(scripts, fake_clock, [q], 0.5, health)
    assert forwarder.run_once() == 0 and forwarder.next_wait() == 0.5  # nothing scheduled: the interval
    seed_task(redis_client, q, "soon", "retry", score=to_ms(now + 0.2))
    seed_task(redis_client, q, "later", "scheduled", score=to_ms(now + 0.3))
    forwarder.run_once()
    assert forwarder.next_wait() == pytest.approx(0.2)  # the earliest of both ZSETs
    fake_clock.advance(0.25)
    assert forwarder.run_once() == 1 and forwarder.next_wait() == pytest.approx(0.05)
    fake_clock.advance(0.1)
    assert forwarder.run_once() == 1 and forwarder.next_wait() == 0.5
    seed_task(redis_client, q, "next", "scheduled", score=to_ms(fake_clock.now() + 0.1))
    forwarder.run_once()
    fake_clock.advance(0.3)  # the round ran long: its due time has passed before the sleep
    assert forwarder.next_wait() == 0.001  # never a negative or zero sleep


def test_forwarder_thread_moves_a_scheduled_task_at_its_time_not_at_its_interval(
        redis_client: redis.Redis, scripts: Scripts, q: QueueKeys, health: RedisHealth) -> None:
    from queuecore.core.clock import SystemClock

    clock = SystemClock()
    seed_task(redis_client, q, "due-soon", "scheduled", score=to_ms(clock.now() + 0.3))
    forwarder = Forwarder(scripts, clock, [q], 3600.0, health)  # the interval alone would wait an hour
    forwarder.start()
    try:
        wait_until(lambda: read_pending(redis_client, q) == ["due-soon"], 10, message="the task to be forwarded")
    finally:
        forwarder.shutdown()


def test_forwarder_told_of_a_task_due_before_its_next_round_moves_it_at_its_time(
        redis_client: redis.Redis, scripts: Scripts, q: QueueKeys, health: RedisHealth) -> None:
    from queuecore.core.clock import SystemClock

    clock = SystemClock()
    forwarder = Forwarder(scripts, clock, [q], 3600.0, health)  # the interval alone would wait an hour
    forwarder.start()
    try:
        wait_until(lambda: forwarder.rounds == 1, 10, message="the first round")  # it found nothing
        due = clock.now() + 0.3
        seed_task(redis_client, q, "told", "retry", score=to_ms(due))
        forwarder.note_due(due + 60)  # a later one changes nothing
        forwarder.note_due(due)
        wait_until(lambda: read_pending(redis_client, q) == ["told"], 10, message="the task to be forwarded")
        assert forwarder.rounds == 2  # one round, at the task's time: no polling until then
    finally:
        forwarder.shutdown()


def test_janitor_deletes_expired_tasks_and_old_counters(
        redis_client: redis.Redis, scripts: Scripts, fake_clock: FakeClock, q: QueueKeys, health: RedisHealth,
        broker: Broker) -> None:
    now = fake_clock.now()
    seed_task(redis_client, q, "expired", "completed", score=to_ms(now - 1))
    seed_task(redis_client, q, "kept", "completed", score=to_ms(now + 60))
    seed_task(redis_client, q, "ancient", "archived", score=to_ms(now - 3600))
    old_minute, new_minute = stats_minute(now - 4 * 3600), stats_minute(now)
    redis_client.hset(q.stats, mapping={f"processed:{old_minute}": 1, f"processed:{new_minute}": 2,
                                        f"processed:{stats_day(now)}": 3, "processed": 5})
    janitor = Janitor(scripts, broker, fake_clock, [q], 8.0, archive_max_age=600, max_archive_size=10_000,
                      health=health)
    assert janitor.run_once() == 2
    assert read_task(redis_client, q, "expired") == {} and read_task(redis_client, q, "ancient") == {}
    assert read_task(redis_client, q, "kept")["state"] == "completed"
    assert set(redis_client.hkeys(q.stats)) == {f"processed:{new_minute}", f"processed:{stats_day(now)}", "processed"}


def test_janitor_says_when_it_deletes_archived_tasks_beyond_the_archive_size(
        redis_client: redis.Redis, scripts: Scripts, fake_clock: FakeClock, q: QueueKeys, health: RedisHealth,
        broker: Broker, caplog: pytest.LogCaptureFixture) -> None:
    """An operator's "archive all" may archive more than the archive keeps: the janitor deletes the
    oldest beyond it, and said nothing (dashboard probe: 110,000 of 120,000 archived tasks gone)."""
    now = fake_clock.now()
    for i in range(450):  # more than one janitor batch (200) beyond the size
        seed_task(redis_client, q, f"a{i}", "archived", score=to_ms(now - 1000 + i))
    janitor = Janitor(scripts, broker, fake_clock, [q], 8.0, archive_max_age=3600, max_archive_size=100,
                      health=health)
    with caplog.at_level(logging.WARNING, logger="queuecore.worker"):
        assert janitor.run_once() == 350
    assert redis_client.zcard(q.archived) == 100 and read_task(redis_client, q, "a349") == {}
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        f"queue {q.queue}: deleted the 350 oldest archived task(s) beyond max_archive_size (100)"]


# -- Recoverer ------------------------------------------------------------------------------------

def test_recoverer_renews_its_own_leases_before_taking_back_expired_ones(
        redis_client: redis.Redis, scripts: Scripts, fake_clock: FakeClock, q: QueueKeys, health: RedisHealth) -> None:
    now = fake_clock.now()
    held = HeldTasks()
    held.add(held_attempt(redis_client, q, "mine", lease=1, expires=now - 5))  # expired during an outage
    held_attempt(redis_client, q, "dead", lease=1, expires=now - 5)  # its worker died
    renewer = renewer_for(scripts, fake_clock, held, q, Calls(), Calls())
    recoverer = Recoverer(scripts, fake_clock, [q], 10.0, 0.0, renewer, health)
    assert recoverer.run_once() == (1, 0, 0)
    assert read_pending(redis_client, q) == ["dead"]
    dead = read_task(redis_client, q, "dead")
    assert dead["state"] == "pending" and dead["retried"] == "1" and dead["error"] == "worker lost (lease expired)"
    assert read_zset(redis_client, q.active) == {"mine": to_ms(now + LEASE)}


def test_a_queue_that_cannot_be_reached_holds_up_no_other_queue(
        redis_client: redis.Redis, scripts: Scripts, fake_clock: FakeClock, connection: ConnectionConfig,
        health: RedisHealth) -> None:
    """One queue's calls failing (its master away, on a cluster; here its keys refused) stops neither
    the renewal of this process's leases in the other queues nor their recovery; the failing queue's
    own expired leases are not taken back in that round, and the error is reported."""
    broken, fine = connection.keys.queue("broken"), connection.keys.queue("fine")
    now = fake_clock.now()
    held = HeldTasks()
    held.add(held_attempt(redis_client, broken, "ours-broken", lease=1, expires=now + 1))
    held.add(held_attempt(redis_client, fine, "ours-fine", lease=1, expires=now - 5))  # lapsed in an outage
    held_attempt(redis_client, fine, "dead", lease=1, expires=now - 5)  # its worker died
    redis_client.delete(broken.active)
    redis_client.set(broken.active, "not a zset")  # every script of that queue is refused
    renewer = LeaseRenewer(scripts, fake_clock, LEASE, held, {broken.queue: broken, fine.queue: fine},
                           on_lost=Calls(), on_cancel=Calls())
    recoverer = Recoverer(scripts, fake_clock, [broken, fine], 10.0, 0.0, renewer, health)
    with pytest.raises(WrongKeyType):
        recoverer.run_once()
    assert renewer.unrenewed == {"broken"}
    assert read_zset(redis_client, fine.active) == {"ours-fine": to_ms(now + LEASE)}  # renewed, kept
    assert read_pending(redis_client, fine) == ["dead"]  # recovered
    assert read_task(redis_client, fine, "dead")["error"] == "worker lost (lease expired)"


# -- Subscriber -----------------------------------------------------------------------------------

def test_subscriber_passes_on_cancels_and_wake_ups(broker: Broker, redis_client: redis.Redis, q: QueueKeys,
                                                   connection: ConnectionConfig, health: RedisHealth) -> None:
    cancel, wake = Calls(reply=True), Calls()
    subscriber = Subscriber(broker, [q.cancel_channel], [q.wake_channel], on_cancel=cancel,
                            on_wake=wake, health=health)
    subscriber.start()
    try:
        wait_until(subscriber.subscribed.is_set, 10, message="the subscription")
        wait_until(lambda: wake.args, 10, message="the wake-up on subscribing")
        wakes = len(wake.args)
        redis_client.publish(q.cancel_channel, "default task-7")
        wait_until(lambda: cancel.args, 10, message="the cancel")
        assert cancel.args == [("default", "task-7")]
        redis_client.publish(q.wake_channel, "1")
        wait_until(lambda: len(wake.args) > wakes, 10, message="the wake-up")
    finally:
        subscriber.shutdown()


def test_a_subscription_whose_replies_are_out_of_step_subscribes_again_without_a_traceback(
        broker: Broker, redis_client: redis.Redis, q: QueueKeys, health: RedisHealth,
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CI run on a cluster saw the subscription read a CLIENT SETINFO error reply as a message during a
    slot migration, and the worker logged it as an unexpected error with its traceback. Here an error
    reply is put on a live subscription's connection by hand (a command whose reply nobody reads): the
    subscriber says so in one WARNING line, subscribes again and goes on passing messages on."""
    made: list[Any] = []
    real = broker.pubsub
    monkeypatch.setattr(broker, "pubsub", lambda: made.append(real()) or made[-1])
    cancel = Calls(reply=True)
    subscriber = Subscriber(broker, [q.cancel_channel], [q.wake_channel], on_cancel=cancel, on_wake=Calls(),
                            health=health)
    caplog.set_level(logging.WARNING, logger="queuecore")
    subscriber.start()
    try:
        wait_until(subscriber.subscribed.is_set, 10, message="the subscription")
        made[0].connection.send_command("CLIENT", "NOSUCHSUBCOMMAND")  # its error reply comes among the messages
        wait_until(lambda: len(made) == 2 and subscriber.subscribed.is_set(), 10, message="a new subscription")
        redis_client.publish(q.cancel_channel, "default task-8")
        wait_until(lambda: cancel.args, 10, message="the cancel, on the new subscription")
    finally:
        subscriber.shutdown()
    warned = [r for r in caplog.records if "read an error reply in place of a message" in r.getMessage()]
    assert len(warned) == 1 and warned[0].levelno == logging.WARNING
    assert not [r for r in caplog.records if r.name.startswith("queuecore") and r.exc_info]


def test_a_subscription_redis_refuses_is_one_error_line_then_quiet_until_it_works_again(
        private_redis, connection: ConnectionConfig, health: RedisHealth, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An ACL user without channel permissions: every SUBSCRIBE gets a NOPERM error reply, which the
    subscriber read as replies out of step: a WARNING every 0.1-0.2 s, forever, and never a word that no
    wake-up, push or cancel could reach the worker. Now: one WARNING, one ERROR, retries with backoff,
    and a line when the subscription works again."""
    admin = redis.Redis.from_url(private_redis.url, decode_responses=True)
    admin.execute_command("ACL", "SETUSER", "nochannels", "on", ">pw", "~*", "+@all", "resetchannels")
    user_url = f"redis://nochannels:pw@127.0.0.1:{private_redis.port}/0"
    user = redis.Redis.from_url(user_url, decode_responses=True)
    broker = Broker(user, connection.keys)
    made: list[Any] = []
    real = broker.pubsub
    monkeypatch.setattr(broker, "pubsub", lambda: made.append(real()) or made[-1])
    q = connection.keys.queue("default")
    cancel = Calls(reply=True)
    subscriber = Subscriber(broker, [q.cancel_channel], [q.wake_channel], on_cancel=cancel, on_wake=Calls(),
                            health=health)
    caplog.set_level(logging.WARNING, logger="queuecore")

    def lines(text: str) -> list[logging.LogRecord]:
        return [r for r in caplog.records if text in r.getMessage()]

    subscriber.start()
    try:
        wait_until(lambda: len(made) >= 5, 30, message="five tries to subscribe")
        assert [r.levelno for r in lines("in place of a message")] == [logging.WARNING]
        refused = lines("Redis refuses this worker's subscription")
        assert [r.levelno for r in refused] == [logging.ERROR] and "NoPermissionError" in refused[0].getMessage()
        admin.execute_command("ACL", "SETUSER", "nochannels", "allchannels")
        wait_until(lambda: lines("the subscription works again"), 30, message="the subscription to work again")
        admin.publish(q.cancel_channel, "default task-9")
        wait_until(lambda: cancel.args, 10, message="the cancel")
    finally:
        subscriber.shutdown()
        user.close()
        admin.close()
    assert len(lines("Redis refuses this worker's subscription")) == 1
    assert not [r for r in caplog.records if r.name.startswith("queuecore") and r.exc_info]


def test_subscriber_passes_on_when_a_scheduled_task_falls_due(broker: Broker, q: QueueKeys,
                                                              health: RedisHealth) -> None:
    wake, due = Calls(), Calls()
    subscriber = Subscriber(broker, [q.cancel_channel], [q.wake_channel], on_cancel=Calls(reply=True),
                            on_wake=wake, health=health, on_due=due)
    subscriber.handle(q.wake_channel, "due 1800000000500")
    assert due.args == [(1_800_000_000.5,)] and wake.args == []
    subscriber.handle(q.wake_channel, "due soon")  # not a time: taken as a plain wake-up
    subscriber.handle(q.wake_channel, "due " + "9" * 400)  # too large for a float: the same
    assert due.args == [(1_800_000_000.5,)] and wake.args == [(), ()]


def test_a_subscriber_that_met_redis_full_ends_that_spell_once_it_subscribes(
        redis_client: redis.Redis, q: QueueKeys, health: RedisHealth, caplog: pytest.LogCaptureFixture,
        broker: Broker) -> None:
    """Each component that Redis refused as full must say when it writes again, or the worker never
    logs "Redis has room again" (the spell ends when no refused component is left)."""
    health.report_error("subscriber", RedisFull("OOM command not allowed when used memory > 'maxmemory'"))
    assert health.full
    subscriber = Subscriber(broker, [q.cancel_channel], [q.wake_channel], on_cancel=Calls(reply=True),
                            on_wake=Calls(), health=health)
    caplog.set_level(logging.WARNING, logger="queuecore")
    subscriber.start()
    try:
        wait_until(subscriber.subscribed.is_set, 10, message="the subscription")
        wait_until(lambda: not health.full, 10, message="the spell of Redis being full to end")
        assert any("Redis has room again" in m for m in caplog.messages)
    finally:
        subscriber.shutdown()


# -- Acker, Recorder, Processor -------------------------------------------------------------------

def test_acker_acknowledges_a_batch_and_reports_each_task(
        redis_client: redis.Redis, scripts: Scripts, fake_clock: FakeClock, q: QueueKeys, health: RedisHealth) -> None:
    now = fake_clock.now()
    attempts = [held_attempt(redis_client, q, f"t{i}", lease=1, expires=now + 30) for i in range(3)]
    redis_client.hset(q.task("t2"), "lease", 9)  # lost meanwhile
    recorder = Recorder(WorkerConfig(), scripts, {q.queue: q}, fake_clock, TaskRegistry(), health)
    acknowledged = Calls()
    acker = Acker(scripts.dedicated(), fake_clock, {q.queue: q}, recorder.with_retries, acknowledged)
    acker.start()
    for attempt in attempts:
        acker.put(attempt, "")
    acker.stop()  # writes what is queued first
    assert sorted((r.id, accepted) for r, accepted in acknowledged.args) == [("t0", True), ("t1", True),
                                                                          ("t2", False)]
    assert read_task(redis_client, q, "t0") == {}  # no retention: a finished task leaves no trace
    assert read_task(redis_client, q, "t2")["state"] == "active"
    assert list(read_zset(redis_client, q.active)) == ["t2"]


class CountingAcker:
    """An acker over real scripts, with held attempts ``t0``... to acknowledge, whose ``done`` calls are
    counted (``sizes``: the number of tasks in each call)."""

    def __init__(self, redis_client: redis.Redis, scripts: Scripts, clock: FakeClock, q: QueueKeys,
                 health: RedisHealth, tasks: int, **linger: float) -> None:
        self.attempts = [held_attempt(redis_client, q, f"t{i}", lease=1, expires=clock.now() + 30)
                         for i in range(tasks)]
        recorder = Recorder(WorkerConfig(), scripts, {q.queue: q}, clock, TaskRegistry(), health)
        dedicated = scripts.dedicated()
        real = dedicated.done_many
        self.sizes: list[int] = []

        def done_many(queue_keys: QueueKeys, items: list, **kwargs: object) -> list[bool]:  # type: ignore[type-arg]
            self.sizes.append(len(items))
            return real(queue_keys, items, **kwargs)  # type: ignore[arg-type]

        dedicated.done_many = done_many  # type: ignore[method-assign]
        self.acknowledged = Calls()
        self.acker = Acker(dedicated, clock, {q.queue: q}, recorder.with_retries, self.acknowledged,
                           **linger)  # type: ignore[arg-type]

    def put(self, index: int, result: str = "") -> None:
        self.acker.put(self.attempts[index], result)

    def written(self) -> int:
        return len(self.acknowledged.args)


def test_a_busy_acker_lingers_to_write_acknowledgements_together(
        redis_client: redis.Redis, scripts: Scripts, fake_clock: FakeClock, q: QueueKeys, health: RedisHealth) -> None:
    """Right after a write (busy), the acker waits for a fuller batch: five successes in one call. The
    linger here is 60 s, so a test that passes cannot have waited it out; stop() cuts a linger short."""
    counting = CountingAcker(redis_client, scripts, fake_clock, q, health, 7, linger=60.0, linger_after=60.0,
                             linger_batch=5)
    acker = counting.acker
    acker.start()
    try:
        counting.put(0)  # nothing written before: no linger
        wait_until(lambda: counting.written() == 1, 10, message="the first acknowledgement, at once")
        counting.put(1)
        wait_until(lambda: acker._lingering, 10, message="the acker to linger for more")
        assert counting.sizes == [1]  # lingering: the second is not written yet
        for index in range(2, 6):
            counting.put(index)
        wait_until(lambda: counting.written() == 6, 10, message="a batch of five, as soon as it is full")
        assert counting.sizes == [1, 5]
        counting.put(6)  # lingers for four more that never come ...
        wait_until(lambda: acker._lingering, 10, message="the acker to linger again")
    finally:
        stopping = threading.Thread(target=acker.stop)
        stopping.start()
        stopping.join(10)  # ... until stop() writes it at once
    assert not stopping.is_alive() and counting.sizes == [1, 5, 1]
    assert counting.written() == 7 and all(accepted for _, accepted in counting.acknowledged.args)
    assert read_zset(redis_client, q.active) == {}


def test_an_acker_batch_ends_with_the_result_that_brings_it_to_4_mb(
        redis_client: redis.Redis, scripts: Scripts, fake_clock: FakeClock, q: QueueKeys, health: RedisHealth) -> None:
    """Redis runs a call whole, and a result may be up to 256 MiB: 180 results of 500 KB in one call held
    it 0.19 s. Twelve of 500 KB queued together are written nine, then three."""
    counting = CountingAcker(redis_client, scripts, fake_clock, q, health, 12)
    for index in range(12):
        counting.put(index, '"' + "x" * 500_000 + '"')
    counting.acker.start()
    counting.acker.stop()
    assert counting.sizes == [9, 3]
    assert counting.written() == 12 and all(accepted for _, accepted in counting.acknowledged.args)


def test_an_acker_after_a_quiet_spell_writes_at_once(
        redis_client: redis.Redis, scripts: Scripts, fake_clock: FakeClock, q: QueueKeys, health: RedisHealth) -> None:
    """When the last write is older than ``linger_after``, one success is written alone, without a linger
    (60 s here: a test that passes did not wait for it)."""
    counting = CountingAcker(redis_client, scripts, fake_clock, q, health, 3, linger=60.0, linger_after=0.0,
                             linger_batch=5)
    counting.acker.start()
    try:
        for index in range(3):
            counting.put(index)
            wait_until(lambda n=index + 1: counting.written() == n, 10, message=f"acknowledgement {index + 1}, at once")
        assert counting.sizes == [1, 1, 1]
    finally:
        counting.acker.stop()


def test_processor_runs_a_task_without_a_worker(redis_client: redis.Redis, scripts: Scripts, q: QueueKeys,
                                                health: RedisHealth) -> None:
    from queuecore.core.clock import SystemClock

    registry = TaskRegistry()
    ran = threading.Event()

    @task(name="test.task", registry=registry)
    def handler() -> None:
        ran.set()

    clock = SystemClock()
    seed_task(redis_client, q, "one", "pending", msg=make_msg("one", q.queue, max_retry=0))
    held = HeldTasks()
    processor = Processor(WorkerConfig(concurrency=2, fetch_poll_interval=0.05), scripts, {q.queue: q}, clock,
                          registry, held, health)
    processor.start()
    try:
        assert ran.wait(10)
        wait_until(lambda: read_task(redis_client, q, "one") == {}, 10, message="the acknowledgement")
        assert read_zset(redis_client, q.active) == {} and read_pending(redis_client, q) == []
        wait_until(lambda: len(held) == 0, 10, message="the attempt to be released")
    finally:
        assert processor.shutdown(1.0) == 0


def test_runner_runs_an_attempt_inside_the_middleware_and_hands_on_its_outcome(
        redis_client: redis.Redis, scripts: Scripts, fake_clock: FakeClock, q: QueueKeys) -> None:
    registry = TaskRegistry()
    seen: list[str] = []

    @task(name="test.add", registry=registry)
    def add(a: int, b: int) -> int:
        seen.append("handler")
        if a < 0:
            raise ValueError("negative")
        return a + b

    def outer(ctx: TaskContext, call_next):  # type: ignore[no-untyped-def]
        seen.append(f"middleware {ctx.id}")
        return call_next()

    finalized, freed = Calls(reply=True), Calls()
    loop = AsyncLoop()
    runner = Runner(60.0, [outer], fake_clock, LimitGate(scripts, scripts.keys, {q.queue: q}, fake_clock, 30.0, 5.0),
                    loop, None, finalized, freed)
    handler = registry.get("test.add")
    assert handler is not None

    def attempt(task_id: str, payload: dict[str, object]) -> Running:
        a = held_attempt(redis_client, q, task_id, lease=1, expires=fake_clock.now() + 30)
        a.message = TaskMessage(id=task_id, type="test.add", payload=payload, queue=q.queue, max_retry=3)
        a.ctx.payload = payload
        return a

    ok, failing, mismatched = attempt("ok", {"a": 1, "b": 2}), attempt("bad", {"a": -1, "b": 0}), attempt("x", {"c": 1})
    for a in (ok, failing, mismatched):
        runner.run_sync(a, handler)
    outcomes = {r.id: o for r, o in finalized.args}
    assert outcomes["ok"].kind == "success" and outcomes["ok"].result == 3
    assert outcomes["bad"].kind == "failure" and str(outcomes["bad"].error) == "negative"
    assert outcomes["x"].kind == "skip_retry"  # a payload that does not fit: no retry, no middleware
    assert seen == ["middleware ok", "handler", "middleware bad", "handler"]
    assert [r.id for (r,) in freed.args] == ["ok", "bad", "x"]  # each run slot freed once
    assert ok.begun and ok.deadline == ok.started + 60.0  # the default timeout counts from the start


# -- HandlerPool, RedisHealth ---------------------------------------------------------------------

def test_daemon_executor_returns_results_and_errors_on_daemon_threads() -> None:
    executor = DaemonExecutor("test-daemon", 2)
    try:
        threads = [executor.submit(lambda: threading.current_thread()).result(10) for _ in range(3)]
        assert all(t.daemon and t.name.startswith("test-daemon") for t in threads)
        with pytest.raises(ZeroDivisionError):
            executor.submit(lambda: 1 / 0).result(10)
        assert executor.submit(max, 3, 4).result(10) == 4
    finally:
        executor.shutdown()
    with pytest.raises(RuntimeError, match="after shutdown"):
        executor.submit(max, 1, 2)


def test_async_loop_takes_a_burst_of_handed_over_work_in_one_wake_up() -> None:
    """Work started from other threads while the loop is busy is created together: one
    ``call_soon_threadsafe`` (one write to the loop's wake-up pipe) for the burst, not one per task."""
    loop = AsyncLoop()
    event_loop = loop._ensure()
    busy, ran = threading.Event(), []
    event_loop.call_soon_threadsafe(busy.wait, 10)  # the loop is held up, as by a slow callback
    wake_ups = []
    real = event_loop.call_soon_threadsafe

    def counting(callback, *args):  # type: ignore[no-untyped-def]
        wake_ups.append(callback)
        return real(callback, *args)

    event_loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
    done = threading.Event()

    async def work(n: int) -> None:
        ran.append(n)
        if len(ran) == 50:
            done.set()

    kept: list[object] = []
    try:
        for n in range(50):
            loop.start(lambda n=n: work(n), kept.append)
        busy.set()
        assert done.wait(10)
        assert sorted(ran) == list(range(50)) and len(kept) == 50  # every piece of work ran, each task kept
        assert len(wake_ups) == 1
        loop.start(lambda: work(50), kept.append)  # the loop took the burst: the next start wakes it again
        wait_until(lambda: 50 in ran, 10, message="the next piece of work")
        assert len(wake_ups) == 2
    finally:
        busy.set()
        loop.shutdown()


def test_handler_pool_runs_at_most_size_threads() -> None:
    release = threading.Event()
    started: list[int] = []
    lock = threading.Lock()

    def work() -> None:
        with lock:
            started.append(threading.get_ident())
        release.wait(10)

    pool = HandlerPool("test-pool", 2)
    for _ in range(3):
        pool.submit(work)
    wait_until(lambda: len(started) == 2, 10, message="two handlers running")
    assert pool.threads == 2 and pool.queued == 1
    release.set()
    wait_until(lambda: len(started) == 3, 10, message="the third handler")
    pool.shutdown()
    wait_until(lambda: pool.threads == 0, 10, message="the pool's threads to end")


def test_redis_health_logs_an_outage_once_and_its_end(caplog: pytest.LogCaptureFixture) -> None:
    health = RedisHealth()
    caplog.set_level(logging.INFO, logger="queuecore.worker")
    for where in ("fetch", "heartbeater", "ack"):
        health.report_error(where, redis.ConnectionError("refused"))
    assert health.down
    health.note_ok()
    health.note_ok()
    messages = [r.getMessage() for r in caplog.records]
    assert len([m for m in messages if "unreachable" in m]) == 1 and "fetch" in messages[0]
    assert len([m for m in messages if "reachable again" in m]) == 1 and not health.down


def test_redis_health_logs_redis_full_once_until_every_refused_component_writes_again(
        caplog: pytest.LogCaptureFixture) -> None:
    health = RedisHealth()
    caplog.set_level(logging.INFO, logger="queuecore.worker")
    full = redis.ResponseError("OOM command not allowed when used memory > 'maxmemory'.")

    def lines(word: str) -> int:
        return len([r for r in caplog.records if word in r.getMessage()])

    health.report_error("startup", full, retried=False)  # one-shot: cannot end the spell itself
    health.report_error("fetch", full)
    health.report_error("repair", RedisFull("Redis is full (maxmemory reached): ..."))
    assert health.full and not health.down and lines("Redis is full") == 1
    assert not [r for r in caplog.records if r.exc_info]
    health.note_ok("heartbeater")  # writes that work at maxmemory prove nothing
    health.note_ok("fetch")
    assert health.full and lines("room again") == 0
    health.note_ok("repair")
    assert not health.full and lines("room again") == 1
    health.note_ok("repair")
    assert lines("room again") == 1


def test_redis_health_logs_other_errors_with_their_traceback(caplog: pytest.LogCaptureFixture) -> None:
    health = RedisHealth()
    health.report_error("janitor", ValueError("odd reply"))
    assert not health.down
    [record] = caplog.records
    assert record.levelno == logging.ERROR and record.exc_info is not None and "odd reply" in record.getMessage()


def test_a_component_reading_through_the_inspector_logs_an_outage_once_without_a_traceback(
        key_prefix, caplog: pytest.LogCaptureFixture) -> None:
    """The bulk-job runner reads through the Inspector, which raises ``RedisUnavailable`` when Redis
    is away: that is an outage (one line for all components, then quiet), not an error whose
    traceback is logged every round."""
    caplog.set_level(logging.INFO, logger="queuecore.worker")
    health = RedisHealth()
    with Inspector(redis_url="redis://127.0.0.1:1/0", key_prefix=key_prefix) as dead:
        runner = BulkJobRunner(dead, health, interval=0.01)
        runner.start()
        try:
            wait_until(lambda: runner.rounds >= 3, 10, message="three rounds of the bulk-job runner")
        finally:
            runner.shutdown()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.getMessage().split(" (")[0] for r in errors] == ["Redis is unreachable"]
    assert "bulk-jobs" in errors[0].getMessage() and not [r for r in errors if r.exc_info]
    assert health.down and runner.last_round_failed


def test_an_outage_is_timed_from_the_call_that_met_it(silent_redis, redis_client: redis.Redis, health: RedisHealth,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """A review: an outage was timed from when its error came back, so one met as a socket timeout was
    logged a socket timeout short ("reachable again after 0.0s" for a 0.6 s hang)."""
    from queuecore.core.component import Periodic

    silent = redis.Redis.from_url(silent_redis.url, socket_timeout=0.6, socket_connect_timeout=0.6)

    class Pinger(Periodic):
        name = "pinger"

        def run_once(self) -> None:
            (silent if self.rounds == 0 else redis_client).ping()  # the first round hangs, then Redis answers

        def next_wait(self) -> float:
            return 0.01

    caplog.set_level(logging.WARNING, logger="queuecore")
    pinger = Pinger(0.01, health)
    pinger.start()
    try:
        wait_until(lambda: "reachable again" in caplog.text, 10, message="the outage's end")
    finally:
        pinger.shutdown()
        silent.close()
    (line,) = [r.getMessage() for r in caplog.records if "reachable again" in r.getMessage()]
    assert float(line.rsplit("after ", 1)[1].rstrip("s")) >= 0.6, line


def test_a_call_in_flight_when_redis_came_back_is_not_a_new_outage(health: RedisHealth,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """A review: a call that began during an outage and failed just after another component found Redis
    again logged a second outage, ended a moment later as "reachable again after 0.0s"."""
    import time

    caplog.set_level(logging.WARNING, logger="queuecore")
    slow_call_began = time.monotonic()
    health.report_error("fetch", redis.ConnectionError("refused"), began=time.monotonic())
    health.note_ok("heartbeat")  # Redis is back
    health.report_error("pinger", redis.TimeoutError("timed out"), began=slow_call_began)  # in flight till now
    assert not health.down
    health.note_ok("pinger")
    assert [r.getMessage().split(" (")[0].split(" after")[0] for r in caplog.records] == [
        "Redis is unreachable", "Redis is reachable again"]
    health.report_error("fetch", redis.ConnectionError("refused"), began=time.monotonic())  # a new one is seen
    assert health.down


def test_an_acknowledgement_outage_is_timed_from_the_write_that_met_it(
        silent_redis, redis_client: redis.Redis, scripts: Scripts, fake_clock: FakeClock, q: QueueKeys,
        health: RedisHealth, caplog: pytest.LogCaptureFixture) -> None:
    """The acknowledger's outage was timed from when its write's error came back: a write that hung for
    a socket timeout (0.6 s) and then found Redis again was logged "reachable again after 0.0s"."""
    silent = redis.Redis.from_url(silent_redis.url, socket_timeout=0.6, socket_connect_timeout=0.6)
    recorder = Recorder(WorkerConfig(), scripts, {q.queue: q}, fake_clock, TaskRegistry(), health)
    calls: list[int] = []

    def write() -> bool:
        calls.append(1)
        return bool((silent if len(calls) == 1 else redis_client).ping())  # the first hangs, then Redis answers

    caplog.set_level(logging.WARNING, logger="queuecore")
    try:
        assert recorder.with_retries("a test write", write) == (True, True)
    finally:
        silent.close()
    (line,) = [r.getMessage() for r in caplog.records if "reachable again" in r.getMessage()]
    assert float(line.rsplit("after ", 1)[1].rstrip("s")) >= 0.6, line


def test_a_failed_unlisting_is_logged_in_one_short_line(scripts: Scripts, q: QueueKeys, health: RedisHealth,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    """A review: "could not take this worker off queue X's idle list" logged redis-py's whole error, the
    sentinels' client reprs included (about 1,100 characters); it now gives the reason in one line."""
    from queuecore.core.clock import SystemClock

    processor = Processor(WorkerConfig(), scripts, {q.queue: q}, SystemClock(), TaskRegistry(), HeldTasks(), health,
                          worker_id="w-unlist")
    reprs = ", ".join(f"Sentinel<Redis<ConnectionPool<Connection<host=10.0.0.{i},port=26379,db=0>>>> - "
                      "ConnectionError: Error 111 connecting" for i in range(8))
    no_master = redis.sentinel.MasterNotFoundError(f"No master found for 'mymaster' : {{{reprs}}}")
    assert len(str(no_master)) > 800

    def unlist(*args: object) -> None:
        raise no_master

    processor._fetch_scripts.unlist = unlist  # type: ignore[method-assign]
    caplog.set_level(logging.INFO, logger="queuecore")
    processor._unlist()
    (line,) = [r.getMessage() for r in caplog.records if "idle list" in r.getMessage()]
    assert len(line) < 300 and "no sentinel named one (ConnectionError" in line, line
