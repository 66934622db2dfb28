"""The janitor: deletes completed tasks past retention, old archived tasks and old counters."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from queuecore.core.broker import Broker
from queuecore.core.clock import Clock, to_ms
from queuecore.core.component import Periodic
from queuecore.core.health import RedisHealth
from queuecore.core.keys import QueueKeys
from queuecore.core.scripts import Scripts

BATCH = 200

logger = logging.getLogger("queuecore.worker")


class Janitor(Periodic):
    name = "janitor"

    def __init__(self, scripts: Scripts, broker: Broker, clock: Clock, queues: Iterable[QueueKeys], interval: float,
                 archive_max_age: float, max_archive_size: int, health: RedisHealth) -> None:
        super().__init__(interval, health)
        self._scripts = scripts
        self._broker = broker
        self._clock = clock
        self._queues = tuple(queues)
        self._archive_max_age = archive_max_age
        self._max_archive_size = max_archive_size

    def run_once(self) -> int:
        """Clean every queue; returns how many tasks were deleted."""
        deleted = 0
        now = self._clock.now()
        cutoff = to_ms(now - self._archive_max_age)
        for q in self._queues:
            aged = over_size = 0
            while True:
                counts = self._scripts.janitor(q, now_ms=to_ms(now), archive_cutoff_ms=cutoff,
                                               max_archive_size=self._max_archive_size, limit=BATCH)
                deleted += sum(counts)
                aged += counts[1]
                over_size += counts[2]
                if max(counts) < BATCH:
                    break
            if over_size:  # an operator archived more than the archive keeps: say where they went
                logger.warning("queue %s: deleted the %d oldest archived task(s) beyond max_archive_size (%d)",
                               q.queue, over_size, self._max_archive_size)
            if aged:
                logger.info("queue %s: deleted %d archived task(s) older than archive_max_age (%.0f s)",
                            q.queue, aged, self._archive_max_age)
            self._broker.prune_stats(q.stats, now)
        return deleted

