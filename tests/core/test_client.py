"""The client and the @task decorator: enqueue, options, uniqueness, batches, errors."""

from __future__ import annotations

import inspect
import math
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis

from queuecore import (
    BatchEnqueueError,
    BrokerError,
    Client,
    ConfigurationError,
    ConnectionConfig,
    DuplicateTask,
    FakeClock,
    Inspector,
    InvalidOption,
    InvalidPayload,
    RedisUnavailable,
    TaskIdConflict,
    TaskInfo,
    TaskRegistry,
    TaskRequest,
    TaskState,
    WrongKeyType,
    get_default_client,
    set_default_client_factory,
    task,
)
from queuecore.core.clock import to_ms
from queuecore.core.keys import stats_day, stats_minute
from queuecore.core.message import DEFAULT_MAX_RETRY, TaskMessage
from queuecore.core.scripts import Scripts
from tests.conftest import wait_until
from tests.helpers.state import empty_state, read_queue_state


def module_level_handler(x: int) -> int:
    return x


@pytest.fixture
def fc_client(connection: ConnectionConfig, registry: TaskRegistry, fake_clock: FakeClock) -> Client:
    c = Client(connection=connection, registry=registry, clock=fake_clock)
    yield c
    c.close()


@pytest.fixture
def default_client(connection: ConnectionConfig, registry: TaskRegistry) -> Client:
    """Point ``fn.enqueue`` (the process-wide default client) at this test's namespace."""
    set_default_client_factory(lambda: Client(connection=connection, registry=registry))
    yield get_default_client()
    set_default_client_factory(None)


def all_keys(r: redis.Redis, prefix: str) -> set[str]:
    return set(r.scan_iter(match=f"{prefix}:*", count=1000))


def stored_message(r: redis.Redis, connection: ConnectionConfig, info: TaskInfo) -> TaskMessage:
    q = connection.keys.queue(info.queue)
    return TaskMessage.decode(info.id, info.queue, r.hget(q.task(info.id), "msg"))


def test_enqueue_returns_task_info_and_stores_the_task(fc_client: Client, fake_clock: FakeClock, redis_client,
                                                       connection) -> None:
    now = fake_clock.now()
    info = fc_client.enqueue("emails.send", {"to": "a@example.com"}, queue="mail", max_retry=3, timeout=30)
    assert isinstance(info, TaskInfo)
    assert len(info.id) == 32 and int(info.id, 16) >= 0
    assert (info.queue, info.type, info.state, info.payload) == ("mail", "emails.send", TaskState.PENDING,
                                                                 {"to": "a@example.com"})
    assert (info.max_retry, info.timeout, info.retried) == (3, 30.0, 0)
    assert info.next_process_at == info.enqueued_at == datetime.fromtimestamp(now, tz=UTC)
    q = connection.keys.queue("mail")
    state = read_queue_state(redis_client, q)
    msg = state["tasks"][info.id]["msg"]
    assert state == empty_state(pending=[info.id],
                                tasks={info.id: {"msg": msg, "state": "pending"}})
    assert TaskMessage.decode(info.id, "mail", msg) == TaskMessage(
        id=info.id, type="emails.send", payload={"to": "a@example.com"}, queue="mail", max_retry=3, timeout=30.0,
        enqueued_at=now)
    assert redis_client.smembers(connection.keys.queues) == {"mail"}


def test_enqueue_defaults(client: Client, redis_client, connection) -> None:
    info = client.enqueue("some.task")
    assert (info.queue, info.max_retry, info.payload, info.timeout, info.retention) == (
        "default", DEFAULT_MAX_RETRY, {}, None, 0.0)
    assert stored_message(redis_client, connection, info).payload == {}
    assert redis_client.lrange(connection.keys.queue("default").pending, 0, -1) == [info.id]


def test_the_connections_default_max_retry_applies_when_no_max_retry_is_given(redis_url, key_prefix, registry,
                                                                               redis_client) -> None:
    connection = ConnectionConfig(redis_url=redis_url, key_prefix=key_prefix, default_max_retry=3)
    spelled = task(name="t.spelled", registry=registry, max_retry=7)(module_level_handler)
    with Client(connection=connection, registry=registry) as c:
        plain = c.enqueue("t.plain")
        assert plain.max_retry == 3
        assert stored_message(redis_client, connection, plain).max_retry == 3
        assert c.enqueue("t.plain", max_retry=5).max_retry == 5  # the call's own wins
        assert c.enqueue(spelled, {"x": 1}).max_retry == 7  # and so does the task's
        assert c.enqueue_many([("t.plain", None)])[0].max_retry == 3
        # DEFAULT_MAX_RETRY itself is left out of the stored message (decoders and recover assume it)
        spelled_default = c.enqueue("t.plain", max_retry=DEFAULT_MAX_RETRY)
        msg = redis_client.hget(connection.keys.queue("default").task(spelled_default.id), "msg")
        assert '"max_retry"' not in msg
        assert stored_message(redis_client, connection, spelled_default).max_retry == DEFAULT_MAX_RETRY


@pytest.mark.parametrize("value", ["3", 2.5, True, None])
def test_default_max_retry_must_be_a_whole_number(value: Any) -> None:
    with pytest.raises(ConfigurationError, match="default_max_retry"):
        ConnectionConfig(default_max_retry=value)
    assert ConnectionConfig(default_max_retry=-1).default_max_retry == -1  # negative: retry forever


def test_every_enqueue_gets_a_new_id(client: Client) -> None:
    ids = {client.enqueue("some.task").id for _ in range(20)}
    assert len(ids) == 20


