"""Frozen, validated configuration for the core: where Redis is, and how a worker behaves.

The core never reads Django settings or the environment on its own; adapters build these. A
``Client``, ``Inspector`` or ``Worker`` built without a connection asks ``ConnectionConfig.default()``:
the provider an adapter registered (the Django app's reads ``QUEUECORE``), else the environment.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, cast

import redis
import redis.asyncio

from queuecore.core import limits
from queuecore.core.errors import ConfigurationError
from queuecore.core.keys import DEFAULT_PREFIX, Keys, validate_prefix, validate_queue_name
from queuecore.core.message import DEFAULT_MAX_PAYLOAD_BYTES, DEFAULT_MAX_RETRY
from queuecore.core.topology import RedisTarget, connect, connect_async, parse_redis_url
from queuecore.core.topology import redact_url as redact_url  # re-exported: where callers have always found it

if TYPE_CHECKING:
    from queuecore.core.context import Middleware

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_QUEUE = "default"


def default_retry_delay(retried: int, error: BaseException | None = None) -> float:
    """Seconds before attempt ``retried + 1``: ``n**4 + 15 + rand(30) * (n + 1)`` (Sidekiq's curve)."""
    n = retried
    return float(n**4 + 15 + random.randrange(30) * (n + 1))


# The ``QUEUECORE`` setting that gives each of ``ConnectionConfig``'s client defaults: the Django app
# and adminctl (``manage.py adminctl``, ``adminctl --settings``) read a site's settings through it.
CLIENT_DEFAULT_SETTINGS = {"MAX_PAYLOAD_BYTES": "max_payload_bytes", "DEFAULT_MAX_RETRY": "default_max_retry",
                           "DEFAULT_RETENTION": "default_retention"}


@dataclass(frozen=True)
class ConnectionConfig:
    """Where Redis is and which key namespace to use, and what a client stores by default."""

    redis_url: str = DEFAULT_REDIS_URL
    key_prefix: str = DEFAULT_PREFIX
    socket_timeout: float = 5.0
    connect_timeout: float = 2.0
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    default_max_retry: int = DEFAULT_MAX_RETRY  # a task's max_retry when neither it nor its enqueue gives one
    # Seconds a task's result is kept when neither it nor its enqueue gives a retention; 0 = not kept.
    default_retention: float = 0.0

    def __post_init__(self) -> None:
        try:
            validate_prefix(self.key_prefix)
        except ConfigurationError as exc:
            raise ConfigurationError(str(exc), field=exc.field or "key_prefix") from None
        object.__setattr__(self, "_target", parse_redis_url(self.redis_url))
        for name, allowed in (("socket_timeout", limits.SOCKET_TIMEOUT), ("connect_timeout", limits.SOCKET_TIMEOUT),
                              ("max_payload_bytes", limits.MAX_PAYLOAD_BYTES),
                              ("default_max_retry", limits.MAX_RETRY), ("default_retention", limits.RETENTION)):
            object.__setattr__(self, name, allowed.check(getattr(self, name), name))

    def __repr__(self) -> str:  # the URL without its password (a traceback's locals, a debug log)
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values["redis_url"] = redact_url(self.redis_url)
        shown = ", ".join(f"{name}={value!r}" for name, value in values.items())
        return f"ConnectionConfig({shown})"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> ConnectionConfig:
        """Build from ``QUEUECORE_REDIS_URL`` and ``QUEUECORE_KEY_PREFIX``, then ``overrides``."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        if env.get("QUEUECORE_REDIS_URL"):
            values["redis_url"] = env["QUEUECORE_REDIS_URL"]
        if env.get("QUEUECORE_KEY_PREFIX"):
            values["key_prefix"] = env["QUEUECORE_KEY_PREFIX"]
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    @classmethod
    def default(cls, **overrides: Any) -> ConnectionConfig:
        """The connection of a ``Client``, ``Inspector`` or ``Worker`` built without one: the registered
        provider's (``set_connection_provider``; the Django app's is ``QUEUECORE`` whenever Django
        settings are configured), else ``from_env()``; ``overrides`` that are not None win."""
        base = _connection_provider() if _connection_provider is not None else None
        if base is None:
            return cls.from_env(**overrides)
        given = {k: v for k, v in overrides.items() if v is not None}
        return replace(base, **given) if given else base

    @property
    def keys(self) -> Keys:
        return Keys(self.key_prefix)

    @property
    def target(self) -> RedisTarget:
        """The parsed ``redis_url``: one server, a Redis Cluster or a Sentinel-managed master."""
        return cast(RedisTarget, self.__dict__["_target"])

    def connect(self, *, socket_timeout: float | None = None) -> redis.Redis:
        """A new Redis client (strings decoded as UTF-8) for this configuration: a cluster client for a
        ``redis+cluster://`` URL, the sentinels' master for ``redis+sentinel://`` (``topology.py``)."""
        return connect(self.target, socket_timeout=socket_timeout or self.socket_timeout,
                       connect_timeout=self.connect_timeout)

    def connect_async(self, *, socket_timeout: float | None = None) -> redis.asyncio.Redis:
        """``connect`` for asyncio."""
        return connect_async(self.target, socket_timeout=socket_timeout or self.socket_timeout,
                             connect_timeout=self.connect_timeout)


