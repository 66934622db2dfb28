"""Periodic tasks: the entry model, its validation, and the schedule maths (cron and every N seconds).

An entry is a name, a task type, a schedule (a cron expression, five fields or six with seconds
first, read by croniter; or ``every`` N whole seconds), a payload, enqueue options, a time zone and a
missed-fire policy. Validation happens when the entry is built (``PeriodicEntry.from_spec``), so a
bad entry fails at start-up with a ``ConfigurationError`` naming it.

Fire times are whole unix seconds. ``every=N`` fires at the multiples of N seconds since the epoch
(every worker agrees without talking). A cron expression is read as wall-clock time in its time zone;
daylight saving time is handled as Vixie cron does:

- a *fixed-hour* expression (its hour field does not start with ``*``, e.g. ``30 2 * * *``): a wall
  time in a skipped hour fires once, at the moment the clock jumps (02:30 fires at 03:00 new time);
  a wall time in a repeated hour fires once, at its first occurrence;
- an *every-hour* expression (hour field ``*`` or ``*/n``, e.g. ``*/15 * * * *``): fires follow real
  time; wall times in a skipped hour do not exist and do not fire, and those in a repeated hour fire
  at both occurrences.

croniter is an optional dependency (the ``periodic`` extra); it is imported only when a cron entry is
built.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from queuecore.core import limits
from queuecore.core.errors import ConfigurationError, InvalidPayload, shown
from queuecore.core.keys import validate_queue_name, validate_type_name
from queuecore.core.message import DEFAULT_MAX_PAYLOAD_BYTES, encode_payload

NAME_RULE = "1-100 characters of A-Z a-z 0-9 _ . -, not '.' or '..'"
_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,100}")
MISSED_POLICIES = ("once", "skip")
DEFAULT_MISSED = "once"
# A fire enqueued within this many seconds of its time is on time; older unclaimed fires are missed
# (workers were all down or stalled) and the entry's missed-fire policy decides.
MISFIRE_GRACE = 60.0
MAX_EVERY = 366 * 24 * 3600  # the longest ``every``: a year, in seconds
ENTRY_OPTIONS = frozenset({"queue", "max_retry", "timeout", "retention"})
SPEC_KEYS = frozenset({"task", "cron", "every", "payload", "timezone", "missed"}) | ENTRY_OPTIONS


def validate_entry_name(name: object) -> str:
    """Return ``name`` if it may name a periodic entry (it is part of keys and task ids)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name in (".", ".."):
        raise ConfigurationError(f"invalid periodic entry name {shown(name)}: {NAME_RULE}", field="periodic")
    return name


class Schedule(Protocol):
    """When an entry fires: whole unix seconds."""

    def next_after(self, t: float) -> int:
        """The first fire time strictly after ``t``."""
        ...

    def describe(self) -> str:
        """The schedule in words."""
        ...


def _plural(n: int, unit: str) -> str:
    return f"{n} {unit}" if n == 1 else f"{n} {unit}s"


