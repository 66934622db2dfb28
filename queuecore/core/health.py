"""Redis health as the worker's components see it: an outage is logged once, and so is its end."""

from __future__ import annotations

import logging
import threading
import time

from queuecore.core.redis_errors import is_connection_error

logger = logging.getLogger("queuecore.worker")


class RedisHealth:
    """Shared by the components of one worker: each reports the errors it meets and the successes
    after them, and the operator sees one line when Redis goes away and one when it is back."""

    def __init__(self) -> None:
        self._down_since: float | None = None  # monotonic
        self._lock = threading.Lock()

    @property
    def down(self) -> bool:
        """True between a connection error and the next success."""
        return self._down_since is not None

    def report_error(self, where: str, exc: BaseException) -> None:
        """Log a Redis outage once (its end is logged by ``note_ok``); log other errors with their
        traceback."""
        if is_connection_error(exc):
            with self._lock:
                first = self._down_since is None
                if first:
                    self._down_since = time.monotonic()
            if first:
                logger.error("Redis is unreachable (%s: %s); retrying with backoff", where, exc)
            return
        logger.error("error in %s: %s", where, exc, exc_info=exc)

    def note_ok(self) -> None:
        """A Redis call succeeded: end a reported outage, if any."""
        if self._down_since is None:  # the common case, without the lock
            return
        with self._lock:
            since, self._down_since = self._down_since, None
        if since is not None:
            logger.warning("Redis is reachable again after %.1fs", time.monotonic() - since)