def test_enqueue_registers_every_queue_it_uses(client: Client, redis_client, connection) -> None:
    for name in ("a", "b", "a", "c"):
        client.enqueue("t", queue=name)
    assert redis_client.smembers(connection.keys.queues) == {"a", "b", "c"}


def test_max_retry_negative_is_allowed(client: Client, redis_client, connection) -> None:
    info = client.enqueue("t", max_retry=-1)
    assert info.max_retry == -1
    assert stored_message(redis_client, connection, info).max_retry == -1


@pytest.mark.parametrize("value", ["3", 2.5, True])
def test_max_retry_must_be_a_whole_number(client: Client, value: Any) -> None:
    with pytest.raises(ConfigurationError):
        client.enqueue("t", max_retry=value)


def test_retention_deadline_and_timeout_are_stored(fc_client: Client, fake_clock, redis_client, connection) -> None:
    deadline = datetime.fromtimestamp(fake_clock.now() + 3600, tz=UTC)
    info = fc_client.enqueue("t", retention=timedelta(minutes=5), deadline=deadline, timeout=timedelta(seconds=9))
    m = stored_message(redis_client, connection, info)
    assert (m.retention, m.deadline, m.timeout) == (300.0, deadline.timestamp(), 9.0)
    assert (info.retention, info.deadline, info.timeout) == (300.0, deadline, 9.0)


@pytest.mark.parametrize(("option", "value"), [
    ("timeout", 0), ("timeout", -1), ("retention", -5), ("unique_for", 0), ("unique_for", -1),
    ("timeout", "10"), ("process_in", "soon"), ("process_at", "tomorrow"), ("deadline", True),
])
def test_invalid_option_values_are_refused(client: Client, redis_client, key_prefix, option: str,
                                           value: Any) -> None:
    with pytest.raises(ConfigurationError):
        client.enqueue("t", **{option: value})
    assert all_keys(redis_client, key_prefix) == set()


@pytest.mark.parametrize("option", ["timeout", "process_in", "process_at", "deadline", "unique_for", "retention"])
@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, 10**400])
def test_non_finite_option_values_are_refused(client: Client, redis_client, key_prefix, option: str,
                                              value: float) -> None:
    with pytest.raises(ConfigurationError):
        client.enqueue("t", **{option: value})
    assert all_keys(redis_client, key_prefix) == set()


@pytest.mark.parametrize("option", ["timeout", "process_in", "process_at", "deadline"])
def test_points_in_time_beyond_any_datetime_are_refused(client: Client, redis_client, key_prefix,
                                                        option: str) -> None:
    with pytest.raises(ConfigurationError, match="out of range"):
        client.enqueue("t", **{option: 1e300})
    assert all_keys(redis_client, key_prefix) == set()


# -- scheduling ---------------------------------------------------------------------------------


@pytest.mark.parametrize("option", ["process_in", "process_at"])
def test_future_tasks_are_scheduled(fc_client: Client, fake_clock, redis_client, connection, option: str) -> None:
    now = fake_clock.now()
    value: Any = 90 if option == "process_in" else datetime.fromtimestamp(now + 90, tz=UTC)
    info = fc_client.enqueue("t", **{option: value})
    assert info.state is TaskState.SCHEDULED
    assert info.next_process_at == datetime.fromtimestamp(now + 90, tz=UTC)
    assert info.enqueued_at == datetime.fromtimestamp(now, tz=UTC)
    q = connection.keys.queue("default")
    state = read_queue_state(redis_client, q)
    assert state == empty_state(scheduled={info.id: to_ms(now + 90)},
                                tasks={info.id: {"msg": state["tasks"][info.id]["msg"], "state": "scheduled"}})


def test_process_in_accepts_a_timedelta(fc_client: Client, fake_clock, redis_client, connection) -> None:
    info = fc_client.enqueue("t", process_in=timedelta(minutes=2))
    assert redis_client.zscore(connection.keys.queue("default").scheduled, info.id) == to_ms(fake_clock.now() + 120)


@pytest.mark.parametrize("when", [-3600, -0.001, 0])
def test_due_or_past_process_at_goes_straight_to_pending(fc_client: Client, fake_clock, redis_client, connection,
                                                         when: float) -> None:
    info = fc_client.enqueue("t", process_at=datetime.fromtimestamp(fake_clock.now() + when, tz=UTC))
    assert info.state is TaskState.PENDING
    q = connection.keys.queue("default")
    assert redis_client.lrange(q.pending, 0, -1) == [info.id]
    assert redis_client.zcard(q.scheduled) == 0


def test_process_at_and_process_in_together_are_refused(client: Client) -> None:
    with pytest.raises(ConfigurationError, match="not both"):
        client.enqueue("t", process_in=5, process_at=datetime.now(tz=UTC) + timedelta(seconds=5))


# -- uniqueness and ids -------------------------------------------------------------------------


def test_unique_for_refuses_a_duplicate_while_held(client: Client, redis_client, connection) -> None:
    first = client.enqueue("report.build", {"year": 2026}, unique_for=60)
    assert first.unique_key is not None and first.unique_key.startswith(connection.keys.queue("default").base)
    with pytest.raises(DuplicateTask, match=first.id):
        client.enqueue("report.build", {"year": 2026}, unique_for=60)
    # different payload, type or queue: not a duplicate
    client.enqueue("report.build", {"year": 2025}, unique_for=60)
    client.enqueue("report.other", {"year": 2026}, unique_for=60)
    client.enqueue("report.build", {"year": 2026}, unique_for=60, queue="other")
    assert redis_client.llen(connection.keys.queue("default").pending) == 3
    assert redis_client.get(first.unique_key) == first.id


