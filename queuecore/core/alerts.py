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

import json
import logging
import queue
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from queuecore.core import typestats
from queuecore.core.clock import Clock, to_ms
from queuecore.core.component import Periodic
from queuecore.core.errors import ConfigurationError
from queuecore.core.hashreads import read_task_fields
from queuecore.core.health import RedisHealth
from queuecore.core.keys import is_valid_name, stats_minute
from queuecore.core.periodic import MISFIRE_GRACE
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


class RuleEvaluator:
    """Pure reads: which alerts of ``rules`` hold now, through an ``Inspector`` (typed ``Any``:
    inspector.py imports this module for ``Inspector.alerts``)."""

    def __init__(self, inspector: Any, rules: Sequence[AlertRule], clock: Clock) -> None:
        self._ins = inspector
        self._rules = list(rules)
        self._clock = clock
        self._hold_for = {rule.name: rule.hold_for for rule in self._rules}
        # queue -> task id -> (its started_at, the timeout of its message): an active task's message does
        # not change until it is fetched again (a new started_at), so each is read once, not every round.
        self._timeouts: dict[str, dict[str, tuple[str, Any]]] = {}

    def hold_for(self, alert: Alert) -> float:
        """How long ``alert`` must hold before it fires: its rule's ``for`` (s)."""
        return self._hold_for.get(alert.rule, 0.0)

    def holding(self) -> dict[str, Alert]:
        now = self._clock.now()
        out: dict[str, Alert] = {}
        known = self._ins.queues()
        infos: dict[str, Any] | None = None
        servers: list[Any] | None = None
        for rule in self._rules:
            queues = known if rule.queue == "*" else [rule.queue]
            if rule.kind in ("latency", "backlog"):
                if infos is None:
                    infos = {i.name: i for i in self._ins.all_queue_info()}
                for name in queues:
                    info = infos.get(name)
                    if info is None:
                        continue
                    value = info.latency if rule.kind == "latency" else info.pending
                    if rule.above is not None and value > rule.above:
                        what = f"latency {value:.0f} s" if rule.kind == "latency" else f"{value} pending tasks"
                        out_alert = _alert(rule, name, f"queue {name}: {what} (above {rule.above:g})",
                                           float(value), now)
                        out[out_alert.id] = out_alert
            elif rule.kind == "failure_rate":
                for name in queues:
                    if rule.type is None:
                        checks = [(name, f"queue {name}", *self._failure_rate(name, rule.window, now))]
                    else:
                        types = self._types(name) if rule.type == "*" else [rule.type]
                        checks = [(f"{name}/{t}", f"type {t} in queue {name}",
                                   *self._type_failure_rate(name, t, rule.window, now)) for t in types]
                    for subject, what, rate, total in checks:
                        if total >= rule.min_tasks and rule.above is not None and rate > rule.above:
                            span = covering_minutes(rule.window, now)[1]
                            a = _alert(rule, subject, f"{what}: {rate:.0%} of {total} attempts failed in the last "
                                       f"{span:.0f} s (above {rule.above:.0%})", rate, now)
                            out[a.id] = a
            elif rule.kind == "no_worker":
                if servers is None:
                    servers = self._ins.servers()
                served = {q for s in servers if s.status != "stopping" for q in s.queues}
                for name in queues:
                    if name not in served:
                        a = _alert(rule, name, f"queue {name}: no live worker serves it", None, now)
                        out[a.id] = a
            elif rule.kind == "overdue":
                for name in queues:
                    count = self._overdue(name, rule.grace, now)
                    if count:
                        a = _alert(rule, name, f"queue {name}: {count} task(s) active past their timeout "
                                   f"plus {rule.grace:g} s", float(count), now)
                        out[a.id] = a
            elif rule.kind == "memory":
                info = self._ins.redis_info(count_keys=False)
                if info.fullest is not None and rule.above is not None:
                    used = info.fullest  # the fullest server: on a cluster, the one that refuses writes first
                    if used > rule.above:
                        a = _alert(rule, "redis", f"Redis memory at {used:.0%} of maxmemory (above "
                                   f"{rule.above:.0%})", used, now)
                        out[a.id] = a
            elif rule.kind == "periodic_missed":
                for entry in self._ins.periodic_entries():
                    if (rule.entry != "*" and entry.name != rule.entry) or entry.paused:
                        continue
                    late = entry.next_fire_at is not None and entry.next_fire_at.timestamp() < now - rule.grace
                    if late or entry.last_kind in ("late", "skip"):
                        why = "its next fire is overdue" if late else f"its last fire was {entry.last_kind} (missed)"
                        a = _alert(rule, entry.name, f"periodic entry {entry.name}: {why}", None, now)
                        out[a.id] = a
        return out

    def _failure_rate(self, name: str, window: float, now: float) -> tuple[float, int]:
        q = self._ins.keys.queue(name)
        first = covering_minutes(window, now)[0]
        stamps = [stats_minute(minute * 60.0) for minute in range(first, int(now // 60) + 1)]
        fields = [f"{kind}:{s}" for s in stamps for kind in ("processed", "failed")]
        values = self._ins.redis.hmget(q.stats, fields)
        processed = sum(int(v or 0) for v in values[0::2])
        failed = sum(int(v or 0) for v in values[1::2])
        return (failed / processed if processed else 0.0), processed

    def _types(self, name: str) -> list[str]:
        return sorted(typestats.read_totals(self._ins.redis.hgetall(self._ins.keys.queue(name).type_stats)))

    def _type_failure_rate(self, name: str, type_name: str, window: float, now: float) -> tuple[float, int]:
        q = self._ins.keys.queue(name)
        span = covering_minutes(window, now)[1]  # read() takes the minutes that begin within its window
        stats = typestats.read(self._ins.redis, q.type_stats, name, type_name, timedelta(seconds=span + 1), now)
        return (stats.failed / stats.processed if stats.processed else 0.0), stats.processed

    def _overdue(self, name: str, grace: float, now: float) -> int:
        """How many active tasks of queue ``name`` have run past their timeout and ``grace``. Their
        ``started_at`` first; the message (for its ``timeout``) only of those that started more than
        ``grace`` ago (a timeout is positive) and not read in an earlier round, in bounded pipelines."""
        q = self._ins.keys.queue(name)
        r = self._ins.redis
        ids = [str(i) for i in r.zrange(q.active, 0, OVERDUE_SCAN - 1)]
        known = self._timeouts.get(name, {})
        timeouts: dict[str, tuple[str, Any]] = {}
        unread: list[str] = []
        rows = read_task_fields(r, [q.task(task_id) for task_id in ids], ("started_at",), ())
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
        rows = read_task_fields(r, [q.task(task_id) for task_id in unread], ("started_at", "msg"))
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
        holding = self._rules.holding()
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
        resolve = [a_id for a_id in (*active, *pending) if a_id not in holding]
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


class WebhookSender:
    """POSTs each event as JSON to ``url``; retries ``retries`` times with exponential backoff
    (``backoff``, 2x, ...), each try within ``timeout`` seconds. Runs on its ``SenderThread``."""

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
            try:
                # The URL was checked to be http(s) in __init__ (bandit B310: no file:// or custom schemes).
                with urllib.request.urlopen(request, timeout=self.timeout) as response:  # nosec B310
                    if 200 <= response.status < 300:
                        return
            except (urllib.error.URLError, OSError, ValueError) as exc:
                error: object = exc
            else:  # pragma: no cover - urlopen raises HTTPError for statuses >= 400
                error = f"status {response.status}"
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
        self._queue.put(None)
        self._thread.join(timeout)


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
