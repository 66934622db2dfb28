"""Lease renewal: keeps the leases of every task this process holds, and reports lost ones."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping

from queuecore.core.clock import Clock, to_ms
from queuecore.core.keys import QueueKeys
from queuecore.core.outcome import LEASE_LOST as LEASE_LOST_REASON
from queuecore.core.running import HeldTasks
from queuecore.core.scripts import LEASE_CANCEL_REQUESTED, LEASE_LOST, Scripts


class LeaseRenewer:
    """Extends the leases of the held tasks by ``lease_duration``.

    A renewal that finds a task no longer ours calls ``on_lost(task_id, lease)``; one that finds
    an operator's cancel flag calls ``on_cancel(task_id)``. The heartbeater renews every beat; the
    recoverer renews before taking back expired leases, so that after a Redis outage this process
    does not recover tasks it is still running.
    """

    def __init__(self, scripts: Scripts, clock: Clock, lease_duration: float, held: HeldTasks,
                 queue_keys: Mapping[str, QueueKeys], on_lost: Callable[[str, int], None],
                 on_cancel: Callable[[str], object]) -> None:
        self._scripts = scripts
        self._clock = clock
        self._lease_duration = lease_duration
        self._held = held
        self._queue_keys = queue_keys
        self._on_lost = on_lost
        self._on_cancel = on_cancel

    def renew(self) -> None:
        """One renewal round: one script call per queue with held tasks."""
        by_queue: dict[str, list[tuple[str, int]]] = defaultdict(list)
        # Every attempt still held keeps its lease, including one whose outcome waits to be written
        # while Redis is away; only attempts that already lost theirs are left out.
        for running in self._held.snapshot():
            if running.ctx.cancel_reason != LEASE_LOST_REASON:
                by_queue[running.queue].append((running.id, running.lease))
        if not by_queue:
            return
        lease_until = to_ms(self._clock.now() + self._lease_duration)
        for queue, held in by_queue.items():
            codes = self._scripts.extend_lease(self._queue_keys[queue], held, lease_until_ms=lease_until)
            for (task_id, lease), code in zip(held, codes, strict=True):
                if code == LEASE_LOST:
                    self._on_lost(task_id, lease)
                elif code == LEASE_CANCEL_REQUESTED:
                    self._on_cancel(task_id)
