"""The tasks this worker process holds a lease on: what the heartbeat, the subscriber and the
recoverer need to know about the processor's work, and nothing more."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Any

from queuecore.core.clock import to_ms
from queuecore.core.context import TaskContext
from queuecore.core.message import TaskMessage


@dataclass
class Running:
    """One attempt this process holds a lease on, from fetch until its outcome is written.

    Fetched ahead, it waits for a free run slot (``begun`` False); then its handler runs
    (``begun``); it is ``finalized`` once its outcome is decided.
    """

    id: str
    queue: str
    lease: int
    retried: int
    message: TaskMessage
    ctx: TaskContext
    started: float  # wall clock seconds: when it was fetched, then when its handler started
    deadline: float | None
    lock: threading.Lock = field(default_factory=threading.Lock)
    fetched: float = 0.0  # wall clock seconds
    lease_until: float = 0.0  # wall clock seconds: when its lease runs out, as last extended (0: not known)
    begun: bool = False  # its handler started (it holds one of the ``concurrency`` run slots)
    run_slot: bool = False  # it holds a run slot (from its start until its thread or coroutine is free)
    finalized: bool = False
    lease_lost: bool = False  # a renewal found its lease another's (said once, whatever the cancel reason)
    ending: bool = False  # its outcome is queued for the outcome writer (the supervisor leaves it alone)
    in_handler: bool = False
    traced: bool = False  # its handler was called in a ``process`` span (the otel extra: tracing.py)
    thread_ident: int | None = None
    async_task: asyncio.Task[Any] | None = None
    handed_back: bool = False
    interrupted_at: float | None = None  # monotonic
    cancel_seen_at: float | None = None  # monotonic
    operator_cancel: bool = False  # an operator's cancel reached it (whatever reason came first): it is archived
    attempt: str = ""  # a success kept for retention: its attempt history line, for the acknowledgement
    limit_hold: Any = None  # a concurrency slot it holds (flow.LimitHold), released when it ends
    ended: float | None = None  # wall clock seconds: when its handler returned (a success; per-type statistics)

    @property
    def handler_started_ms(self) -> int | None:
        """When its handler started (unix ms); None if it never started."""
        return to_ms(self.started) if self.begun else None

    @property
    def handler_duration_ms(self) -> int | None:
        """How long its handler ran (ms), once it returned; None if not known."""
        return max(0, to_ms(self.ended - self.started)) if self.begun and self.ended is not None else None


class HeldTasks:
    """Attempts held by this process, keyed by (queue, task id, lease). Thread-safe.

    Keyed by the queue: a task id is unique within its queue only (a caller may choose ``order-42`` in
    two queues). Keyed by the lease too: after losing a lease this process may run the same task again
    while the stale attempt is still going, and the two must not be mixed up.
    """

    def __init__(self) -> None:
        self._attempts: dict[tuple[str, str, int], Running] = {}
        self._lock = threading.Lock()

    def add(self, running: Running) -> None:
        with self._lock:
            self._attempts[(running.queue, running.id, running.lease)] = running

    def forget(self, running: Running) -> None:
        """Drop an attempt whose outcome is written (or given up); a newer attempt stays."""
        key = (running.queue, running.id, running.lease)
        with self._lock:
            if self._attempts.get(key) is running:
                del self._attempts[key]

    def get(self, queue: str, task_id: str, lease: int) -> Running | None:
        return self._attempts.get((queue, task_id, lease))

    def with_id(self, queue: str, task_id: str) -> list[Running]:
        """Every held attempt of one task of ``queue`` (usually one)."""
        return [r for r in self.snapshot() if r.id == task_id and r.queue == queue]

    def snapshot(self) -> list[Running]:
        with self._lock:
            return list(self._attempts.values())

    def __len__(self) -> int:
        return len(self._attempts)
