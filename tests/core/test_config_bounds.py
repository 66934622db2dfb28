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