def test_unique_for_sees_equal_payloads_built_in_another_key_order(client: Client) -> None:
    first = client.enqueue("report.build", {"a": 1, "b": {"x": [1, {"p": 1, "q": 2}], "y": 2}}, unique_for=60)
    with pytest.raises(DuplicateTask, match=first.id):
        client.enqueue("report.build", {"b": {"y": 2, "x": [1, {"q": 2, "p": 1}]}, "a": 1}, unique_for=60)
    with pytest.raises(BatchEnqueueError, match=first.id):
        client.enqueue_many([("report.build", {"b": {"y": 2, "x": [1, {"q": 2, "p": 1}]}, "a": 1})], unique_for=60)
    # a list's order is its content: not the same payload
    client.enqueue("report.build", {"a": 1, "b": {"x": [{"p": 1, "q": 2}, 1], "y": 2}}, unique_for=60)


def test_unique_lock_is_released_when_the_task_completes(client: Client, scripts: Scripts, connection) -> None:
    first = client.enqueue("report.build", {"year": 2026}, unique_for=60)
    q = connection.keys.queue("default")
    now_ms = to_ms(time.time())
    (got,) = scripts.dequeue(q, now_ms=now_ms, lease_until_ms=now_ms + 30_000, count=10)
    assert got.id == first.id
    with pytest.raises(DuplicateTask):  # still held while it runs
        client.enqueue("report.build", {"year": 2026}, unique_for=60)
    assert scripts.done(q, first.id, got.lease, now_ms=now_ms, retention_ms=0, result="",
                        day=stats_day(now_ms / 1000), minute=stats_minute(now_ms / 1000), unique_key=first.unique_key)
    second = client.enqueue("report.build", {"year": 2026}, unique_for=60)
    assert second.id != first.id


def test_unique_lock_expires_after_unique_for(client: Client, redis_client) -> None:
    first = client.enqueue("report.build", {"year": 2026}, unique_for=0.2)
    assert 0 < redis_client.pttl(first.unique_key) <= 200
    with pytest.raises(DuplicateTask):
        client.enqueue("report.build", {"year": 2026}, unique_for=0.2)
    wait_until(lambda: not redis_client.exists(first.unique_key), timeout=5, message="the unique lock to expire")
    assert client.enqueue("report.build", {"year": 2026}, unique_for=0.2).id != first.id


def test_duplicate_task_id_is_a_conflict(client: Client, redis_client, connection) -> None:
    first = client.enqueue("t", {"n": 1}, task_id="order-42")
    assert first.id == "order-42"
    before = read_queue_state(redis_client, connection.keys.queue("default"))
    with pytest.raises(TaskIdConflict, match="order-42"):
        client.enqueue("t", {"n": 2}, task_id="order-42")
    assert read_queue_state(redis_client, connection.keys.queue("default")) == before
    client.enqueue("t", {"n": 2}, task_id="order-42", queue="other")  # ids are per queue


@pytest.mark.parametrize("task_id", ["has space", "a/b", "", "x" * 201, "new\n"])
def test_unsafe_task_ids_are_refused(client: Client, task_id: str) -> None:
    with pytest.raises(ConfigurationError):
        client.enqueue("t", task_id=task_id)


# -- payload errors -----------------------------------------------------------------------------


@pytest.mark.parametrize("payload", [{"when": datetime(2026, 1, 1, tzinfo=UTC)}, {"x": object()}, ["a"], "text",
                                     {"x": math.nan}, {1: "int key"}])
def test_unserialisable_payload_is_refused_and_nothing_is_written(client: Client, redis_client, key_prefix,
                                                                  payload: Any) -> None:
    with pytest.raises(InvalidPayload):
        client.enqueue("t", payload)
    assert all_keys(redis_client, key_prefix) == set()


def test_payload_over_the_connection_limit_is_refused(redis_url, key_prefix, registry, redis_client) -> None:
    small = ConnectionConfig(redis_url=redis_url, key_prefix=key_prefix, max_payload_bytes=64)
    with Client(connection=small, registry=registry) as c:
        limit_payload = {"s": "x" * (64 - len('{"s":""}'))}
        with pytest.raises(InvalidPayload, match="65 bytes"):
            c.enqueue("t", {"s": limit_payload["s"] + "x"})
        assert all_keys(redis_client, key_prefix) == set()
        info = c.enqueue("t", limit_payload)  # exactly at the limit
        assert info.payload == limit_payload


def test_invalid_type_names_and_queues_are_refused(client: Client, redis_client, key_prefix) -> None:
    for bad in ("has space", "br{ace", ""):
        with pytest.raises(ConfigurationError):
            client.enqueue(bad)
        with pytest.raises(ConfigurationError):
            client.enqueue("t", queue=bad or "a b")
    assert all_keys(redis_client, key_prefix) == set()


def test_check_validates_without_sending(client: Client, redis_client, key_prefix) -> None:
    client.check("t", {"a": 1}, queue="x")
    with pytest.raises(InvalidPayload):
        client.check("t", {"a": object()})
    assert all_keys(redis_client, key_prefix) == set()


# -- @task --------------------------------------------------------------------------------------


def test_task_enqueue_binds_positional_arguments_to_names(registry, default_client, redis_client,
                                                          connection) -> None:
    @task(name="math.add", registry=registry)
    def add(a: int, b: int = 0, c: int = 10) -> int:
        return a + b + c

    info = add.enqueue(1, b=2)
    assert (info.type, info.payload) == ("math.add", {"a": 1, "b": 2})
    assert stored_message(redis_client, connection, info).payload == {"a": 1, "b": 2}
    assert add(1, 2) == 13  # calling it runs it here
    assert add.request(4, c=1) == TaskRequest("math.add", {"a": 4, "c": 1}, {})


