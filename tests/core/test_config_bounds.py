"""Issue 11, item 5: a configuration that cannot work is refused at construction, naming the field
and its allowed range, for every numeric field of ``ConnectionConfig`` and ``WorkerConfig``."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from queuecore import ConfigurationError, ConnectionConfig, WorkerConfig
from queuecore.core import limits

NAN, INF = math.nan, math.inf

WORKER_FLOATS = {
    "shutdown_timeout": limits.INTERVAL, "lease_duration": limits.INTERVAL, "heartbeat_interval": limits.INTERVAL,
    "recover_interval": limits.INTERVAL, "forward_interval": limits.INTERVAL, "janitor_interval": limits.INTERVAL,
    "fetch_poll_interval": limits.INTERVAL, "repair_interval": limits.REPAIR_INTERVAL,
    "cancel_grace": limits.GRACE, "abandon_grace": limits.GRACE, "default_timeout": limits.TIMEOUT,
    "archive_max_age": limits.ARCHIVE_MAX_AGE,
}
WORKER_INTS = {"concurrency": limits.CONCURRENCY, "prefetch": limits.PREFETCH,
               "max_archive_size": limits.MAX_ARCHIVE_SIZE}
CONNECTION_NUMBERS = {"socket_timeout": limits.SOCKET_TIMEOUT, "connect_timeout": limits.SOCKET_TIMEOUT,
                      "max_payload_bytes": limits.MAX_PAYLOAD_BYTES, "default_max_retry": limits.MAX_RETRY,
                      "default_retention": limits.RETENTION}


def test_every_numeric_field_has_a_range_in_these_tests() -> None:
    def numeric(cls: type) -> set[str]:
        return {f.name for f in dataclasses.fields(cls) if f.type in ("int", "float", "int | None", "float | None")}

    assert numeric(WorkerConfig) == set(WORKER_FLOATS) | set(WORKER_INTS)
    assert numeric(ConnectionConfig) == set(CONNECTION_NUMBERS)


def bad_values(r: limits.Range) -> list[Any]:
    values: list[Any] = [NAN, INF, -INF, r.high * 2 + 1, r.low - 1, "1", True, None, 10**400]
    if r.low_open:
        values.append(r.low)
    if r.whole:
        values += [float(r.low) + 0.5, float(r.high)]  # whole fields take ints only
    return values


def worker_cases() -> list[tuple[str, limits.Range, Any]]:
    cases = []
    for name, r in {**WORKER_FLOATS, **WORKER_INTS}.items():
        for value in bad_values(r):
            if value is None and name in ("default_timeout", "prefetch"):
                continue  # None means "no default timeout" / "same as concurrency"
            cases.append((name, r, value))
    return cases


def connection_cases() -> list[tuple[str, limits.Range, Any]]:
    return [(name, r, value) for name, r in CONNECTION_NUMBERS.items() for value in bad_values(r)]


@pytest.mark.parametrize(("field", "allowed", "value"), worker_cases())
def test_worker_config_refuses_values_that_cannot_work(field: str, allowed: limits.Range, value: Any) -> None:
    with pytest.raises(ConfigurationError) as caught:
        WorkerConfig(**{field: value})
    message = str(caught.value)
    assert message.startswith(f"{field} "), message
    assert allowed.describe() in message, message
    assert caught.value.field == field


@pytest.mark.parametrize(("field", "allowed", "value"), connection_cases())
def test_connection_config_refuses_values_that_cannot_work(field: str, allowed: limits.Range, value: Any) -> None:
    with pytest.raises(ConfigurationError) as caught:
        ConnectionConfig(**{field: value})
    message = str(caught.value)
    assert message.startswith(f"{field} ") and allowed.describe() in message, message
    assert caught.value.field == field


@pytest.mark.parametrize(("field", "allowed"), [*WORKER_FLOATS.items(), *WORKER_INTS.items()])
def test_worker_config_accepts_both_ends_of_each_range(field: str, allowed: limits.Range) -> None:
    for value in (allowed.low, allowed.high):
        if allowed.low_open and value == allowed.low:
            continue
        value = int(value) if allowed.whole else value
        if (field, value) in (("lease_duration", limits.MIN_INTERVAL), ("heartbeat_interval", limits.MAX_INTERVAL)):
            continue  # the heartbeat must stay shorter than the lease: no config has either
        extra: dict[str, Any] = {"lease_duration": limits.MAX_INTERVAL} if field == "heartbeat_interval" else {}
        config = WorkerConfig(**{field: value}, **extra)
        assert getattr(config, field) == value


@pytest.mark.parametrize(("field", "allowed"), CONNECTION_NUMBERS.items())
def test_connection_config_accepts_both_ends_of_each_range(field: str, allowed: limits.Range) -> None:
    for value in (allowed.low, allowed.high):
        value = int(value) if allowed.whole else value
        assert getattr(ConnectionConfig(**{field: value}), field) == value


def test_the_messages_of_the_issue() -> None:
    with pytest.raises(ConfigurationError, match=r"^lease_duration is out of range: got nan; allowed: a number "
                                                 r"from 0\.001 to 86400 seconds \(1 day\)$"):
        WorkerConfig(lease_duration=NAN)
    with pytest.raises(ConfigurationError, match=r"^max_payload_bytes must be a whole number from 1 to 268435456 "
                                                 r"bytes \(256 MiB\), got nan$"):
        ConnectionConfig(max_payload_bytes=NAN)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"^socket_timeout is out of range: got -1; allowed: a number from "
                                                 r"0\.001 to 86400 seconds \(1 day\)$"):
        ConnectionConfig(socket_timeout=-1)


def _middleware(ctx: Any, call_next: Any) -> Any:
    return call_next()


@pytest.mark.parametrize(("field", "value", "message"), [
    ("strict_priority", "false", "strict_priority must be True or False, got 'false'"),
    ("strict_priority", 1, "strict_priority must be True or False, got 1"),
    ("strict_priority", None, "strict_priority must be True or False, got None"),
    ("retry_delay", 5, "retry_delay must be None or a callable"),
    ("retry_delay", "a.b", "retry_delay must be None or a callable"),
    ("error_handler", 5, "error_handler must be None or a callable"),
    ("middleware", "a.b", "middleware must be a list of callables"),
    ("middleware", 5, "middleware must be a list of callables"),
    ("middleware", ["/"], "middleware must be a list of callables f(task_context, call_next), got '/' in it"),
    ("middleware", [_middleware, None], "got None in it"),
])
def test_worker_config_refuses_hooks_and_flags_of_the_wrong_type(field: str, value: Any, message: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        WorkerConfig(**{field: value})
    assert caught.value.field == field
    assert message in str(caught.value)


def test_worker_config_accepts_hooks_and_flags_of_the_right_type() -> None:
    config = WorkerConfig(strict_priority=True, retry_delay=lambda n, e: 1.0, error_handler=print,
                          middleware=[_middleware])
    assert config.strict_priority is True and config.middleware == (_middleware,)
    from queuecore import default_retry_delay

    assert WorkerConfig(retry_delay=None).retry_delay is default_retry_delay  # type: ignore[arg-type]
    assert WorkerConfig(error_handler=None, middleware=()).error_handler is None


@pytest.mark.parametrize("queues", [5, 2.5, True, b"default"])
def test_queues_of_the_wrong_type_are_a_configuration_error(queues: Any) -> None:
    with pytest.raises(ConfigurationError, match=r"^queues must be a dict of queue name -> weight") as caught:
        WorkerConfig(queues=queues)
    assert caught.value.field == "queues"


@pytest.mark.parametrize("queues", ["a=1,b=2,a=3", "default,default", ["low", "low"]])
def test_a_queue_given_twice_is_refused_not_left_to_its_last_weight(queues: Any) -> None:
    """``--queues a=1,b=2,a=3`` served ``a`` at weight 3, and said nothing of the 1."""
    with pytest.raises(ConfigurationError, match=r"is given twice") as caught:
        WorkerConfig(queues=queues)
    assert caught.value.field == "queues"


@pytest.mark.parametrize("queues", ["", " ", ",", []])
def test_queues_that_name_no_queue_are_refused(queues: Any) -> None:
    """An empty string served the default queue, while an empty list was refused: both are refused."""
    with pytest.raises(ConfigurationError, match=r"^no queues given") as caught:
        WorkerConfig(queues=queues)
    assert caught.value.field == "queues"


def test_no_queues_at_all_is_the_default_queue() -> None:
    assert WorkerConfig(queues=None).queues == {"default": 1}  # type: ignore[arg-type]
    assert WorkerConfig(queues={}).queues == {"default": 1}


def test_a_key_prefix_error_names_its_field() -> None:
    with pytest.raises(ConfigurationError, match="invalid key prefix") as caught:
        ConnectionConfig(key_prefix="a b")
    assert caught.value.field == "key_prefix"