_connection_provider: Callable[[], ConnectionConfig | None] | None = None


def set_connection_provider(provider: Callable[[], ConnectionConfig | None] | None) -> None:
    """Register where ``ConnectionConfig.default()`` finds the process's connection (``None`` from the
    provider, or no provider: the environment). The Django app registers one reading ``QUEUECORE``."""
    global _connection_provider
    _connection_provider = provider


def parse_queues(spec: str | Mapping[str, int] | Sequence[str] | None) -> dict[str, int]:
    """Queues with weights from ``"critical=6,default=3,low"``, a mapping, or a list of names (None:
    the default queue); a name given twice is refused, not left to the last weight given."""
    if spec is None or spec == {}:
        return {DEFAULT_QUEUE: 1}
    items: list[tuple[str, Any]]
    if isinstance(spec, str):
        items = []
        for part in spec.split(","):
            part = part.strip()
            if not part:
                continue
            name, _, weight = part.partition("=")
            items.append((name.strip(), weight.strip() or 1))
    elif isinstance(spec, Mapping):
        items = list(spec.items())
    elif isinstance(spec, Iterable) and not isinstance(spec, (bytes, bytearray)):
        items = [(name, 1) for name in spec]
    else:
        raise ConfigurationError(f"queues must be a dict of queue name -> weight, a list of queue names or a string "
                                 f"such as 'critical=6,default=3,low', got {spec!r}", field="queues")
    queues: dict[str, int] = {}
    for name, weight in items:
        validate_queue_name(name)
        if name in queues:
            raise ConfigurationError(f"queue {name!r} is given twice", field="queues")
        value: object = weight
        if isinstance(weight, str):
            try:
                value = int(weight)
            except ValueError:
                raise ConfigurationError(f"queue {name!r}: weight {weight!r} is not a whole number",
                                         field="queues") from None
        try:
            queues[name] = int(limits.WEIGHT.check(value, "weight"))
        except ConfigurationError as exc:
            raise ConfigurationError(f"queue {name!r}: {exc}", field="queues") from None
    if not queues:
        raise ConfigurationError("no queues given", field="queues")
    return queues


DEFAULT_MAX_ARCHIVE_SIZE = 10_000  # archived tasks a queue keeps, unless MAX_ARCHIVE_SIZE says otherwise


