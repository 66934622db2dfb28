"""Seed and read the Redis state of a queue directly, in the layout the Lua scripts use (asynq testutil style).

Layout (see ``queuecore/core/keys.py`` and the headers of ``queuecore/core/lua/*.lua``):

- ``t:<id>`` HASH with ``msg`` (encoded ``TaskMessage``), ``state`` and the mutable fields
  ``retried``, ``error``, ``failed_at``, ``pending_since``, ``started_at``, ``lease``, ``cancel``,
  ``unique``, ``result``, ``completed_at``;
- ``pending`` LIST: new ids are LPUSHed on the left, workers RPOP from the right (the right end is
  the oldest);
- ``active``/``scheduled``/``retry``/``archived``/``completed`` ZSETs of ids with scores in unix ms;
- ``stats`` HASH of counters, ``paused`` STRING, ``unique:<type>:<digest>`` STRINGs.
"""

from __future__ import annotations

from typing import Any

import redis

from queuecore.core.keys import QueueKeys
from queuecore.core.message import TaskMessage
from queuecore.core.scripts import BulkBound

ZSET_STATES = ("active", "scheduled", "retry", "archived", "completed")
ALL_STATES = ("pending", *ZSET_STATES)

#: A bulk script call's bound that takes every task there now (no chunk cursor, no later cut-off).
EVERY = BulkBound(since_ms=10**15 - 1, quota=10**6)


def make_msg(task_id: str, queue: str, *, type: str = "test.task", payload: dict[str, Any] | None = None,
             max_retry: int = 25, **fields: Any) -> str:
    """An encoded message as the client would store it."""
    return TaskMessage(id=task_id, type=type, payload=payload or {}, queue=queue, max_retry=max_retry,
                       **fields).encode()


def seed_task(r: redis.Redis, q: QueueKeys, task_id: str, state: str, *, score: float | None = None,
              msg: str | None = None, type: str = "test.task", payload: dict[str, Any] | None = None,
              max_retry: int = 25, index: bool = True, **fields: Any) -> dict[str, str]:
    """Write a task hash and put its id in the structure of ``state``; returns the hash as stored.

    ``fields`` are extra hash fields (``lease=1``, ``retried=2``, ``error="boom"`` ...); ``None``
    values are left out. ``score`` is required for ZSET states. ``index=False`` writes the hash only.
    """
    if msg is None:
        msg = make_msg(task_id, q.queue, type=type, payload=payload, max_retry=max_retry)
    mapping = {"msg": msg, "state": state}
    mapping.update({k: str(v) for k, v in fields.items() if v is not None})
    r.hset(q.task(task_id), mapping=mapping)
    if index:
        add_id(r, q, state, task_id, score)
    return mapping


def add_id(r: redis.Redis, q: QueueKeys, state: str, task_id: str, score: float | None = None) -> None:
    """Put an id in a state's LIST/ZSET without touching any hash (for orphan ids)."""
    if state == "pending":
        r.lpush(q.pending, task_id)
    else:
        if score is None:
            raise ValueError(f"a score is needed for state {state}")
        r.zadd(q.state_key(state), {task_id: score})


def read_task(r: redis.Redis, q: QueueKeys, task_id: str) -> dict[str, str]:
    """The task hash ({} when it does not exist)."""
    return r.hgetall(q.task(task_id))


def read_pending(r: redis.Redis, q: QueueKeys) -> list[str]:
    """Pending ids, oldest first (the order workers pop them)."""
    return list(reversed(r.lrange(q.pending, 0, -1)))


def read_zset(r: redis.Redis, key: str) -> dict[str, float]:
    return dict(r.zrange(key, 0, -1, withscores=True))


def read_tasks(r: redis.Redis, q: QueueKeys) -> dict[str, dict[str, str]]:
    """Every task hash of the queue, by id."""
    out = {}
    for key in r.scan_iter(match=q.all_pattern, count=1000):
        if key.startswith(q.task_prefix):
            out[key[len(q.task_prefix):]] = r.hgetall(key)
    return out


def read_unique_locks(r: redis.Redis, q: QueueKeys) -> dict[str, str]:
    prefix = q.base + "unique:"
    return {key: r.get(key) for key in r.scan_iter(match=q.all_pattern, count=1000) if key.startswith(prefix)}


def read_queue_state(r: redis.Redis, q: QueueKeys) -> dict[str, Any]:
    """The complete state of a queue: every list, zset, hash, flag and lock, for whole-state asserts."""
    return {
        "pending": read_pending(r, q),
        **{state: read_zset(r, q.state_key(state)) for state in ZSET_STATES},
        "paused": bool(r.exists(q.paused)),
        "stats": r.hgetall(q.stats),
        "tasks": read_tasks(r, q),
        "unique": read_unique_locks(r, q),
    }


def empty_state(**overrides: Any) -> dict[str, Any]:
    """The state of an empty queue, with ``overrides`` applied (for building expected states)."""
    state: dict[str, Any] = {"pending": [], **{s: {} for s in ZSET_STATES}, "paused": False, "stats": {},
                             "tasks": {}, "unique": {}}
    state.update(overrides)
    return state


def queue_key_names(r: redis.Redis, q: QueueKeys) -> set[str]:
    """Every Redis key of the queue."""
    return set(r.scan_iter(match=q.all_pattern, count=1000))


class Subscription:
    """A pub/sub subscription whose confirmation has been received, so nothing published after
    ``__init__`` returns can be missed. ``messages()`` returns what was published since the last call
    (it publishes a sentinel and reads up to it, so no sleep is needed to know "nothing came").
    On a Redis 7 cluster it subscribes as the scripts publish there: to a shard channel."""

    _SENTINEL = "__qc-test-sentinel__"

    def __init__(self, r: redis.Redis, channel: str, timeout: float = 5.0) -> None:
        from queuecore.core.topology import sharded_pubsub

        self.r = r
        self.channel = channel
        self.timeout = timeout
        self.sharded = bool(sharded_pubsub(r))
        self.pubsub = r.pubsub()
        if self.sharded:
            self.pubsub.ssubscribe(channel)
        else:
            self.pubsub.subscribe(channel)
        first = self._next()
        if not first or first["type"] not in ("subscribe", "ssubscribe"):
            raise AssertionError(f"no subscribe confirmation for {channel!r}: {first!r}")

    def _next(self) -> dict[str, Any] | None:
        if self.sharded:
            return self.pubsub.get_sharded_message(timeout=self.timeout)  # type: ignore[no-any-return]
        return self.pubsub.get_message(timeout=self.timeout)  # type: ignore[no-any-return]

    def messages(self) -> list[str]:
        self.r.execute_command("SPUBLISH" if self.sharded else "PUBLISH", self.channel, self._SENTINEL)
        out: list[str] = []
        while True:
            message = self._next()
            if message is None:
                raise AssertionError(f"the sentinel published on {self.channel!r} never arrived")
            if message["type"] not in ("message", "smessage"):
                continue
            data = message["data"]
            data = data.decode() if isinstance(data, bytes) else data
            if data == self._SENTINEL:
                return out
            out.append(data)

    def close(self) -> None:
        self.pubsub.close()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

