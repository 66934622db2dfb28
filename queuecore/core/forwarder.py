"""The forwarder: moves scheduled and retry tasks to pending when they are due.

It runs every ``interval`` seconds, or sooner when a task it saw falls due sooner: each round
learns the earliest due time left in its queues, so tasks scheduled ahead start within a few
milliseconds of their time. A task scheduled after a round, due before the next, is told of
(``note_due``): by the enqueue script's "due" wake-up when a client scheduled it, by the recorder
when this worker wrote a retry or a snooze.
"""

from __future__ import annotations

import threading
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
        self._next_round: float | None = None  # when the interval brings the next round (unix s)
        self._noted: float | None = None  # the earliest due time told since this round began (unix s)
        self._noted_lock = threading.Lock()

    def run_once(self) -> int:
        """Forward every due task of the worker's queues; returns how many moved."""
        moved = 0
        now = self._clock.now()
        now_ms = to_ms(now)
        self._next_round = now + self.interval
        next_due_ms: int | None = None
        self.next_due = None  # until a round completes: no early wake-up after an error
        with self._noted_lock:
            self._noted = None  # this round sees every task told of so far
        failed: Exception | None = None  # one queue (a corrupt key, a cluster master away) holds up no other
        for q in self._queues:
            for source in DUE_STATES:
                try:
                    while True:
                        n, due_ms = self._scripts.forward(q, source, now_ms=now_ms, limit=BATCH)
                        moved += n
                        if n < BATCH:
                            break
                except Exception as exc:
                    failed = failed or exc
                    continue
                if due_ms is not None and (next_due_ms is None or due_ms < next_due_ms):
                    next_due_ms = due_ms
        self.next_due = None if next_due_ms is None else next_due_ms / 1000
        if failed is not None:
            raise failed  # reported (and the round counted as failed) once the others have moved theirs
        return moved

    def note_due(self, due: float) -> None:
        """A task was just scheduled to fall due at ``due`` (unix s), by a client (the enqueue script's
        "due" wake-up) or by this worker (a retry, a snooze): the next round comes no later (any thread)."""
        with self._noted_lock:
            if self._noted is not None and self._noted <= due:
                return
            self._noted = due
        self.rouse()

    def next_wait(self) -> float:
        """Until the interval's next round, or less when a task falls due sooner."""
        soonest = min((t for t in (self._next_round, self.next_due, self._noted) if t is not None), default=None)
        if soonest is None:
            return self.interval
        return min(self.interval, max(MIN_WAIT, soonest - self._clock.now()))
