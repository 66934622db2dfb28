"""The documented range of every number a caller gives queuecore: enqueue options and settings.

One place, so that the client, the configurations, the README and the tests agree. A value
outside its range is refused where it enters (``InvalidOption`` for an enqueue option,
``ConfigurationError`` for a setting), naming the field and the range, before anything is written.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from numbers import Integral, Real
from typing import TypeVar

from queuecore.core.errors import ConfigurationError, shown

MAX_DURATION = 10 * 365 * 24 * 3600.0  # 315,360,000 s, ten years: timeouts, retention, uniqueness, delays
MAX_RETRY_LIMIT = 1_000_000  # max_retry and default_max_retry lie in [-MAX_RETRY_LIMIT, MAX_RETRY_LIMIT]
MAX_PAYLOAD_DEPTH = 100  # nested objects/arrays in a payload, the payload object itself included
MAX_PAYLOAD_BYTES_LIMIT = 256 * 1024 * 1024  # the largest max_payload_bytes (a Redis string holds 512 MB)
MAX_INTERVAL = 86_400.0  # one day: the longest worker interval, grace or socket timeout
MIN_INTERVAL = 0.001  # one millisecond, the resolution of every time stored in Redis
MAX_CONCURRENCY = 10_000  # handler threads (or async slots) per worker, and tasks fetched ahead
MAX_ARCHIVE_SIZE_LIMIT = 10_000_000
MAX_PROCESSES = 64  # worker processes one supervisor starts (runworker --processes)
# Task messages or results one Redis script call carries or reads: a call ends with the one that brings
# it to this (Redis runs a call whole, and a message may be as long as max_payload_bytes). The Lua side's
# qc_read_enough (lua/_lib.lua) holds the same number.
CALL_BYTES = 4 * 1024 * 1024

_Item = TypeVar("_Item")


def utf8_size(text: str) -> int:
    """The bytes ``text`` takes in Redis (UTF-8), as Lua's ``#`` counts them: a CJK character is 3."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def call_chunks(items: Iterable[_Item], size: Callable[[_Item], int], most: int) -> Iterator[list[_Item]]:
    """``items`` cut into calls of at most ``most``, each ending with the item whose ``size`` brings it
    to ``CALL_BYTES``."""
    chunk: list[_Item] = []
    total = 0
    for item in items:
        chunk.append(item)
        total += size(item)
        if len(chunk) == most or total >= CALL_BYTES:
            yield chunk
            chunk, total = [], 0
    if chunk:
        yield chunk


def _fmt(value: float) -> str:
    return f"{int(value)}" if float(value).is_integer() else repr(float(value))


@dataclass(frozen=True)
class Range:
    """A closed (or left-open) range of numbers: ``low <= value <= high`` (``low < value`` when
    ``low_open``); ``whole`` ranges take integers only."""

    low: float
    high: float
    low_open: bool = False
    whole: bool = False
    unit: str = "seconds"
    note: str = ""  # e.g. "(10 years)", appended after the upper bound

    def describe(self) -> str:
        """The range in words, as error messages and the README give it."""
        kind = "a whole number" if self.whole else "a number"
        unit = f" {self.unit}" if self.unit else ""
        note = f" {self.note}" if self.note else ""
        if self.low_open:
            return f"{kind} more than {_fmt(self.low)} and at most {_fmt(self.high)}{unit}{note}"
        return f"{kind} from {_fmt(self.low)} to {_fmt(self.high)}{unit}{note}"

    def check(self, value: object, name: str, error: type[ConfigurationError] = ConfigurationError) -> float:
        """``value`` as a float (an int for whole ranges) if it lies in the range, else raise ``error``
        naming ``name`` and the range. Booleans, strings, NaN and infinities are refused."""
        kind = type(value)
        if not (kind is int or (kind is float and not self.whole)) and (  # the ABC checks only when needed
                isinstance(value, bool) or not isinstance(value, Integral if self.whole else Real)):
            raise error(f"{name} must be {self.describe()}, got {shown(value)}", field=name)
        if self.whole:
            number: float = int(value)  # type: ignore[call-overload]
        else:
            try:
                number = float(value)  # type: ignore[arg-type]
            except OverflowError:  # an int too large for a float
                number = math.inf
        if (not self.whole and not math.isfinite(number)) or number > self.high or number < self.low \
                or (self.low_open and number == self.low):
            raise error(f"{name} is out of range: got {shown(value)}; allowed: {self.describe()}", field=name)
        return number


# -- enqueue options --------------------------------------------------------------------------------

MAX_RETRY = Range(-MAX_RETRY_LIMIT, MAX_RETRY_LIMIT, whole=True, unit="", note="(negative = retry forever)")
TIMEOUT = Range(0, MAX_DURATION, low_open=True, note="(10 years)")
RETENTION = Range(0, MAX_DURATION, note="(10 years; 0 = not kept)")
UNIQUE_FOR = Range(MIN_INTERVAL, MAX_DURATION, note="(10 years)")
PROCESS_IN = Range(-MAX_DURATION, MAX_DURATION, note="(10 years; 0 or less = now)")
PRIORITY = Range(-100, 100, whole=True, unit="", note="(more than 0 = to the head of its queue)")
# process_at and deadline: a point in time from 1970-01-01 UTC to MAX_DURATION after now (the client
# checks them, since the upper bound moves with the clock).

# -- ConnectionConfig -------------------------------------------------------------------------------

SOCKET_TIMEOUT = Range(MIN_INTERVAL, MAX_INTERVAL, note="(1 day)")
MAX_PAYLOAD_BYTES = Range(1, MAX_PAYLOAD_BYTES_LIMIT, whole=True, unit="bytes", note="(256 MiB)")

# -- WorkerConfig -----------------------------------------------------------------------------------

INTERVAL = Range(MIN_INTERVAL, MAX_INTERVAL, note="(1 day)")
REPAIR_INTERVAL = Range(0, MAX_INTERVAL, note="(1 day; 0 = every recover round)")
GRACE = Range(0, MAX_INTERVAL, note="(1 day)")
CONCURRENCY = Range(1, MAX_CONCURRENCY, whole=True, unit="")
PREFETCH = Range(0, MAX_CONCURRENCY, whole=True, unit="")
WEIGHT = Range(1, 1_000_000, whole=True, unit="")
MAX_ARCHIVE_SIZE = Range(1, MAX_ARCHIVE_SIZE_LIMIT, whole=True, unit="tasks")
ARCHIVE_MAX_AGE = Range(0, MAX_DURATION, low_open=True, note="(10 years)")

# -- Supervisor -------------------------------------------------------------------------------------

PROCESSES = Range(1, MAX_PROCESSES, whole=True, unit="processes")