def test_task_options_are_defaults_that_using_overrides(registry, client: Client, default_client, redis_client,
                                                        connection) -> None:
    @task(name="mail.send", registry=registry, queue="mail", max_retry=2, timeout=5)
    def send(to: str) -> None: ...

    assert registry.get("mail.send") is send
    info = send.enqueue("x@y")
    assert (info.queue, info.max_retry, info.timeout) == ("mail", 2, 5.0)

    low = send.using(queue="low", client=client).enqueue(to="z@y")
    assert (low.queue, low.max_retry, low.timeout, low.payload) == ("low", 2, 5.0, {"to": "z@y"})
    assert redis_client.lrange(connection.keys.queue("low").pending, 0, -1) == [low.id]
    chained = send.using(queue="low").using(max_retry=0, client=client).enqueue("c@d")
    assert (chained.queue, chained.max_retry) == ("low", 0)
    # client.enqueue with the name also picks up the registered defaults, explicit options win
    by_name = client.enqueue("mail.send", {"to": "n@m"}, timeout=1)
    assert (by_name.queue, by_name.max_retry, by_name.timeout) == ("mail", 2, 1.0)


def test_default_type_name_is_module_and_function(registry) -> None:
    fn = task(registry=registry)(module_level_handler)
    assert fn.name == "tests.core.test_client.module_level_handler"
    assert registry.get("tests.core.test_client.module_level_handler") is fn
    named = task(name="custom.name", registry=TaskRegistry())(module_level_handler)
    assert named.name == "custom.name"


def test_enqueue_checks_the_payload_against_a_known_handler(registry, client: Client, redis_client,
                                                            key_prefix) -> None:
    @task(name="math.add", registry=registry)
    def add(a: int, b: int = 0) -> int:
        return a + b

    bound = add.using(client=client)
    for call in (lambda: bound.enqueue(1, 2, 3), lambda: bound.enqueue(b=2), lambda: bound.enqueue(1, z=3),
                 lambda: client.enqueue("math.add", {"a": 1, "c": 2}), lambda: client.enqueue("math.add", {}),
                 lambda: client.enqueue(add, {"b": 1})):
        with pytest.raises(InvalidPayload):
            call()
    assert all_keys(redis_client, key_prefix) == set()
    # an unknown type cannot be checked: any JSON object goes
    assert client.enqueue("not.registered.here", {"anything": [1]}).payload == {"anything": [1]}
    assert client.enqueue(add, {"a": 1}).type == "math.add"


def test_kwargs_handlers_accept_extra_names(registry, client: Client) -> None:
    @task(name="flex", registry=registry)
    def flex(a: int, **extra: Any) -> None: ...

    info = flex.using(client=client).enqueue(1, x=2, y=[3])
    assert info.payload == {"a": 1, "x": 2, "y": [3]}
    assert client.enqueue("flex", {"a": 1, "zzz": 2}).payload == {"a": 1, "zzz": 2}
    with pytest.raises(InvalidPayload):
        client.enqueue("flex", {"zzz": 2})  # a is still required


def test_positional_only_and_var_positional_handlers_are_refused(registry) -> None:
    def posonly(a, /, b): ...

    def star(*args): ...

    for fn in (posonly, star):
        with pytest.raises(ConfigurationError):
            task(name=f"bad.{fn.__name__}", registry=registry)(fn)
    assert registry.names() == []


def test_options_are_keyword_only_and_never_mixed_with_the_payload(registry, client: Client, redis_client,
                                                                   connection) -> None:
    assert inspect.signature(Client.enqueue).parameters["options"].kind is inspect.Parameter.VAR_KEYWORD
    with pytest.raises(TypeError):
        client.enqueue("t", {}, "low")  # type: ignore[misc]

    # payload keys that look like options stay payload
    info = client.enqueue("t", {"queue": "payload-q", "timeout": 5})
    assert (info.queue, info.timeout, info.payload) == ("default", None, {"queue": "payload-q", "timeout": 5})

    @task(name="odd.names", registry=registry)
    def odd(queue: str, timeout: int) -> None: ...

    info = odd.using(client=client, queue="real").enqueue("payload-q", timeout=9)
    assert (info.queue, info.timeout, info.payload) == ("real", None, {"queue": "payload-q", "timeout": 9})
    assert stored_message(redis_client, connection, info).payload == {"queue": "payload-q", "timeout": 9}

    @task(name="plain", registry=registry)
    def plain(a: int) -> None: ...

    with pytest.raises(InvalidPayload):  # enqueue(...) arguments are the call's arguments, not options
        plain.using(client=client).enqueue(1, queue="low")


def test_unknown_options_are_refused(registry, client: Client) -> None:
    with pytest.raises(ConfigurationError, match="urgency"):
        client.enqueue("t", {}, urgency=5)

    @task(name="known", registry=registry)
    def known() -> None: ...

    with pytest.raises(ConfigurationError):
        known.using(urgency=1)
    with pytest.raises(ConfigurationError):
        task(name="x", registry=registry, bogus=1)
    with pytest.raises(ConfigurationError):  # per-call options cannot be decorator defaults
        task(name="y", registry=registry, task_id="fixed")
    with pytest.raises(ConfigurationError):
        client.enqueue_many([TaskRequest("t", {}, {"urgency": 1})])


# -- enqueue_many -------------------------------------------------------------------------------


