"""The recoverer: takes back tasks whose lease expired because their worker died or hung, and
repairs task hashes that no list or zset points at (``repair.lua``).

Each round first renews this process's own leases, then runs a bounded slice of the repair scan
(the SCAN cursor of each queue is kept across rounds, so a large keyspace is covered over several
rounds and Redis is never blocked), then recovers expired leases. A hash put back in ``active`` by
the repair carries an expired lease, so it is recovered in the same round.
"""

from __future__ import annotations

import logging

from queuecore.core.clock import to_ms
from queuecore.core.component import Periodic
from queuecore.core.keys import stats_day, stats_minute

logger = logging.getLogger("queuecore.worker")
BATCH = 100
REPAIR_EVERY = 1  # run the repair slice every N rounds
REPAIR_SCAN_COUNT = 1000  # SCAN COUNT hint of one repair call
REPAIR_CALLS_PER_ROUND = 4  # at most this many repair calls per queue and round (each well under 100 ms)


class Recoverer(Periodic):
    name = "recoverer"

    def __init__(self, worker) -> None:
        super().__init__(worker, worker.config.recover_interval)
        self.rounds = 0
        self._cursors: dict[str, str] = {}

    def run_once(self) -> tuple[int, int, int]:
        """Recover expired leases in every queue: returns (requeued, archived, orphans)."""
        # Renew this process's own leases first, so that after a Redis outage longer than the lease
        # the worker does not take back tasks it is still running or about to acknowledge.
        if self.worker.processor.running:
            self.worker.heartbeater.renew_leases()
        if self.rounds % REPAIR_EVERY == 0:
            self.repair()
        self.rounds += 1
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

    def repair(self) -> tuple[int, int]:
        """One bounded slice of the repair scan in every queue: returns (repaired, archived)."""
        repaired = archived = 0
        now_ms = to_ms(self.worker.clock.now())
        for name in self.worker.config.queues:
            q = self.worker.keys.queue(name)
            cursor = self._cursors.get(name, "0")
            for _ in range(REPAIR_CALLS_PER_ROUND):
                cursor, fixed, dead, _seen = self.worker.scripts.repair(q, now_ms=now_ms, cursor=cursor,
                                                                        count=REPAIR_SCAN_COUNT)
                repaired += fixed
                archived += dead
                if cursor == "0":
                    break
            self._cursors[name] = cursor
        if repaired or archived:
            logger.warning("repaired %d task(s) that no list or zset pointed at; archived %d with a reason",
                           repaired, archived)
        return repaired, archived
