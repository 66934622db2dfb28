"""The recoverer: takes back tasks whose lease expired because their worker died or hung, and
repairs task hashes that no list or zset points at (``repair.lua``).

Each round first renews this process's own leases, then, when it is this worker's turn, runs a
bounded slice of the repair scan, then recovers expired leases. The repair pass is shared by all
workers: its SCAN cursor lives in Redis and one worker per queue takes a turn every
``repair_interval`` seconds, so its cost does not grow with the number of workers, a large keyspace
is covered over several turns, and Redis is never blocked for long. A hash put back in ``active`` by
the repair carries an expired lease, so it is recovered in the same round.

Outage grace: leases that expired while Redis (or every worker's connection to it) was away
belong to owners that could not renew them. When a round finds that no round of any worker ran for
longer than ``outage_after`` seconds (measured on Redis's clock), it takes nothing back and starts
a grace of ``grace`` seconds (one lease) in which no worker takes anything back, so that owners that
are alive renew their leases and write their outcomes first (``recover.lua``).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterable

from queuecore.core.attempts import one_line
from queuecore.core.clock import Clock, to_ms
from queuecore.core.component import Periodic
from queuecore.core.health import RedisHealth
from queuecore.core.keys import QueueKeys, stats_day, stats_minute
from queuecore.core.leases import LeaseRenewer
from queuecore.core.scripts import ARCHIVED_WHY, RECOVERED_HOW, RecoveredTask, Scripts

logger = logging.getLogger("queuecore.worker")
BATCH = 100


def outage_threshold(lease_duration: float, heartbeat_interval: float, recover_interval: float) -> float:
    """The silence (no recovery round by any worker) that counts as an outage: shorter than the time a
    live owner's lease can go unrenewed (``lease_duration - heartbeat_interval``), so every outage
    that can expire such a lease is seen, but never shorter than two recovery intervals, so that
    rounds running late are not taken for one."""
    return max(lease_duration - heartbeat_interval, 2 * recover_interval)
REPAIR_SCAN_COUNT = 1000  # SCAN COUNT hint of one repair call
REPAIR_CALLS_PER_TURN = 4  # at most this many repair calls per queue and turn (each well under 100 ms)
RECOVERY_LOG_LINES = 20  # tasks taken back are logged one per line, up to this many per round


def recovery_log_line(queue: str, task: RecoveredTask) -> str:
    """``task <id> (<type>) in queue <q> lost its worker (lease expired), attempt 2 of 26; requeued``."""
    total = "unlimited" if task.max_retry < 0 else str(task.max_retry + 1)
    return (f"task {task.id} ({one_line(task.type, 200)}) in queue {queue} lost its worker (lease expired), "
            f"attempt {task.attempt} of {total}; {RECOVERED_HOW.get(task.how, 'taken back')}")


def _why_archived(why: Counter[str], archived: int) -> str:
    """`` (2 retries spent, 1 cancelled by operator)``: why the round's archived tasks were archived,
    from their lines (``ARCHIVED_WHY``); nothing when they do not account for every one."""
    if not archived or sum(why.values()) != archived:
        return ""
    return " (" + ", ".join(f"{n} {reason}" for reason, n in sorted(why.items())) + ")"


class Recoverer(Periodic):
    name = "recoverer"

    def __init__(self, scripts: Scripts, clock: Clock, queues: Iterable[QueueKeys], interval: float,
                 repair_interval: float, renewer: LeaseRenewer, health: RedisHealth, *,
                 outage_after: float = 0.0, grace: float = 0.0) -> None:
        super().__init__(interval, health)
        self._scripts = scripts
        self._clock = clock
        self._queues = tuple(queues)
        self._repair_interval = repair_interval
        self._renewer = renewer
        self._outage_ms = to_ms(outage_after)
        self._grace_ms = to_ms(grace)

    def run_once(self) -> tuple[int, int, int]:
        """Recover expired leases in every queue: returns (requeued, archived, orphans)."""
        # Renew this process's own leases first, so that after a Redis outage longer than the lease
        # the worker does not take back tasks it is still running or about to acknowledge.
        failed: Exception | None = None  # a queue whose master is away (a cluster) holds up no other queue
        try:
            self._renewer.renew()
        except Exception as exc:  # the queues it could not renew wait for a round that can
            failed = exc
        began = time.monotonic()
        try:
            self.repair()
            self.health.note_ok("repair")
        except Exception as exc:  # Redis full, say: recovery (whose first write frees memory) goes on
            self.health.report_error("repair", exc, began=began)
        totals = [0, 0, 0]
        archived_why: Counter[str] = Counter()
        logged = 0
        now = self._clock.now()
        for q in self._queues:
            if q.queue in self._renewer.unrenewed:
                continue  # this process's own leases there may have lapsed unrenewed: not taken back now
            while True:
                try:
                    got = self._scripts.recover(q, now_ms=to_ms(now), limit=BATCH, day=stats_day(now),
                                                minute=stats_minute(now), outage_ms=self._outage_ms,
                                                grace_ms=self._grace_ms)
                except Exception as exc:
                    failed = failed or exc
                    break
                if got.silence_ms:
                    logger.warning("queue %r: no recovery round ran for %.1fs (no worker ran, or Redis or every "
                                   "worker's connection to it was away); leases that expired meanwhile get %.1fs "
                                   "of grace for their owners to renew them", q.queue, got.silence_ms / 1000,
                                   got.grace_left_ms / 1000)
                for i, n in enumerate(got.counts):
                    totals[i] += n
                for task in got.tasks:  # a line per task, up to RECOVERY_LOG_LINES a round
                    if task.how != 1:
                        archived_why[ARCHIVED_WHY.get(task.how, "other reasons")] += 1
                    if logged < RECOVERY_LOG_LINES:
                        logger.warning("%s", recovery_log_line(q.queue, task),
                                       extra={"qc_task_id": task.id, "qc_queue": q.queue, "qc_type": task.type,
                                              "qc_attempt": task.attempt, "qc_action": "recover"})
                    logged += 1
                if sum(got.counts) < BATCH and not got.more:
                    break
        requeued, archived, orphans = totals
        if logged > RECOVERY_LOG_LINES:
            logger.warning("... and %d more task(s) taken back in this round (not listed)", logged - RECOVERY_LOG_LINES)
        if requeued or archived or orphans:
            logger.warning("recovered tasks with expired leases: %d requeued, %d archived%s, %d orphan ids dropped",
                           requeued, archived, _why_archived(archived_why, archived), orphans)
        if failed is not None:
            raise failed  # reported by the caller, once every other queue had its round
        return requeued, archived, orphans

    def repair(self) -> tuple[int, int]:
        """This worker's turn of the shared repair pass, if due, in every queue: (repaired, archived)."""
        repaired = archived = 0
        now_ms = to_ms(self._clock.now())
        turn_ms = to_ms(self._repair_interval)
        for q in self._queues:
            for call in range(REPAIR_CALLS_PER_TURN):
                step = self._scripts.repair(
                    q, now_ms=now_ms, cursor="", count=REPAIR_SCAN_COUNT, turn_ms=turn_ms if call == 0 else 0)
                repaired += step.repaired
                archived += step.archived
                if step.seen < 0 or step.complete:  # not our turn, or the pass is complete
                    break
        if repaired or archived:
            logger.warning("repaired %d task(s) that no list or zset pointed at; archived %d with a reason",
                           repaired, archived)
        return repaired, archived
