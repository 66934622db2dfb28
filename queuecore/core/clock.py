"""Time sources. Everything time-based takes a ``Clock`` so tests can control time."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Protocol

from queuecore.core.errors import RedisUnavailable
from queuecore.core.redis_errors import is_connection_error, unreachable_message


class Clock(Protocol):
    """A source of wall-clock time in seconds since the epoch."""

    def now(self) -> float: ...


class SystemClock:
    """The real wall clock."""

    def now(self) -> float:
        return time.time()


def _elapsed_default() -> Callable[[], float]:
    """The clock ``RedisTimeClock`` advances by between measurements: one that never steps (a change
    of the host's wall clock leaves it alone). On Linux ``CLOCK_BOOTTIME``, which also counts the time
    the host was suspended (``time.monotonic``, ``CLOCK_MONOTONIC``, stops then: a worker resumed
    after an hour's sleep would be an hour behind until its next measurement); elsewhere
    ``time.monotonic``."""
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    if boottime is not None:
        try:
            time.clock_gettime(boottime)
        except OSError:
            pass
        else:
            return lambda: time.clock_gettime(boottime)
    return time.monotonic


_elapsed = _elapsed_default()


class RedisTimeClock:
    """This host's clock, corrected to Redis's: ``now()`` is the local time plus the offset to Redis's
    ``TIME``, measured by ``align`` (when the worker starts and at each heartbeat). Workers on hosts
    whose clocks disagree then agree on when a lease ends, a task falls due, a rate window closes or
    a periodic entry fires, as Redis's clock says. The offset moves only when a measurement differs
    from it by more than ``tolerance`` seconds, so network jitter does not make time wobble.

    Between measurements time advances with ``monotonic`` (a clock that never steps), not with the
    wall clock ``base``: each measurement (and the construction) anchors ``now()`` at ``base()`` plus
    the offset, and ``now()`` is that anchor plus the monotonic time elapsed since. A step of the
    host's wall clock (an NTP step after a VM resumes, a manual change) had moved ``now()`` by the
    whole step until the next measurement: an hour ahead, a worker took back a task whose lease had
    30 s left, and a periodic entry fired an hour's runs at once; an hour back, lease renewals wrote
    expiries in the past. Now the step changes nothing until the next measurement finds the new
    offset. Re-anchoring at every measurement, even when the offset is kept, also corrects any drift
    between the two clocks."""

    SKEW_WARNING = 1.0  # seconds: an offset this large means the host's clock is wrong; say so
    log = logging.getLogger("queuecore.worker")  # a worker's clock: its log, where operators look

    def __init__(self, base: Callable[[], float] = time.time, tolerance: float = 0.25,
                 monotonic: Callable[[], float] | None = None) -> None:
        self._base = base
        self._monotonic = monotonic or _elapsed
        self._tolerance = tolerance
        self.offset = 0.0
        self.aligned = False  # a measurement has been made
        self.last_ignored = False  # the last measurement's round trip was too long to tell
        # (now() at the anchor, monotonic() then): one tuple, replaced whole, so a reader in another
        # thread never pairs one anchor's wall time with another's monotonic time.
        self._anchor = (self._base(), self._monotonic())

    def now(self) -> float:
        wall, elapsed = self._anchor
        return wall + (self._monotonic() - elapsed)

    def align(self, redis_time: Callable[[], float]) -> float:
        """Measure the offset to ``redis_time()`` (Redis's clock, seconds), taken as read halfway
        through the round trip; adopt it when it moved; re-anchor ``now()`` on it; return it. A round
        trip longer than twice the tolerance says nothing within the tolerance (the process was paused
        or starved, or the network stalled, in the middle of it: its halfway point is off by up to half
        of it), so the offset and the anchor are kept: a 1.9 s pause during a TIME call had set the
        clock 0.95 s back, and leases that had run out looked alive. The round trip is timed with the
        monotonic clock and the offset taken against the wall clock read after it, so a step of the
        wall clock during the call neither hides a prompt answer nor skews the offset by half the
        step."""
        started = self._monotonic()
        remote = redis_time()
        ended = self._monotonic()
        after = self._base()
        round_trip = ended - started
        self.last_ignored = round_trip > 2 * self._tolerance
        if self.last_ignored:
            return self.offset
        measured = remote + round_trip / 2 - after  # Redis's time when ``after`` was read, minus it
        first, previous = not self.aligned, self.offset
        self.aligned = True
        if first or abs(measured - previous) > self._tolerance:
            self.offset = measured if abs(measured) > self._tolerance else 0.0
            if abs(self.offset) >= self.SKEW_WARNING:
                self.log.warning("this host's clock is %.1f s %s Redis's: queuecore keeps Redis's time here (for "
                                 "leases, due tasks, limits, periodic fires and enqueue times); fix the host's "
                                 "clock (NTP)", abs(self.offset), "behind" if self.offset > 0 else "ahead of")
            elif abs(previous) >= self.SKEW_WARNING:
                self.log.info("this host's clock agrees with Redis's again (within %.2f s)", self._tolerance)
        self._anchor = (after + self.offset, ended)
        return self.offset


class AligningClock(RedisTimeClock):
    """A ``RedisTimeClock`` that measures its own offset, for processes with no heartbeat to do it
    (a ``Client``, an ``Inspector``): on first use and every ``every`` seconds after, one ``TIME``
    round trip through ``redis_time``. A failed measurement, or one whose round trip was too long to
    tell (``align``), keeps the offset it had (none at first) and is tried again ``retry`` seconds
    later; the caller's own Redis call then reports an outage.
    With ``raise_unreachable``, a measurement that finds Redis unreachable raises ``RedisUnavailable``
    from the ``now()`` that made it, for callers about to call Redis themselves (a client, an
    inspector): their own call would only wait out the same connect or read timeout a second time.
    It logs under ``queuecore.clock``: a client or an inspector runs in a web or script process,
    not a worker."""

    log = logging.getLogger("queuecore.clock")

    def __init__(self, redis_time: Callable[[], float], *, every: float = 60.0, retry: float = 5.0,
                 base: Callable[[], float] = time.time, tolerance: float = 0.25,
                 raise_unreachable: bool = False, monotonic: Callable[[], float] | None = None) -> None:
        super().__init__(base, tolerance, monotonic)
        self._redis_time = redis_time
        self._raise_unreachable = raise_unreachable
        self._every = every
        self._retry = retry
        self._next_align = -math.inf  # time.monotonic() of the next measurement
        self._measuring = threading.Lock()

    def now(self) -> float:
        if time.monotonic() >= self._next_align:
            failure = self._measure()
            if failure is not None and self._raise_unreachable and is_connection_error(failure):
                raise RedisUnavailable(unreachable_message(failure)) from failure
        return super().now()

    def _measure(self) -> Exception | None:
        """Measure the offset unless another thread is at it or it is not due; the measurement's error,
        if it failed (the offset is kept)."""
        if not self._measuring.acquire(blocking=False):
            return None  # another thread is measuring: use the offset as it is
        try:
            if time.monotonic() < self._next_align:
                return None
            try:
                self.align(self._redis_time)
                self._next_align = time.monotonic() + (self._retry if self.last_ignored else self._every)
            except Exception as exc:  # Redis away (the caller's own call says so), or TIME refused by an ACL
                self._next_align = time.monotonic() + self._retry
                self.log.debug("could not read Redis's clock (%s); keeping an offset of %.3f s", exc, self.offset)
                return exc
            return None
        finally:
            self._measuring.release()


class FakeClock:
    """A clock that only moves when told to; thread-safe."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds

    def set(self, when: float) -> None:
        with self._lock:
            self._now = when


def to_ms(seconds: float) -> int:
    """Seconds (float) to whole milliseconds, the unit of every score in Redis."""
    return round(seconds * 1000)


def format_duration(seconds: float) -> str:
    """A duration for people: ``0.31s``, ``4.2s``, ``3m 12s``, ``2h 05m``, ``3d 4h`` (under a second
    with two decimals; surfaces that prefer ``850ms`` word that case themselves)."""
    if seconds < 1:
        return f"{seconds:.2f}s"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, sec = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h {minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h"