def test_enqueue_many_sends_one_batch_across_queues(registry, client: Client, redis_client, connection,
                                                    monkeypatch) -> None:
    @task(name="math.double", registry=registry, queue="math")
    def double(n: int) -> int:
        return 2 * n

    pipelines: list[Any] = []
    direct: list[Any] = []
    assert client.scripts.publish_command  # asked once per client (on a cluster: INFO), not per batch
    client.clock.now()  # Redis's TIME: read on a client's first use, then once a minute, not per batch
    real_pipeline, real_execute = client.redis.pipeline, client.redis.execute_command
    monkeypatch.setattr(client.redis, "pipeline", lambda *a, **k: pipelines.append(1) or real_pipeline(*a, **k))
    monkeypatch.setattr(client.redis, "execute_command", lambda *a, **k: direct.append(a) or real_execute(*a, **k))

    infos = client.enqueue_many([
        TaskRequest("a.t", {"x": 1}, {"queue": "q1", "max_retry": 1}),
        ("b.t", {"y": 2}),
        double.request(5),
        ("c.t", None),
    ], max_retry=7)  # batch options apply to every request that does not set its own
    # the new queues registered first, on their own (a refused registration stores nothing), then one pipeline
    assert (len(pipelines), [command[0] for command in direct]) == (1, ["SADD"])
    assert [(i.type, i.queue, i.payload, i.max_retry, i.state) for i in infos] == [
        ("a.t", "q1", {"x": 1}, 1, TaskState.PENDING), ("b.t", "default", {"y": 2}, 7, TaskState.PENDING),
        ("math.double", "math", {"n": 5}, 7, TaskState.PENDING), ("c.t", "default", {}, 7, TaskState.PENDING)]
    keys = connection.keys
    assert redis_client.lrange(keys.queue("q1").pending, 0, -1) == [infos[0].id]
    assert redis_client.lrange(keys.queue("default").pending, 0, -1) == [infos[3].id, infos[1].id]
    assert redis_client.lrange(keys.queue("math").pending, 0, -1) == [infos[2].id]
    assert redis_client.smembers(keys.queues) == {"q1", "default", "math"}
    for info in infos:
        assert stored_message(redis_client, connection, info).payload == info.payload


def test_enqueue_many_cuts_its_script_calls_by_message_size(client: Client, redis_client, connection,
                                                            monkeypatch) -> None:
    """Redis runs a script call whole: 1,000 tasks of 500 KB in one call held it 1.36 s. A call ends
    with the task whose message brings it to 4 MB (here the ninth of 500 KB); small tasks still go
    1,000 to a call."""
    sizes: list[int] = []
    real = Client._enqueue_call

    def counted(self: Client, queue: str, items: list[Any], *args: Any) -> Any:
        sizes.append(len(items))
        return real(self, queue, items, *args)

    monkeypatch.setattr(Client, "_enqueue_call", counted)
    big = [("big.t", {"pad": "x" * 500_000})] * 20
    infos = client.enqueue_many(big)
    assert sizes == [9, 9, 2]
    assert redis_client.llen(connection.keys.queue("default").pending) == 20 == len({i.id for i in infos})
    sizes.clear()
    client.enqueue_many([("small.t", {"n": n}) for n in range(2_500)], queue="small")
    assert sizes == [1_000, 1_000, 500]
    # Sizes are the bytes Redis holds (UTF-8, as the scripts count them), not characters: a message of
    # 170,000 CJK characters is 510 KB, so nine reach 4 MB (counted in characters, all 20 went in one call).
    sizes.clear()
    client.enqueue_many([("cjk.t", {"pad": "語" * 170_000})] * 20, queue="cjk")
    assert sizes == [9, 9, 2]


def test_enqueue_many_empty_batch(client: Client, redis_client, key_prefix) -> None:
    assert client.enqueue_many([]) == []
    assert all_keys(redis_client, key_prefix) == set()


def test_enqueue_many_reports_refused_items_and_enqueues_the_rest(client: Client, redis_client,
                                                                  connection) -> None:
    client.enqueue("t", {"first": True}, task_id="dup")
    with pytest.raises(BatchEnqueueError) as caught:
        client.enqueue_many([
            TaskRequest("t", {"n": 0}),
            TaskRequest("t", {"n": 1}, {"task_id": "dup"}),
            TaskRequest("u", {"n": 2}, {"unique_for": 60}),
            TaskRequest("u", {"n": 2}, {"unique_for": 60}),
            TaskRequest("t", {"n": 4}, {"queue": "elsewhere"}),
        ])
    err = caught.value
    assert sorted(err.errors) == [1, 3]
    assert isinstance(err.errors[1], TaskIdConflict)
    assert isinstance(err.errors[3], DuplicateTask)
    assert [i.payload for i in err.enqueued] == [{"n": 0}, {"n": 2}, {"n": 4}]
    default = connection.keys.queue("default")
    assert set(redis_client.lrange(default.pending, 0, -1)) == {"dup", err.enqueued[0].id, err.enqueued[1].id}
    assert redis_client.lrange(connection.keys.queue("elsewhere").pending, 0, -1) == [err.enqueued[2].id]
    original = TaskMessage.decode("dup", "default", redis_client.hget(default.task("dup"), "msg"))
    assert original.payload == {"first": True}  # the conflicting item did not overwrite it