@dataclass(frozen=True)
class Every:
    """Every ``seconds`` whole seconds, at the multiples of ``seconds`` since the epoch."""

    seconds: int

    def next_after(self, t: float) -> int:
        return (math.floor(t) // self.seconds + 1) * self.seconds

    def describe(self) -> str:
        n = self.seconds
        for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
            if n % size == 0:
                return "every " + (unit if n == size else _plural(n // size, unit))
        return "every second" if n == 1 else f"every {n} seconds"


def _croniter() -> Any:
    try:
        from croniter import croniter  # type: ignore[import-untyped, unused-ignore]
    except ImportError:  # pragma: no cover - depends on the environment
        raise ConfigurationError(
            "cron schedules need croniter: pip install 'queuecore[periodic]' (or use 'every' seconds)",
            field="periodic") from None
    return croniter


@dataclass(frozen=True)
class Cron:
    """A cron expression read in a time zone (see the module docstring for DST)."""

    expression: str
    timezone: str = "UTC"
    tz: tzinfo = field(default=UTC, compare=False, repr=False)

    @classmethod
    def parse(cls, expression: object, timezone: object = "UTC") -> Cron:
        if not isinstance(expression, str) or not expression.strip():
            raise ConfigurationError(
                f"cron must be a cron expression string, got {shown(expression)}", field="periodic")
        expression = " ".join(expression.split())
        croniter = _croniter()
        fields = expression.split(" ")
        if not (expression.startswith("@") and len(fields) == 1) and len(fields) not in (5, 6):
            raise ConfigurationError(f"invalid cron expression {shown(expression)}: five fields (minute hour day "
                                     "month weekday), six with seconds first, or @hourly/@daily/...",
                                     field="periodic")
        try:
            croniter(expression, datetime(2026, 1, 1), second_at_beginning=len(fields) == 6).get_next(datetime)
        except Exception as exc:  # croniter raises several error types (CroniterBadCronError, ValueError, ...)
            raise ConfigurationError(f"invalid cron expression {shown(expression)}: {exc}", field="periodic") from None
        return cls(expression, *_zone(timezone))

    @property
    def _has_seconds(self) -> bool:
        return len(self.expression.split(" ")) == 6

    @property
    def _every_hour(self) -> bool:
        """True when the hour field starts with ``*`` (Vixie cron's "wildcard" jobs follow real time)."""
        fields = self.expression.split(" ")
        if len(fields) == 1:
            return fields[0] == "@hourly"
        return fields[2 if self._has_seconds else 1].startswith("*")

    def next_after(self, t: float) -> int:
        if self.timezone == "UTC":
            it = _croniter()(self.expression, datetime.fromtimestamp(math.floor(t), UTC).replace(tzinfo=None),
                             second_at_beginning=self._has_seconds)
            while True:
                fire = int(it.get_next(datetime).replace(tzinfo=UTC).timestamp())
                if fire > t:
                    return fire
        start = datetime.fromtimestamp(math.floor(t), self.tz).replace(tzinfo=None)
        shift = start.replace(tzinfo=self.tz, fold=0).timestamp() - start.replace(tzinfo=self.tz, fold=1).timestamp()
        if shift < 0 and self._every_hour:  # t's wall time repeats later: start where the repeat begins
            start += timedelta(seconds=shift)
        it = _croniter()(self.expression, start, second_at_beginning=self._has_seconds)
        best: int | None = None
        for _ in range(200_000):  # bounded: an hour of seconds in a repeated hour is 3,600 steps
            instants = self._instants(it.get_next(datetime))
            if best is not None and instants and min(instants) > best:
                return best  # each wall time's earliest instant only grows: nothing earlier is left
            for fire in instants:
                if fire > t and (best is None or fire < best):
                    best = fire
        raise RuntimeError(f"no fire time found for {self.expression!r} after {t}")  # pragma: no cover

    def _instants(self, wall: datetime) -> list[int]:
        """The unix seconds at which the naive local time ``wall`` fires (0, 1 or 2 of them)."""
        first = wall.replace(tzinfo=self.tz, fold=0)
        second = wall.replace(tzinfo=self.tz, fold=1)
        a, b = int(first.timestamp()), int(second.timestamp())
        if a == b:
            return [a]
        if datetime.fromtimestamp(a, self.tz).replace(tzinfo=None) != wall:  # a wall time the clock skips
            return [] if self._every_hour else [_transition(min(a, b), max(a, b), self.tz)]
        return [a, b] if self._every_hour else [a]  # a repeated wall time: fold 0 comes first

    def describe(self) -> str:
        words = describe_cron(self.expression)
        return words if self.timezone == "UTC" else f"{words} ({self.timezone})"


def _transition(lo: int, hi: int, tz: tzinfo) -> int:
    """The first second in (lo, hi] whose UTC offset is ``hi``'s: when the clock jumped."""
    target = datetime.fromtimestamp(hi, tz).utcoffset()
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, tz).utcoffset() == target:
            hi = mid
        else:
            lo = mid
    return hi


def _zone(name: object) -> tuple[str, tzinfo]:
    if name is None or name == "UTC":
        return "UTC", UTC
    if not isinstance(name, str):
        raise ConfigurationError(f"timezone must be an IANA name such as 'Europe/Paris', got {shown(name)}",
                                 field="periodic")
    try:
        return name, ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigurationError(f"unknown timezone {shown(name)}: use an IANA name such as 'Europe/Paris'",
                                 field="periodic") from None


_DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
_MACROS = {"@yearly": "every year on 1 January at 00:00", "@annually": "every year on 1 January at 00:00",
           "@monthly": "every month on day 1 at 00:00", "@weekly": "every Sunday at 00:00",
           "@daily": "every day at 00:00", "@midnight": "every day at 00:00", "@hourly": "every hour at minute 0"}


def describe_cron(expression: str) -> str:
    """Common cron expressions in words; anything else as ``cron <expression>``."""
    if expression in _MACROS:
        return _MACROS[expression]
    fields = expression.split(" ")
    second = "0"
    if len(fields) == 6:
        second, fields = fields[0], fields[1:]
    if len(fields) != 5:
        return f"cron {expression}"
    minute, hour, dom, month, dow = fields
    step = re.fullmatch(r"\*/(\d+)", second)
    if (minute, hour, dom, month, dow) == ("*",) * 5:
        if second == "*":
            return "every second"
        if step:
            return f"every {step.group(1)} seconds"
        if second == "0":
            return "every minute"
    if second == "0" and (hour, dom, month, dow) == ("*",) * 4:
        m = re.fullmatch(r"\*/(\d+)", minute)
        if m:
            return f"every {m.group(1)} minutes"
        if minute.isdigit():
            return f"every hour at minute {int(minute)}"
    if second.isdigit() and minute.isdigit() and hour.isdigit() and month == "*":
        at = f"{int(hour):02d}:{int(minute):02d}" + (f":{int(second):02d}" if second != "0" else "")
        if dom == "*" and dow == "*":
            return f"every day at {at}"
        if dom == "*" and dow in ("1-5", "MON-FRI", "mon-fri"):
            return f"every weekday at {at}"
        if dom == "*" and dow.isdigit() and int(dow) <= 7:
            return f"every {_DAYS[int(dow)]} at {at}"
        if dow == "*" and dom.isdigit():
            return f"every month on day {int(dom)} at {at}"
    return f"cron {expression}"


MISSED_COUNT_CAP = 1_000  # fire times counted per run of missed fires (a cron one costs a croniter step: ~0.1 ms)


def count_fires(schedule: Schedule, first: int, last: float, cap: int = MISSED_COUNT_CAP) -> int:
    """How many fire times of ``schedule`` lie in ``[first, last]`` (``first`` being one), at most ``cap``."""
    if last < first:
        return 0
    if isinstance(schedule, Every):
        return min(cap, int(math.floor(last) // schedule.seconds - first // schedule.seconds) + 1)
    count, fire = 0, first
    while fire <= last and count < cap:
        count += 1
        fire = schedule.next_after(fire)
    return count


@dataclass(frozen=True)
class PeriodicEntry:
    """One periodic task: ``name`` → ``task`` on ``schedule`` with ``payload`` and enqueue ``options``.

    Build it from a settings dict with ``from_spec``; ``options`` holds the enqueue options given
    (``queue``, ``max_retry``, ``timeout``, ``retention``), ``missed`` is ``"once"``
    (default: after downtime, run once late) or ``"skip"``.
    """

    name: str
    task: str
    schedule: Every | Cron
    payload: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    missed: str = DEFAULT_MISSED

    @property
    def queue(self) -> str:
        """The queue its fires go to (``options['queue']``; ``default`` when none is given)."""
        return str(self.options.get("queue") or "default")

    @classmethod
    def from_spec(cls, name: object, spec: object,
                  max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> PeriodicEntry:
        """An entry from a settings dict; raises ``ConfigurationError`` naming the entry and the field
        (a payload over ``max_payload_bytes`` too: every fire of it would be refused)."""
        name = validate_entry_name(name)
        try:
            return cls._from_spec(name, spec, max_payload_bytes)
        except ConfigurationError as exc:
            raise ConfigurationError(f"periodic entry {shown(name)}: {exc}", field="periodic") from None
        except InvalidPayload as exc:
            raise ConfigurationError(f"periodic entry {shown(name)}: payload: {exc}", field="periodic") from None

    @classmethod
    def _from_spec(cls, name: str, spec: object, max_payload_bytes: int) -> PeriodicEntry:
        if not isinstance(spec, Mapping):
            raise ConfigurationError(f"must be a dict with 'task' and 'cron' or 'every', got {shown(spec)}")
        unknown = set(spec) - SPEC_KEYS
        if unknown:
            raise ConfigurationError(f"unknown key(s) {', '.join(sorted(map(str, unknown)))}; "
                                     f"allowed: {', '.join(sorted(SPEC_KEYS))}")
        if "task" not in spec:
            raise ConfigurationError("'task' (a task type name) is required")
        task = validate_type_name(spec["task"])
        schedule: Every | Cron
        if ("cron" in spec) == ("every" in spec):
            raise ConfigurationError("give exactly one of 'cron' (an expression) and 'every' (seconds)")
        if "every" in spec:
            if spec.get("timezone") not in (None, "UTC"):
                raise ConfigurationError("'timezone' applies to 'cron' schedules only")
            every = spec["every"]
            if isinstance(every, timedelta):
                every = every.total_seconds()
                every = int(every) if float(every).is_integer() else every
            schedule = Every(int(limits.Range(1, MAX_EVERY, whole=True, note="(a year)").check(every, "every")))
        else:
            schedule = Cron.parse(spec["cron"], spec.get("timezone", "UTC"))
        payload = spec.get("payload")
        if payload is None:
            payload = {}
        encode_payload(payload, max_payload_bytes)  # InvalidPayload unless a JSON object ([] and "" included)
        missed = spec.get("missed", DEFAULT_MISSED)
        if missed not in MISSED_POLICIES:
            raise ConfigurationError(f"missed must be 'once' (run once late) or 'skip', got {shown(missed)}")
        options = {k: spec[k] for k in ENTRY_OPTIONS if spec.get(k) is not None}
        if "queue" in options:
            validate_queue_name(options["queue"])
        if "max_retry" in options:
            options["max_retry"] = int(limits.MAX_RETRY.check(options["max_retry"], "max_retry"))
        for key, allowed in (("timeout", limits.TIMEOUT), ("retention", limits.RETENTION)):
            if key in options:
                value = options[key]
                options[key] = allowed.check(value.total_seconds() if isinstance(value, timedelta) else value, key)
        return cls(name, task, schedule, dict(payload), options, missed)

    def with_defaults(self, defaults: Mapping[str, Any]) -> PeriodicEntry:
        """This entry with a handler's default options under its own (the entry's win)."""
        merged = {k: v.total_seconds() if isinstance(v, timedelta) else v  # a duration as the entry's own: seconds
                  for k, v in defaults.items() if k in ENTRY_OPTIONS and v is not None}
        merged.update(self.options)
        return PeriodicEntry(self.name, self.task, self.schedule, self.payload, merged, self.missed)

    def definition(self) -> str:
        """The entry as stored in Redis for operators (JSON): what the Inspector reads and runs."""
        sched = ({"every": self.schedule.seconds} if isinstance(self.schedule, Every)
                 else {"cron": self.schedule.expression, "timezone": self.schedule.timezone})
        return json.dumps({"task": self.task, **sched, "describe": self.schedule.describe(),
                           "payload": dict(self.payload), "options": dict(self.options), "missed": self.missed},
                          sort_keys=True, separators=(",", ":"))


def parse_entries(spec: object, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> tuple[PeriodicEntry, ...]:
    """Entries from ``QUEUECORE['PERIODIC']`` / ``Worker(periodic=...)``: a dict name → spec dict (or
    ``PeriodicEntry``), or an iterable of ``PeriodicEntry``. Names must be unique, and each payload
    must fit ``max_payload_bytes`` (``MAX_PAYLOAD_BYTES``, which every fire's enqueue checks)."""
    if spec is None:
        return ()
    entries: list[PeriodicEntry] = []
    if isinstance(spec, Mapping):
        for name, item in spec.items():
            if isinstance(item, PeriodicEntry):
                if item.name != name:
                    raise ConfigurationError(f"periodic entry {shown(name)} is named {item.name!r}", field="periodic")
                entries.append(item)
            else:
                entries.append(PeriodicEntry.from_spec(name, item, max_payload_bytes))
    elif isinstance(spec, Iterable) and not isinstance(spec, (str, bytes)):
        for item in spec:
            if not isinstance(item, PeriodicEntry):
                raise ConfigurationError(f"periodic entries must be PeriodicEntry objects, got {shown(item)}",
                                         field="periodic")
            entries.append(item)
    else:
        raise ConfigurationError(f"PERIODIC must be a dict of entry name -> entry, got {shown(spec)}", field="periodic")
    for entry in entries:
        try:
            encode_payload(dict(entry.payload), max_payload_bytes)
        except InvalidPayload as exc:
            raise ConfigurationError(f"periodic entry {entry.name!r}: payload: {exc}", field="periodic") from None
    names = [e.name for e in entries]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigurationError(f"duplicate periodic entry name(s): {', '.join(dupes)}", field="periodic")
    return tuple(entries)


def fire_task_id(name: str, fire: int) -> str:
    """The task id of an entry's fire at ``fire`` (unix seconds): ``periodic:<name>:<UTC time>``."""
    return f"periodic:{name}:{datetime.fromtimestamp(fire, UTC).strftime('%Y%m%dT%H%M%SZ')}"


def manual_task_id(name: str, at: float) -> str:
    """The task id of an operator's run of an entry at ``at``: ``periodic:<name>:run:<UTC time, ms>``."""
    stamp = datetime.fromtimestamp(at, UTC)
    return f"periodic:{name}:run:{stamp.strftime('%Y%m%dT%H%M%S')}.{stamp.microsecond // 1000:03d}Z"