@dataclass(frozen=True)
class WorkerConfig:
    """How a worker process behaves. Every interval is in seconds and configurable for tests."""

    queues: Mapping[str, int] = field(default_factory=lambda: {DEFAULT_QUEUE: 1})
    strict_priority: bool = False
    concurrency: int = 10
    prefetch: int | None = None  # tasks fetched ahead of free handlers; None = same as concurrency
    shutdown_timeout: float = 25.0
    lease_duration: float = 30.0
    heartbeat_interval: float = 5.0
    recover_interval: float = 10.0
    # One repair step (a bounded scan for task hashes no list or zset points at) per queue and this
    # period, shared by all workers; 0 = every recover round of every worker.
    repair_interval: float = 5.0
    forward_interval: float = 0.5
    janitor_interval: float = 8.0
    fetch_poll_interval: float = 1.0
    cancel_grace: float = 1.0
    abandon_grace: float = 5.0
    default_timeout: float | None = 1800.0
    max_archive_size: int = DEFAULT_MAX_ARCHIVE_SIZE
    archive_max_age: float = 90 * 24 * 3600.0
    retry_delay: Callable[[int, BaseException | None], float] = default_retry_delay  # None: this default
    error_handler: Callable[[Any, BaseException], None] | None = None
    middleware: Sequence[Middleware] = ()
    health_file: str | None = None  # rewritten after each heartbeat, removed on a clean stop (liveness.py)
    # Per-task-type statistics (typestats.py), written by the acknowledgement scripts; False: the scripts
    # get nothing per type and write nothing per type (the last percent of a no-op drain).
    type_stats: bool = True

    def __post_init__(self) -> None:
        """Refuse, naming the field and its range, any value a worker cannot work with."""
        object.__setattr__(self, "queues", parse_queues(self.queues))
        if not isinstance(self.strict_priority, bool):
            raise ConfigurationError(f"strict_priority must be True or False, got {self.strict_priority!r}",
                                     field="strict_priority")
        if self.retry_delay is None:
            object.__setattr__(self, "retry_delay", default_retry_delay)
        if not callable(self.retry_delay):
            raise ConfigurationError(f"retry_delay must be None or a callable f(retried, error) -> seconds, got "
                                     f"{self.retry_delay!r}", field="retry_delay")
        if self.error_handler is not None and not callable(self.error_handler):
            raise ConfigurationError(f"error_handler must be None or a callable f(task_context, error), got "
                                     f"{self.error_handler!r}", field="error_handler")
        if isinstance(self.middleware, (str, bytes)) or not isinstance(self.middleware, Sequence):
            raise ConfigurationError(f"middleware must be a list of callables f(task_context, call_next), got "
                                     f"{self.middleware!r}", field="middleware")
        object.__setattr__(self, "middleware", tuple(self.middleware))
        for hook in self.middleware:
            if not callable(hook):
                raise ConfigurationError(f"middleware must be a list of callables f(task_context, call_next), got "
                                         f"{hook!r} in it", field="middleware")
        object.__setattr__(self, "concurrency", limits.CONCURRENCY.check(self.concurrency, "concurrency"))
        if self.prefetch is None:
            object.__setattr__(self, "prefetch", self.concurrency)
        object.__setattr__(self, "prefetch", limits.PREFETCH.check(self.prefetch, "prefetch"))
        for name, allowed in _WORKER_RANGES:
            object.__setattr__(self, name, allowed.check(getattr(self, name), name))
        if self.default_timeout is not None:
            object.__setattr__(self, "default_timeout", limits.TIMEOUT.check(self.default_timeout, "default_timeout"))
        if self.health_file is not None:
            path = os.fspath(self.health_file) if isinstance(self.health_file, os.PathLike) else self.health_file
            if not isinstance(path, str) or not path.strip():
                raise ConfigurationError(f"health_file must be a file path or None, got {self.health_file!r}",
                                         field="health_file")
            if os.path.isdir(path):
                raise ConfigurationError(f"health_file {path!r} is a directory: name a file in it (say "
                                         f"{os.path.join(path, 'queuecore-health.json')!r})", field="health_file")
            object.__setattr__(self, "health_file", path)
        if not isinstance(self.type_stats, bool):
            raise ConfigurationError(f"type_stats must be True or False, got {self.type_stats!r}",
                                     field="type_stats")
        if self.heartbeat_interval >= self.lease_duration:
            raise ConfigurationError("heartbeat_interval must be shorter than lease_duration "
                                     "(leases are renewed on each heartbeat)", field="heartbeat_interval")


# Every numeric field of WorkerConfig but concurrency, prefetch and default_timeout, with its range.
_WORKER_RANGES: tuple[tuple[str, limits.Range], ...] = (
    ("shutdown_timeout", limits.INTERVAL), ("lease_duration", limits.INTERVAL),
    ("heartbeat_interval", limits.INTERVAL), ("recover_interval", limits.INTERVAL),
    ("repair_interval", limits.REPAIR_INTERVAL), ("forward_interval", limits.INTERVAL),
    ("janitor_interval", limits.INTERVAL), ("fetch_poll_interval", limits.INTERVAL),
    ("cancel_grace", limits.GRACE), ("abandon_grace", limits.GRACE),
    ("max_archive_size", limits.MAX_ARCHIVE_SIZE), ("archive_max_age", limits.ARCHIVE_MAX_AGE),
)