def test_a_task_id_given_twice_in_a_batch_is_a_conflict_even_for_the_same_payload(client: Client, redis_client,
                                                                                 connection) -> None:
    """A review: two identical requests with one chosen id came back as two stored tasks (the script
    took the second for the retry of a call whose reply was lost); one task was stored."""
    same = TaskRequest("x.y", {"a": 1}, {"task_id": "dup"})
    with pytest.raises(BatchEnqueueError) as caught:
        client.enqueue_many([same, TaskRequest("x.y", {"a": 2}), same,
                             TaskRequest("x.y", {"a": 1}, {"task_id": "dup", "queue": "other"})])
    err = caught.value
    assert list(err.errors) == [2] and isinstance(err.errors[2], TaskIdConflict)
    assert "given twice in the batch" in str(err.errors[2])
    assert [(i.id, i.queue) for i in err.enqueued if i.id == "dup"] == [("dup", "default"), ("dup", "other")]
    assert redis_client.lrange(connection.keys.queue("default").pending, 0, -1).count("dup") == 1


def test_an_option_given_as_none_counts_as_not_given(registry, client: Client) -> None:
    """A review: None passed for an option threw the task's own default away (queue=None sent the task
    to "default", where no worker of the task's queue looked; max_retry=None gave 25)."""
    @task(name="mail.send", registry=registry, queue="mail", max_retry=3, unique_for=60)
    def send(n: int) -> None: ...

    bound = send.using(client=client, queue=None, max_retry=None).enqueue(1)
    direct = client.enqueue(send, {"n": 2}, queue=None, max_retry=None, unique_for=None)
    assert [(i.queue, i.max_retry) for i in (bound, direct)] == [("mail", 3), ("mail", 3)]
    with pytest.raises(DuplicateTask):  # unique_for=None kept the task's uniqueness
        client.enqueue(send, {"n": 2}, unique_for=None)
    batch = client.enqueue_many([TaskRequest("mail.send", {"n": 3}, {"queue": None}, handler=send)], queue="batch")
    assert batch[0].queue == "batch"  # the batch's option, under the request's None
    assert send.using(client=client, queue="low").using(queue=None).enqueue(4).queue == "low"  # the earlier using's


@pytest.mark.parametrize("bad", [("t", ["not", "a", "dict"]), "just-a-string", ("t",), ("t", {}, {}),
                                 TaskRequest("t", {"x": object()}), TaskRequest("bad name", {}),
                                 TaskRequest("t", {}, {"queue": "bad queue"})])
def test_enqueue_many_with_an_invalid_item_sends_nothing(client: Client, redis_client, key_prefix,
                                                         bad: Any) -> None:
    with pytest.raises((InvalidPayload, ConfigurationError)):
        client.enqueue_many([("ok", {"a": 1}), bad, ("ok", {"a": 2})])
    assert all_keys(redis_client, key_prefix) == set()


# -- Redis unreachable --------------------------------------------------------------------------


def test_unreachable_redis_raises_broker_error(key_prefix, registry) -> None:
    with Client(redis_url="redis://127.0.0.1:1/0", key_prefix=key_prefix, registry=registry) as dead:
        with pytest.raises(BrokerError, match="unreachable"):
            dead.enqueue("t", {"a": 1})
        with pytest.raises(BrokerError):
            dead.enqueue_many([("t", {"a": 1}), ("t", {"a": 2})])
        with pytest.raises(BrokerError):  # a failed attempt does not leave the queue marked as registered
            dead.enqueue("t", {"a": 1})


def test_a_server_that_does_not_speak_redis_is_unreachable_not_a_raw_redis_error(not_redis, key_prefix,
                                                                                   registry) -> None:
    """A URL whose port belongs to something else (here a server that answers as a web server): the
    caller gets ``RedisUnavailable`` saying so, as for a Redis that is down, not redis-py's
    ``InvalidResponse``."""
    expected = "Redis is unreachable: the server at that address does not answer in Redis's protocol"
    with Client(redis_url=not_redis.url, key_prefix=key_prefix, registry=registry) as wrong:
        with pytest.raises(RedisUnavailable, match=expected):
            wrong.enqueue("t", {"a": 1})
        with pytest.raises(RedisUnavailable, match=expected):
            wrong.enqueue_many([("t", {"a": 1}), ("t", {"a": 2})])
    with Inspector(redis_url=not_redis.url, key_prefix=key_prefix) as wrong_inspector:
        with pytest.raises(RedisUnavailable, match=expected):
            wrong_inspector.queues()
        with pytest.raises(RedisUnavailable, match=expected):
            wrong_inspector.get_task("default", "0" * 32)
    assert not_redis.served  # the requests did reach that server


def test_a_server_that_hangs_up_without_a_reply_is_named_as_maybe_another_protocol(closes_at_once, key_prefix,
                                                                                    registry) -> None:
    """Pointed at PostgreSQL's port, the error was redis-py's "Connection closed by server." alone
    (dashboard probe); it says what that can mean."""
    with Client(redis_url=closes_at_once.url, key_prefix=key_prefix, registry=registry) as wrong, \
            pytest.raises(RedisUnavailable) as caught:
        wrong.enqueue("t", {"a": 1})
    assert str(caught.value) == (
        "Redis is unreachable: Connection closed by server without a reply: a Redis restarting, or a port that "
        "speaks another protocol (a Redis that takes TLS only wants a rediss:// URL)")
    assert closes_at_once.served


SILENT_TIMEOUT = 0.5  # seconds a call waits for a reply from the silent server


