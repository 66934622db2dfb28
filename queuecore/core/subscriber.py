"""The subscriber: listens for cancel requests and for wake-ups when a queue gets work."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from queuecore.core.worker import Worker

logger = logging.getLogger("queuecore.worker")


class Subscriber:
    """Holds one pub/sub connection; reconnects with backoff when Redis goes away."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.done = threading.Event()
        self.subscribed = threading.Event()
        self._thread: threading.Thread | None = None
        self._wake_channels = {worker.keys.queue(q).wake_channel for q in worker.config.queues}

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="queuecore-subscriber", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        self.done.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        backoff = 0.1
        while not self.done.is_set():
            pubsub = self.worker.redis.pubsub(ignore_subscribe_messages=True)
            try:
                pubsub.subscribe(self.worker.keys.cancel_channel, *self._wake_channels)
                self.subscribed.set()
                self.worker.processor.wake.set()  # anything published while we were away
                backoff = 0.1
                while not self.done.is_set():
                    message = pubsub.get_message(timeout=0.5)
                    if message is not None:
                        self._handle(message["channel"], message["data"])
            except Exception as exc:
                self.subscribed.clear()
                self.worker.report_redis_error("subscriber", exc)
                self.done.wait(backoff)
                backoff = min(backoff * 2, 5.0)
            finally:
                try:
                    pubsub.close()
                except Exception:
                    pass

    def _handle(self, channel: str, data: str) -> None:
        if channel == self.worker.keys.cancel_channel:
            queue, _, task_id = str(data).partition(" ")
            if self.worker.processor.cancel(task_id):
                logger.info("cancel requested for task %s in queue %s", task_id, queue)
        else:
            self.worker.processor.wake.set()
