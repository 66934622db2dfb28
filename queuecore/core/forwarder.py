"""The forwarder: moves scheduled and retry tasks to pending when they are due.

It runs every ``interval`` seconds, or sooner when a task it saw falls due sooner: each round
learns the earliest due time left in its queues, so tasks scheduled ahead start within a few
milliseconds of their time. A task scheduled after a round, due before the next, waits at most
``interval``.
"""

from __future__ import annotations

from collections.abc import Iterable

from queuecore.core.clock import Clock, to_ms
from queuecore.core.component import Periodic
from queuecore.core.health import RedisHealth
from queuecore.core.keys import QueueKeys
from queuecore.core.scripts import Scripts
from queuecore.core.states import DUE_STATES

BATCH = 100
MIN_WAIT = 0.001  # seconds: the shortest sleep between rounds


class Forwarder(Periodic):
    name = "forwarder"

    def __init__(self, scripts: Scripts, clock: Clock, queues: Iterable[QueueKeys], interval: float,
                 health: RedisHealth) -> None:
        super().__init__(interval, health)
        self._scripts = scripts
        self._clock = clock
        self._queues = tuple(queues)
        self.next_due: float | None = None  # the earliest due time left after the last round (unix s)

    def run_once(self) -> int:
        """Forward every due task of the worker's queues; returns how many moved."""
        moved = 0
        now_ms = to_ms(self._clock.now())
        next_due_ms: int | None = None
        self.next_due = None  # until a round completes: no early wake-up after an error
        for q in self._queues:
            for source in DUE_STATES:
                while True:
                    n, due_ms = self._scripts.forward(q, source, now_ms=now_ms, limit=BATCH)
                    moved += n
                    if n < BATCH:
                        break
                if due_ms is not None and (next_due_ms is None or due_ms < next_due_ms):
                    next_due_ms = due_ms
        self.next_due = None if next_due_ms is None else next_due_ms / 1000
        return moved

    def next_wait(self) -> float:
        """The interval, or less when a task falls due sooner."""
        if self.next_due is None:
            return self.interval
        return min(self.interval, max(MIN_WAIT, self.next_due - self._clock.now()))
