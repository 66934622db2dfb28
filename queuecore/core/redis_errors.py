"""Turn redis-py exceptions into queuecore's typed errors at the edge of every public call."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import redis

from queuecore.core.errors import BrokerError, RedisFull, RedisUnavailable, WrongKeyType

F = TypeVar("F", bound=Callable[..., Any])


def is_wrong_type(text: str) -> bool:
    """True for our scripts' ``QCWRONGTYPE`` refusal and Redis's own ``WRONGTYPE`` error."""
    return "QCWRONGTYPE" in text or text.startswith("WRONGTYPE") or ": WRONGTYPE" in text


def wrong_type_message(text: str) -> str:
    detail = text.split("QCWRONGTYPE", 1)[1].strip() if "QCWRONGTYPE" in text else text
    return f"corrupt data in Redis, nothing was written: {detail}"


def is_out_of_memory(text: str) -> bool:
    """True for Redis's refusal of a write at ``maxmemory`` (``OOM command not allowed ...``), also
    when it comes back from inside a script."""
    return text.startswith("OOM") or ": OOM " in text or "maxmemory" in text


def full_message(text: str) -> str:
    return f"Redis is full (maxmemory reached): {text}"


# Errors that mean "Redis cannot answer right now" rather than "Redis refused this": besides lost
# connections and timeouts, a Redis Cluster failing over (CLUSTERDOWN, MASTERDOWN, TRYAGAIN, no node
# for a slot) and a sentinel naming no master (MasterNotFoundError is a ConnectionError).
UNAVAILABLE = (redis.ConnectionError, redis.TimeoutError, redis.exceptions.ClusterDownError,
               redis.exceptions.TryAgainError, redis.exceptions.ClusterError, redis.exceptions.SlotNotCoveredError)


def cluster_unreachable(exc: BaseException) -> bool:
    """True for redis-py's error when no node of a cluster answers (a RedisClusterException, which
    otherwise means a command the cluster cannot run, such as keys of several slots)."""
    return isinstance(exc, redis.exceptions.RedisClusterException) and "cannot be connected" in str(exc)


def is_connection_error(exc: BaseException) -> bool:
    """True when ``exc`` says Redis cannot answer: redis-py's errors of that kind, and our own
    ``RedisUnavailable`` (what the Inspector raises for them, e.g. under the bulk-job runner)."""
    return (isinstance(exc, (*UNAVAILABLE, RedisUnavailable, ConnectionError, TimeoutError))
            or cluster_unreachable(exc))


@contextmanager
def broker_errors() -> Iterator[None]:
    """Re-raise Redis failures as ``BrokerError`` with a one-line message: ``RedisUnavailable`` when Redis
    cannot answer, ``RedisFull`` for OOM, ``WrongKeyType`` for WRONGTYPE."""
    try:
        yield
    except UNAVAILABLE as exc:
        raise RedisUnavailable(f"Redis is unreachable: {exc or type(exc).__name__}") from exc
    except redis.exceptions.RedisClusterException as exc:
        if cluster_unreachable(exc):
            raise RedisUnavailable(f"Redis is unreachable: {exc}") from exc
        raise BrokerError(f"the Redis Cluster refused the operation: {exc}") from exc
    except redis.ResponseError as exc:
        text = str(exc)
        if is_out_of_memory(text):
            raise RedisFull(full_message(text)) from exc
        if is_wrong_type(text):
            raise WrongKeyType(wrong_type_message(text)) from exc
        raise BrokerError(f"Redis refused the operation: {text}") from exc


def translate(func: F) -> F:
    """Decorator form of ``broker_errors``."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with broker_errors():
            return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
