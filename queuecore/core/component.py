"""A small base for the worker's periodic components: start, run_once every interval, shutdown."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from queuecore.core.worker import Worker

logger = logging.getLogger("queuecore.worker")


class Periodic:
    """Runs ``run_once`` every ``interval`` seconds on its own thread until ``shutdown``."""

    name = "component"

    def __init__(self, worker: Worker, interval: float) -> None:
        self.worker = worker
        self.interval = interval
        self.done = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=f"queuecore-{self.name}", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        self.done.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self.done.is_set():
            try:
                self.run_once()
                self.worker.note_redis_ok()
            except Exception as exc:
                self.worker.report_redis_error(self.name, exc)
            self.done.wait(self.interval)

    def run_once(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError
