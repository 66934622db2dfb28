"""The heartbeater: publishes this worker process's state and renews the leases it holds."""

from __future__ import annotations

import logging
from collections import defaultdict

from queuecore.core.clock import to_ms
from queuecore.core.component import Periodic
from queuecore.core.message import dumps
from queuecore.core.processor import LEASE_LOST as LEASE_LOST_REASON
from queuecore.core.scripts import LEASE_CANCEL_REQUESTED, LEASE_LOST

logger = logging.getLogger("queuecore.worker")


class Heartbeater(Periodic):
    name = "heartbeater"

    def __init__(self, worker) -> None:
        super().__init__(worker, worker.config.heartbeat_interval)

    @property
    def ttl(self) -> float:
        """How long a heartbeat stays visible: three intervals, so one slow beat does not hide us."""
        return self.worker.config.heartbeat_interval * 3

    def run_once(self) -> None:
        self.renew_leases()
        self.beat()

    def renew_leases(self) -> None:
        """Extend the lease of every task this process runs; stop lost ones, cancel flagged ones."""
        processor = self.worker.processor
        by_queue: dict[str, list[tuple[str, int]]] = defaultdict(list)
        # Every attempt still in ``running`` keeps its lease, including one whose outcome waits to
        # be written while Redis is away; only attempts that already lost theirs are left out.
        for running in processor.snapshot():
            if running.ctx.cancel_reason != LEASE_LOST_REASON:
                by_queue[running.queue].append((running.id, running.lease))
        lease_until = to_ms(self.worker.clock.now() + self.worker.config.lease_duration)
        for queue, held in by_queue.items():
            codes = self.worker.scripts.extend_lease(processor.queue_keys(queue), held, lease_until_ms=lease_until)
            for (task_id, lease), code in zip(held, codes, strict=True):
                if code == LEASE_LOST:
                    processor.lease_lost(task_id, lease)
                elif code == LEASE_CANCEL_REQUESTED:
                    processor.cancel(task_id)

    def beat(self) -> None:
        """Write this process's ``ServerInfo`` with a TTL."""
        worker = self.worker
        now = worker.clock.now()
        info = {
            "id": worker.server_id,
            "host": worker.host,
            "pid": worker.pid,
            "concurrency": worker.config.concurrency,
            "queues": dict(worker.config.queues),
            "strict_priority": worker.config.strict_priority,
            "started_at": worker.started_at,
            "status": worker.status,
            "heartbeat_at": now,
            "workers": [
                {"task_id": r.id, "queue": r.queue, "type": r.message.type, "started_at": r.started,
                 "deadline": r.deadline}
                for r in worker.processor.snapshot() if not r.finalized and r.ctx.cancel_reason != LEASE_LOST_REASON
            ],
        }
        keys = worker.keys
        pipe = worker.redis.pipeline(transaction=False)
        pipe.set(keys.server(worker.server_id), dumps(info), px=to_ms(self.ttl))
        pipe.zadd(keys.servers, {worker.server_id: to_ms(now + self.ttl)})
        pipe.zremrangebyscore(keys.servers, "-inf", to_ms(now))
        pipe.execute()

    def clear(self) -> None:
        """Remove this process's heartbeat on clean exit."""
        keys = self.worker.keys
        pipe = self.worker.redis.pipeline(transaction=False)
        pipe.delete(keys.server(self.worker.server_id))
        pipe.zrem(keys.servers, self.worker.server_id)
        pipe.execute()
