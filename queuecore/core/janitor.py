"""The janitor: deletes completed tasks past retention, old archived tasks and old counters."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from queuecore.core.clock import Clock, to_ms
from queuecore.core.component import Periodic
from queuecore.core.health import RedisHealth
from queuecore.core.keys import QueueKeys, stats_day, stats_minute
from queuecore.core.scripts import Scripts

BATCH = 200
MINUTE_STATS_KEEP = 3 * 3600.0  # per-minute counters cover the last hours
DAY_STATS_KEEP_DAYS = 90


class Janitor(Periodic):
    name = "janitor"

    def __init__(self, scripts: Scripts, clock: Clock, queues: Iterable[QueueKeys], interval: float,
                 archive_max_age: float, health: RedisHealth) -> None:
        super().__init__(interval, health)
        self._scripts = scripts
        self._clock = clock
        self._queues = tuple(queues)
        self._archive_max_age = archive_max_age

    def run_once(self) -> int:
        """Clean every queue; returns how many tasks were deleted."""
        deleted = 0
        now = self._clock.now()
        cutoff = to_ms(now - self._archive_max_age)
        for q in self._queues:
            while True:
                n = self._scripts.janitor(q, now_ms=to_ms(now), archive_cutoff_ms=cutoff, limit=BATCH)
                deleted += n
                if n < BATCH:
                    break
            prune_stats(self._scripts.redis, q.stats, now)
        return deleted


def prune_stats(redis: Any, key: str, now: float) -> int:
    """Delete per-minute counters older than a few hours and per-day counters older than 90 days."""
    oldest_minute = stats_minute(now - MINUTE_STATS_KEEP)
    oldest_day = stats_day(now - DAY_STATS_KEEP_DAYS * 86400)
    old = []
    for field in redis.hkeys(key):
        _, _, stamp = field.partition(":")
        if not stamp:
            continue
        if ("T" in stamp and stamp < oldest_minute) or ("T" not in stamp and stamp < oldest_day):
            old.append(field)
    if old:
        redis.hdel(key, *old)
    return len(old)
