"""Every Redis key and channel name queuecore uses, built in one place.

All keys of one queue share the hash tag ``{<queue>}`` so that every script touches a single
Redis Cluster slot: ``<prefix>:{<queue>}:<suffix>``.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from functools import lru_cache

DEFAULT_PREFIX = "qc"
_QUEUE_NAME = re.compile(r"^[^\s{}]{1,200}$")
_PREFIX = re.compile(r"^[^\s{}]{1,64}$")
_TASK_ID = re.compile(r"^[A-Za-z0-9_.:\-]{1,200}$")
_TYPE_NAME = re.compile(r"^[^\s{}]{1,200}$")


def _check(pattern: re.Pattern[str], value: object, what: str, rule: str) -> str:
    from queuecore.core.errors import ConfigurationError

    # fullmatch, not match: "$" would also accept a trailing newline ("default\n").
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise ConfigurationError(f"invalid {what} {value!r}: {rule}")
    return value


def validate_queue_name(name: object) -> str:
    """Return ``name`` if it is a valid queue name, else raise ``ConfigurationError``."""
    return _check(_QUEUE_NAME, name, "queue name", "1-200 characters, no whitespace, '{' or '}'")


def validate_prefix(prefix: object) -> str:
    """Return ``prefix`` if it is a valid key prefix, else raise ``ConfigurationError``."""
    return _check(_PREFIX, prefix, "key prefix", "1-64 characters, no whitespace, '{' or '}'")


def validate_task_id(task_id: object) -> str:
    """Return ``task_id`` if it is a safe token (letters, digits, ``_ . : -``; up to 200)."""
    return _check(_TASK_ID, task_id, "task id", "1-200 characters of A-Z a-z 0-9 _ . : -")


def validate_type_name(name: object) -> str:
    """Return ``name`` if it is a valid task type name."""
    return _check(_TYPE_NAME, name, "task type", "1-200 characters, no whitespace, '{' or '}'")


@dataclass(frozen=True)
class QueueKeys:
    """The keys of one queue. Build with ``Keys.queue(name)``."""

    prefix: str
    queue: str

    @property
    def base(self) -> str:
        """``<prefix>:{<queue>}:``, the start of every key of this queue."""
        return f"{self.prefix}:{{{self.queue}}}:"

    @property
    def pending(self) -> str:
        """LIST of task ids ready to run; pushed on the left, popped on the right."""
        return self.base + "pending"

    @property
    def active(self) -> str:
        """ZSET of running task ids scored by lease expiry (unix ms): no active task without a lease."""
        return self.base + "active"

    @property
    def scheduled(self) -> str:
        """ZSET of task ids scored by the time they are due (unix ms)."""
        return self.base + "scheduled"

    @property
    def retry(self) -> str:
        """ZSET of failed task ids scored by their next attempt (unix ms)."""
        return self.base + "retry"

    @property
    def archived(self) -> str:
        """ZSET of archived (dead) task ids scored by when they were archived (unix ms)."""
        return self.base + "archived"

    @property
    def completed(self) -> str:
        """ZSET of completed task ids kept for retention, scored by when they expire (unix ms)."""
        return self.base + "completed"

    @property
    def paused(self) -> str:
        """STRING present while the queue is paused."""
        return self.base + "paused"

    @property
    def stats(self) -> str:
        """HASH of counters: ``processed``/``failed`` totals, per day ``d:`` and per minute ``m:``."""
        return self.base + "stats"

    @property
    def repair(self) -> str:
        """HASH of the repair pass shared by the workers: ``cursor`` and ``next_at`` (unix ms)."""
        return self.base + "repair"

    @property
    def recovery(self) -> str:
        """HASH of the recoverers' shared view of time: ``seen`` (Redis time of the last recovery
        round, ms) and ``grace_until`` (ms): see ``recover.lua``."""
        return self.base + "recovery"

    @property
    def task_prefix(self) -> str:
        """The start of every task hash key of this queue (``...:t:<id>``)."""
        return self.base + "t:"

    def task(self, task_id: str) -> str:
        """HASH of one task: ``msg`` (encoded message), ``state`` and the mutable fields."""
        return self.task_prefix + task_id

    def unique(self, type_name: str, digest: str) -> str:
        """STRING holding the id of the task that owns a uniqueness lock (with a TTL)."""
        return f"{self.base}unique:{type_name}:{digest}"

    def state_key(self, state: str) -> str:
        """The LIST or ZSET holding ids of tasks in ``state``."""
        return self.base + state

    @property
    def wake_channel(self) -> str:
        """Pub/sub channel told when the queue turns non-empty, so idle workers fetch at once."""
        return self.base + "wake"

    @property
    def all_pattern(self) -> str:
        """A SCAN pattern matching every key of this queue."""
        return _escape_glob(self.base) + "*"


@dataclass(frozen=True)
class Keys:
    """Key builder for one prefix."""

    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        validate_prefix(self.prefix)

    def queue(self, name: str) -> QueueKeys:
        return QueueKeys(self.prefix, validate_queue_name(name))

    @property
    def queues(self) -> str:
        """SET of every known queue name."""
        return f"{self.prefix}:queues"

    @property
    def servers(self) -> str:
        """ZSET of worker process ids scored by when their heartbeat expires (unix ms)."""
        return f"{self.prefix}:servers"

    def server(self, server_id: str) -> str:
        """STRING (JSON) describing one worker process and its active tasks, with a TTL."""
        return f"{self.prefix}:servers:{{{server_id}}}"

    @property
    def audit(self) -> str:
        """LIST of operator actions (JSON, newest first), capped."""
        return f"{self.prefix}:audit"

    @property
    def cancel_channel(self) -> str:
        """Pub/sub channel carrying ``<queue> <task id>`` cancel requests."""
        return f"{self.prefix}:cancel"

    @property
    def all_pattern(self) -> str:
        """A SCAN pattern matching every key under this prefix."""
        return _escape_glob(self.prefix) + ":*"


def _escape_glob(text: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def stats_day(unix_seconds: float) -> str:
    """The stats field suffix of a UTC day: ``YYYY-MM-DD``."""
    return _stats_minute(int(unix_seconds // 60))[:10]


def stats_minute(unix_seconds: float) -> str:
    """The stats field suffix of a UTC minute: ``YYYY-MM-DDTHH:MM``."""
    return _stats_minute(int(unix_seconds // 60))


@lru_cache(maxsize=4)
def _stats_minute(minute: int) -> str:  # called per acknowledgement batch: formatted once a minute
    return time.strftime("%Y-%m-%dT%H:%M", time.gmtime(minute * 60))
