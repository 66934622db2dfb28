"""Built-in alerts: rules, their evaluation by one worker at a time, the alert state, the senders.

Rules come from ``QUEUECORE["ALERTS"]["RULES"]`` or ``Worker(alerts={"RULES": ...})``: rule name ->
``{"kind": ..., ...}`` (``parse_alerts``). Every worker that has rules runs an ``AlertMonitor``; only
the one holding the evaluator lease evaluates (the lease is a field of ``<prefix>:alerts``, renewed
every round and taken over by another worker once its holder stops renewing it). Each round the
holder reads the queues, workers, periodic entries and Redis memory, decides which alerts hold now,
and fires the new ones and resolves the gone ones with ``alerts_apply.lua``: the alert's field is
set only if absent and deleted only if present, in the same step as the lease check, so an alert
fires once and resolves once however many evaluators run. Only what the script confirms is sent.

Senders get an ``AlertEvent`` (``fired`` or ``resolved``). Each runs on a thread of its own behind a
queue (``SenderThread``), so a slow webhook never blocks the worker's other components.
"""

from __future__ import annotations

import http.client
import json
import logging
import queue
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, cast

import redis

from queuecore.core import typestats
from queuecore.core.clock import Clock, to_ms
from queuecore.core.component import Periodic
from queuecore.core.errors import ConfigurationError, WrongKeyType
from queuecore.core.hashreads import read_task_fields
from queuecore.core.health import RedisHealth
from queuecore.core.keys import is_valid_name, stats_minute
from queuecore.core.periodic import MISFIRE_GRACE
from queuecore.core.redis_errors import is_wrong_type
from queuecore.core.scripts import Scripts

logger = logging.getLogger("queuecore.alerts")

DEFAULT_INTERVAL = 15.0
LEASE_ROUNDS = 3  # the lease outlives this many evaluation intervals
SEVERITIES = ("info", "warning", "critical")
OVERDUE_SCAN = 10_000  # active tasks looked at per queue and round

# kind -> (required options, optional options with defaults)
_KINDS: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "failure_rate": (("above",), {"queue": "*", "type": None, "window": 300.0, "min_tasks": 1}),
    "latency": (("above",), {"queue": "*"}),
    "backlog": (("above",), {"queue": "*"}),
    "no_worker": ((), {"queue": "*"}),
    "overdue": ((), {"queue": "*", "grace": 60.0}),
    "memory": (("above",), {}),
    "periodic_missed": ((), {"entry": "*", "grace": MISFIRE_GRACE}),
}
_COMMON = {"kind", "severity", "for"}
MAX_HOLD_FOR = 86400.0  # the longest "for" a rule takes, s
SenderFn = Callable[["AlertEvent"], None]
T = TypeVar("T")


@dataclass(frozen=True)
class AlertRule:
    """One validated rule. ``queue``/``entry`` ``"*"`` means every queue (entry)."""

    name: str
    kind: str
    above: float | None = None
    queue: str = "*"
    entry: str = "*"
    type: str | None = None  # failure_rate per task type (from the per-type statistics): a type or "*"
    window: float = 300.0
    min_tasks: int = 1
    grace: float = 60.0
    severity: str = "warning"
    hold_for: float = 0.0  # the rule's "for": how long an alert holds (pending) before it fires, s


