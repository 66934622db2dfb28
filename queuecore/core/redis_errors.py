"""Turn redis-py exceptions into queuecore's typed errors at the edge of every public call."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any, TypeVar

import redis
import redis.sentinel

from queuecore.core.errors import BrokerError, RedisFull, RedisUnavailable, WrongKeyType, WrongServer

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
# connections and timeouts, a Redis Cluster failing over or moving a slot (CLUSTERDOWN, MASTERDOWN,
# TRYAGAIN, MOVED or ASK redirections redis-py did not follow, no node for a slot), a sentinel naming
# no master (MasterNotFoundError is a ConnectionError), and a server that does not answer in Redis's
# protocol (InvalidResponse: the URL's port belongs to something else).
UNAVAILABLE = (redis.ConnectionError, redis.TimeoutError, redis.exceptions.ClusterDownError,
               redis.exceptions.TryAgainError, redis.exceptions.ClusterError, redis.exceptions.SlotNotCoveredError,
               redis.exceptions.AskError, redis.exceptions.InvalidResponse)


def unavailable_reason(exc: BaseException) -> str:
    """Why Redis cannot answer, in one line: the error's own text, and for a server that answered in
    another protocol, or a cluster moving a slot, what that means."""
    if isinstance(exc, redis.exceptions.InvalidResponse):
        return f"the server at that address does not answer in Redis's protocol ({exc})"
    text = str(exc) or type(exc).__name__
    if isinstance(exc, redis.sentinel.MasterNotFoundError) and " : " in text:
        # redis-py appends each sentinel's client repr (a line of 1,400 characters); its error kinds suffice
        kinds = ", ".join(dict.fromkeys(re.findall(r" - ([\w:]+)", text))) or "no answer"
        return f"{text.split(' : ', 1)[0]}: no sentinel named one ({kinds})"
    if isinstance(exc, redis.ConnectionError) and text.startswith("Connection closed by server"):
        # No reply at all: what PostgreSQL, say, does with a Redis command, or a TLS-only Redis
        return (f"{text.rstrip('.')} without a reply: a Redis restarting, or a port that speaks another protocol "
                "(a Redis that takes TLS only wants a rediss:// URL)")
    if isinstance(exc, (redis.exceptions.TryAgainError, redis.exceptions.AskError)) or (
            isinstance(exc, redis.exceptions.ClusterError) and "TTL exhausted" in text):
        # redis-py's "TTL exhausted": it was redirected or told to try again until it gave up
        return (f"the Redis Cluster is moving this key's slot between masters (a resharding or a failover "
                f"in progress); try again once it ends ({text})")
    return text


def unreachable_message(exc: BaseException) -> str:
    """The one-line message of ``RedisUnavailable`` (and of the CLI's error) for ``exc``."""
    return f"Redis is unreachable: {unavailable_reason(exc)}"


def cluster_unreachable(exc: BaseException) -> bool:
    """True for redis-py's error when no node of a cluster answers (a RedisClusterException, which
    otherwise means a command the cluster cannot run, such as keys of several slots), but not when
    the node that answered is no cluster node."""
    return (isinstance(exc, redis.exceptions.RedisClusterException) and "cannot be connected" in str(exc)
            and not not_a_cluster(exc))


def not_a_cluster(exc: BaseException) -> bool:
    """True when a ``redis+cluster://`` URL names a server that runs without cluster mode."""
    return "Cluster mode is not enabled" in str(exc)


def is_connection_error(exc: BaseException) -> bool:
    """True when ``exc`` says Redis cannot answer: redis-py's errors of that kind, and our own
    ``RedisUnavailable`` (what the Inspector raises for them, e.g. under the bulk-job runner)."""
    return (isinstance(exc, (*UNAVAILABLE, RedisUnavailable, ConnectionError, TimeoutError))
            or cluster_unreachable(exc))


class _BrokerErrors:
    """The context manager ``broker_errors()`` returns: a plain class, since a generator-based one
    costs more than the rest of a single enqueue's bookkeeping."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if exc is None:
            return
        if isinstance(exc, UNAVAILABLE):
            raise RedisUnavailable(unreachable_message(exc)) from exc
        if isinstance(exc, redis.exceptions.RedisClusterException):
            if cluster_unreachable(exc):
                raise RedisUnavailable(unreachable_message(exc)) from exc
            if not_a_cluster(exc):
                raise WrongServer("the redis+cluster:// URL names a server that is not a Redis Cluster node "
                                  "(cluster mode is not enabled there): use redis:// for one server") from exc
            raise BrokerError(f"the Redis Cluster refused the operation: {exc}") from exc
        if isinstance(exc, redis.ResponseError):
            text = str(exc)
            if is_out_of_memory(text):
                raise RedisFull(full_message(text)) from exc
            if is_wrong_type(text):
                raise WrongKeyType(wrong_type_message(text)) from exc
            if "unknown command 'SENTINEL'" in text:
                raise WrongServer("the redis+sentinel:// URL names a server that is not a sentinel (it does not know "
                                  "the SENTINEL command): list the sentinels' addresses, or use redis:// for "
                                  "one server") from exc
            if "DB index is out of range" in text:
                raise WrongServer("the URL's database number is beyond those this Redis has (its 'databases' "
                                  f"setting; 16 by default: 0 to 15): {text}") from exc
            raise BrokerError(f"Redis refused the operation: {text}") from exc


_BROKER_ERRORS = _BrokerErrors()


def broker_errors() -> _BrokerErrors:
    """Re-raise Redis failures as ``BrokerError`` with a one-line message: ``RedisUnavailable`` when Redis
    cannot answer, ``RedisFull`` for OOM, ``WrongKeyType`` for WRONGTYPE."""
    return _BROKER_ERRORS


def translate(func: F) -> F:
    """Decorator form of ``broker_errors``."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with broker_errors():
            return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