def test_a_first_call_that_finds_redis_silent_fails_after_one_timeout_not_two(silent_redis, key_prefix,
                                                                              registry) -> None:
    """A new client or inspector measures Redis's clock (TIME) before its first call. When Redis does
    not answer, that measurement's timeout is the outage: the call raises ``RedisUnavailable`` at once,
    rather than sending its own command and waiting out a second timeout on a second connection."""
    connection = ConnectionConfig(redis_url=silent_redis.url, key_prefix=key_prefix, socket_timeout=SILENT_TIMEOUT)
    calls = [lambda c, i: c.enqueue("t", {"a": 1}), lambda c, i: c.enqueue_many([("t", {"a": 1})]),
             lambda c, i: i.limits(), lambda c, i: i.pause_queue("default", 60)]
    for call in calls:
        before = len(silent_redis.connections)
        with Client(connection=connection, registry=registry) as fresh, Inspector(connection=connection) as ins:
            started = time.monotonic()
            with pytest.raises(RedisUnavailable, match="Redis is unreachable: Timeout"):
                call(fresh, ins)
            waited = time.monotonic() - started
        assert len(silent_redis.connections) - before == 1, "one connection, one timeout"
        print(f"raised RedisUnavailable after {waited:.2f}s (socket timeout {SILENT_TIMEOUT}s)")


def test_check_does_not_report_an_outage_that_the_enqueue_reports(silent_redis, key_prefix, registry) -> None:
    """``check`` sends nothing: with Redis silent it still validates (bad input raises, good input
    passes) after its clock's failed measurement; the enqueue that follows reports the outage."""
    connection = ConnectionConfig(redis_url=silent_redis.url, key_prefix=key_prefix, socket_timeout=SILENT_TIMEOUT)
    with Client(connection=connection, registry=registry) as fresh:
        fresh.check("t", {"a": 1})
        with pytest.raises(InvalidOption, match="timeout"):
            fresh.check("t", {"a": 1}, timeout=-5)
        with pytest.raises(RedisUnavailable):
            fresh.enqueue("t", {"a": 1})
    assert silent_redis.connections  # the clock did try


def test_enqueue_many_option_precedence(registry, client: Client) -> None:
    """Handler defaults < the batch's options < a request's own overrides."""

    @task(name="prec.job", registry=registry, queue="decorated", max_retry=2)
    def job(n: int) -> int:
        return n

    infos = client.enqueue_many([job.request(1), job.using(queue="override").request(2), ("prec.job", {"n": 3})],
                                queue="batch")
    assert [i.queue for i in infos] == ["batch", "override", "batch"]
    assert [i.max_retry for i in infos] == [2, 2, 2]
    assert client.enqueue_many([job.request(4)])[0].queue == "decorated"


def test_enqueue_many_shares_options_but_not_what_each_payload_decides(registry, client: Client, redis_client,
                                                                       connection) -> None:
    """A batch checks its options once per task type; each task still gets its own id, its own unique
    key (from its payload) and its type's own defaults."""

    @task(name="share.a", registry=registry, max_retry=3, priority=5)
    def a(n: int) -> int:
        return n

    with pytest.raises(BatchEnqueueError) as caught:
        client.enqueue_many([a.request(1), ("share.b", {"n": 1}), a.request(2), ("share.b", {"n": 2}),
                             a.request(1)], unique_for=60, process_in=30)
    assert list(caught.value.errors) == [4]  # the same type and payload as the first: its unique lock
    assert isinstance(caught.value.errors[4], DuplicateTask)
    infos = caught.value.enqueued
    assert [(i.type, i.max_retry, i.priority, i.state) for i in infos] == [
        ("share.a", 3, 5, TaskState.SCHEDULED), ("share.b", 25, 0, TaskState.SCHEDULED),
        ("share.a", 3, 5, TaskState.SCHEDULED), ("share.b", 25, 0, TaskState.SCHEDULED)]
    assert len({i.id for i in infos}) == 4 and len({i.unique_key for i in infos}) == 4
    for info in infos:
        assert redis_client.get(info.unique_key) == info.id
    with pytest.raises(InvalidOption, match="max_retry"):  # a bad batch option refuses the batch, first type or not
        client.enqueue_many([("share.c", {}), a.request(3)], max_retry=10**7)


def test_empty_queue_name_is_refused(client: Client) -> None:
    with pytest.raises(ConfigurationError, match="queue name"):
        client.enqueue("anything", queue="")


# -- the connection of each enqueuing thread (scripts.PerThreadScripts) -------------------------------


def needs_per_thread_connections(client: Client) -> None:
    if getattr(client.redis, "connection_pool", None) is None:
        pytest.skip("a Redis Cluster client sends scripts by redis-py's cluster path, not per-thread connections")


def test_threads_enqueue_at_once_each_on_a_connection_of_its_own(client: Client, redis_client, connection) -> None:
    needs_per_thread_connections(client)
    import threading

    ids: list[str] = []
    lock = threading.Lock()
    enqueued = threading.Barrier(9)  # the 8 threads stay alive (their connections with them) until counted
    counted = threading.Event()

    def enqueue_some() -> None:
        for n in range(50):
            task_id = client.enqueue("t.many", {"n": n}).id
            with lock:
                ids.append(task_id)
        enqueued.wait(timeout=30)
        counted.wait(timeout=30)

    threads = [threading.Thread(target=enqueue_some) for _ in range(8)]
    for t in threads:
        t.start()
    enqueued.wait(timeout=30)
    assert len(set(ids)) == 400 and redis_client.llen(connection.keys.queue("default").pending) == 400
    own = [ref() for ref in client.scripts._made]  # type: ignore[attr-defined]
    assert len({id(c) for c in own if c is not None}) == 8  # one per thread
    client.close()
    assert all(c is None or c._sock is None for c in own)  # close() closed every thread's
    counted.set()
    for t in threads:
        t.join()


