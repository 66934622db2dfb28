"""The acker: acknowledges succeeded tasks in batches (group commit)."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, cast

from queuecore.core.clock import Clock, to_ms
from queuecore.core.errors import RedisFull
from queuecore.core.keys import QueueKeys, stats_day, stats_minute
from queuecore.core.limits import MAX_DURATION, call_chunks, utf8_size
from queuecore.core.redis_errors import is_connection_error
from queuecore.core.running import Running
from queuecore.core.scripts import DoneItem, Scripts

logger = logging.getLogger("queuecore.worker")

ACK_BATCH = 500
# Group commit under load: when the previous write ended less than LINGER_AFTER seconds ago (the worker
# is busy), the acker waits up to LINGER seconds for LINGER_BATCH acknowledgements before it writes,
# so that a busy worker's successes share one call; after a quiet spell it writes at once.
LINGER = 0.001
LINGER_AFTER = 0.005
LINGER_BATCH = 32
# ``persist(what, write)``: run ``write`` until Redis takes it; (True, reply), or (False, None) if given up.
Persist = Callable[[str, Callable[[], Any]], tuple[bool, Any]]


class Acker:
    """All tasks that succeeded during the previous round-trip go in one ``done`` call per queue,
    written on this component's own thread and connection, retried while Redis is away. Under load
    it lingers (up to ``linger`` seconds, for up to ``linger_batch`` tasks) so that calls carry more
    tasks: a third fewer Redis commands per task in a drain of no-op tasks, at the cost of writing an
    acknowledgement at most ``linger`` later.

    ``on_acknowledged(running, accepted)`` is called for each task once its acknowledgement is
    written (``accepted`` False: the lease was lost meanwhile) or given up (``accepted`` None).
    """

    def __init__(self, scripts: Scripts, clock: Clock, queue_keys: Mapping[str, QueueKeys], persist: Persist,
                 on_acknowledged: Callable[[Running, bool | None], None], *, linger: float = LINGER,
                 linger_after: float = LINGER_AFTER, linger_batch: int = LINGER_BATCH) -> None:
        self._scripts = scripts  # used by the acker thread only
        self._clock = clock
        self._queue_keys = queue_keys
        self._persist = persist
        self._on_acknowledged = on_acknowledged
        self._items: list[tuple[Running, str]] = []
        self._sizes: list[int] = []  # each item's result in bytes (``utf8_size``), measured by ``put``
        self._cond = threading.Condition()
        self._stopping = False
        self._linger, self._linger_after, self._linger_batch = linger, linger_after, linger_batch
        self._lingering = False  # waiting for a fuller batch: a put below linger_batch does not wake it
        self._last_write = -math.inf  # time.monotonic() when the last write ended
        self._thread = threading.Thread(target=self._loop, name="queuecore-acker", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def put(self, running: Running, result: str) -> None:
        """Queue the acknowledgement of a succeeded attempt, with its encoded result."""
        if running.ended is None:
            running.ended = self._clock.now()
        size = utf8_size(result)  # not under the lock: a result may be 256 MiB
        with self._cond:
            self._items.append((running, result))
            self._sizes.append(size)
            if not self._lingering or len(self._items) >= self._linger_batch:
                self._cond.notify()

    def stop(self) -> None:
        """Write what is queued, then end the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join()
        self._scripts.close()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._items and not self._stopping:
                    self._cond.wait()
                if not self._items:
                    return
                if (len(self._items) < self._linger_batch and not self._stopping
                        and time.monotonic() - self._last_write < self._linger_after):
                    self._lingering = True
                    self._cond.wait(self._linger)  # woken early by a full batch or by stop()
                    self._lingering = False
                # At most ACK_BATCH, and none after the result that brings the batch to CALL_BYTES (a
                # result may be 256 MiB: 180 results of 500 KB in one call held Redis 0.19 s).
                taken = len(next(call_chunks(self._sizes, int, ACK_BATCH)))
                batch, self._items, self._sizes = self._items[:taken], self._items[taken:], self._sizes[taken:]
            try:
                self.write(batch)
            except Exception:  # never let the acker die: the leases will bring the tasks back
                logger.exception("acknowledging %d task(s) failed", len(batch))
                for running, _ in batch:
                    self._on_acknowledged(running, None)
            self._last_write = time.monotonic()

    def write(self, batch: list[tuple[Running, str]]) -> None:
        """Acknowledge ``batch`` now: one ``done`` call per queue.

        One task's data never costs another task its acknowledgement: a task whose item cannot be
        built is given up alone, and a call that Redis refuses as a whole (a corrupt key of one
        task, say) is written again one task at a time, so only the task at fault is given up.
        """
        by_queue: dict[str, list[tuple[Running, str]]] = {}
        for running, result in batch:
            by_queue.setdefault(running.queue, []).append((running, result))
        for queue, group in by_queue.items():
            self._write_queue(self._queue_keys[queue], group)

    def _write_queue(self, q: QueueKeys, group: list[tuple[Running, str]]) -> None:
        owners: list[Running] = []
        items: list[DoneItem] = []
        for running, result in group:
            try:
                items.append(DoneItem(running.id, running.lease, retention_ms(running.message.retention), result,
                                      running.message.unique_key, running.attempt, running.handler_started_ms,
                                      running.message.type, running.handler_duration_ms))
            except Exception:  # a bug or a message no check foresaw: this task only
                logger.exception("cannot acknowledge task %s; its lease will expire and it will run again",
                                 running.id)
                self._on_acknowledged(running, None)
                continue
            owners.append(running)
        if not items:
            return
        reply = self._write_items(q, items)
        if isinstance(reply, _Refused) and len(items) > 1:
            logger.warning("Redis refused the acknowledgement of %d task(s) of queue %s together (%s); "
                           "writing them one by one", len(items), q.queue, reply.error)
            for running, item in zip(owners, items, strict=True):
                self._report([running], self._write_items(q, [item]))
            return
        self._report(owners, reply)

    def _write_items(self, q: QueueKeys, items: list[DoneItem]) -> list[bool] | _Refused | None:
        """One ``done`` call, retried while Redis is away: the codes, ``_Refused``, or None if given up."""

        def write() -> list[bool] | _Refused:
            now = self._clock.now()
            try:
                return self._scripts.done_many(q, items, now_ms=to_ms(now), day=stats_day(now),
                                               minute=stats_minute(now))
            except Exception as exc:
                if is_connection_error(exc) or isinstance(exc, RedisFull):
                    raise  # about Redis, not about these tasks: persist retries or gives up
                return _Refused(exc)

        written, reply = self._persist(f"the acknowledgement of {len(items)} task(s)", write)
        return cast("list[bool] | _Refused", reply) if written else None

    def _report(self, owners: list[Running], reply: list[bool] | _Refused | None) -> None:
        if isinstance(reply, _Refused):
            logger.error("could not record the acknowledgement of %s: %s; the lease will expire and the task "
                         "run again", ", ".join(f"task {r.id}" for r in owners), reply.error)
        for index, running in enumerate(owners):
            self._on_acknowledged(running, reply[index] if isinstance(reply, list) else None)


class _Refused:
    """A ``done`` call that Redis refused for what it holds (not for being away)."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


def retention_ms(seconds: float) -> int:
    """A completed task's retention in whole ms, within the documented range (a message stored by an
    older client, or by hand, may hold any number: 1e306 kept for the longest retention, not raised);
    a positive one under a millisecond is one (it promised a result: rounded to 0 it kept none)."""
    if not seconds > 0:  # 0, negative or NaN: not kept
        return 0
    return max(1, to_ms(min(seconds, MAX_DURATION)))
