"""The forwarder: moves scheduled and retry tasks to pending when they are due."""

from __future__ import annotations

from queuecore.core.clock import to_ms
from queuecore.core.component import Periodic

BATCH = 100


class Forwarder(Periodic):
    name = "forwarder"

    def __init__(self, worker) -> None:
        super().__init__(worker, worker.config.forward_interval)

    def run_once(self) -> int:
        """Forward every due task of the worker's queues; returns how many moved."""
        moved = 0
        now_ms = to_ms(self.worker.clock.now())
        for name in self.worker.config.queues:
            q = self.worker.keys.queue(name)
            for source in ("scheduled", "retry"):
                while True:
                    n = self.worker.scripts.forward(q, source, now_ms=now_ms, limit=BATCH)
                    moved += n
                    if n < BATCH:
                        break
        return moved