def test_a_dropped_connection_is_made_again_on_the_next_enqueue(client: Client, redis_client) -> None:
    needs_per_thread_connections(client)
    client.enqueue("t.registers")  # the first enqueue to a queue registers it first
    client.enqueue("t.first")
    own = client.scripts._local.connection  # type: ignore[attr-defined]
    import socket

    sock = own._sock
    sock.shutdown(socket.SHUT_RDWR)  # as a server restart or a proxy's idle timeout leaves it
    assert client.enqueue("t.second").id  # the dropped connection reconnected once, no error
    assert client.scripts._local.connection is own and own._sock is not sock  # type: ignore[attr-defined]


def test_after_a_fork_the_child_enqueues_on_a_new_connection_and_the_parent_still_can(client: Client,
                                                                                      redis_client,
                                                                                      connection) -> None:
    import os

    needs_per_thread_connections(client)

    client.enqueue("t.registers")  # the first enqueue to a queue registers it first
    client.enqueue("t.before")
    parent_connection = client.scripts._local.connection  # type: ignore[attr-defined]
    pid = os.fork()
    if pid == 0:  # the child: exits 0 only when its enqueue worked on a connection of its own
        try:
            client.enqueue("t.child")
            ok = client.scripts._local.connection is not parent_connection  # type: ignore[attr-defined]
            os._exit(0 if ok else 3)
        except BaseException:
            os._exit(4)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    client.enqueue("t.after")  # the parent's connection was not closed by the child
    assert client.scripts._local.connection is parent_connection  # type: ignore[attr-defined]
    pending = connection.keys.queue("default").pending
    types = sorted(redis_client.hget(connection.keys.queue("default").task(i), "msg").split('"type":"')[1][:8]
                   for i in redis_client.lrange(pending, 0, -1))
    assert types == ["t.after\"", "t.before", "t.child\"", "t.regist"]


def test_results_are_stored_alike_with_or_without_orjson(client: Client, make_worker, registry, caplog) -> None:
    """A result is encoded by the standard library whatever extras are installed: with the ``fast``
    extra, orjson stored NaN as null without the promised warning, an integer over 64 bits and a dict
    with int keys as their repr(), and a datetime as text. (The Django 6 leg of scripts/test runs
    with orjson installed, the others without.)"""
    from queuecore import task

    values: dict[str, Any] = {"nan": [float("nan")], "big": 2 ** 70 + 1, "int_keys": {1: "a"},
                              "when": datetime(2026, 1, 2, tzinfo=UTC)}

    @task(name="t.returns", registry=registry)
    def returns(name: str) -> Any:
        return values[name]

    handles = {name: client.enqueue("t.returns", {"name": name}, retention=60) for name in values}
    make_worker()
    got = {name: handle.get(timeout=20) for name, handle in handles.items()}
    assert type(got["big"]) is int  # orjson read it back as a float (2 ** 70 itself compares equal to one)
    assert got == {"nan": "[nan]", "big": 2 ** 70 + 1, "int_keys": {"1": "a"},
                   "when": "datetime.datetime(2026, 1, 2, 0, 0, tzinfo=datetime.timezone.utc)"}
    kept_repr = [r for r in caplog.records if "returned a value that is not JSON" in r.getMessage()]
    assert {r.getMessage().split()[1] for r in kept_repr} == {handles["nan"].id, handles["when"].id}


def test_a_refused_registration_stores_nothing(client: Client, redis_client, connection, key_prefix) -> None:
    """A review: the queue's registration went in one pipeline with the enqueue scripts, so when Redis
    refused it (a key of another type; an ACL without the global keys) the caller got the error while
    the tasks were stored, and each retry stored another copy."""
    redis_client.set(connection.keys.queues, "not a set")
    for attempt in range(2):
        with pytest.raises(WrongKeyType, match="nothing was written"):
            client.enqueue("t", {"n": attempt}, queue="fresh")
        with pytest.raises(WrongKeyType, match="nothing was written"):
            client.enqueue_many([("t", {"n": attempt}), ("t", {"n": attempt + 10})], queue="fresh")
    assert all_keys(redis_client, key_prefix) == {connection.keys.queues}  # not one task stored
    redis_client.delete(connection.keys.queues)
    assert client.enqueue("t", queue="fresh").id  # registered at the next try
    assert redis_client.smembers(connection.keys.queues) == {"fresh"}


def test_a_higher_level_s_due_time_replaces_the_lower_level_s(client: Client, registry, inspector) -> None:
    """A review: ``process_at`` and ``process_in`` are one choice, but a request's own (or a later
    ``using``'s) was merged beside the batch's (or the earlier one's), so the call was refused, "give
    process_at or process_in, not both", where every other option of the higher level wins."""
    from queuecore import task

    @task(name="t.when", registry=registry)
    def when(n: int) -> None: ...

    at = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=2)
    [own_at] = client.enqueue_many([when.using(process_at=at).request(1)], process_in=60)
    [own_in] = client.enqueue_many([when.using(process_in=600).request(2)], process_at=at)
    later = when.using(client=client, process_at=at).using(process_in=900).enqueue(3)
    due = {h.id: inspector.get_task("default", h.id).next_process_at for h in (own_at, own_in, later)}
    assert due[own_at.id] == at
    for handle, seconds in ((own_in, 600), (later, 900)):
        assert abs((due[handle.id] - datetime.now(UTC)).total_seconds() - seconds) < 30
    with pytest.raises(InvalidOption, match="not both"):  # one level giving both is still refused
        client.enqueue("t.when", {"n": 4}, process_at=at, process_in=5)
