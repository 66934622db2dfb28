"""Lease renewal: keeps the leases of every task this process holds, and reports lost ones."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Mapping

from queuecore.core.clock import Clock, to_ms
from queuecore.core.errors import WrongKeyType
from queuecore.core.keys import QueueKeys
from queuecore.core.reasons import LEASE_LOST as LEASE_LOST_REASON
from queuecore.core.running import HeldTasks, Running
from queuecore.core.scripts import LEASE_CANCEL_REQUESTED, LEASE_LOST, Scripts

logger = logging.getLogger("queuecore.worker")


class LeaseRenewer:
    """Extends the leases of the held tasks by ``lease_duration``.

    A renewal that finds a task no longer ours calls ``on_lost(queue, task_id, lease)``; one that
    finds an operator's cancel flag calls ``on_cancel(queue, task_id)``. The heartbeater renews every beat; the
    recoverer renews before taking back expired leases, so that after a Redis outage this process
    does not recover tasks it is still running.
    """

    def __init__(self, scripts: Scripts, clock: Clock, lease_duration: float, held: HeldTasks,
                 queue_keys: Mapping[str, QueueKeys], on_lost: Callable[[str, str, int], None],
                 on_cancel: Callable[[str, str], object]) -> None:
        self._scripts = scripts
        self._clock = clock
        self._lease_duration = lease_duration
        self._held = held
        self._queue_keys = queue_keys
        self._on_lost = on_lost
        self._on_cancel = on_cancel
        self.unrenewed: frozenset[str] = frozenset()  # the queues whose renewal failed in the last round

    def renew(self) -> None:
        """One renewal round: one script call per queue with held tasks."""
        by_queue: dict[str, list[tuple[str, int]]] = defaultdict(list)
        attempts: dict[tuple[str, str, int], Running] = {}
        # Every attempt still held keeps its lease, including one whose outcome waits to be written
        # while Redis is away; only attempts that already lost theirs are left out.
        for running in self._held.snapshot():
            if running.ctx.cancel_reason != LEASE_LOST_REASON:
                by_queue[running.queue].append((running.id, running.lease))
                attempts[(running.queue, running.id, running.lease)] = running
        if not by_queue:
            self.unrenewed = frozenset()
            return
        until = self._clock.now() + self._lease_duration
        lease_until = to_ms(until)
        # One queue's refusal, or its master being away (a cluster), never stops the renewals of the others.
        refused: Exception | None = None
        unrenewed: set[str] = set()
        for queue, held in by_queue.items():
            try:
                renewed = self._renew_queue(self._queue_keys[queue], held, lease_until)
            except Exception as exc:
                refused = refused or exc
                unrenewed.add(queue)
                continue
            for (task_id, lease), code in renewed:
                if code == LEASE_LOST:
                    self._on_lost(queue, task_id, lease)
                    continue
                attempts[(queue, task_id, lease)].lease_until = until
                if code == LEASE_CANCEL_REQUESTED:
                    self._on_cancel(queue, task_id)
        self.unrenewed = frozenset(unrenewed)
        if refused is not None:
            raise refused  # reported by the caller; every lease that could be renewed was

    def confirm(self, running: Running) -> int:
        """Extend one attempt's lease now (one about to start after its lease ran out) and return the
        script's code: ``LEASE_LOST`` when the task is no longer this attempt's. Raises when Redis
        cannot say."""
        until = self._clock.now() + self._lease_duration
        code = self._scripts.extend_lease(self._queue_keys[running.queue], [(running.id, running.lease)],
                                          lease_until_ms=to_ms(until))[0]
        if code != LEASE_LOST:
            running.lease_until = until
        return code

    def _renew_queue(self, q: QueueKeys, held: list[tuple[str, int]],
                     lease_until: int) -> list[tuple[tuple[str, int], int]]:
        """One ``extend_lease`` call; when Redis refuses it for one task's corrupt key (the script
        refuses the whole call), the tasks are renewed one by one and only that one is left out."""
        try:
            return list(zip(held, self._scripts.extend_lease(q, held, lease_until_ms=lease_until), strict=True))
        except WrongKeyType:
            if len(held) == 1:
                raise
        renewed: list[tuple[tuple[str, int], int]] = []
        first: WrongKeyType | None = None
        for item in held:
            try:
                renewed.append((item, self._scripts.extend_lease(q, [item], lease_until_ms=lease_until)[0]))
            except WrongKeyType as exc:
                logger.error("cannot renew the lease of task %s in queue %s: %s", item[0], q.queue, exc)
                first = first or exc
        if not renewed and first is not None:
            raise first
        return renewed
