"""Issue 11, items 2-4: every enqueue option has a finite documented range, a batch stores every
task or none when any input is invalid, odd payloads and dates raise the library's errors, and
one task's data never changes another task's acknowledgement."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis

from queuecore import (
    BatchEnqueueError,
    Client,
    ConfigurationError,
    ConnectionConfig,
    FakeClock,
    InvalidOption,
    InvalidPayload,
    TaskRegistry,
    TaskRequest,
    WorkerConfig,
    task,
)
from queuecore.core.acker import Acker
from queuecore.core.clock import to_ms
from queuecore.core.context import TaskContext
from queuecore.core.health import RedisHealth
from queuecore.core.keys import QueueKeys
from queuecore.core.limits import MAX_DURATION, MAX_PAYLOAD_DEPTH, MAX_RETRY_LIMIT
from queuecore.core.message import TaskMessage, encode_payload, nesting
from queuecore.core.recorder import Recorder
from queuecore.core.running import Running
from queuecore.core.scripts import EnqueueItem, Scripts
from tests.helpers.state import make_msg, read_task, read_zset, seed_task

YEAR = 365 * 24 * 3600.0


@pytest.fixture
def fc_client(connection: ConnectionConfig, registry: TaskRegistry, fake_clock: FakeClock) -> Client:
    c = Client(connection=connection, registry=registry, clock=fake_clock)
    yield c
    c.close()


def all_keys(r: redis.Redis, prefix: str) -> set[str]:
    return set(r.scan_iter(match=f"{prefix}:*", count=1000))


def nested(depth: int) -> dict[str, Any]:
    """A payload whose objects and arrays nest ``depth`` levels, the payload object included."""
    value: Any = 1
    for level in range(depth - 1):
        value = [value] if level % 2 else {"k": value}
    return {"v": value}


# -- item 2: every numeric option is bounded at enqueue ------------------------------------------

NOW = 1_800_000_000.0  # the fake clock's start
OUT_OF_RANGE = [
    ("retention", 1e306), ("retention", MAX_DURATION + 1), ("retention", 11 * YEAR),
    ("unique_for", 1e20), ("unique_for", MAX_DURATION + 1), ("unique_for", 0.0001),
    ("timeout", 1e10), ("timeout", MAX_DURATION + 1),
    ("process_in", 1e10), ("process_in", -1e10), ("process_in", timedelta(days=3651)),
    ("process_at", datetime.fromtimestamp(NOW + 11 * YEAR, tz=UTC)), ("process_at", NOW + 11 * YEAR),
    ("process_at", -1.0), ("deadline", datetime.fromtimestamp(NOW + 11 * YEAR, tz=UTC)), ("deadline", -1.0),
    ("max_retry", 10**30), ("max_retry", 2**63), ("max_retry", MAX_RETRY_LIMIT + 1), ("max_retry", -10**30),
]


@pytest.mark.parametrize(("option", "value"), OUT_OF_RANGE)
def test_numeric_options_out_of_range_are_refused_naming_the_option(fc_client: Client, redis_client, key_prefix,
                                                                    option: str, value: Any) -> None:
    with pytest.raises(InvalidOption, match=f"{option} is out of range") as caught:
        fc_client.enqueue("t", **{option: value})
    assert caught.value.field == option
    assert isinstance(caught.value, ConfigurationError)  # InvalidOption is a ConfigurationError
    assert all_keys(redis_client, key_prefix) == set()


@pytest.mark.parametrize(("option", "value"), [
    ("retention", MAX_DURATION), ("unique_for", MAX_DURATION), ("unique_for", 0.001), ("timeout", MAX_DURATION),
    ("process_in", MAX_DURATION), ("process_in", -MAX_DURATION), ("max_retry", MAX_RETRY_LIMIT),
    ("max_retry", -MAX_RETRY_LIMIT), ("process_at", datetime.fromtimestamp(NOW + MAX_DURATION, tz=UTC)),
    ("deadline", NOW + MAX_DURATION), ("process_at", 0.0), ("deadline", datetime(1970, 1, 1, tzinfo=UTC)),
])
def test_the_ends_of_every_range_are_accepted(fc_client: Client, redis_client, connection, option: str,
                                              value: Any) -> None:
    info = fc_client.enqueue("t", **{option: value})
    q = connection.keys.queue("default")
    message = TaskMessage.decode(info.id, "default", redis_client.hget(q.task(info.id), "msg"))
    assert message.id == info.id


# -- item 3: a batch stores every task or none -----------------------------------------------------


@pytest.mark.parametrize("bad", [
    TaskRequest("t", {"n": 1}, {"unique_for": 1e20}),
    TaskRequest("t", {"n": 1}, {"retention": 1e306}),
    TaskRequest("t", {"n": 1}, {"max_retry": 10**30}),
    TaskRequest("t", {"n": 1}, {"process_in": 1e12}),
    TaskRequest("t", {"s": "\ud800"}),
    TaskRequest("t", {"n": 1}, {"process_at": datetime(1, 1, 1)}),  # naive on purpose
])
def test_a_batch_with_an_invalid_item_raises_the_input_error_and_stores_nothing(client: Client, redis_client,
                                                                               key_prefix, bad: TaskRequest) -> None:
    with pytest.raises((InvalidOption, InvalidPayload)):
        client.enqueue_many([TaskRequest("t", {"n": 0}), bad, TaskRequest("t", {"n": 2}, {"queue": "other"})])
    assert all_keys(redis_client, key_prefix) == set()


def test_a_single_enqueue_with_an_unstorable_ttl_raises_the_input_error_not_broker_error(
        client: Client, redis_client, key_prefix) -> None:
    with pytest.raises(InvalidOption, match="unique_for is out of range"):
        client.enqueue("t", {"n": 1}, unique_for=1e20)
    assert all_keys(redis_client, key_prefix) == set()


def test_the_enqueue_script_checks_every_item_before_its_first_write(scripts: Scripts, connection,
                                                                     redis_client, key_prefix) -> None:
    """Behind the client's checks, the script refuses a malformed batch as a whole."""
    q = connection.keys.queue("default")
    ok = EnqueueItem("ok1", make_msg("ok1", "default"), check_id=False)
    unique = q.unique("t", "d" * 32)
    for bad in (EnqueueItem("bad", make_msg("bad", "default"), 0, unique, 10**23),  # TTL Redis cannot store
                EnqueueItem("bad", make_msg("bad", "default"), -5),  # a negative due time
                EnqueueItem("bad", make_msg("bad", "default"), 10**20),  # a due time beyond any date
                EnqueueItem("bad", "", 0)):  # no message
        with pytest.raises(redis.ResponseError, match="QCINVALID"):
            scripts.enqueue_many(q, [ok, bad, EnqueueItem("ok2", make_msg("ok2", "default"))], now_ms=to_ms(NOW))
        assert all_keys(redis_client, key_prefix) == set(), bad


