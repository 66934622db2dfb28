"""Per-task-type statistics: the model, the write context the ack scripts take, and the reads.

Written by the scripts that record outcomes (``done``, ``retry``, ``archive``, ``recover``), in the
same call: one write per acknowledgement batch and per type, never a round trip of its own. Each
record is a *vector* of counters, packed as comma-separated integers (trailing zeros dropped):

====  ===========================================================================
 1    processed: attempts that ended (succeeded or failed), as the queue's ``processed``
 2    failed: attempts that failed (retried or archived)
 3    retried: failed attempts scheduled for another attempt
 4    archived: tasks archived (retries spent, SkipRetry, cancelled, lost for good)
 5    recovered: expired leases taken back by a recoverer
 6    timed: attempts whose handler duration is known
 7    duration sum, ms
 8..  one count per duration bucket (``BUCKETS_MS``, then +Inf): not cumulative
====  ===========================================================================

Keys (all in the queue's ``{queue}`` slot; the scripts build the per-type ones from a prefix):

* ``<prefix>:{<q>}:ts``                          HASH type -> vector since the type first ran
* ``<prefix>:{<q>}:ts:<type>:m:<hour>``          HASH minute of the hour (0-59) -> vector; hour is
  whole hours since the epoch; expires 72 h after its hour ends
* ``<prefix>:{<q>}:ts:<type>:d:<YYYY-MM>``       HASH day of the month (1-31) -> vector; expires
  90 days after its month ends (reads keep the last 90 days)
"""

from __future__ import annotations

import calendar
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from functools import lru_cache
from typing import Any

PROCESSED, FAILED, RETRIED, ARCHIVED, RECOVERED, TIMED, DURATION_SUM = range(7)
FIRST_BUCKET = 7
# Upper bounds of the duration buckets, ms (Prometheus' defaults widened to an hour); then +Inf.
BUCKETS_MS: tuple[int, ...] = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000,
                               900000, 3600000)
VECTOR_LENGTH = FIRST_BUCKET + len(BUCKETS_MS) + 1
MINUTES_KEPT = 72 * 60  # per-minute records: 72 h
DAYS_KEPT = 90  # per-day records: 90 days
MINUTE_RESOLUTION_UP_TO = timedelta(hours=72)


def totals_key(ts_prefix: str) -> str:
    """HASH type -> vector since the type first ran in the queue."""
    return ts_prefix


def minute_key(ts_prefix: str, type_name: str, hour: int) -> str:
    """HASH minute of ``hour`` (whole hours since the epoch) -> vector."""
    return f"{ts_prefix}:{type_name}:m:{hour}"


def day_key(ts_prefix: str, type_name: str, month: str) -> str:
    """HASH day of ``month`` (``YYYY-MM``) -> vector."""
    return f"{ts_prefix}:{type_name}:d:{month}"


