"""The broker: the worker's and the client's Redis operations that are plain commands.

Every change to a task, a queue's lists or a lease is an atomic Lua script, sent through one typed
wrapper each in ``scripts.py``. What needs no script lives here, so that "who writes key X" has
one answer on the worker's and the client's side: a script in ``lua/`` or a method below.

- the set of known queue names (``register_queues``), and moving keys an earlier version wrote;
- a stopped worker's heartbeat (``remove_server``);
- Redis's clock and eviction policy (``time``, ``eviction_policy``);
- a queue's old per-minute and per-day counters (``prune_stats``);
- the pub/sub connection the subscriber listens on (``pubsub``);
- finding a task's queue by id, and the blocking wait on a task's done token (``wait_for_done``).

The operator's side (reads, and every action) is the Inspector's, also through ``scripts.py``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from queuecore.core.keys import Keys, QueueKeys, is_valid_name, stats_day, stats_minute
from queuecore.core.topology import eviction_policy, follows_sentinels
from queuecore.core.upgrade import move_legacy_global_keys

MINUTE_STATS_KEEP = 3 * 3600.0  # per-minute counters cover the last hours
DAY_STATS_KEEP_DAYS = 90


class Broker:
    """Plain Redis commands of the worker and the client (see the module), on one Redis client."""

    def __init__(self, redis: Any, keys: Keys) -> None:
        self._redis = redis
        self._keys = keys

    def pipeline(self) -> Any:
        """A non-transactional pipeline, for sending script calls and ``register_queues`` together."""
        return self._redis.pipeline(transaction=False)

    def register_queues(self, names: Iterable[str], client: Any = None) -> None:
        """Add queue names to the set of known queues (what the dashboard and CLI list), on
        ``client`` when given (a pipeline)."""
        names = sorted(set(names))
        if names:
            (client if client is not None else self._redis).sadd(self._keys.queues, *names)

    def move_legacy_keys(self) -> list[str]:
        """Move the keys of no queue that an earlier version wrote to their names now (``upgrade.py``)."""
        return move_legacy_global_keys(self._redis, self._keys)

    def remove_server(self, server_id: str) -> None:
        """Delete a worker process's heartbeat and its entry in the index of live processes (on a
        clean exit). DEL and ZREM free memory, so this works at maxmemory."""
        pipe = self._redis.pipeline(transaction=False)
        pipe.delete(self._keys.server(server_id))  # one key per DEL: a cluster pipeline takes no more
        pipe.delete(self._keys.server_task_types(server_id))
        pipe.zrem(self._keys.servers, server_id)
        pipe.execute()

    def time(self) -> float:
        """Redis's clock (``TIME``), in seconds since the epoch."""
        seconds, micros = self._redis.time()
        return float(seconds) + float(micros) / 1_000_000

    def eviction_policy(self) -> str | None:
        """Redis's ``maxmemory-policy`` (``topology.eviction_policy``)."""
        return eviction_policy(self._redis)

    def prune_stats(self, key: str, now: float) -> int:
        """Delete a queue's per-minute counters older than a few hours and per-day counters older
        than 90 days (fields of its ``stats`` HASH); returns how many went."""
        oldest_minute = stats_minute(now - MINUTE_STATS_KEEP)
        oldest_day = stats_day(now - DAY_STATS_KEEP_DAYS * 86400)
        old = []
        for field in self._redis.hkeys(key):
            _, _, stamp = field.partition(":")
            if not stamp:
                continue
            if ("T" in stamp and stamp < oldest_minute) or ("T" not in stamp and stamp < oldest_day):
                old.append(field)
        if old:
            self._redis.hdel(key, *old)
        return len(old)

    def pubsub(self) -> Any:
        """A new pub/sub connection (the subscriber's), which skips subscribe confirmations."""
        return self._redis.pubsub(ignore_subscribe_messages=True)

    def pubsub_must_ping(self) -> bool:
        """Whether a subscription must send a PING every ``topology.MASTER_RECHECK`` seconds to find
        out that its server is no longer the master (a sentinel client)."""
        return follows_sentinels(self._redis)

    @staticmethod
    def ping_subscription(pubsub: Any) -> None:
        """Send a PING on a subscription (its PONG comes back among the messages)."""
        pubsub.ping()

    def queues_holding(self, task_id: str) -> list[str]:
        """The known queues that hold a task with this id (one EXISTS each, in one pipeline)."""
        queues = sorted(q for q in cast("set[str]", self._redis.smembers(self._keys.queues)) if is_valid_name(q))
        pipe = self._redis.pipeline(transaction=False)
        for queue in queues:
            pipe.exists(self._keys.queue(queue).task(task_id))
        return [queue for queue, n in zip(queues, pipe.execute(), strict=True) if n]


def wait_for_done(blocking: Any, q: QueueKeys, task_id: str, block: float) -> Any:
    """Block up to ``block`` seconds for a task's done token on ``blocking`` (a client whose socket
    timeout allows it; with an asyncio client, await the result). The token is rotated, not taken,
    so it stays for every other waiter; Redis takes a timeout in seconds with decimals."""
    done = q.done(task_id)
    return blocking.blmove(done, done, block, "RIGHT", "LEFT")
