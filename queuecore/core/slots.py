"""Slot accounting for the processor's fetcher."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Slots:
    """How many more tasks this process may hold: the running ones plus a few fetched ahead, so a
    handler thread never waits for a dequeue round-trip.

    The fetcher waits for a batch of free slots (fewer, larger dequeues cost Redis and this
    process less per task), unless the handlers are about to run out of work.
    """

    def __init__(self, free: int, batch: int, work_queued: Callable[[], int]) -> None:
        self.free = free
        self._batch = batch
        self._work_queued = work_queued
        self._cond = threading.Condition()

    def _may_fetch(self) -> bool:
        return self.free >= self._batch or (self.free > 0 and self._work_queued() == 0)

    def take(self, stopping: threading.Event) -> int:
        """Block until a batch is free (or one, while the handlers have nothing queued); how many
        are free, 0 when stopping."""
        with self._cond:
            while not stopping.is_set() and not self._may_fetch():
                self._cond.wait(0.5)
            return 0 if stopping.is_set() else self.free

    def use(self) -> None:
        with self._cond:
            self.free -= 1

    def release(self) -> None:
        with self._cond:
            self.free += 1
            if self._may_fetch():
                self._cond.notify()

    def recheck(self) -> None:
        """Wake the fetcher if it may fetch now (the handlers took the last queued task)."""
        with self._cond:
            if self._may_fetch():
                self._cond.notify()

    def wake_all(self) -> None:
        with self._cond:
            self._cond.notify_all()
