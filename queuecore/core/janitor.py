"""The janitor: deletes completed tasks past retention, old archived tasks and old counters."""

from __future__ import annotations

from queuecore.core.clock import to_ms
from queuecore.core.component import Periodic
from queuecore.core.keys import stats_day, stats_minute

BATCH = 200
MINUTE_STATS_KEEP = 3 * 3600.0  # per-minute counters cover the last hours
DAY_STATS_KEEP_DAYS = 90


class Janitor(Periodic):
    name = "janitor"

    def __init__(self, worker) -> None:
        super().__init__(worker, worker.config.janitor_interval)

    def run_once(self) -> int:
        """Clean every queue; returns how many tasks were deleted."""
        deleted = 0
        now = self.worker.clock.now()
        cutoff = to_ms(now - self.worker.config.archive_max_age)
        for name in self.worker.config.queues:
            q = self.worker.keys.queue(name)
            while True:
                n = self.worker.scripts.janitor(q, now_ms=to_ms(now), archive_cutoff_ms=cutoff, limit=BATCH)
                deleted += n
                if n < BATCH:
                    break
            prune_stats(self.worker.redis, q.stats, now)
        return deleted


def prune_stats(redis, key: str, now: float) -> int:
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