def context(ts_prefix: str, now_ms: int) -> list[Any]:
    """The seven ARGV fields every writing script takes (``qc_ts_write`` in ``_lib.lua``): the key
    prefix, the hour and minute of the hour, the month and day of the month, and when the hour's and
    the month's keys expire (unix seconds)."""
    return [ts_prefix, *_context_cached(now_ms // 60000)]


def _context(minute: int) -> tuple[int, int, str, int, int, int]:
    hour, minute_of_hour = divmod(minute, 60)
    tm = time.gmtime(minute * 60)
    year, month = tm.tm_year, tm.tm_mon
    next_month = calendar.timegm((year + (month == 12), month % 12 + 1, 1, 0, 0, 0))
    return (hour, minute_of_hour, f"{year:04d}-{month:02d}", tm.tm_mday, (hour + 1) * 3600 + MINUTES_KEPT * 60,
            next_month + DAYS_KEPT * 86400)


class Malformed(list[int]):
    """The zeros ``unpack`` returns for a value that is not a packed vector (see ``malformed``)."""


def parse(value: object) -> list[int] | None:
    """A packed vector as VECTOR_LENGTH integers; None when ``value`` is not one (text that is not
    comma-separated counters: never a negative, NaN or infinite one). Besides integers it takes what
    Lua's ``tostring`` writes for a count beyond 10^14 (``1e+15``), as the writing script reads it."""
    out = [0] * VECTOR_LENGTH
    if value is None or value == b"" or value == "":
        return out
    try:
        text = value.decode() if isinstance(value, bytes) else value
    except UnicodeDecodeError:
        return None
    if not isinstance(text, str):
        return None
    for i, part in enumerate(text.split(",")[:VECTOR_LENGTH]):
        if not part:
            continue
        try:
            out[i] = int(part)
        except ValueError:
            try:
                number = float(part)
            except ValueError:
                return None
            if not math.isfinite(number) or not number.is_integer():
                return None
            out[i] = int(number)
        if out[i] < 0:
            return None
    return out


def unpack(value: bytes | str | None) -> list[int]:
    """A packed vector as VECTOR_LENGTH integers. Never raises: a value that is not one (a
    hand-edited field, say) reads as zeros marked ``Malformed``; readers skip it (``malformed``), so
    a bad value costs that value only, never a scrape, an alert round or a page."""
    out = parse(value)
    return Malformed([0] * VECTOR_LENGTH) if out is None else out


def malformed(vector: list[int]) -> bool:
    """True for what ``unpack`` returned in place of a value that is not a packed vector."""
    return isinstance(vector, Malformed)


def _field_number(field_: Any) -> int | None:
    """A minute-of-the-hour or day-of-the-month field name as an int; None when it is not one."""
    text = field_.decode(errors="replace") if isinstance(field_, bytes) else str(field_)
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 2 else None


def add(into: list[int], vector: Iterable[int]) -> list[int]:
    for i, n in enumerate(vector):
        into[i] += n
    return into


def percentile_ms(buckets: list[int], q: float) -> float | None:
    """An estimate of the ``q`` quantile (0..1) of the durations counted in ``buckets`` (one count per
    bucket, not cumulative), interpolated linearly inside its bucket; in the +Inf bucket, its lower
    bound. None when nothing was timed."""
    total = sum(buckets)
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for i, count in enumerate(buckets):
        if count and seen + count >= rank:
            if i >= len(BUCKETS_MS):
                return float(BUCKETS_MS[-1])
            low = 0 if i == 0 else BUCKETS_MS[i - 1]
            return low + (BUCKETS_MS[i] - low) * max(0.0, rank - seen) / count
        seen += count
    return float(BUCKETS_MS[-1])


@lru_cache(maxsize=4)  # called per acknowledgement: computed once a minute
def _context_cached(minute: int) -> tuple[int, int, str, int, int, int]:
    return _context(minute)


@dataclass(frozen=True)
class TypeStatsPoint:
    """One minute or one day of a task type's statistics."""

    start: float  # unix seconds
    processed: int
    failed: int
    retried: int
    archived: int
    recovered: int


@dataclass(frozen=True)
class TypeStats:
    """A task type's statistics in one queue over a window.

    ``p50_ms_estimate`` and friends are *estimates*: computed from fixed duration buckets
    (``BUCKETS_MS``), interpolated inside a bucket, so within that bucket's bounds of the truth.
    """

    queue: str
    type: str
    window: timedelta
    resolution: str  # "minute" or "day"
    processed: int
    failed: int
    retried: int
    archived: int
    recovered: int
    timed: int
    mean_ms: float | None
    p50_ms_estimate: float | None
    p95_ms_estimate: float | None
    p99_ms_estimate: float | None
    buckets: tuple[int, ...]  # per bucket of BUCKETS_MS, then +Inf; not cumulative
    points: tuple[TypeStatsPoint, ...] = field(default=())
    # Unix s: the start of the first minute (or day) counted. The counts cover the whole minutes after
    # the window's start, or the whole days that cover it (a window over 72 h counts from the start of
    # the day it begins in: up to a day more than the window).
    counted_from: float = 0.0
    counted_until: float = 0.0  # unix s: the window's end (its "now")


def summarize(queue: str, type_name: str, window: timedelta, resolution: str,
              points: Mapping[float, list[int]], counted_from: float = 0.0, counted_until: float = 0.0) -> TypeStats:
    total = [0] * VECTOR_LENGTH
    for vector in points.values():
        add(total, vector)
    buckets = total[FIRST_BUCKET:]
    timed = total[TIMED]
    return TypeStats(
        queue=queue, type=type_name, window=window, resolution=resolution, processed=total[PROCESSED],
        failed=total[FAILED], retried=total[RETRIED], archived=total[ARCHIVED], recovered=total[RECOVERED],
        timed=timed, mean_ms=total[DURATION_SUM] / timed if timed else None,
        p50_ms_estimate=percentile_ms(buckets, 0.50), p95_ms_estimate=percentile_ms(buckets, 0.95),
        p99_ms_estimate=percentile_ms(buckets, 0.99), buckets=tuple(buckets),
        points=tuple(TypeStatsPoint(start, v[PROCESSED], v[FAILED], v[RETRIED], v[ARCHIVED], v[RECOVERED])
                     for start, v in sorted(points.items())), counted_from=counted_from,
        counted_until=counted_until)


def read(client: Any, ts_prefix: str, queue: str, type_name: str, window: timedelta, now: float) -> TypeStats:
    """Read a type's statistics over ``window`` ending at ``now`` (unix seconds): per minute up to
    72 h, per day beyond (at most 90 days). One pipeline of at most 72 (or 4) HGETALLs."""
    if window <= timedelta(0):
        raise ValueError("window must be positive")
    start = now - window.total_seconds()
    points: dict[float, list[int]] = {}
    if window <= MINUTE_RESOLUTION_UP_TO:
        first_minute, last_minute = int(start // 60) + 1, int(now // 60)
        hours = range(first_minute // 60, last_minute // 60 + 1)
        pipe = client.pipeline(transaction=False)
        for hour in hours:
            pipe.hgetall(minute_key(ts_prefix, type_name, hour))
        for hour, record in zip(hours, pipe.execute(), strict=True):
            for field_, value in record.items():
                minute_of_hour, vector = _field_number(field_), parse(value)
                if minute_of_hour is None or minute_of_hour >= 60 or vector is None:
                    continue  # not written by the scripts: skipped, the rest still counts
                minute = hour * 60 + minute_of_hour
                if first_minute <= minute <= last_minute:
                    points[minute * 60.0] = vector
        return summarize(queue, type_name, window, "minute", points, first_minute * 60.0, now)
    window = min(window, timedelta(days=DAYS_KEPT))
    # The days that cover the window: from the one it starts in (a day's record cannot be cut). It
    # counted window.days days back from today, which left out up to a day: 73 h read 56.
    first_day = max(int((now - window.total_seconds()) // 86400), int(now // 86400) - DAYS_KEPT + 1)
    last_day = int(now // 86400)
    months = sorted({time.strftime("%Y-%m", time.gmtime(d * 86400)) for d in range(first_day, last_day + 1)})
    pipe = client.pipeline(transaction=False)
    for month in months:
        pipe.hgetall(day_key(ts_prefix, type_name, month))
    for month, record in zip(months, pipe.execute(), strict=True):
        year, mon = (int(x) for x in month.split("-"))
        days_in_month = calendar.monthrange(year, mon)[1]
        for field_, value in record.items():
            day_of_month, vector = _field_number(field_), parse(value)
            if day_of_month is None or not 1 <= day_of_month <= days_in_month or vector is None:
                continue  # not written by the scripts: skipped, the rest still counts
            day = calendar.timegm((year, mon, day_of_month, 0, 0, 0)) // 86400
            if first_day <= day <= last_day:
                points[day * 86400.0] = vector
    return summarize(queue, type_name, window, "day", points, first_day * 86400.0, now)


def read_totals(record: Mapping[Any, Any]) -> dict[str, list[int]]:
    """The HGETALL of a queue's ``ts`` HASH as type -> vector. Every type is listed (its per-minute
    and per-day records may be fine); a value that is not a packed vector is a ``Malformed`` one
    (``malformed``): skip it when summing."""
    return {(k.decode() if isinstance(k, bytes) else str(k)): unpack(v) for k, v in record.items()}
