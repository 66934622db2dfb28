"""The recoverer: takes back tasks whose lease expired because their worker died or hung."""

from __future__ import annotations

import logging

from queuecore.core.clock import to_ms
from queuecore.core.component import Periodic
from queuecore.core.keys import stats_day, stats_minute

logger = logging.getLogger("queuecore.worker")
BATCH = 100


class Recoverer(Periodic):
    name = "recoverer"

    def __init__(self, worker) -> None:
        super().__init__(worker, worker.config.recover_interval)

    def run_once(self) -> tuple[int, int, int]:
        """Recover expired leases in every queue: returns (requeued, archived, orphans)."""
        # Renew this process's own leases first, so that after a Redis outage longer than the lease
        # the worker does not take back tasks it is still running or about to acknowledge.
        if self.worker.processor.running:
            self.worker.heartbeater.renew_leases()
        totals = [0, 0, 0]
        now = self.worker.clock.now()
        for name in self.worker.config.queues:
            q = self.worker.keys.queue(name)
            while True:
                counts = self.worker.scripts.recover(q, now_ms=to_ms(now), limit=BATCH, day=stats_day(now),
                                                     minute=stats_minute(now))
                for i, n in enumerate(counts):
                    totals[i] += n
                if sum(counts) < BATCH:
                    break
        requeued, archived, orphans = totals
        if requeued or archived or orphans:
            logger.warning("recovered tasks with expired leases: %d requeued, %d archived (retries spent), "
                           "%d orphan ids dropped", requeued, archived, orphans)
        return requeued, archived, orphans
