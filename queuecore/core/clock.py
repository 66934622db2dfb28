"""Time sources. Everything time-based takes a ``Clock`` so tests can control time."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """A source of wall-clock time in seconds since the epoch."""

    def now(self) -> float: ...


class SystemClock:
    """The real wall clock."""

    def now(self) -> float:
        return time.time()


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
