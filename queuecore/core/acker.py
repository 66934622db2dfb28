"""The acker: acknowledges succeeded tasks in batches (group commit)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from queuecore.core.clock import Clock, to_ms
from queuecore.core.keys import QueueKeys, stats_day, stats_minute
from queuecore.core.running import Running
from queuecore.core.scripts import DoneItem, Scripts

logger = logging.getLogger("queuecore.worker")

ACK_BATCH = 500
# ``persist(what, write)``: run ``write`` until Redis takes it; (True, reply), or (False, None) if given up.
Persist = Callable[[str, Callable[[], Any]], tuple[bool, Any]]


class Acker:
    """All tasks that succeeded during the previous round-trip go in one ``done`` call per queue,
    written on this component's own thread and connection, retried while Redis is away.

    ``on_acknowledged(running, accepted)`` is called for each task once its acknowledgement is
    written (``accepted`` False: the lease was lost meanwhile) or given up (``accepted`` None).
    """

    def __init__(self, scripts: Scripts, clock: Clock, queue_keys: Mapping[str, QueueKeys], persist: Persist,
                 on_acknowledged: Callable[[Running, bool | None], None]) -> None:
        self._scripts = scripts  # used by the acker thread only
        self._clock = clock
        self._queue_keys = queue_keys
        self._persist = persist
        self._on_acknowledged = on_acknowledged
        self._items: list[tuple[Running, str]] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="queuecore-acker", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def put(self, running: Running, result: str) -> None:
        """Queue the acknowledgement of a succeeded attempt, with its encoded result."""
        with self._cond:
            self._items.append((running, result))
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
                batch, self._items = self._items[:ACK_BATCH], self._items[ACK_BATCH:]
            try:
                self.write(batch)
            except Exception:  # never let the acker die: the leases will bring the tasks back
                logger.exception("acknowledging %d task(s) failed", len(batch))
                for running, _ in batch:
                    self._on_acknowledged(running, None)

    def write(self, batch: list[tuple[Running, str]]) -> None:
        """Acknowledge ``batch`` now: one ``done`` call per queue."""
        by_queue: dict[str, list[tuple[Running, str]]] = {}
        for running, result in batch:
            by_queue.setdefault(running.queue, []).append((running, result))
        for queue, group in by_queue.items():
            q = self._queue_keys[queue]
            items = [DoneItem(r.id, r.lease, to_ms(r.message.retention), result, r.message.unique_key)
                     for r, result in group]

            def write(q: QueueKeys = q, items: list[DoneItem] = items) -> list[bool]:
                now = self._clock.now()
                return self._scripts.done_many(q, items, now_ms=to_ms(now), day=stats_day(now),
                                               minute=stats_minute(now))

            written, codes = self._persist(f"the acknowledgement of {len(items)} task(s)", write)
            for index, (running, _) in enumerate(group):
                self._on_acknowledged(running, codes[index] if written else None)
