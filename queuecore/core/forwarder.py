"""The forwarder: moves scheduled and retry tasks to pending when they are due."""

from __future__ import annotations

from collections.abc import Iterable

from queuecore.core.clock import Clock, to_ms
from queuecore.core.component import Periodic
from queuecore.core.health import RedisHealth
from queuecore.core.keys import QueueKeys
from queuecore.core.scripts import Scripts
from queuecore.core.states import DUE_STATES

BATCH = 100


class Forwarder(Periodic):
    name = "forwarder"

    def __init__(self, scripts: Scripts, clock: Clock, queues: Iterable[QueueKeys], interval: float,
                 health: RedisHealth) -> None:
        super().__init__(interval, health)
        self._scripts = scripts
        self._clock = clock
        self._queues = tuple(queues)

    def run_once(self) -> int:
        """Forward every due task of the worker's queues; returns how many moved."""
        moved = 0
        now_ms = to_ms(self._clock.now())
        for q in self._queues:
            for source in DUE_STATES:
                while True:
                    n = self._scripts.forward(q, source, now_ms=now_ms, limit=BATCH)
                    moved += n
                    if n < BATCH:
                        break
        return moved