@dataclass(frozen=True)
class Alert:
    """An alert that holds: ``id`` is ``<rule>/<subject>`` (a queue, an entry, or ``redis``)."""

    id: str
    rule: str
    kind: str
    subject: str
    severity: str
    message: str
    value: float | None
    threshold: float | None
    since: float  # unix seconds: when it fired

    @property
    def since_dt(self) -> datetime:
        return datetime.fromtimestamp(self.since, tz=UTC)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["since"] = self.since_dt.isoformat()
        return out

    @classmethod
    def from_json(cls, text: str) -> Alert:
        data = json.loads(text)
        return cls(**{k: data.get(k) for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class PendingAlert:
    """An alert that holds but waits out its rule's ``for`` before it fires: ``alert`` as of the last
    evaluation round (its ``since``: when it began to hold), ``fires_at`` unix seconds."""

    alert: Alert
    hold_for: float

    @property
    def fires_at(self) -> float:
        return self.alert.since + self.hold_for

    @property
    def fires_at_dt(self) -> datetime:
        return datetime.fromtimestamp(self.fires_at, tz=UTC)

    def to_json(self) -> str:
        return json.dumps({"alert": asdict(self.alert), "hold_for": self.hold_for}, separators=(",", ":"),
                          sort_keys=True)

    def to_dict(self) -> dict[str, Any]:
        return {**self.alert.to_dict(), "for": self.hold_for,
                "fires_at": self.fires_at_dt.isoformat()}

    @classmethod
    def from_json(cls, text: str) -> PendingAlert:
        data = json.loads(text)
        return cls(Alert(**{k: data["alert"].get(k) for k in Alert.__dataclass_fields__}), float(data["hold_for"]))


@dataclass(frozen=True)
class AlertEvent:
    """What senders receive: ``action`` is ``fired`` or ``resolved``; ``at`` unix seconds."""

    action: str
    alert: Alert
    at: float

    def to_dict(self) -> dict[str, Any]:
        return {"action": self.action, "at": datetime.fromtimestamp(self.at, tz=UTC).isoformat(),
                "alert": self.alert.to_dict()}


@dataclass(frozen=True)
class AlertSettings:
    """The parsed ``ALERTS`` setting: rules, senders (callables) and the evaluation interval."""

    rules: tuple[AlertRule, ...] = ()
    senders: tuple[SenderFn, ...] = ()
    interval: float = DEFAULT_INTERVAL


# -- validation ------------------------------------------------------------------------------------


def _number(value: Any, rule: str, key: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (low <= value <= high):
        raise ConfigurationError(f"alert rule {rule!r}: {key} must be a number from {low:g} to {high:g}, "
                                 f"got {value!r}", field="alerts")
    return float(value)


def parse_rule(name: Any, spec: Any) -> AlertRule:
    """One rule, validated; ``ConfigurationError`` names the rule."""
    if not isinstance(name, str) or not name or len(name) > 100 or not all(c.isalnum() or c in "_.-" for c in name):
        raise ConfigurationError(f"alert rule name {name!r}: 1-100 characters of A-Z a-z 0-9 _ . -", field="alerts")
    if not isinstance(spec, Mapping):
        raise ConfigurationError(f"alert rule {name!r}: must be a dict", field="alerts")
    kind = spec.get("kind")
    if kind not in _KINDS:
        raise ConfigurationError(f"alert rule {name!r}: kind must be one of {', '.join(_KINDS)}, got {kind!r}",
                                 field="alerts")
    required, optional = _KINDS[kind]
    unknown = set(spec) - _COMMON - set(required) - set(optional)
    if unknown:
        raise ConfigurationError(f"alert rule {name!r}: unknown key(s) for {kind}: {', '.join(sorted(unknown))}",
                                 field="alerts")
    for key in required:
        if key not in spec:
            raise ConfigurationError(f"alert rule {name!r}: {kind} needs {key!r}", field="alerts")
    values: dict[str, Any] = {**optional, **{k: v for k, v in spec.items() if k != "kind"}}
    severity = values.pop("severity", "warning")
    if severity not in SEVERITIES:
        raise ConfigurationError(f"alert rule {name!r}: severity must be one of {', '.join(SEVERITIES)}",
                                 field="alerts")
    out: dict[str, Any] = {"name": name, "kind": kind, "severity": severity}
    for key in ("queue", "entry"):
        if key in values:
            value = values[key]
            if value != "*" and not is_valid_name(value):
                raise ConfigurationError(f"alert rule {name!r}: {key} must be a name or '*', got {value!r}",
                                         field="alerts")
            out[key] = value
    if values.get("type") is not None:
        value = values["type"]
        if value != "*" and not is_valid_name(value):
            raise ConfigurationError(f"alert rule {name!r}: type must be a task type or '*', got {value!r}",
                                     field="alerts")
        out["type"] = value
    if "above" in values:
        high = {"failure_rate": 1.0, "memory": 1.0}.get(kind, 1e12)
        low = 0.0
        if kind == "memory":
            out["above"] = _number(values["above"], name, "above", 0.01, high)
        else:
            out["above"] = _number(values["above"], name, "above", low, high)
    if "window" in values:
        out["window"] = _number(values["window"], name, "window", 60, 3 * 3600)
    if "min_tasks" in values:
        out["min_tasks"] = int(_number(values["min_tasks"], name, "min_tasks", 1, 1e9))
    if "grace" in values:
        out["grace"] = _number(values["grace"], name, "grace", 0, 86400)
    if "for" in values:
        out["hold_for"] = _number(values["for"], name, "for", 0, MAX_HOLD_FOR)
    return AlertRule(**out)


def parse_rules(spec: Any) -> tuple[AlertRule, ...]:
    if spec is None:
        return ()
    if not isinstance(spec, Mapping):
        raise ConfigurationError("alert RULES must be a dict: rule name -> rule", field="alerts")
    return tuple(parse_rule(name, rule) for name, rule in spec.items())


def parse_sender(spec: Any, extra_kinds: Mapping[str, Callable[..., SenderFn]] | None = None) -> SenderFn:
    """A callable, or ``{"kind": "webhook", "url": ..., "timeout": 5, "retries": 3, "backoff": 1}``
    (or another kind the adapter provides: Django's ``signal`` and ``email``)."""
    if callable(spec):
        return spec  # type: ignore[no-any-return]
    kinds: dict[str, Callable[..., SenderFn]] = {"webhook": WebhookSender, **(extra_kinds or {})}
    if isinstance(spec, str):
        spec = {"kind": spec}
    if not isinstance(spec, Mapping) or spec.get("kind") not in kinds:
        raise ConfigurationError(f"alert sender {spec!r}: a callable or a dict with kind one of "
                                 f"{', '.join(sorted(kinds))}", field="alerts")
    options = {k: v for k, v in spec.items() if k != "kind"}
    try:
        return kinds[spec["kind"]](**options)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"alert sender {spec['kind']!r}: {exc}", field="alerts") from None


def parse_alerts(spec: Any, extra_kinds: Mapping[str, Callable[..., SenderFn]] | None = None) -> AlertSettings:
    """``{"RULES": {...}, "SENDERS": [...], "INTERVAL": 15}`` (or an ``AlertSettings``), validated."""
    if spec is None:
        return AlertSettings()
    if isinstance(spec, AlertSettings):
        return spec
    if not isinstance(spec, Mapping):
        raise ConfigurationError("ALERTS must be a dict with RULES, SENDERS and INTERVAL", field="alerts")
    unknown = set(spec) - {"RULES", "SENDERS", "INTERVAL"}
    if unknown:
        raise ConfigurationError(f"ALERTS: unknown key(s) {', '.join(sorted(unknown))}", field="alerts")
    senders = spec.get("SENDERS") or []
    if not isinstance(senders, (list, tuple)):
        raise ConfigurationError("ALERTS['SENDERS'] must be a list", field="alerts")
    interval = spec.get("INTERVAL", DEFAULT_INTERVAL)
    interval = _number(interval, "INTERVAL", "INTERVAL", 0.01, 86400)
    return AlertSettings(parse_rules(spec.get("RULES")), tuple(parse_sender(s, extra_kinds) for s in senders),
                         interval)


# -- evaluation ------------------------------------------------------------------------------------


def _alert(rule: AlertRule, subject: str, message: str, value: float | None, now: float) -> Alert:
    return Alert(id=f"{rule.name}/{subject}", rule=rule.name, kind=rule.kind, subject=subject,
                 severity=rule.severity, message=message, value=value, threshold=rule.above, since=now)


def covering_minutes(window: float, now: float) -> tuple[int, float]:
    """The first of the whole minutes (unix seconds // 60) that the per-minute statistics cover the last
    ``window`` seconds with, and the seconds those minutes span up to ``now`` (``window`` to ``window``
    + 60): a failure rate read from the minute ``now`` is in alone would miss what came just before."""
    first = int((now - window) // 60)
    return first, now - first * 60


class Unreadable(Exception):
    """What an alert rule reads holds a key of the wrong Redis type (corrupt or foreign data):
    ``subject`` is what could not be read (``queue emails``, ``type t.x in queue emails``, ``the queue
    list``, ...), ``detail`` why, naming the key where it is known."""

    def __init__(self, subject: str, detail: str) -> None:
        super().__init__(f"{subject}: {detail}")
        self.subject = subject
        self.detail = detail


@dataclass(frozen=True)
class Evaluation:
    """One round's reading: the alerts that hold, and ``kept``: what could not be read, whose alerts
    keep the state they have (neither fired nor resolved): ``<rule>`` (every alert of the rule) or
    ``<rule>/<subject>`` (that alert and, for a queue, its per-type ones)."""

    holding: dict[str, Alert]
    kept: frozenset[str] = frozenset()

    def keeps(self, alert_id: str) -> bool:
        """True when ``alert_id``'s state is to be kept this round (names contain no ``/``)."""
        parts = alert_id.split("/")
        return any("/".join(parts[:n]) in self.kept for n in range(1, len(parts) + 1))


class _Round:
    """One evaluation round's results, and the reads several rules share (made once a round)."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.out: dict[str, Alert] = {}
        self.kept: set[str] = set()
        self.problems: dict[str, str] = {}  # subject -> why it could not be read (the first reason)
        self._shared: dict[str, Any] = {}

    def add(self, alert: Alert) -> None:
        self.out[alert.id] = alert

    def skip(self, prefix: str, exc: Unreadable) -> None:
        """Keep the state of the alerts under ``prefix`` (a rule, or a rule and a subject)."""
        self.kept.add(prefix)
        self.problems.setdefault(exc.subject, exc.detail)

    def once(self, name: str, read: Callable[[], T]) -> T:
        """``read()``, made once a round; an ``Unreadable`` it raised is raised again for each caller."""
        if name not in self._shared:
            try:
                self._shared[name] = read()
            except Unreadable as exc:
                self._shared[name] = exc
        value = self._shared[name]
        if isinstance(value, Unreadable):
            raise value
        return cast("T", value)


def _wrong_type(exc: BaseException) -> bool:
    return isinstance(exc, WrongKeyType) or (isinstance(exc, redis.ResponseError) and is_wrong_type(str(exc)))


class RuleEvaluator:
    """Pure reads: which alerts of ``rules`` hold now, through an ``Inspector`` (typed ``Any``:
    inspector.py imports this module for ``Inspector.alerts``).

    Each rule, and each of its subjects (a queue, a task type), is read on its own: one that meets a
    key of the wrong Redis type is left out of the round, its alerts kept as they are (``Evaluation``),
    and logged at WARNING once while it lasts; the other rules and subjects are evaluated as usual."""

    def __init__(self, inspector: Any, rules: Sequence[AlertRule], clock: Clock) -> None:
        self._ins = inspector
        self._rules = list(rules)
        self._clock = clock
        self._hold_for = {rule.name: rule.hold_for for rule in self._rules}
        # queue -> task id -> (its started_at, the timeout of its message): an active task's message does
        # not change until it is fetched again (a new started_at), so each is read once, not every round.
        self._timeouts: dict[str, dict[str, tuple[str, Any]]] = {}
        self._unreadable: dict[str, str] = {}  # subject -> why, as logged in the last round

    def hold_for(self, alert: Alert) -> float:
        """How long ``alert`` must hold before it fires: its rule's ``for`` (s)."""
        return self._hold_for.get(alert.rule, 0.0)

    def holding(self) -> dict[str, Alert]:
        """The alerts that hold now (``evaluate().holding``)."""
        return self.evaluate().holding

    def evaluate(self) -> Evaluation:
        """The alerts that hold now, and those whose state is kept because what they are about could
        not be read."""
        rnd = _Round(self._clock.now())
        for rule in self._rules:
            try:
                self._evaluate(rule, rnd)
            except Unreadable as exc:  # a read every subject of the rule needs (the queue list, ...)
                rnd.skip(rule.name, exc)
        self._report(rnd.problems)
        return Evaluation(rnd.out, frozenset(rnd.kept))

    def _report(self, problems: dict[str, str]) -> None:
        """Log each unreadable subject once while it lasts (again only after a round it was not in)."""
        for subject, detail in problems.items():
            if subject not in self._unreadable:
                logger.warning("alerts: %s cannot be read (%s): its alerts are neither fired nor resolved until "
                               "it can", subject, detail)
        self._unreadable = dict(problems)

    def _evaluate(self, rule: AlertRule, rnd: _Round) -> None:
        now = rnd.now
        if rule.kind == "memory":
            info = self._inspect("Redis memory", self._ins.redis_info, count_keys=False)
            if info.fullest is not None and rule.above is not None:
                used = info.fullest  # the fullest server: on a cluster, the one that refuses writes first
                if used > rule.above:
                    rnd.add(_alert(rule, "redis", f"Redis memory at {used:.0%} of maxmemory (above "
                                   f"{rule.above:.0%})", used, now))
            return
        if rule.kind == "periodic_missed":
            for entry in self._inspect("the periodic entries", self._ins.periodic_entries):
                if (rule.entry != "*" and entry.name != rule.entry) or entry.paused:
                    continue
                late = entry.next_fire_at is not None and entry.next_fire_at.timestamp() < now - rule.grace
                if late or entry.last_kind in ("late", "skip"):
                    why = "its next fire is overdue" if late else f"its last fire was {entry.last_kind} (missed)"
                    rnd.add(_alert(rule, entry.name, f"periodic entry {entry.name}: {why}", None, now))
            return
        queues: list[str] = (rnd.once("queues", lambda: self._inspect("the queue list", self._ins.queues))
                             if rule.queue == "*" else [rule.queue])
        if rule.kind in ("latency", "backlog"):
            infos = rnd.once("infos", lambda: {i.name: i for i in self._inspect("the queue list",
                                                                                 self._ins.all_queue_info)})
            for name in queues:
                info = infos.get(name)
                if info is None:
                    continue
                if info.problem:  # a queue with a key of the wrong type: listed with zeros
                    rnd.skip(f"{rule.name}/{name}", Unreadable(f"queue {name}", info.problem))
                    continue
                value = info.latency if rule.kind == "latency" else info.pending
                if rule.above is not None and value > rule.above:
                    what = f"latency {value:.0f} s" if rule.kind == "latency" else f"{value} pending tasks"
                    rnd.add(_alert(rule, name, f"queue {name}: {what} (above {rule.above:g})", float(value), now))
        elif rule.kind == "failure_rate":
            for name in queues:
                try:
                    if rule.type is None:
                        checks = [(name, f"queue {name}", *self._failure_rate(name, rule.window, now))]
                    else:
                        checks = []
                        for t in self._types(name) if rule.type == "*" else [rule.type]:
                            try:
                                checks.append((f"{name}/{t}", f"type {t} in queue {name}",
                                               *self._type_failure_rate(name, t, rule.window, now)))
                            except Unreadable as exc:
                                rnd.skip(f"{rule.name}/{name}/{t}", exc)
                except Unreadable as exc:
                    rnd.skip(f"{rule.name}/{name}", exc)
                    continue
                for subject, what, rate, total in checks:
                    if total >= rule.min_tasks and rule.above is not None and rate > rule.above:
                        span = covering_minutes(rule.window, now)[1]
                        rnd.add(_alert(rule, subject, f"{what}: {rate:.0%} of {total} attempts failed in the last "
                                       f"{span:.0f} s (above {rule.above:.0%})", rate, now))
        elif rule.kind == "no_worker":
            servers = rnd.once("servers", lambda: self._inspect("the worker heartbeats", self._ins.servers))
            served = {q for s in servers if s.status != "stopping" for q in s.queues}
            for name in queues:
                if name not in served:
                    rnd.add(_alert(rule, name, f"queue {name}: no live worker serves it", None, now))
        elif rule.kind == "overdue":
            for name in queues:
                try:
                    count = self._overdue(name, rule.grace, now)
                except Unreadable as exc:
                    rnd.skip(f"{rule.name}/{name}", exc)
                    continue
                if count:
                    rnd.add(_alert(rule, name, f"queue {name}: {count} task(s) active past their timeout "
                                   f"plus {rule.grace:g} s", float(count), now))

    # -- reads: a key of the wrong Redis type raises Unreadable ------------------------------------

    def _type_problem(self, key: str, expected: str) -> str | None:
        """Why ``key`` cannot be read as a ``expected``, or None when it can (or is absent)."""
        actual = self._ins.redis.type(key)
        actual = actual.decode() if isinstance(actual, bytes) else str(actual)
        return None if actual in (expected, "none") else f"key {key} holds a {actual}, expected a {expected}"

    def _inspect(self, subject: str, read: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """An Inspector read; its wrong-type error (which names no key) as ``Unreadable``: of the queue
        list when that is the key at fault (most reads go through it), else of ``subject``."""
        try:
            return read(*args, **kwargs)
        except (WrongKeyType, redis.ResponseError) as exc:
            if not _wrong_type(exc):
                raise
            in_list = self._type_problem(self._ins.keys.queues, "set")
            if in_list:
                raise Unreadable("the queue list", in_list) from None
            raise Unreadable(subject, str(exc)) from None

    def _read(self, subject: str, key: str, expected: str, read: Callable[[], T]) -> T:
        """``read()`` of ``key``; a wrong-type reply as ``Unreadable`` of ``subject`` naming ``key``."""
        try:
            return read()
        except redis.ResponseError as exc:
            if not is_wrong_type(str(exc)):
                raise
            raise Unreadable(subject, self._type_problem(key, expected) or f"key {key}: {exc}") from None

    def _failure_rate(self, name: str, window: float, now: float) -> tuple[float, int]:
        q = self._ins.keys.queue(name)
        first = covering_minutes(window, now)[0]
        stamps = [stats_minute(minute * 60.0) for minute in range(first, int(now // 60) + 1)]
        fields = [f"{kind}:{s}" for s in stamps for kind in ("processed", "failed")]
        values = self._read(f"queue {name}", q.stats, "hash", lambda: self._ins.redis.hmget(q.stats, fields))
        processed = sum(_count(v) for v in values[0::2])
        failed = sum(_count(v) for v in values[1::2])
        return (failed / processed if processed else 0.0), processed

    def _types(self, name: str) -> list[str]:
        key = self._ins.keys.queue(name).type_stats
        return sorted(typestats.read_totals(self._read(f"queue {name}", key, "hash",
                                                       lambda: self._ins.redis.hgetall(key))))

    def _type_failure_rate(self, name: str, type_name: str, window: float, now: float) -> tuple[float, int]:
        q = self._ins.keys.queue(name)
        span = covering_minutes(window, now)[1]  # read() takes the minutes that begin within its window
        try:
            stats = typestats.read(self._ins.redis, q.type_stats, name, type_name, timedelta(seconds=span + 1), now)
        except redis.ResponseError as exc:
            if not is_wrong_type(str(exc)):
                raise
            raise Unreadable(f"type {type_name} in queue {name}",
                             f"a key of its per-minute statistics ({q.type_stats}:{type_name}:m:<hour>) holds "
                             "another Redis type than a hash") from None
        return (stats.failed / stats.processed if stats.processed else 0.0), stats.processed

    def _task_rows(self, name: str, keys: list[str], fields: Sequence[str], sized: Sequence[str]) -> list[Any]:
        """``read_task_fields``; a task key of another type than a hash as ``Unreadable`` naming it."""
        rows = read_task_fields(self._ins.redis, keys, fields, sized, raise_on_error=False)
        for key, row in zip(keys, rows, strict=True):
            if isinstance(row, Exception):
                if isinstance(row, redis.ResponseError) and is_wrong_type(str(row)):
                    raise Unreadable(f"queue {name}", self._type_problem(key, "hash") or f"key {key}: {row}")
                raise row
        return rows

    def _overdue(self, name: str, grace: float, now: float) -> int:
        """How many active tasks of queue ``name`` have run past their timeout and ``grace``. Their
        ``started_at`` first; the message (for its ``timeout``) only of those that started more than
        ``grace`` ago (a timeout is positive) and not read in an earlier round, in bounded pipelines."""
        q = self._ins.keys.queue(name)
        r = self._ins.redis
        ids = [str(i) for i in self._read(f"queue {name}", q.active, "zset",
                                          lambda: r.zrange(q.active, 0, OVERDUE_SCAN - 1))]
        known = self._timeouts.get(name, {})
        timeouts: dict[str, tuple[str, Any]] = {}
        unread: list[str] = []
        rows = self._task_rows(name, [q.task(task_id) for task_id in ids], ("started_at",), ())
        for task_id, (started,) in zip(ids, rows, strict=True):
            try:
                if not started or float(started) / 1000 + grace >= now:
                    continue  # not started, or too recently to be overdue
            except ValueError:
                continue
            if task_id in known and known[task_id][0] == started:
                timeouts[task_id] = known[task_id]
            else:
                unread.append(task_id)
        rows = self._task_rows(name, [q.task(task_id) for task_id in unread], ("started_at", "msg"), ("msg",))
        for task_id, (started, msg) in zip(unread, rows, strict=True):
            if not started or msg is None:
                continue  # finished meanwhile
            try:
                timeouts[task_id] = (started, json.loads(msg).get("timeout"))
            except (ValueError, AttributeError):
                timeouts[task_id] = (started, None)
        self._timeouts[name] = timeouts  # only the tasks still looked at: bounded by OVERDUE_SCAN
        count = 0
        for started, timeout in timeouts.values():
            try:
                if timeout and float(started) / 1000 + float(timeout) + grace < now:
                    count += 1
            except (ValueError, TypeError):
                continue
        return count


def _count(value: Any) -> int:
    """A counter field; a value the scripts never write (not an integer) counts as 0."""
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


class AlertEvaluator:
    """One evaluator: takes the lease, evaluates, fires and resolves, and hands the events on."""

    def __init__(self, scripts: Scripts, clock: Clock, rules: RuleEvaluator, *, holder: str, lease: float,
                 deliver: Callable[[list[AlertEvent]], None] | None = None) -> None:
        self._scripts = scripts
        self._clock = clock
        self._rules = rules
        self.holder = holder
        self.lease = lease
        self._deliver = deliver

    def run_once(self) -> list[AlertEvent]:
        """One round; returns the events this evaluator made (none when another holds the lease)."""
        now = self._clock.now()
        held, _, _ = self._scripts.alerts_apply(self.holder, now_ms=to_ms(now), lease_until_ms=to_ms(now + self.lease))
        if not held:
            return []
        evaluation = self._rules.evaluate()
        holding = evaluation.holding
        active, pending, _ = alert_state(self._scripts)
        fire: list[tuple[str, str]] = []
        pend: list[tuple[str, str]] = []
        for a_id, alert in holding.items():
            if a_id in active:
                continue
            hold_for = self._rules.hold_for(alert)
            if hold_for <= 0 or (a_id in pending and now - pending[a_id] >= hold_for):
                fire.append((a_id, alert.to_json()))
            else:  # pending: what it says now (since when it holds is the mark's)
                pend.append((a_id, PendingAlert(alert, hold_for).to_json()))
                if a_id not in pending:
                    logger.info("alert %s pending: %s (fires if it still holds after %gs)", a_id, alert.message,
                                hold_for)
        # an alert whose subject could not be read this round keeps its state: neither fired nor resolved
        resolve = [a_id for a_id in (*active, *pending) if a_id not in holding and not evaluation.keeps(a_id)]
        if not fire and not pend and not resolve:
            return []
        now = self._clock.now()
        held, fired, resolved = self._scripts.alerts_apply(self.holder, now_ms=to_ms(now),
                                                           lease_until_ms=to_ms(now + self.lease),
                                                           fire=fire, pend=pend, resolve=resolve)
        events = [AlertEvent("fired", holding[i], now) for i in fired]
        events += [AlertEvent("resolved", Alert.from_json(body), now) for _, body in resolved]
        for e in events:
            if e.action == "fired":
                logger.warning("alert %s fired: %s", e.alert.id, e.alert.message)
            else:  # its message is the one it fired with
                logger.info("alert %s resolved: no longer holds (it fired with: %s)", e.alert.id, e.alert.message)
        if events and self._deliver is not None:
            self._deliver(events)
        return events

    def release(self) -> None:
        """Give the lease up (on shutdown), so another worker takes over at its next round."""
        self._scripts.alerts_apply(self.holder, now_ms=to_ms(self._clock.now()), lease_until_ms=0)


def active_alerts(scripts: Scripts) -> dict[str, Alert]:
    """The active alerts by id, from ``<prefix>:alerts``."""
    return alert_state(scripts)[0]


def alert_state(scripts: Scripts) -> tuple[dict[str, Alert], dict[str, float], dict[str, PendingAlert]]:
    """From ``<prefix>:alerts``: the active alerts by id; since when (unix s) each pending alert (one
    whose rule has a ``for`` not yet reached) holds; and what each pending alert says (a mark that an
    older version wrote has none)."""
    raw = cast("dict[str, str]", scripts.redis.hgetall(scripts.keys.alerts))
    active: dict[str, Alert] = {}
    since: dict[str, float] = {}
    details: dict[str, PendingAlert] = {}
    for key, value in raw.items():
        try:
            if key.startswith("a:"):
                active[key[2:]] = Alert.from_json(value)
            elif key.startswith("p:"):
                since[key[2:]] = int(value) / 1000 if value.isdigit() else 0.0  # unreadable: long pending
            elif key.startswith("d:"):
                details[key[2:]] = PendingAlert.from_json(value)
        except (ValueError, TypeError, KeyError, AttributeError):
            continue
    pending = {a_id: PendingAlert(replace(p.alert, since=since[a_id]), p.hold_for)
               for a_id, p in details.items() if a_id in since}
    return active, since, pending


# -- senders ---------------------------------------------------------------------------------------


def _shut(sock: Any) -> None:
    """Shut ``sock`` down both ways (a blocked read returns at once); one already closed is left alone."""
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class _TryDeadline:
    """Ends one try at its deadline: shuts down the sockets of the connections it made, so that a
    receiver (or a proxy, answering the CONNECT of an HTTPS tunnel) sending its reply a byte at a time
    cannot hold the try past ``timeout`` (urllib's timeout bounds each read, not the whole try)."""

    def __init__(self) -> None:
        self._connections: list[http.client.HTTPConnection] = []
        self._sockets: list[socket.socket] = []  # as made, before a connection holds them (a proxy's tunnel)
        self._lock = threading.Lock()
        self.expired = False

    def track(self, connection_class: type[http.client.HTTPConnection]) -> type[http.client.HTTPConnection]:
        """``connection_class`` whose connections this ends at the deadline, one still connecting (a slow
        name lookup, a proxy's tunnel) included."""
        deadline = self

        class Tracked(connection_class):  # type: ignore[valid-type,misc]
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                made: Callable[..., socket.socket] = self._create_connection  # type: ignore[has-type]
                self._create_connection = deadline.made_by(made)

            def connect(self) -> None:
                with deadline._lock:
                    if deadline.expired:
                        raise TimeoutError("the try's time ran out")
                    deadline._connections.append(self)
                super().connect()
                with deadline._lock:
                    if deadline.expired:
                        _shut(self.sock)

        return Tracked

    def made_by(self, create_connection: Callable[..., socket.socket]) -> Callable[..., socket.socket]:
        """``create_connection`` whose sockets this shuts at the deadline: one made after it is closed."""

        def create(*args: Any, **kwargs: Any) -> socket.socket:
            sock = create_connection(*args, **kwargs)
            with self._lock:
                if self.expired:
                    sock.close()
                    raise TimeoutError("the try's time ran out")
                self._sockets.append(sock)
            return sock

        return create

    def expire(self) -> None:
        with self._lock:
            self.expired = True
            for connection in self._connections:
                _shut(connection.sock)
            for sock in self._sockets:
                _shut(sock)

    def opener(self) -> urllib.request.OpenerDirector:
        """An opener as ``urlopen``'s (proxies from the environment included) whose connections this
        tracks, and which follows no redirect (``_RefuseRedirects``)."""
        deadline = self

        class HTTPHandler(urllib.request.HTTPHandler):
            def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
                return self.do_open(deadline.track(http.client.HTTPConnection), req)

        class HTTPSHandler(urllib.request.HTTPSHandler):
            def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
                return self.do_open(deadline.track(http.client.HTTPSConnection), req,
                                    context=self._context)  # type: ignore[attr-defined]

        return urllib.request.build_opener(HTTPHandler(), HTTPSHandler(), _RefuseRedirects())


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect fails the try: urllib follows a POST's 301/302/303 with a GET without the body, which
    a receiver may answer 200, and the alert would count as delivered though nobody got it."""

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> urllib.request.Request | None:
        raise urllib.error.HTTPError(req.full_url, code, f"{msg}, redirected to {newurl} (a webhook's POST is not "
                                     "followed: give the URL it redirects to)", headers, fp)


class WebhookSender:
    """POSTs each event as JSON to ``url``; retries ``retries`` times with exponential backoff
    (``backoff``, 2x, ...), each try within ``timeout`` seconds, the whole try (connecting, sending,
    the reply). Runs on its ``SenderThread``."""

    def __init__(self, url: str, *, timeout: float = 5.0, retries: int = 3, backoff: float = 1.0,
                 headers: Mapping[str, str] | None = None, wait: Callable[[float], object] | None = None) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"url must be an http(s) URL, got {url!r}")
        if not (0 < float(timeout) <= 300) or not (0 <= int(retries) <= 20) or not (0 <= float(backoff) <= 3600):
            raise ValueError("timeout 0-300 s, retries 0-20, backoff 0-3600 s")
        self.url = url
        self.timeout = float(timeout)
        self.retries = int(retries)
        self.backoff = float(backoff)
        self.headers = {"Content-Type": "application/json", "User-Agent": "queuecore-alerts", **(headers or {})}
        self._wait = wait or time.sleep

    def __call__(self, event: AlertEvent) -> None:
        body = json.dumps(event.to_dict()).encode()
        for attempt in range(self.retries + 1):
            request = urllib.request.Request(self.url, data=body, headers=self.headers, method="POST")
            deadline = _TryDeadline()
            timer = threading.Timer(self.timeout, deadline.expire)
            timer.daemon = True
            timer.start()
            try:
                # The URL was checked to be http(s) in __init__ (bandit B310: no file:// or custom schemes).
                with deadline.opener().open(request, timeout=self.timeout) as response:  # nosec B310
                    if deadline.expired:  # its headers ended by the deadline's shutdown, not by the receiver
                        raise TimeoutError
                    if 200 <= response.status < 300:
                        return
            except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
                # HTTPException: a receiver's bad status line or headers, tried again
                error: object = f"no reply within {self.timeout:g}s" if deadline.expired else exc
            else:  # pragma: no cover - the opener raises HTTPError for statuses >= 400
                error = f"status {response.status}"
            finally:
                timer.cancel()
            if attempt < self.retries:
                logger.info("alert webhook %s: attempt %d failed (%s); retrying", self.url, attempt + 1, error)
                self._wait(self.backoff * (2 ** attempt))
            else:
                raise RuntimeError(f"alert webhook {self.url}: gave up after {attempt + 1} attempt(s): {error}")


class SenderThread:
    """Runs one sender on its own daemon thread, fed through a queue: never blocks the caller."""

    def __init__(self, sender: SenderFn) -> None:
        self.sender = sender
        self._queue: queue.Queue[AlertEvent | None] = queue.Queue(maxsize=10_000)
        self._thread = threading.Thread(target=self._loop, name="queuecore-alert-sender", daemon=True)
        self._thread.start()

    def put(self, event: AlertEvent) -> None:
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            logger.error("alert sender %r: queue full, event %s %s dropped", self.sender, event.alert.id, event.action)

    def _loop(self) -> None:
        while True:
            event = self._queue.get()
            if event is None:
                return
            try:
                self.sender(event)
            except Exception:
                logger.exception("alert sender %r failed for %s %s", self.sender, event.alert.id, event.action)

    def close(self, timeout: float = 5.0) -> None:
        """Let the queued events go out within ``timeout`` seconds; never blocks past it (a receiver that
        does not answer, with the queue full, blocked a worker's shutdown for good)."""
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            pass  # the thread is a daemon: it ends with the process
        self._thread.join(timeout)
        if self._thread.is_alive():
            logger.warning("alert sender %r: %d event(s) not sent by shutdown", self.sender, self._queue.qsize())


class Dispatcher:
    """Hands events to every sender's thread."""

    def __init__(self, senders: Iterable[SenderFn]) -> None:
        self._threads = [SenderThread(s) for s in senders]

    def __call__(self, events: list[AlertEvent]) -> None:
        for thread in self._threads:
            for event in events:
                thread.put(event)

    def close(self) -> None:
        for thread in self._threads:
            thread.close()


class AlertMonitor(Periodic):
    """The worker's alert component: every ``interval`` one ``AlertEvaluator`` round; gives the
    lease up and stops its senders on shutdown."""

    name = "alerts"

    def __init__(self, evaluator: AlertEvaluator, dispatcher: Dispatcher, interval: float,
                 health: RedisHealth) -> None:
        super().__init__(interval, health)
        self.evaluator = evaluator
        self.dispatcher = dispatcher

    def run_once(self) -> list[AlertEvent]:
        return self.evaluator.run_once()

    def shutdown(self) -> None:
        super().shutdown()
        try:
            self.evaluator.release()
        except Exception as exc:
            self.health.report_error(self.name, exc)
        self.dispatcher.close()


def build_monitor(settings: AlertSettings, scripts: Scripts, inspector: Any, clock: Clock,
                  health: RedisHealth, *, holder: str) -> AlertMonitor:
    """The ``AlertMonitor`` for ``settings`` (the worker builds it when there are rules)."""
    dispatcher = Dispatcher(settings.senders)
    evaluator = AlertEvaluator(scripts, clock, RuleEvaluator(inspector, settings.rules, clock), holder=holder,
                               lease=LEASE_ROUNDS * settings.interval, deliver=dispatcher)
    return AlertMonitor(evaluator, dispatcher, settings.interval, health)
