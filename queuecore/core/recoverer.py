"""The recoverer: takes back tasks whose lease expired because their worker died or hung, and
repairs task hashes that no list or zset points at (``repair.lua``).

Each round first renews this process's own leases, then, when it is this worker's turn, runs a
bounded slice of the repair scan, then recovers expired leases. The repair pass is shared by all
workers: its SCAN cursor lives in Redis and one worker per queue takes a turn every
``repair_interval`` seconds, so its cost does not grow with the number of workers, a large keyspace
is covered over several turns, and Redis is never blocked for long. A hash put back in ``active`` by
the repair carries an expired lease, so it is recovered in the same round.
"""

from __future__ import annotations

import logging

from queuecore.core.clock import to_ms
from queuecore.core.component import Periodic
from queuecore.core.keys import stats_day, stats_minute

logger = logging.getLogger("queuecore.worker")
BATCH = 100
REPAIR_SCAN_COUNT = 1000  # SCAN COUNT hint of one repair call
REPAIR_CALLS_PER_TURN = 4  # at most this many repair calls per queue and turn (each well under 100 ms)


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
        self.repair()
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
        """This worker's turn of the shared repair pass, if due, in every queue: (repaired, archived)."""
        repaired = archived = 0
        now_ms = to_ms(self.worker.clock.now())
        turn_ms = to_ms(self.worker.config.repair_interval)
        for name in self.worker.config.queues:
            q = self.worker.keys.queue(name)
            for call in range(REPAIR_CALLS_PER_TURN):
                cursor, fixed, dead, seen = self.worker.scripts.repair(
                    q, now_ms=now_ms, cursor="", count=REPAIR_SCAN_COUNT, turn_ms=turn_ms if call == 0 else 0)
                repaired += fixed
                archived += dead
                if seen < 0 or cursor == "0":  # not our turn, or the pass is complete
                    break
        if repaired or archived:
            logger.warning("repaired %d task(s) that no list or zset pointed at; archived %d with a reason",
                           repaired, archived)
        return repaired, archived
