"""Redis health as the worker's components see it: an outage is logged once, and so is its end;
so is a spell of Redis being full (``maxmemory``)."""

from __future__ import annotations

import logging
import threading
import time

import redis

from queuecore.core.errors import RedisFull
from queuecore.core.redis_errors import is_connection_error, is_out_of_memory, unavailable_reason

logger = logging.getLogger("queuecore.worker")


def is_full(exc: BaseException) -> bool:
    """True when Redis refused a write because it is at ``maxmemory``."""
    return isinstance(exc, RedisFull) or (isinstance(exc, redis.ResponseError) and is_out_of_memory(str(exc)))


class RedisHealth:
    """Shared by the components of one worker: each reports the errors it meets and the successes
    after them, and the operator sees one line when Redis goes away and one when it is back; one
    when Redis is full (a write refused at ``maxmemory``) and one when every component that met
    that refusal has written again."""

    def __init__(self) -> None:
        self._down_since: float | None = None  # monotonic
        self._up_since = float("-inf")  # monotonic: when the last outage ended
        self._full_since: float | None = None  # monotonic
        self._full_in: set[str] = set()  # components whose last write Redis refused as full
        self._lock = threading.Lock()

    @property
    def down(self) -> bool:
        """True between a connection error and the next success."""
        return self._down_since is not None

    @property
    def full(self) -> bool:
        """True while a component's last write was refused at ``maxmemory``."""
        return self._full_since is not None

    def report_error(self, where: str, exc: BaseException, *, retried: bool = True,
                     began: float | None = None) -> None:
        """Log a Redis outage, or Redis being full, once (its end is logged by ``note_ok``); log other
        errors with their traceback. ``retried=False`` for a one-shot call (nothing of ``where`` will
        write again to end the spell of being full). ``began``: when the failed call began
        (``time.monotonic()``): the outage counts from then (a timeout is met a socket timeout late),
        and a call that began before the last outage ended belongs to that outage (it logs nothing)."""
        if is_connection_error(exc):
            with self._lock:
                if began is not None and began < self._up_since:
                    return  # in flight when Redis was found again: not a new outage
                first = self._down_since is None
                if first:
                    self._down_since = time.monotonic() if began is None else began
            if first:
                logger.error("Redis is unreachable (%s: %s); retrying with backoff", where, unavailable_reason(exc))
            return
        if is_full(exc):
            with self._lock:
                first = self._full_since is None
                if first:
                    self._full_since = time.monotonic()
                if retried:
                    self._full_in.add(where)
            if first:
                logger.error("Redis is full (maxmemory reached): %s cannot write; retrying. Running tasks "
                             "are still acknowledged; new ones wait until Redis has room", where)
            return
        logger.error("error in %s: %s", where, exc, exc_info=exc)

    def note_ok(self, where: str = "") -> None:
        """A Redis call of component ``where`` succeeded: end a reported outage; end the spell of Redis
        being full when ``where`` was refused and no other component still is."""
        if self._down_since is None and self._full_since is None:  # the common case, without the lock
            return
        with self._lock:
            down, self._down_since = self._down_since, None
            if down is not None:
                self._up_since = time.monotonic()
            full = None
            if where in self._full_in:  # only a component that was refused can show there is room
                self._full_in.discard(where)
                if not self._full_in:
                    full, self._full_since = self._full_since, None
        now = time.monotonic()
        if down is not None:
            logger.warning("Redis is reachable again after %.1fs", now - down)
        if full is not None:
            logger.warning("Redis has room again after %.1fs", now - full)
