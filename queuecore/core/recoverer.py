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
from collections.abc import Iterable

from queuecore.core.clock import Clock, to_ms
from queuecore.core.component import Periodic
from queuecore.core.health import RedisHealth
from queuecore.core.keys import QueueKeys, stats_day, stats_minute
from queuecore.core.leases import LeaseRenewer
from queuecore.core.scripts import Scripts

logger = logging.getLogger("queuecore.worker")
BATCH = 100
REPAIR_SCAN_COUNT = 1000  # SCAN COUNT hint of one repair call
REPAIR_CALLS_PER_TURN = 4  # at most this many repair calls per queue and turn (each well under 100 ms)


class Recoverer(Periodic):
    name = "recoverer"

    def __init__(self, scripts: Scripts, clock: Clock, queues: Iterable[QueueKeys], interval: float,
                 repair_interval: float, renewer: LeaseRenewer, health: RedisHealth) -> None:
        super().__init__(interval, health)
        self._scripts = scripts
        self._clock = clock
        self._queues = tuple(queues)
        self._repair_interval = repair_interval
        self._renewer = renewer

    def run_once(self) -> tuple[int, int, int]:
        """Recover expired leases in every queue: returns (requeued, archived, orphans)."""
        # Renew this process's own leases first, so that after a Redis outage longer than the lease
        # the worker does not take back tasks it is still running or about to acknowledge.
        self._renewer.renew()
        self.repair()
        totals = [0, 0, 0]
        now = self._clock.now()
        for q in self._queues:
            while True:
                counts = self._scripts.recover(q, now_ms=to_ms(now), limit=BATCH, day=stats_day(now),
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
        now_ms = to_ms(self._clock.now())
        turn_ms = to_ms(self._repair_interval)
        for q in self._queues:
            for call in range(REPAIR_CALLS_PER_TURN):
                cursor, fixed, dead, seen = self._scripts.repair(
                    q, now_ms=now_ms, cursor="", count=REPAIR_SCAN_COUNT, turn_ms=turn_ms if call == 0 else 0)
                repaired += fixed
                archived += dead
                if seen < 0 or cursor == "0":  # not our turn, or the pass is complete
                    break
        if repaired or archived:
            logger.warning("repaired %d task(s) that no list or zset pointed at; archived %d with a reason",
                           repaired, archived)
        return repaired, archived
