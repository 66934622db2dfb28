"""The worker's bulk-job runner: carries out the bulk jobs that no driver holds.

A job queued with ``adminctl ... --background``, or left by a driver that died (a dashboard process
restarted, an ``adminctl`` killed), waits in ``<prefix>:{/}:bulk:open``; every worker process looks
there once a ``interval`` and drives the first job whose lease is free, in this component's own
thread (``Inspector.run_bulk_job``: one driver at a time, by lease). At shutdown it gives the lease
up between two chunks, and another worker goes on. The job's driver logs when it starts or takes
a job up (``queuecore.bulk``).
"""

from __future__ import annotations

from queuecore.core.component import Periodic
from queuecore.core.errors import BulkJobNotFound
from queuecore.core.health import RedisHealth
from queuecore.core.inspector import Inspector

POLL_INTERVAL = 1.0  # seconds between two looks for a job to take up


class BulkJobRunner(Periodic):
    """Drives the open bulk jobs no other driver holds, one at a time."""

    name = "bulk-jobs"

    def __init__(self, inspector: Inspector, health: RedisHealth, interval: float = POLL_INTERVAL) -> None:
        super().__init__(interval, health)
        self._inspector = inspector

    def run_once(self) -> int:
        """Drive each open job whose lease is free; how many this call drove to their end."""
        ended = 0
        for job_id in self._inspector.open_bulk_job_ids():
            if self.done.is_set():
                break
            try:
                job = self._inspector.bulk_job(job_id)
            except BulkJobNotFound:  # finished and gone meanwhile
                continue
            if job.holder and job.extra.get("lease_until", 0) > self._inspector.clock.now() * 1000:
                continue  # its driver is alive
            if self._inspector.as_actor(job.actor).run_bulk_job(job_id, stop=self.done).finished:
                ended += 1
        return ended
