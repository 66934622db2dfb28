"""A small base for the worker's periodic components: start, run_once every interval, shutdown."""

from __future__ import annotations

import threading
import time

from queuecore.core.health import RedisHealth


class Periodic:
    """Runs ``run_once`` every ``interval`` seconds on its own thread until ``shutdown``.

    Errors are reported to the shared ``RedisHealth`` (an outage is logged once) and the loop goes on.
    """

    name = "component"

    def __init__(self, interval: float, health: RedisHealth) -> None:
        self.interval = interval
        self.health = health
        self.done = threading.Event()
        self._roused = threading.Event()
        self.rounds = 0  # run_once calls made by the loop so far, failed ones included
        self.last_round_failed = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=f"queuecore-{self.name}", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        self.done.set()
        self._roused.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self.done.is_set():
            began = time.monotonic()
            try:
                self.run_once()
                self.health.note_ok(self.name)
                self.last_round_failed = False
            except Exception as exc:
                self.health.report_error(self.name, exc, began=began)
                self.last_round_failed = True
            self.rounds += 1
            self._sleep()

    def _sleep(self) -> None:
        """Wait ``next_wait()`` seconds; on ``rouse`` ask ``next_wait()`` again (it may have shortened)."""
        while not self.done.is_set():
            if not self._roused.wait(self.next_wait()):
                return
            self._roused.clear()

    def rouse(self) -> None:
        """Make the sleeping loop ask ``next_wait()`` again (from any thread)."""
        self._roused.set()

    def run_once(self) -> object:  # pragma: no cover - abstract
        raise NotImplementedError

    def next_wait(self) -> float:
        """Seconds until the next ``run_once``: the interval, unless a component knows better."""
        return self.interval