def test_the_client_reports_a_script_refusal_as_invalid_option(client: Client, redis_client, key_prefix,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Were an item to slip past the client's own checks, the script's refusal is still an input error."""
    monkeypatch.setattr("queuecore.core.client.to_ms", lambda seconds: 10**23)  # every time out of range
    with pytest.raises(InvalidOption, match="refused by the enqueue script"):
        client.enqueue("t", {"n": 1}, process_in=60)
    with pytest.raises(InvalidOption, match="refused by the enqueue script"):
        client.enqueue_many([("t", {"n": 1}), ("t", {"n": 2})], process_in=60)
    assert not [k for k in all_keys(redis_client, key_prefix) if ":{default}:" in k]


def test_runtime_conflicts_in_a_batch_are_reported_per_task_and_the_rest_stored(client: Client) -> None:
    """The documented exception to all-or-nothing: duplicates found by Redis, not invalid input."""
    client.enqueue("t", {"first": True}, task_id="taken")
    with pytest.raises(BatchEnqueueError) as caught:
        client.enqueue_many([TaskRequest("t", {"n": 0}), TaskRequest("t", {"n": 1}, {"task_id": "taken"})])
    assert sorted(caught.value.errors) == [1] and [i.payload for i in caught.value.enqueued] == [{"n": 0}]


# -- item 4: the library's errors, never a raw Python one -----------------------------------------


@pytest.mark.parametrize("payload", [{"s": "\ud800"}, {"\udfff": 1}, {"a": ["ok", {"b": "x\udc80y"}]}])
def test_a_lone_surrogate_in_a_payload_is_an_invalid_payload(client: Client, redis_client, key_prefix,
                                                             payload: dict[str, Any]) -> None:
    with pytest.raises(InvalidPayload, match="surrogate"):
        client.enqueue("t", payload)
    with pytest.raises(InvalidPayload, match="surrogate"):
        client.check("t", payload)
    assert all_keys(redis_client, key_prefix) == set()


@pytest.mark.parametrize("payload", [{"m": {1: "int", "1": "str"}}, {"m": [{None: 1}]}, {"a": {"b": {2.5: "f"}}},
                                     {"a": {"b": {True: "t"}}}])
def test_a_nested_key_that_is_not_a_string_is_an_invalid_payload(client: Client, redis_client, key_prefix,
                                                                  payload: dict[str, Any]) -> None:
    """JSON turns such a key into text (and drops one of 1 and "1"): what a handler got was not what
    was enqueued, and the handle disagreed with the stored task."""
    with pytest.raises(InvalidPayload, match=r"keys must be strings, got .* in a nested object"):
        client.enqueue("t", payload)
    assert all_keys(redis_client, key_prefix) == set()
    assert encode_payload({"m": {"1": "a", "x": [{"y": "{"}]}, "s": "{{"})  # text keys and braces in text pass


@pytest.mark.parametrize("wide", [2**64, -(2**63) - 1, 123456789012345678901234567890])
def test_an_integer_beyond_64_bits_is_an_invalid_payload(client: Client, redis_client, key_prefix,
                                                         wide: int) -> None:
    """orjson (the fast extra) reads such an integer back as an inexact float: refused where it enters,
    the same with or without orjson installed."""
    for payload in ({"n": wide}, {"a": [1, {"b": wide}]}):
        with pytest.raises(InvalidPayload, match=f"the integer {wide}, beyond 64 bits"):
            client.enqueue("t", payload)
    assert all_keys(redis_client, key_prefix) == set()


def test_the_ends_of_the_64_bit_range_and_long_digit_strings_run_through(client: Client, redis_client,
                                                                        connection) -> None:
    payload = {"max": 2**64 - 1, "min": -(2**63), "digits": "1" * 40, "big": 1e300}
    info = client.enqueue("t", payload)
    q = connection.keys.queue("default")
    assert TaskMessage.decode(info.id, "default", redis_client.hget(q.task(info.id), "msg")).payload == payload


@pytest.mark.parametrize("depth", [MAX_PAYLOAD_DEPTH + 1, 1000, 5000])
def test_a_payload_nested_too_deeply_is_an_invalid_payload(client: Client, redis_client, key_prefix,
                                                           depth: int) -> None:
    payload = nested(depth)
    assert nesting(payload) == depth
    with pytest.raises(InvalidPayload, match=f"nested more than {MAX_PAYLOAD_DEPTH} levels"):
        client.enqueue("t", payload)
    assert all_keys(redis_client, key_prefix) == set()


def test_a_payload_nested_to_the_limit_runs_through(client: Client, redis_client, connection) -> None:
    payload = nested(MAX_PAYLOAD_DEPTH)
    assert nesting(payload) == MAX_PAYLOAD_DEPTH
    info = client.enqueue("t", payload)
    q = connection.keys.queue("default")
    assert TaskMessage.decode(info.id, "default", redis_client.hget(q.task(info.id), "msg")).payload == payload
    # many containers side by side are not depth
    assert encode_payload({"rows": [{"a": [1]} for _ in range(500)]})


@pytest.mark.parametrize("option", ["process_at", "deadline"])
@pytest.mark.parametrize("when", [datetime(1, 1, 1), datetime.max, datetime(1, 1, 1, tzinfo=UTC),  # naive ones first
                                  datetime(1969, 12, 31, tzinfo=UTC), datetime.max.replace(tzinfo=UTC)])
def test_dates_no_task_can_have_are_refused(client: Client, redis_client, key_prefix, option: str,
                                            when: datetime) -> None:
    with pytest.raises(InvalidOption, match=f"{option} is out of range"):
        client.enqueue("t", {}, **{option: when})
    assert all_keys(redis_client, key_prefix) == set()


def test_a_stored_message_with_non_finite_numbers_does_not_decode() -> None:
    from queuecore.core.errors import TaskDecodeError

    for field in ("timeout", "deadline", "retention", "enqueued_at"):
        with pytest.raises(TaskDecodeError):
            TaskMessage.decode("x", "q", f'{{"type":"t","payload":{{}},"{field}":1e400}}')


# -- item 2: one task's data never changes another task's acknowledgement ----------------------------


def held(r: redis.Redis, q: QueueKeys, task_id: str, now: float, *, msg: str | None = None,
         **fields: object) -> Running:
    msg = msg or make_msg(task_id, q.queue)
    seed_task(r, q, task_id, "active", score=to_ms(now + 30), msg=msg, lease=1, **fields)
    message = TaskMessage.decode(task_id, q.queue, msg)
    ctx = TaskContext(id=task_id, queue=q.queue, type=message.type, retried=0, max_retry=message.max_retry,
                      payload=message.payload)
    return Running(id=task_id, queue=q.queue, lease=1, retried=0, message=message, ctx=ctx, started=0.0,
                   deadline=None)


def run_acker(scripts: Scripts, clock: FakeClock, q: QueueKeys, batch: list[Running]) -> dict[str, bool | None]:
    recorder = Recorder(WorkerConfig(), scripts, {q.queue: q}, clock, TaskRegistry(), RedisHealth())
    acknowledged: dict[str, bool | None] = {}
    acker = Acker(scripts.dedicated(), clock, {q.queue: q}, recorder.with_retries,
                  lambda running, accepted: acknowledged.__setitem__(running.id, accepted))
    acker.write([(running, '"r"') for running in batch])  # one batch, as the acker's thread sends it
    return acknowledged


def test_an_absurd_retention_in_a_stored_message_costs_no_task_its_acknowledgement(
        redis_client, scripts: Scripts, fake_clock: FakeClock, connection) -> None:
    """A message stored by an older client with retention=1e306 made the acker raise OverflowError
    and drop the whole batch: every task in it ran again."""
    q = connection.keys.queue("default")
    now = fake_clock.now()
    batch = [held(redis_client, q, f"ok{i}", now, msg=make_msg(f"ok{i}", "default", retention=60.0))
             for i in range(6)]
    batch.insert(3, held(redis_client, q, "absurd", now, msg=make_msg("absurd", "default", retention=1e306)))
    assert run_acker(scripts, fake_clock, q, batch) == {r.id: True for r in batch}
    completed = read_zset(redis_client, q.completed)
    assert completed == {**{f"ok{i}": to_ms(now) + 60_000 for i in range(6)},
                         "absurd": to_ms(now) + to_ms(MAX_DURATION)}  # kept for the longest retention
    assert read_zset(redis_client, q.active) == {}


def test_a_corrupt_key_of_one_task_costs_no_other_task_its_acknowledgement(
        redis_client, scripts: Scripts, fake_clock: FakeClock, connection) -> None:
    """The done script refuses a whole call when one task's lock has the wrong type; the acker then
    acknowledges the others one by one."""
    q = connection.keys.queue("default")
    now = fake_clock.now()
    lock = q.unique("t", "e" * 32)
    batch = [held(redis_client, q, f"ok{i}", now) for i in range(6)]
    batch.insert(2, held(redis_client, q, "corrupt", now, msg=make_msg("corrupt", "default", unique_key=lock)))
    redis_client.hset(lock, "not", "a string")  # the lock key holds a hash: corrupt data
    acknowledged = run_acker(scripts, fake_clock, q, batch)
    assert acknowledged == {**{f"ok{i}": True for i in range(6)}, "corrupt": None}
    assert read_zset(redis_client, q.active) == {"corrupt": to_ms(now + 30)}  # its lease will bring it back
    assert all(read_task(redis_client, q, f"ok{i}") == {} for i in range(6))


def test_a_corrupt_task_hash_costs_no_other_task_its_lease_renewal(redis_client, scripts: Scripts,
                                                                    fake_clock: FakeClock, connection,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    """extend_lease refuses a whole call when one held task's hash has the wrong type: without
    isolation every other lease of the queue (and of the queues after it) ran out, and their tasks
    ran twice."""
    from queuecore.core.leases import LeaseRenewer
    from queuecore.core.running import HeldTasks

    now = fake_clock.now()
    q, other = connection.keys.queue("default"), connection.keys.queue("other")
    attempts = HeldTasks()
    for task_q, task_id in ((q, "a1"), (q, "bad"), (q, "a3"), (other, "b1")):
        attempts.add(held(redis_client, task_q, task_id, now))
    redis_client.delete(q.task("bad"))
    redis_client.set(q.task("bad"), "a string where a hash belongs")
    lost: list[tuple[str, int]] = []
    renewer = LeaseRenewer(scripts, fake_clock, 600.0, attempts, {"default": q, "other": other},
                           on_lost=lambda _q, task_id, lease: lost.append((task_id, lease)), on_cancel=lambda *_: None)
    with caplog.at_level("ERROR", logger="queuecore.worker"):
        renewer.renew()
    assert [r.getMessage() for r in caplog.records if "cannot renew" in r.getMessage()] == [
        f"cannot renew the lease of task bad in queue default: corrupt data in Redis, nothing was written: "
        f"{q.task('bad')} holds a string, expected a hash"]
    assert read_zset(redis_client, q.active) == {"a1": to_ms(now + 600), "bad": to_ms(now + 30),
                                                 "a3": to_ms(now + 600)}
    assert read_zset(redis_client, other.active) == {"b1": to_ms(now + 600)}
    assert lost == []


@pytest.mark.parametrize(("options", "refusal"), [
    ({"timeout": -5}, "timeout is out of range"),
    ({"max_retry": "x"}, "max_retry must be a whole number"),
    ({"queue": "a/b"}, "invalid queue name 'a/b'"),
    ({"priority": 1000}, "priority is out of range"),
    ({"retention": -1}, "retention is out of range"),
    ({"unique_for": 0}, "unique_for is out of range"),
    ({"retry_delay": "not a callable"}, "retry_delay must be a callable"),
    ({"name": ""}, "invalid task type ''"),
])
def test_task_defaults_are_checked_where_the_type_is_defined(options: dict[str, Any], refusal: str) -> None:
    """Each of these decorated without a word, and then every enqueue of the type failed (a bad
    retry_delay only warned at each failure; name="" fell back to module.function)."""
    types = TaskRegistry()
    with pytest.raises(ConfigurationError, match=refusal):
        task(registry=types, **options)(lambda: None)
    assert types.names() == []


def test_good_task_defaults_still_register() -> None:
    types = TaskRegistry()
    defined = task(name="bounds.defaults", registry=types, queue="low", max_retry=-1, priority=5, timeout=0.5,
                   retention=0, unique_for=timedelta(seconds=1), retry_delay=lambda attempt, error: 1.0)(lambda: None)
    assert types.names() == ["bounds.defaults"] and defined.options["priority"] == 5
