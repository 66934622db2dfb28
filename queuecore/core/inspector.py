"""The Inspector: the one implementation of every read and operator action.

The dashboard and ``adminctl`` call this and nothing else.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import math
import random
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import redis

from queuecore.core import filters, queue_metrics, typestats
from queuecore.core.alerts import Alert, PendingAlert, alert_state
from queuecore.core.attempts import parse_attempts
from queuecore.core.broker import Broker
from queuecore.core.bulkjobs import CHUNK, BulkJob, BulkJobStore, BulkScope, StateCount, run_job
from queuecore.core.clock import AligningClock, Clock, to_ms
from queuecore.core.config import ConnectionConfig
from queuecore.core.context import Progress
from queuecore.core.errors import (
    ConfigurationError,
    FailureGroupNotFound,
    InvalidPayload,
    InvalidTaskState,
    NoWorkerForTask,
    PageNotFound,
    QueuecoreError,
    QueueNotEmpty,
    QueueNotFound,
    RedisFull,
    ServerNotFound,
    TaskDecodeError,
    TaskNotFound,
    TaskTypeNotFound,
    WrongKeyType,
    shown,
)
from queuecore.core.failures import GROUP_ACTIONS, FailureReport, read_failures
from queuecore.core.failures import SCAN_LIMIT as FAILURE_SCAN_LIMIT
from queuecore.core.flow import LimitInfo, pause_seconds, published_limits, read_limits
from queuecore.core.hashreads import read_task_fields
from queuecore.core.keys import (
    QueueKeys,
    is_valid_name,
    stats_day,
    stats_minute,
    validate_queue_name,
    validate_task_id,
    validate_type_name,
)
from queuecore.core.limits import Range
from queuecore.core.message import (
    AuditEntry,
    DailyStats,
    QueueInfo,
    ServerInfo,
    TaskInfo,
    TaskMessage,
    TaskSignature,
    WaitingTaskInfo,
    WorkerInfo,
    dumps,
    encode_payload,
    loads,
    ms_to_datetime,
    seconds_to_datetime,
)
from queuecore.core.periodic_admin import PeriodicAdmin, PeriodicEntryInfo
from queuecore.core.queue_metrics import MetricsSnapshot
from queuecore.core.redis_errors import broker_errors, is_wrong_type, translate
from queuecore.core.scheduler import message_builder
from queuecore.core.scripts import BulkBound, BulkChunk, Scripts
from queuecore.core.states import (
    ACTION_STATES,
    BULK_ACTION_STATES,
    DUE_STATES,
    STATES,
    TASK_ACTIONS,
    ZSET_STATES,
    QueueAction,
    TaskAction,
    TaskState,
)
from queuecore.core.topology import info_of_every_master
from queuecore.core.typereport import TypeReport
from queuecore.core.typestats import TypeStats

BULK_CHUNK = CHUNK  # tasks per call of a state's bulk script
PENDING_MANY_ACTIONS = ("archive", "delete")  # what admin_pending_many does to found pending tasks
PENDING_SPAN = 10_000  # places of the pending list one admin_pending_many call reads between its tasks
PENDING_SLACK = 2_000  # and on each side (workers take tasks meanwhile; priority tasks join the right)
SNAPSHOT_TTL_MS = 3_600_000  # a filtered bulk job's copy of its state lives this long past its last read
AUDIT_MAX_ENTRIES = 10_000
# The ranges of the reads' numeric arguments (checked where they enter, as ConfigurationError).
HISTORY_DAYS = Range(1, 90, whole=True, unit="days")
HISTORY_MINUTES = Range(1, 180, whole=True, unit="minutes")
HISTORY_UNTIL = Range(0, 253_402_300_799, note="(unix seconds, up to the year 9999)")
PAGE_SIZE = Range(1, 1000, whole=True, unit="tasks")
BULK_JOBS_LISTED = Range(1, 1000, whole=True, unit="jobs")
AUDIT_LIMIT = Range(1, AUDIT_MAX_ENTRIES, whole=True, unit="entries")
AUDIT_OFFSET = Range(0, AUDIT_MAX_ENTRIES, whole=True, unit="entries")
FAILURES_SCANNED = Range(1, FAILURE_SCAN_LIMIT, whole=True, unit="tasks per list")
STATS_WINDOW = Range(60, typestats.DAYS_KEPT * 86_400, note=f"(1 minute to {typestats.DAYS_KEPT} days)")
AUDIT_MAX_IDS = 100
EXPORT_LIMIT = Range(1, 10**12, whole=True, unit="tasks")  # iter_tasks' limit
FILTER_SCAN_LIMIT = 20_000  # tasks looked at, at most, to fill one filtered page
ORDERS = ("newest", "oldest")
NEWEST_FIRST_STATES = (TaskState.RETRY.value, TaskState.ARCHIVED.value, TaskState.COMPLETED.value)
MAX_PAGE = 1_000_000_000  # the highest page number a task list accepts (larger ones are PageNotFound)
_TASK_FIELDS = ("msg", "state", "retried", "error", "failed_at", "pending_since", "started_at", "completed_at",
                "result", "cancel", "archived_by")
# A list reads the result apart (``Inspector._with_results``): only for the tasks it returns, never while a
# filter scans. Only a completed task has one (``done.lua`` writes it with the state, and a completed task
# can only be deleted).
_LIST_FIELDS = tuple(f for f in _TASK_FIELDS if f != "result")
_DETAIL_FIELDS = (*_TASK_FIELDS, "attempts")  # one task read whole: with its attempt history (up to 8 KiB)
_DETAIL_FIELDS = (*_DETAIL_FIELDS, "snoozed", "waiting")  # type: ignore[assignment]  # and its flow control
_DETAIL_FIELDS = (*_DETAIL_FIELDS, "edits")  # type: ignore[assignment]  # and the operators' edits
EDIT_BEFORE_CHARS = 2000  # of the payload an edit replaced, kept with the edit


@dataclass(frozen=True)
class TaskPage:
    """One page of a task list."""

    tasks: list[TaskInfo]
    total: int  # tasks in the state (unfiltered)
    page: int
    size: int
    matched: int | None = None  # tasks matching the filter among those scanned; None when unfiltered
    scanned_all: bool = True  # False when a filtered scan stopped at FILTER_SCAN_LIMIT
    # Not in ``to_dict`` (its JSON shape is kept): the order of the list, and how many tasks a filter looked at.
    order: str = "oldest"
    scanned: int | None = None

    @property
    def pages(self) -> int:
        count = self.total if self.matched is None else self.matched
        return max(1, -(-count // self.size))

    def to_dict(self) -> dict[str, Any]:
        return {"tasks": [t.to_dict() for t in self.tasks], "total": self.total, "page": self.page,
                "size": self.size, "pages": self.pages, "matched": self.matched, "scanned_all": self.scanned_all}


@dataclass(frozen=True)
class BulkResult:
    """What a bulk action did."""

    queue: str
    state: str
    action: str
    count: int

    def to_dict(self) -> dict[str, Any]:
        return {"queue": self.queue, "state": self.state, "action": self.action, "count": self.count}


@dataclass(frozen=True)
class QueueRemoval:
    """What ``remove_queue`` deleted: its keys, and of those its tasks' (counted as they went, so a queue
    too damaged to be counted beforehand still says how many)."""

    keys_deleted: int
    tasks_deleted: int


@dataclass(frozen=True)
class RedisInfo:
    """Facts about the Redis server and our namespace in it."""

    version: str | None
    mode: str | None
    used_memory: int | None
    used_memory_human: str | None
    maxmemory: int | None
    maxmemory_policy: str | None
    connected_clients: int | None
    uptime_seconds: int | None
    key_count: int | None  # keys under our prefix; None when not counted
    queues: int
    extra: dict[str, Any] = field(default_factory=dict)
    # A Redis Cluster's figures are its masters' summed (version, policy and uptime: the first's,
    # the least); ``fullest`` is the highest used/maxmemory of any one server, None without a limit.
    nodes: int = 1
    fullest: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _strip_json_space(text: str, in_string: bool) -> str:
    """``text`` without the whitespace that lies outside JSON string literals, reading it as starting
    inside a string literal when ``in_string`` (a fragment cut from the middle of one)."""
    out: list[str] = []
    escaped = False
    for ch in text:
        if in_string:
            out.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
            out.append(ch)
        elif not ch.isspace():
            out.append(ch)
    return "".join(out)


def search_needles(search: str) -> tuple[str, ...]:
    """The forms of a search text that are looked for, lower-cased: the text as typed, as a JSON string
    holds it (a ``\\`` or a ``"`` in a payload's value is escaped there), and the text
    with the whitespace JSON ignores taken out (read as starting outside a string literal, and as
    starting inside one). Payloads are shown with spaces and line breaks (``"user_id": 5005``, the
    indented detail view) but stored compact (``"user_id":5005``): a fragment pasted from the screen
    then finds the task."""
    text = search.lower()
    forms = [text]
    escaped = json.dumps(text, ensure_ascii=False)[1:-1]  # as a payload's string holds it: C:\\data, \"hi\"
    if escaped != text:
        forms.append(escaped)
    if not any(ch in text for ch in '":,{}[]'):  # plain words: looked for as typed, spaces and all
        return tuple(forms)
    for in_string in (False, True):
        form = _strip_json_space(text, in_string)
        if form and form not in forms:
            forms.append(form)
    return tuple(forms)


MEMORY_SAMPLE = 20  # task hashes measured per queue for its memory estimate, over all its states
STATES_BY_KEY = ("pending", *ZSET_STATES)  # the order of the sizes _queue_infos reads
LIVE_STATES = frozenset(STATES_BY_KEY) - {TaskState.COMPLETED.value}  # a task there is work (QueueInfo.size)


def memory_sample_plan(sizes: dict[str, int], sample: int, offset: float = 0.0) -> dict[str, list[int]]:
    """Which task of which state to measure for a memory estimate: ``sample`` positions in all, shared
    out in proportion to each state's size (at least one for every state that holds tasks), spread
    evenly over each state's list, starting ``offset`` (0 to 1, drawn at random by callers) of the
    spacing in. ``queue_metrics.lua`` shares it out the same way."""
    total = sum(sizes.values())
    plan: dict[str, list[int]] = {}
    if total <= 0 or sample <= 0:
        return plan
    for state, count in sizes.items():
        if count <= 0:
            continue
        k = min(count, max(1, int(sample * count / total + 0.5)))
        plan[state] = [min(count - 1, int((j + offset) * count / k)) for j in range(k)]
    return plan


def default_order(state: str) -> str:
    """The order a task list of ``state`` shows by default: ``"newest"`` first for retry, archived and
    completed (the latest failures and results on page 1), else ``"oldest"`` (pending: next to run
    first; scheduled: soonest due first; active: lease ending soonest first)."""
    return "newest" if state in NEWEST_FIRST_STATES else "oldest"


def _stats_window(window: object) -> timedelta:
    """A statistics window (seconds or a ``timedelta``) within ``STATS_WINDOW``."""
    seconds = window.total_seconds() if isinstance(window, timedelta) else window
    return timedelta(seconds=STATS_WINDOW.check(seconds, "window"))


def check_page(page: Any) -> int:
    """``page`` when it is a page number (1 to ``MAX_PAGE``), else ``PageNotFound``."""
    if isinstance(page, bool) or not isinstance(page, int) or not 1 <= page <= MAX_PAGE:
        shown = str(page) if len(str(page)) <= 20 else f"{str(page)[:20]}…"
        raise PageNotFound(f"no such page: {shown} (pages are numbered from 1 to at most {MAX_PAGE:,})")
    return page


def _human_bytes(value: int | None) -> str | None:
    if value is None:
        return None
    size = float(value)
    for unit in ("B", "K", "M", "G", "T"):
        if size < 1024 or unit == "T":
            return f"{size:.2f}{unit}" if unit != "B" else f"{int(size)}B"
        size /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def _edits(raw: Any) -> list[dict[str, Any]]:
    """The ``edits`` field of a task hash: one JSON object per line, newest first; bad lines are skipped."""
    out = []
    for line in str(raw or "").splitlines():
        try:
            edit = loads(line)
        except ValueError:
            continue
        if isinstance(edit, dict):
            out.append(edit)
    return out


def _optional_int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _int(value: Any) -> int:
    try:
        return int(value) if value not in (None, "") else 0
    except (TypeError, ValueError):
        return 0



def _one_of(value: str, choices: tuple[str, ...], what: str) -> str:
    """``value`` as a plain string when it is one of ``choices``, else ``ConfigurationError``."""
    text = str(value)
    if text not in choices:
        raise ConfigurationError(f"invalid {what} {shown(value)}: choose from {', '.join(choices)}")
    return text


class Inspector:
    """Reads queues, tasks and workers, and performs operator actions.

    ``Inspector(redis_url=..., key_prefix=...)``, or pass a ``ConnectionConfig`` or a
    ``redis.Redis`` (which it then does not close).
    """

    def __init__(self, redis_url: str | None = None, key_prefix: str | None = None, *,
                 connection: ConnectionConfig | None = None, redis_client: redis.Redis | None = None,
                 clock: Clock | None = None, actor: str = "api") -> None:
        self.connection = connection or ConnectionConfig.default(redis_url=redis_url, key_prefix=key_prefix)
        self.keys = self.connection.keys
        self._owns_redis = redis_client is None
        self.redis = redis_client if redis_client is not None else self.connection.connect()
        self.scripts = Scripts(self.redis, self.keys)
        # Redis's time, not this host's; a call whose measurement of it finds Redis unreachable fails at
        # once (RedisUnavailable), instead of waiting out the same timeout again on its own Redis call
        self.clock = clock or AligningClock(Broker(self.redis, self.keys).time, raise_unreachable=True)
        self.actor = actor

    def as_actor(self, actor: str) -> Inspector:
        """The same inspector (same connection) recording its actions in the audit log as ``actor``."""
        other = Inspector(connection=self.connection, redis_client=self.redis, clock=self.clock, actor=actor)
        return other

    def close(self) -> None:
        if self._owns_redis:
            self.redis.close()

    def __enter__(self) -> Inspector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- queues -----------------------------------------------------------------------------------

    @translate
    def queues(self) -> list[str]:
        """Names of every known queue, sorted (a name an earlier version stored but this one refuses is left out)."""
        return sorted(n for n in cast("set[str]", self.redis.smembers(self.keys.queues)) if is_valid_name(n))

    def _queue(self, name: str) -> QueueKeys:
        q = self.keys.queue(name)
        return q

    def _require_queue(self, name: str) -> QueueKeys:
        q = self._queue(name)
        if not self.redis.sismember(self.keys.queues, name):
            raise QueueNotFound(f"no queue named {name!r}")
        return q

    @translate
    def queue_info(self, name: str) -> QueueInfo:
        """Sizes per state, pause flag, latency, memory and today's counters of one queue."""
        q = self._require_queue(name)
        return self._queue_infos([q])[0]

    @translate
    def all_queue_info(self) -> list[QueueInfo]:
        """``QueueInfo`` of every queue, in name order, read in one round-trip. A queue with a key of
        the wrong Redis type does not hide the others: it is listed with zeros and its ``problem``."""
        queues = [self._queue(n) for n in self.queues()]
        try:
            return self._queue_infos(queues)
        except WrongKeyType:
            pass
        infos = []
        for q in queues:  # one queue at a time, to tell which one is broken
            try:
                infos += self._queue_infos([q])
            except WrongKeyType as exc:
                infos.append(QueueInfo.unreadable(q.queue, str(exc)))
        return infos

    def _queue_infos(self, queues: list[QueueKeys]) -> list[QueueInfo]:
        if not queues:
            return []
        now = self.clock.now()
        day = stats_day(now)
        pipe = self.redis.pipeline(transaction=False)
        for q in queues:
            pipe.llen(q.pending)
            for state in ZSET_STATES:
                pipe.zcard(q.state_key(state))
            pipe.exists(q.paused)
            pipe.lindex(q.pending, -1)
            pipe.hmget(q.stats, "processed", "failed", f"processed:{day}", f"failed:{day}")
            pipe.pttl(q.paused)  # a timed pause expires when it ends (any key type answers)
        expected: list[tuple[str, str, QueueKeys | None] | None] = []
        for q in queues:
            expected += [(q.pending, "list", q), *((q.state_key(s), "zset", q) for s in ZSET_STATES), None,
                         (q.pending, "list", q), (q.stats, "hash", q), None]
        replies = self._checked(pipe.execute(raise_on_error=False), expected)
        step = 10  # llen, 5 zcard, exists, lindex, hmget, pttl
        infos = []
        oldest_ids = [replies[i * step + 7] for i in range(len(queues))]
        pipe = self.redis.pipeline(transaction=False)
        for q, oldest in zip(queues, oldest_ids, strict=True):
            if oldest:
                pipe.hmget(q.task(oldest), "pending_since", "msg")
        rows = iter(self._checked(pipe.execute(raise_on_error=False), [(q.task(o), "hash", q) for q, o in zip(
            queues, oldest_ids, strict=True) if o]) if any(oldest_ids) else [])
        since = [_pending_since(q, oldest, next(rows) if oldest else "") for q, oldest in zip(queues, oldest_ids,
                                                                                            strict=True)]
        memory = self._memory_usage(queues, [replies[i * step: i * step + 6] for i in range(len(queues))])
        paused_by = self._paused_by({q.queue for i, q in enumerate(queues) if replies[i * step + 6]})
        for i, q in enumerate(queues):
            r = replies[i * step: (i + 1) * step]
            pending_since = since[i]
            latency = max(0.0, now - pending_since) if pending_since else 0.0
            processed_total, failed_total, processed_today, failed_today = (_int(v) for v in r[8])
            infos.append(QueueInfo(
                name=q.queue, paused=bool(r[6]), pending=_int(r[0]), active=_int(r[1]), scheduled=_int(r[2]),
                retry=_int(r[3]), archived=_int(r[4]), completed=_int(r[5]), latency=latency,
                memory_bytes=memory[i], processed_today=processed_today, failed_today=failed_today,
                processed_total=processed_total, failed_total=failed_total,
                paused_until=ms_to_datetime(to_ms(now) + r[9]) if r[6] and r[9] > 0 else None,
                paused_by=paused_by.get(q.queue),
            ))
        return infos

    def _paused_by(self, paused: set[str]) -> dict[str, str]:
        """Who paused each of ``paused`` (queue names): the actor of the latest pause in the recent
        audit log (the last 500 entries)."""
        found: dict[str, str] = {}
        if not paused:
            return found
        for raw in self.redis.lrange(self.keys.audit, 0, 499):
            try:
                d = loads(raw)
                queue, action = d.get("queue"), d.get("action")
                if queue in paused and queue not in found and action in ("queue.pause", "queue.unpause"):
                    found[queue] = str(d["actor"]) if action == "queue.pause" else ""
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
            if len(found) == len(paused):
                break
        return {queue: actor for queue, actor in found.items() if actor}

    @translate
    def limits(self) -> list[LimitInfo]:
        """Every task type with a concurrency or rate limit that a live worker publishes: its limits,
        and per limit key in use (the 50 used last) how many run, wait and started in the window."""
        published: dict[str, dict[str, Any]] = {}
        now_ms = to_ms(self.clock.now())
        ids = cast("list[str]", self.redis.zrangebyscore(self.keys.servers, now_ms, "+inf"))
        if ids:
            pipe = self.redis.pipeline(transaction=False)  # one GET each: every server's key has its own slot
            for server_id in ids:
                pipe.get(self.keys.server_task_types(server_id))
            for raw in pipe.execute():
                published.update(published_limits(raw))
        return read_limits(self.redis, self.keys, published, now_ms)

    def _memory_usage(self, queues: list[QueueKeys], sizes: list[list[Any]]) -> list[int | None]:
        """Estimate bytes per queue: its state and stats keys, plus task hashes sampled from every state
        in proportion to its size (``memory_sample_plan``, ``MEMORY_SAMPLE`` in all), each state's
        average times its count. None where MEMORY is denied (an ACL) or unsupported."""
        plans = [memory_sample_plan(dict(zip(STATES_BY_KEY, (_int(v) for v in sizes[i][:6]), strict=True)),
                                    MEMORY_SAMPLE, random.random()) for i in range(len(queues))]
        try:
            pipe = self.redis.pipeline(transaction=False)
            for q, plan in zip(queues, plans, strict=True):
                pipe.memory_usage(q.pending)
                for state in ZSET_STATES:
                    pipe.memory_usage(q.state_key(state))
                pipe.memory_usage(q.stats)
                pipe.memory_usage(q.type_stats)
                for state, positions in plan.items():
                    for position in positions:
                        if state == "pending":
                            pipe.lindex(q.pending, position)
                        else:
                            pipe.zrange(q.state_key(state), position, position)
            replies = pipe.execute()
            keys_totals, sampled = [], []
            at = 0
            for plan in plans:
                keys_totals.append(sum(_int(v) for v in replies[at: at + 8]))  # the 8 keys above
                at += 8
                ids: dict[str, list[str]] = {}
                for state, positions in plan.items():
                    found = replies[at: at + len(positions)]
                    at += len(positions)
                    ids[state] = [v if isinstance(v, str) else v[0] for v in found if v]
                sampled.append(ids)
            pipe = self.redis.pipeline(transaction=False)
            for q, ids in zip(queues, sampled, strict=True):
                for state_ids in ids.values():
                    for task_id in state_ids:
                        pipe.memory_usage(q.task(task_id), samples=0)  # every field: a task has few
            task_sizes = iter(pipe.execute())
        except redis.ResponseError:
            return [None] * len(queues)  # MEMORY denied (ACL) or unsupported
        out: list[int | None] = []
        for i, ids in enumerate(sampled):
            counts = dict(zip(STATES_BY_KEY, (_int(v) for v in sizes[i][:6]), strict=True))
            estimate = float(keys_totals[i])
            for state, state_ids in ids.items():
                measured = [_int(next(task_sizes)) for _ in state_ids]
                if measured:
                    estimate += sum(measured) / len(measured) * counts[state]
            out.append(int(estimate))
        return out

    @translate
    def history(self, name: str, days: int = 7, *, until: float | None = None) -> list[DailyStats]:
        """Processed and failed per UTC day, oldest first, for the last ``days`` days (up to ``until``,
        unix s: give several queues' series one reading of the clock; default now)."""
        days = int(HISTORY_DAYS.check(days, "days"))
        q = self._require_queue(name)
        until = self.clock.now() if until is None else HISTORY_UNTIL.check(until, "until")
        today = datetime.fromtimestamp(until, tz=UTC).date()
        dates = [(today - timedelta(days=n)).isoformat() for n in range(days - 1, -1, -1)]
        return self._series(q, dates)

    @translate
    def minute_history(self, name: str, minutes: int = 60, *, until: float | None = None) -> list[DailyStats]:
        """Processed and failed per UTC minute, oldest first, for the last ``minutes`` minutes (up to
        ``until``, unix s: give several queues' series one reading of the clock; default now)."""
        minutes = int(HISTORY_MINUTES.check(minutes, "minutes"))
        q = self._require_queue(name)
        now = self.clock.now() if until is None else HISTORY_UNTIL.check(until, "until")
        stamps = [stats_minute(now - 60 * n) for n in range(minutes - 1, -1, -1)]
        return self._series(q, stamps)

    def _series(self, q: QueueKeys, stamps: list[str]) -> list[DailyStats]:
        fields = [f"{kind}:{s}" for s in stamps for kind in ("processed", "failed")]
        values = self.redis.hmget(q.stats, fields)
        return [DailyStats(q.queue, s, _int(values[2 * i]), _int(values[2 * i + 1])) for i, s in enumerate(stamps)]

    @translate
    def type_stats(self, queue: str, type: str, window: float | timedelta = timedelta(hours=1)) -> TypeStats:
        """A task type's statistics in ``queue`` over the last ``window`` (seconds or a ``timedelta``):
        per minute up to 72 h, per day beyond (up to 90 days). Counts are exact; the duration
        percentiles are estimates from fixed buckets (``typestats.BUCKETS_MS``)."""
        q = self._require_queue(queue)
        span = _stats_window(window)
        return typestats.read(self.redis, q.type_stats, q.queue, type, span, self.clock.now())

    @translate
    def metrics(self) -> MetricsSnapshot:
        """Everything a metrics scrape reports (``queuecore.metrics``): each queue's sizes, latency,
        paused flag, memory estimate and per-type counters, in one pipeline of one script call per
        queue, and the live workers. Queues with a key of the wrong Redis type are left out
        (``MetricsSnapshot.unreadable``)."""
        queues, unreadable = queue_metrics.read_queues(self.redis, self.scripts,
                                                       [self._queue(n) for n in self.queues()], self.clock.now())
        return MetricsSnapshot(queues, queue_metrics.worker_metrics(self.servers()), unreadable)

    @translate
    def task_types(self, queue: str) -> list[str]:
        """The task types that have run in ``queue`` (they have per-type statistics), sorted."""
        q = self._require_queue(queue)
        return sorted(typestats.read_totals(cast("dict[str, str]", self.redis.hgetall(q.type_stats))))

    @translate
    def pause_queue(self, name: str, for_: float | timedelta | None = None) -> datetime | None:
        """Stop every worker from fetching this queue's tasks (running ones go on); with ``for_``
        (seconds or a ``timedelta``, up to 10 years) the queue resumes by itself after that long.
        Returns when it resumes (None: until unpaused), which a read just after a short pause no
        longer shows."""
        q = self._require_queue(name)
        until_ms = 0
        if for_ is not None:
            seconds = pause_seconds(for_)
            until_ms = to_ms(self.clock.now() + seconds)
        self.scripts.admin_pause(q, until_ms=until_ms)
        self._audit(f"queue.{QueueAction.PAUSE}", name, state=None if not until_ms else f"for {seconds:g}s")
        return ms_to_datetime(until_ms) if until_ms else None

    @translate
    def unpause_queue(self, name: str) -> None:
        """Let workers fetch this queue's tasks again."""
        q = self._require_queue(name)
        self.redis.delete(q.paused)
        self.scripts.publish(q.wake_channel, "1")
        self._audit(f"queue.{QueueAction.UNPAUSE}", name)

    @translate
    def remove_queue(self, name: str, force: bool = False) -> QueueRemoval:
        """Forget a queue, deleting its keys. It must hold no pending, scheduled, retry or archived
        task unless ``force``; never an active one. Its completed tasks (and their results) go with
        it either way; ``QueueInfo.stored`` counts them before.

        A queue with a key of the wrong Redis type can be removed with ``force`` (how an operator clears
        it away), as long as its active tasks can be counted and are none.

        Returns how many keys, and of them task hashes, were deleted (``QueueRemoval``).
        """
        q = self._require_queue(name)
        try:
            info = self._queue_infos([q])[0]
        except WrongKeyType:
            if not force:
                raise
            with self._expect(q.active, "zset", q):  # its running tasks must still be known to be none
                active = int(self.redis.zcard(q.active))
            info = replace(QueueInfo.unreadable(name, "a key of the wrong Redis type"), active=active)
        if info.active:
            raise QueueNotEmpty(f"queue {name!r} has {info.active} active task(s); wait or cancel them first")
        if info.size and not force:
            raise QueueNotEmpty(f"queue {name!r} holds {info.size} task(s); use force to delete them too")
        deleted = tasks = 0
        watched: list[str] = []
        states = {q.state_key(state) for state in LIVE_STATES}
        try:
            if force:  # the lists of tasks first: cut off there, no list names a task whose hash is gone
                deleted = int(self.redis.unlink(*sorted(states | {q.completed})))
            for batch in self._scan_batches(q.all_pattern):
                task_keys = [key for key in batch if key.startswith(q.task_prefix)]
                others = [key for key in batch if not key.startswith(q.task_prefix)]
                # Without force, what is enqueued meanwhile stays: its task, and the state holding it (an
                # empty state is no key: one found holds such a task).
                task_keys, waited = self._tasks_to_delete(q, task_keys, keep_live=not force)
                watched += waited
                if not force:
                    others = [key for key in others if key not in states]
                removed = int(self.redis.unlink(*task_keys)) if task_keys else 0  # a key SCAN gave twice, once
                tasks += removed
                deleted += removed + (int(self.redis.unlink(*others)) if others else 0)
        except BaseException as exc:  # Ctrl-C, Redis gone: the queue stays listed, and removing it again ends it
            with contextlib.suppress(Exception):
                self._audit(f"queue.{QueueAction.REMOVE}", name, count=tasks,
                            outcome=f"cut off ({type(exc).__name__}) after deleting {tasks} task(s) and "
                                    f"{deleted - tasks} other key(s): remove it again to finish")
            raise
        self._end_waits(q, watched)
        if not force and (arrived := self._queue_infos([q])[0].size):
            raise QueueNotEmpty(f"queue {name!r}: {arrived} task(s) were enqueued while it was "
                                f"being removed; they are kept, and so is the queue ({tasks} finished task(s) and "
                                f"{deleted - tasks} other key(s) were deleted)")
        self.redis.srem(self.keys.queues, name)
        self._audit(f"queue.{QueueAction.REMOVE}", name, count=tasks)
        return QueueRemoval(deleted, tasks)

    def _tasks_to_delete(self, q: QueueKeys, task_keys: list[str], *, keep_live: bool) -> tuple[list[str], list[str]]:
        """Of ``task_keys``: the keys to delete (with ``keep_live``, those of tasks in no live state:
        completed, all a queue removed without ``force`` holds; a task enqueued since the queue was
        found empty is kept), and the ids among them whose outcome a caller waits for (results.py).
        One HMGET per task, in one pipeline (a key of another type is deleted, and no one waits on it)."""
        pipe = self.redis.pipeline(transaction=False)
        for key in task_keys:
            pipe.hmget(key, ("state", "watch"))
        rows = pipe.execute(raise_on_error=False) if task_keys else []
        doomed: list[str] = []
        watched: list[str] = []
        for key, row in zip(task_keys, rows, strict=True):
            state, mark = row if isinstance(row, list) else (None, None)
            if keep_live and state in LIVE_STATES:
                continue
            doomed.append(key)
            if isinstance(mark, str) and mark:
                watched.append(key[len(q.task_prefix):])
        return doomed, watched

    def _end_waits(self, q: QueueKeys, task_ids: list[str]) -> None:
        """Wake the callers blocked on tasks deleted with their queue (they then find no task), and take
        the wake lists away again: Redis hands a pushed token to the blocked callers before it runs the
        next command."""
        for start in range(0, len(task_ids), 500):
            chunk = [q.done(task_id) for task_id in task_ids[start:start + 500]]
            pipe = self.redis.pipeline(transaction=False)
            for key in chunk:
                pipe.lpush(key, "1")
            for key in chunk:  # a cluster pipeline takes one key per UNLINK
                pipe.unlink(key)
            pipe.execute()

    def _scan_batches(self, pattern: str, count: int = 500) -> Iterator[list[str]]:
        batch: list[str] = []
        for key in self.redis.scan_iter(match=pattern, count=count):
            batch.append(key)
            if len(batch) >= count:
                yield batch
                batch = []
        if batch:
            yield batch

    # -- tasks ------------------------------------------------------------------------------------

    @staticmethod
    def _check_state(state: str) -> str:
        return _one_of(state, STATES, "state")

    def _wrong_type(self, key: str, expected: str, q: QueueKeys | None = None) -> WrongKeyType:
        """The error for ``key`` (expected to be a Redis ``expected``) holding another type: it names the
        key, its actual type and, for a task hash, the task."""
        try:
            actual = str(self.redis.type(key))
        except redis.RedisError:
            actual = "value of another type"
        task_id = key[len(q.task_prefix):] if q is not None and key.startswith(q.task_prefix) else None
        of_task = f" (task {task_id} of queue {q.queue})" if task_id and q is not None else ""
        return WrongKeyType(f"corrupt data in Redis: key {key}{of_task} holds a {actual}, expected a {expected}",
                            key=key, task_id=task_id)

    @contextmanager
    def _expect(self, key: str, expected: str, q: QueueKeys | None = None) -> Iterator[None]:
        """Turn Redis's WRONGTYPE (which names no key) on ``key`` into a ``WrongKeyType`` naming it."""
        try:
            yield
        except redis.ResponseError as exc:
            if is_wrong_type(str(exc)):
                raise self._wrong_type(key, expected, q) from exc
            raise

    def _checked(self, replies: list[Any], expected: list[tuple[str, str, QueueKeys | None] | None]) -> list[Any]:
        """The replies of a pipeline run with ``raise_on_error=False``: the first WRONGTYPE reply raises
        ``WrongKeyType`` naming its key (``expected[i]``: key, type, queue), any other error is raised."""
        for reply, spec in zip(replies, expected, strict=True):
            if isinstance(reply, redis.ResponseError):
                if spec is not None and is_wrong_type(str(reply)):
                    raise self._wrong_type(*spec) from reply
                raise reply
        return replies

    def _ids(self, q: QueueKeys, state: str, start: int, stop: int,
             newest: bool = False, key: str | None = None) -> list[tuple[str, float | None]]:
        """Ids with their scores, oldest first (``newest``: newest first): ``start``..``stop`` inclusive;
        read from ``key`` when given (a copy of the state: ``QueueKeys.bulk_snapshot``)."""
        key = key or q.state_key(state)
        with self._expect(key, "list" if state == "pending" else "zset", q):
            if not newest:
                return self._raw_ids(key, state, start, stop)
            if state == "pending":  # pushed left: the newest is at the left end
                return [(i, None) for i in cast("list[str]", self.redis.lrange(key, start, stop))]
            return cast("list[tuple[str, float | None]]", self.redis.zrevrange(key, start, stop, withscores=True))

    def _raw_ids(self, key: str, state: str, start: int, stop: int) -> list[tuple[str, float | None]]:
        if state == "pending":
            # Pushed left, popped right: the oldest is at the right end.
            length = self.redis.llen(key)
            lo, hi = max(0, length - 1 - stop), length - 1 - start
            if hi < 0 or lo > hi:
                return []
            return [(task_id, None) for task_id in reversed(cast("list[str]", self.redis.lrange(key, lo, hi)))]
        scored = self.redis.zrange(key, start, stop, withscores=True)
        return cast("list[tuple[str, float | None]]", scored)

    def _count(self, q: QueueKeys, state: str) -> int:
        with self._expect(q.state_key(state), "list" if state == "pending" else "zset", q):
            return self.redis.llen(q.pending) if state == "pending" else self.redis.zcard(q.state_key(state))

    @translate
    def list_tasks(self, queue: str, state: str, page: int = 1, size: int = 20, *, type: str | None = None,
                   search: str | None = None, order: str | None = None, filter: str | None = None) -> TaskPage:
        """One page of the tasks of ``queue`` in ``state``.

        ``order``: ``"oldest"`` first (pending: the next to run; scored states: by ascending score, so
        scheduled and retry soonest due first) or ``"newest"`` first; ``None`` is the state's default
        (``default_order``: newest first for retry, archived and completed).
        ``type`` keeps tasks of that type; ``search`` keeps tasks whose id, payload or last error
        contains the text; ``filter`` is the filter language (``filters.py``: ``type:... error:...
        payload.<path>:... -term``). Filtered lists scan at most ``FILTER_SCAN_LIMIT`` tasks, from the
        start of the order asked for.
        """
        state = self._check_state(state)
        order = default_order(state) if order is None else _one_of(order, ORDERS, "order")
        newest = order == "newest"
        check_page(page)
        size = int(PAGE_SIZE.check(size, "size"))
        keep = self._predicate(type, search, filter)
        q = self._require_queue(queue)
        total = self._count(q, state)
        if keep is None:
            start = (page - 1) * size
            ids = self._ids(q, state, start, start + size - 1, newest)
            # A page of ids, each returned: a completed task's result is read with it, in the same pass.
            infos = self._infos(q, state, ids, with_results=state == TaskState.COMPLETED)
            return TaskPage(infos, total, page, size, order=order)
        wanted_from = (page - 1) * size
        matched: list[TaskInfo] = []
        matches = 0
        scanned = 0
        chunk = 500
        while scanned < min(total, FILTER_SCAN_LIMIT):
            ids = self._ids(q, state, scanned, scanned + chunk - 1, newest)
            if not ids:
                break
            scanned += len(ids)
            for info in self._infos(q, state, ids):
                if keep(info):
                    if wanted_from <= matches < wanted_from + size:
                        matched.append(info)
                    matches += 1
        return TaskPage(self._with_results(q, matched), total, page, size, matched=matches,
                        scanned_all=scanned >= total, order=order, scanned=scanned)

    def check_filter(self, type: str | None = None, search: str | None = None, filter: str | None = None) -> None:
        """``ConfigurationError`` when a task type, search or filter could not be used by a list, an
        export or a bulk job (nothing is read)."""
        self._predicate(type, search, filter)

    def _predicate(self, type_name: str | None, search: str | None,
                   filter_text: str | None) -> Callable[[TaskInfo], bool] | None:
        """What a filtered list keeps (None: no filter); a bad ``filter_text`` raises ``ConfigurationError``.
        A ``search`` written in the filter language (``filters.looks_like_filter``) is read as a filter."""
        if type_name:  # a name no task can have is a mistake to report, not a filter that matches nothing
            validate_type_name(type_name)
        if search and len(search) > filters.MAX_LENGTH:  # as a filter (filters.parse): a list's, a bulk job's
            raise ConfigurationError(f"a search is at most {filters.MAX_LENGTH:,} characters")
        if search and filters.looks_like_filter(search):
            filter_text, search = f"{filter_text or ''} {search}".strip(), None
        needles = search_needles(search) if search else ()
        terms = filters.parse(filter_text) if filter_text else []
        if not type_name and not needles and not terms:
            return None
        by_terms = filters.matcher(terms, lambda info, text: self._matches(info, None, search_needles(text)))
        return lambda info: self._matches(info, type_name, needles) and by_terms(info)

    @staticmethod
    def _matches(info: TaskInfo, type_name: str | None, needles: tuple[str, ...]) -> bool:
        """Of ``type_name`` (when given) and containing one of ``needles`` (``search_needles``) in its id,
        compact payload or last error (when given)."""
        if type_name and info.type != type_name:
            return False
        if needles:
            haystack = f"{info.id} {dumps(info.payload)} {info.last_error or ''}".lower()
            return any(needle in haystack for needle in needles)
        return True

    def _infos(self, q: QueueKeys, state: str, ids: list[tuple[str, float | None]], *,
               with_results: bool = False) -> list[TaskInfo]:
        """The tasks ``ids`` of ``state`` (those deleted meanwhile left out), read in pipelines of a
        bounded size (``read_task_fields``), without their results unless ``with_results``
        (``_with_results`` adds them to the tasks a filtered list returns, once the filter has chosen them)."""
        if not ids:
            return []
        keys = [q.task(task_id) for task_id, _ in ids]
        fields, sized = (_TASK_FIELDS, ("msg", "result")) if with_results else (_LIST_FIELDS, ("msg",))
        rows = self._checked(read_task_fields(self.redis, keys, fields, sized, raise_on_error=False),
                             [(key, "hash", q) for key in keys])
        out = []
        holders = self._holders() if state == TaskState.ACTIVE else {}
        for (task_id, score), row in zip(ids, rows, strict=True):
            if row[0] is None and row[1] is None:
                continue  # deleted between the two reads
            out.append(self._info(q, task_id, dict(zip(fields, row, strict=True)), state, score, holders))
        return out

    def _with_results(self, q: QueueKeys, infos: list[TaskInfo]) -> list[TaskInfo]:
        """``infos`` (read by ``_infos``) with the results of the completed ones, in the same order."""
        done = [info.id for info in infos if info.state is TaskState.COMPLETED]
        if not done:
            return infos
        keys = [q.task(task_id) for task_id in done]
        rows = self._checked(read_task_fields(self.redis, keys, ("result",), ("result",), raise_on_error=False),
                             [(key, "hash", q) for key in keys])
        results = {task_id: _result(raw) for task_id, (raw,) in zip(done, rows, strict=True)}
        return [replace(info, result=results[info.id]) if results.get(info.id) is not None else info
                for info in infos]

    def _holders(self) -> dict[tuple[str, str], WorkerInfo | WaitingTaskInfo]:
        """(queue, task id) -> the live heartbeat entry of a task a worker holds: running, or fetched
        and waiting for a free slot."""
        out: dict[tuple[str, str], WorkerInfo | WaitingTaskInfo] = {}
        for server in self.servers():
            for waiting in server.waiting:
                out[(waiting.queue, waiting.task_id)] = waiting
            for running in server.workers:
                out[(running.queue, running.task_id)] = running
        return out

    def _info(self, q: QueueKeys, task_id: str, h: dict[str, Any], state: str | None, score: float | None,
              holders: dict[tuple[str, str], WorkerInfo | WaitingTaskInfo] | None = None) -> TaskInfo:
        return task_info(q, task_id, h, state, score, holders)

    @translate
    def get_task(self, queue: str, task_id: str) -> TaskInfo:
        """Every field of one task, with its attempt history; ``TaskNotFound`` when it does not exist."""
        q = self._queue(queue)
        validate_task_id(task_id)
        with self._expect(q.task(task_id), "hash", q):
            row = cast("list[str | None]", self.redis.hmget(q.task(task_id), _DETAIL_FIELDS))
        h = dict(zip(_DETAIL_FIELDS, row, strict=True))
        if h["msg"] is None and h["state"] is None:
            raise TaskNotFound(f"no task {task_id!r} in queue {queue!r}")
        state = h["state"]
        score = None
        if state in ZSET_STATES:
            score = self.redis.zscore(q.state_key(state), task_id)
        holders = self._holders() if state == TaskState.ACTIVE else None
        return self._info(q, task_id, h, state, score, holders)

    def _task_keys(self, queue: str, task_id: str) -> QueueKeys:
        validate_task_id(task_id)
        return self._queue(queue)

    def _task_action(self, action: str, queue: str, task_id: str) -> None:
        q = self._task_keys(queue, task_id)
        try:
            with broker_errors():
                self._admin_script(action, q, task_id)
        except (TaskNotFound, InvalidTaskState) as exc:
            self._audit(f"task.{action}", queue, task_ids=[task_id], outcome=str(exc))
            raise
        self._audit(f"task.{action}", queue, task_ids=[task_id], count=1)

    @translate
    def edit_and_run(self, queue: str, task_id: str, payload: dict[str, Any], *, force: bool = False) -> TaskInfo:
        """Give a scheduled, retry or archived task a new payload and run it now (move it to pending),
        in one step; the edit (when, who, the payload before) is kept in the task's ``edits`` and the
        audit log. The payload is checked as at enqueue (a JSON object within the size and depth
        limits) and, unless ``force``, against the handlers live workers publish (``check_task``)."""
        q = self._queue(queue)
        validate_task_id(task_id)
        current = self.get_task(queue, task_id)
        if current.state not in ACTION_STATES[TaskAction.RUN]:
            raise InvalidTaskState(f"cannot edit and run task {task_id!r}: it is {current.state}")
        if current.decode_error:
            raise InvalidTaskState(f"cannot edit task {task_id!r}: its stored message cannot be decoded "
                                   f"({current.decode_error}); delete it and enqueue it anew")
        if not isinstance(payload, dict):  # encode_payload takes None for {}: an edit to null would wipe it
            raise InvalidPayload(f"a task's payload is a JSON object, not {type(payload).__name__}")
        payload_json = encode_payload(payload, self.connection.max_payload_bytes)
        if not force:
            self.require_runnable(current.type, payload, queue)
        with self._expect(q.task(task_id), "hash", q):
            raw = cast("str | None", self.redis.hget(q.task(task_id), "msg"))
        if raw is None:
            raise TaskNotFound(f"no task {task_id!r} in queue {queue!r} (deleted meanwhile)")
        try:
            message = TaskMessage.decode(task_id, queue, raw)
        except TaskDecodeError as exc:  # changed or deleted since it was read
            raise InvalidTaskState(f"cannot edit task {task_id!r}: {exc}") from None
        new_msg = replace(message, payload=loads(payload_json)).encode(payload_json)
        before = dumps(current.payload)
        record = dumps({"at": self.clock.now(), "actor": self.actor, "before": before[:EDIT_BEFORE_CHARS],
                        "cut": len(before) > EDIT_BEFORE_CHARS})
        self.scripts.admin_run_task(q, task_id, now_ms=to_ms(self.clock.now()), new_msg=new_msg, edit=record)
        self._audit("task.edit_run", queue, task_ids=[task_id], count=1)
        return self.get_task(queue, task_id)

    def run_task(self, queue: str, task_id: str) -> None:
        """Run a scheduled, retry or archived task now (move it to pending)."""
        self._task_action(TaskAction.RUN.value, queue, task_id)

    def archive_task(self, queue: str, task_id: str) -> None:
        """Archive ("kill") a pending, scheduled or retry task."""
        self._task_action(TaskAction.ARCHIVE.value, queue, task_id)

    def delete_task(self, queue: str, task_id: str) -> None:
        """Delete a task that is not running."""
        self._task_action(TaskAction.DELETE.value, queue, task_id)

    def cancel_task(self, queue: str, task_id: str) -> None:
        """Cancel a running task: it stops and is archived as "cancelled by operator"."""
        self._task_action(TaskAction.CANCEL.value, queue, task_id)

    @staticmethod
    def _check_action(action: str) -> str:
        return _one_of(action, TASK_ACTIONS, "action")

    def _check_bulk_state(self, action: str, state: str) -> str:
        state = self._check_state(state)
        allowed = BULK_ACTION_STATES[action]
        if state not in allowed:
            raise ConfigurationError(f"cannot {action} all {state} tasks; allowed states: {', '.join(allowed)}")
        return state

    def _bulk(self, queue: str, state: str, action: str, *, type: str | None = None, search: str | None = None,
              filter: str | None = None) -> BulkResult:
        """A bulk job on ``queue``'s ``state``, driven here until it ends (``run_bulk_job``)."""
        job = self.run_bulk_job(self.start_bulk_job(action, queue=queue, state=state, type=type, search=search,
                                                    filter=filter).id)
        return BulkResult(queue, state, action, job.done)

    def run_all(self, queue: str, state: str) -> BulkResult:
        """Move every scheduled, retry or archived task of the queue to pending, in chunks."""
        return self._bulk(queue, state, TaskAction.RUN.value)

    def archive_all(self, queue: str, state: str) -> BulkResult:
        """Archive every pending, scheduled or retry task of the queue, in chunks."""
        return self._bulk(queue, state, TaskAction.ARCHIVE.value)

    def delete_all(self, queue: str, state: str) -> BulkResult:
        """Delete every task of the queue in a state other than active, in chunks."""
        return self._bulk(queue, state, TaskAction.DELETE.value)

    def act_on_all(self, queue: str, action: str, state: str, *, type: str | None = None, search: str | None = None,
                   filter: str | None = None) -> BulkResult:
        """Run, archive, delete or cancel every task of ``queue`` in ``state`` (that matches ``type``,
        ``search`` and ``filter``, when given: the same match as ``list_tasks``), as a bulk job driven
        here until it ends (``start_bulk_job`` and ``run_bulk_job``: the job and its audit entry are
        the same as a background one's).

        The states each action takes are ``states.BULK_ACTION_STATES``; any other is a
        ``ConfigurationError``.
        """
        return self._bulk(queue, state, self._check_action(action), type=type, search=search, filter=filter)

    # -- bulk jobs (bulkjobs.py) ---------------------------------------------------------------------

    @property
    def _bulk_store(self) -> BulkJobStore:
        return BulkJobStore(self.scripts, self.keys, self.clock)

    @translate
    def start_bulk_job(self, action: str, *, queue: str | None = None, state: str | None = None,
                       type: str | None = None, search: str | None = None, filter: str | None = None,
                       group: str | None = None, confirmed: StateCount | None = None,
                       holder: str | None = None) -> BulkJob:
        """Queue a bulk job: ``action`` on every task of ``queue`` in ``state`` that matches ``type``,
        ``search`` and ``filter`` (none: the whole state), or on every task of failure group ``group`` (of
        ``queue``, or of every queue). It does nothing until a driver runs it: ``run_bulk_job`` here, or
        a worker's bulk-job runner within a second or so. Checked first: the action fits the state (or
        the group), the queue, type and filter are valid, the group exists; ``TooManyBulkJobs`` when
        ``bulkjobs.MAX_OPEN`` are open. ``confirmed``: the count (``state_count``) an operator agreed to;
        a job on the whole state then acts on at most that many, of the tasks in the state before it
        was taken (without it, the state is counted here); a job that finds its tasks first (a filter,
        a cancel) finds them when it runs. ``holder``: the driver that runs it next (``run_bulk_job(...,
        holder=...)``), which holds its lease from the start, so that no worker takes it up meanwhile."""
        action = self._check_action(action)
        if group is not None:
            if action not in GROUP_ACTIONS:
                raise ConfigurationError(f"invalid action {action!r}: one of {', '.join(GROUP_ACTIONS)}")
            if state is not None or type or search or filter:
                raise ConfigurationError("a failure group's job takes no state or filter")
            found = self.failure_groups(queue).group(group)
            if found is None:
                raise FailureGroupNotFound(f"no failure group {group!r}" + (f" in queue {queue!r}" if queue else ""))
            scope = BulkScope(queue, group=group)
            total = found.acted_on(action)
            if not total:
                raise ConfigurationError(f"failure group {group!r} has no task to {action}: every one is "
                                         f"{found.tasks[0].state if found.tasks else 'gone'}")
            return self._bulk_store.create(action, scope, self.actor, total, exact_total=True, holder=holder)
        if queue is None or state is None:
            raise ConfigurationError("a bulk job needs a queue and a state, or a failure group")
        state = self._check_bulk_state(action, state)
        self.check_filter(type, search, filter)  # refused here, before anything is queued
        scope = BulkScope(queue, state, type or None, search or None, filter or None)
        counted_from = self.clock.now()  # before the count: a task enqueued after it is not among the job's
        size = self._count(self._require_queue(queue), state)
        whole = not scope.filtered and action != TaskAction.CANCEL
        if confirmed is not None:
            self._check_confirmed(confirmed, queue, state)
        if confirmed is not None and whole:
            size = min(size, confirmed.size)  # no more than agreed to, nor than the state holds now
            counted_from = min(counted_from, confirmed.at)
        return self._bulk_store.create(action, scope, self.actor, size if whole else None, exact_total=False,
                                       state_size=size, counted_from=counted_from, holder=holder)

    @translate
    def state_count(self, queue: str, state: str) -> StateCount:
        """How many tasks of ``queue`` are in ``state``, and when the count began: what an operator
        confirms before ``start_bulk_job(..., confirmed=...)`` acts on the whole state."""
        q, state = self._require_queue(queue), self._check_state(state)
        at = self.clock.now()
        return StateCount(queue, state, self._count(q, state), at)

    @staticmethod
    def _check_confirmed(confirmed: StateCount, queue: str, state: str) -> None:
        if not isinstance(confirmed, StateCount) or (confirmed.queue, confirmed.state) != (queue, state):
            raise ConfigurationError(f"the confirmed count is not of the {state} tasks of queue {queue!r}")
        size, at = confirmed.size, confirmed.at
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ConfigurationError(f"a confirmed count must be a whole number of tasks, got {size!r}")
        if isinstance(at, bool) or not isinstance(at, (int, float)) or not 0 <= at < math.inf:
            raise ConfigurationError(f"a confirmed count's time must be unix seconds, got {at!r}")

    def run_bulk_job(self, job_id: str, *, stop: threading.Event | None = None, holder: str | None = None,
                     on_progress: Callable[[BulkJob], None] | None = None) -> BulkJob:
        """Drive bulk job ``job_id`` in this thread until it ends (done, cancelled or failed) or ``stop``
        is set (the lease is then given up for another driver); ``on_progress`` gets the job after each
        chunk; ``holder`` names this driver (a driver calling again after an interruption keeps its
        lease). A job another driver holds is returned as it is. ``RedisUnavailable`` or ``RedisFull``
        stop it without ending it: another driver goes on once Redis answers."""
        with broker_errors():
            return run_job(self._bulk_store, InspectorBulkOperations(self), job_id, stop=stop, holder=holder,
                           on_progress=on_progress)

    @translate
    def bulk_job(self, job_id: str) -> BulkJob:
        """One bulk job and its progress; ``BulkJobNotFound`` when there is none of that id."""
        with self._expect(self.keys.bulk_job(job_id) if isinstance(job_id, str) else "", "hash"):
            return self._bulk_store.get(job_id)

    @translate
    def bulk_jobs(self, limit: int = 50) -> list[BulkJob]:
        """The recent bulk jobs, newest first (open ones and those finished in the last week)."""
        return self._bulk_store.recent(int(BULK_JOBS_LISTED.check(limit, "limit")))

    @translate
    def open_bulk_job_ids(self) -> list[str]:
        """The ids of the queued and running bulk jobs, oldest first."""
        return self._bulk_store.open_ids()

    @translate
    def cancel_bulk_job(self, job_id: str) -> BulkJob:
        """Ask bulk job ``job_id`` to stop: it ends ``cancelled`` after the chunk it is on, with what it
        did (a queued job no driver holds ends at once); a finished job is returned as it is."""
        with self._expect(self.keys.bulk_job(job_id) if isinstance(job_id, str) else "", "hash"):
            job, ended_here = self._bulk_store.request_cancel(job_id)
        self._audit("bulk.cancel", job.scope.queue, state=job.scope.state, count=job.done,
                    outcome=f"bulk job {job.id}: {job.describe()}")
        if ended_here:  # no driver will: its own entry, as every finished job has
            InspectorBulkOperations(self).audit(job, f"bulk job {job.id}: cancelled before it acted on any task")
        return job

    @translate
    def count(self, queue: str, state: str) -> int:
        """How many tasks of the queue are in ``state``."""
        return self._count(self._require_queue(queue), self._check_state(state))

    # -- servers and workers ----------------------------------------------------------------------

    @translate
    def servers(self, task_types: bool = False) -> list[ServerInfo]:
        """Every live worker process, from its heartbeat (stale ones are left out): the tasks whose
        handlers run (``workers``) and the tasks fetched ahead that wait for a slot (``waiting``).

        With ``task_types``, also the task types each handles and their parameter names
        (``ServerInfo.task_types``; None for a process that publishes none).
        """
        now_ms = to_ms(self.clock.now())
        ids = cast("list[str]", self.redis.zrangebyscore(self.keys.servers, now_ms, "+inf"))
        if not ids:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for server_id in ids:
            pipe.get(self.keys.server(server_id))
            if task_types:
                pipe.get(self.keys.server_task_types(server_id))
        replies = pipe.execute()
        step = 2 if task_types else 1
        out = []
        for index in range(len(ids)):
            raw = replies[index * step]
            if not raw:
                continue
            try:
                d = loads(raw)
                workers = [WorkerInfo(server_id=d["id"], task_id=w["task_id"], queue=w["queue"], type=w["type"],
                                      started_at=seconds_to_datetime(w["started_at"]),  # type: ignore[arg-type]
                                      deadline=seconds_to_datetime(w.get("deadline")),
                                      progress=Progress.from_dict(w["progress"]) if "progress" in w else None)
                           for w in d.get("workers", [])]
                waiting = [WaitingTaskInfo(server_id=d["id"], task_id=w["task_id"], queue=w["queue"], type=w["type"],
                                           fetched_at=seconds_to_datetime(w["fetched_at"]))  # type: ignore[arg-type]
                           for w in d.get("waiting", [])]
                out.append(ServerInfo(
                    id=d["id"], host=d["host"], pid=int(d["pid"]), concurrency=int(d["concurrency"]),
                    queues=dict(d["queues"]), strict_priority=bool(d["strict_priority"]),
                    started_at=seconds_to_datetime(d["started_at"]),  # type: ignore[arg-type]
                    status=d["status"], heartbeat_at=seconds_to_datetime(d["heartbeat_at"]),  # type: ignore[arg-type]
                    workers=workers, waiting=waiting, rss_bytes=_optional_int(d.get("rss_bytes")),
                    max_archive_size=_optional_int(d.get("max_archive_size")),
                    task_types=_task_types(replies[index * step + 1]) if task_types else None))
            except (ValueError, KeyError, TypeError, OverflowError):
                continue  # a malformed heartbeat is not a live server we can describe
        return sorted(out, key=lambda s: (s.host, s.pid, s.id))

    def archive_kept(self, queue: str) -> int | None:
        """How many archived tasks ``queue`` keeps: the smallest ``MAX_ARCHIVE_SIZE`` among the live
        workers serving it (each trims the archive to its own); None when none says (no live worker)."""
        sizes = [s.max_archive_size for s in self.servers() if queue in s.queues and s.max_archive_size]
        return min(sizes) if sizes else None

    def quiet_server(self, server_id: str) -> None:
        """Ask one live worker process to go quiet (stop fetching; running tasks finish), through
        Redis: it acts at its next heartbeat. Audited."""
        self._control_server(server_id, "quiet")

    def stop_server(self, server_id: str) -> None:
        """Ask one live worker process to stop as on SIGTERM (running tasks get the shutdown timeout),
        through Redis: it acts at its next heartbeat. Audited."""
        self._control_server(server_id, "stop")

    @translate
    def _control_server(self, server_id: str, command: str) -> None:
        if not isinstance(server_id, str) or server_id not in {s.id for s in self.servers()}:
            raise ServerNotFound(f"no live worker process {server_id!r} (see the servers list)")
        # kept a minute: a process that has not taken it by then has not beaten, and is gone
        self.redis.set(self.keys.server_control(server_id), f"{command} {self.actor}", px=60_000)
        self._audit(f"server.{command}", None, task_ids=[server_id])

    @translate
    def check_task(self, type_name: str, payload: dict[str, Any] | None = None, queue: str = "default") -> TaskCheck:
        """Would a live worker run this task? From the task types and parameter names the live
        workers publish with their heartbeats (as fresh as the last heartbeat: a worker that stopped
        beating counts for up to three heartbeat intervals, one that exited cleanly not at all).

        Not runnable when no worker is running, none serves ``queue``, none of those handles
        ``type_name``, or the payload fits the signature of none of those that do. Workers that
        publish no types (an older version) are not checked: they make the task runnable, with a
        warning, as does a payload that fits some workers' signatures and not others'.
        """
        validate_type_name(type_name)
        validate_queue_name(queue)
        payload = payload or {}
        servers = self.servers(task_types=True)
        serving = [s for s in servers if queue in s.queues]
        unknown = [s for s in serving if s.task_types is None]
        handling = [s for s in serving if s.task_types is not None and type_name in s.task_types]
        misfits = {s.id: s.task_types[type_name].misfit(payload) for s in handling if s.task_types is not None}
        fitting = [s for s in handling if misfits[s.id] is None]
        problem: str | None = None
        payload_problem = False
        warnings: list[str] = []
        if not servers:
            problem = (f"no worker is running (no live heartbeat), so no worker can be seen to handle task type "
                       f"{type_name!r}")
        elif not serving:
            served = sorted({name for s in servers for name in s.queues})
            problem = f"no live worker serves queue {queue!r} (the live workers serve {', '.join(served)})"
        elif not handling and not unknown:
            known = sorted({name for s in serving for name in (s.task_types or {})})
            close = difflib.get_close_matches(type_name, known, n=3)
            hint = f" (the closest they handle: {', '.join(repr(c) for c in close)})" if close else (
                f" (they handle {len(known)} other type(s))")
            problem = f"no live worker serving queue {queue!r} handles task type {type_name!r}{hint}"
        elif not fitting and not unknown:
            payload_problem = True
            first = next(m for m in misfits.values() if m)
            problem = (f"the payload does not fit task {type_name!r} on any live worker serving queue {queue!r}: "
                       f"{first}")
        else:
            if unknown:
                warnings.append(f"{len(unknown)} live worker(s) serving queue {queue!r} publish no task types (an "
                                "older version?): not checked")
            misfitting = [s for s in handling if misfits[s.id]]
            if misfitting:
                warnings.append(f"the payload does not fit task {type_name!r} on {len(misfitting)} of {len(handling)} "
                                f"live worker(s) handling it ({misfits[misfitting[0].id]}): one of those would "
                                "archive it at once")
            elsewhere = [s for s in serving if s.task_types is not None and type_name not in s.task_types]
            if elsewhere:
                warnings.append(f"{len(elsewhere)} of {len(serving)} live worker(s) serving queue {queue!r} do not "
                                f"handle {type_name!r}: one of those would fail it (it is then retried)")
        return TaskCheck(type=type_name, queue=queue, runnable=problem is None, problem=problem,
                         payload_problem=payload_problem, warnings=warnings, servers=len(servers),
                         serving=len(serving), handling=len(handling) + len(unknown), fitting=len(fitting))

    def require_runnable(self, type_name: str, payload: dict[str, Any] | None = None,
                         queue: str = "default") -> TaskCheck:
        """``check_task``, raising ``NoWorkerForTask`` (or ``InvalidPayload`` when only the payload is
        at fault) when no live worker would run the task; returns the check (with its warnings)."""
        check = self.check_task(type_name, payload, queue)
        if not check.runnable:
            raise (InvalidPayload if check.payload_problem else NoWorkerForTask)(check.problem)
        return check

    def workers(self) -> list[WorkerInfo]:
        """Every task being processed right now (its handler running), across live worker processes."""
        return [w for s in self.servers() for w in s.workers]

    # -- redis ------------------------------------------------------------------------------------

    @translate
    def redis_info(self, count_keys: bool = True) -> RedisInfo:
        """Server version, memory and clients (None where INFO is denied) and our key count.

        Counting keys SCANs the whole database, so frequent callers (a watch loop) pass
        ``count_keys=False``.
        """
        try:
            infos = info_of_every_master(self.redis)
        except redis.ResponseError:
            infos = []
        key_count = None
        if count_keys:  # on a cluster client, SCAN visits every master
            key_count = sum(1 for _ in self.redis.scan_iter(match=self.keys.all_pattern, count=1000))
        first = infos[0] if infos else {}

        def total(field: str) -> int | None:
            values = [i.get(field) for i in infos]
            if not infos or any(v is None for v in values):
                return None
            return sum(int(cast(Any, v)) for v in values)

        used, limit = total("used_memory"), total("maxmemory")
        fractions = [int(i["used_memory"]) / int(i["maxmemory"]) for i in infos
                     if i.get("maxmemory") and i.get("used_memory") is not None]
        uptimes = [int(i["uptime_in_seconds"]) for i in infos if i.get("uptime_in_seconds") is not None]
        return RedisInfo(
            version=first.get("redis_version"), mode=first.get("redis_mode"), used_memory=used,
            used_memory_human=first.get("used_memory_human") if len(infos) == 1 else _human_bytes(used),
            maxmemory=limit, maxmemory_policy=first.get("maxmemory_policy"),
            connected_clients=total("connected_clients"), uptime_seconds=min(uptimes) if uptimes else None,
            key_count=key_count, queues=len(self.queues()), nodes=max(1, len(infos)),
            fullest=max(fractions) if fractions else None,
        )

    # -- audit log --------------------------------------------------------------------------------

    def _audit(self, action: str, queue: str | None, *, task_ids: list[str] | None = None, state: str | None = None,
               count: int = 0, outcome: str = "ok") -> None:
        entry = {"at": self.clock.now(), "actor": self.actor, "action": action, "queue": queue,
                 "task_ids": list(task_ids or [])[:AUDIT_MAX_IDS], "state": state, "count": count, "outcome": outcome}
        try:  # one script, which works at maxmemory too (where deleting tasks is how room is made)
            self.scripts.audit(dumps(entry), keep=AUDIT_MAX_ENTRIES)
        except (redis.RedisError, QueuecoreError):  # Redis away, or a corrupt audit key
            pass  # the action itself already succeeded or raised; a lost audit line must not undo it

    # -- alerts (alerts.py) ------------------------------------------------------------------------

    def alerts(self) -> list[Alert]:
        """The active alerts, oldest first (fired by the worker that holds the evaluator lease)."""
        return self.alerts_and_pending()[0]

    def pending_alerts(self) -> list[PendingAlert]:
        """The alerts that hold but wait out their rule's ``for``, the first to fire first."""
        return self.alerts_and_pending()[1]

    @translate
    def alerts_and_pending(self) -> tuple[list[Alert], list[PendingAlert]]:
        """``alerts()`` and ``pending_alerts()`` from one read of the alerts' key."""
        active, _, pending = alert_state(self.scripts)
        return (sorted(active.values(), key=lambda a: (a.since, a.id)),
                sorted(pending.values(), key=lambda p: (p.fires_at, p.alert.id)))

    # -- periodic tasks (periodic_admin.py) ---------------------------------------------------------

    def _periodic(self) -> PeriodicAdmin:
        return PeriodicAdmin(self.redis, self.scripts, self.keys, message_builder(self.connection))

    @translate
    def periodic_entries(self) -> list[PeriodicEntryInfo]:
        """The periodic entries live workers declare, by name, with their state and recent fires."""
        return self._periodic().entries(to_ms(self.clock.now()))

    @translate
    def periodic_entry(self, name: str) -> PeriodicEntryInfo:
        """One periodic entry; ``PeriodicEntryNotFound`` when no live worker declares it."""
        return self._periodic().entry(name, to_ms(self.clock.now()))

    @translate
    def pause_periodic(self, name: str) -> bool:
        """Pause a periodic entry (in every queue it is declared in: a deploy that moves it to another
        queue leaves two copies a while): its fires are skipped until it is resumed. False when already
        paused."""
        queues, changed = self._periodic().set_paused(name, True, self.actor, to_ms(self.clock.now()))
        for queue in queues:
            self._audit("periodic.pause", queue, state=name)
        return changed

    @translate
    def resume_periodic(self, name: str) -> bool:
        """Resume a paused periodic entry from its next fire (the paused ones are not run). False when
        it was not paused."""
        queues, changed = self._periodic().set_paused(name, False, self.actor, to_ms(self.clock.now()))
        for queue in queues:
            self._audit("periodic.resume", queue, state=name)
        return changed

    @translate
    def run_periodic(self, name: str) -> str:
        """Enqueue a periodic entry's task now, outside its schedule (in the queue it was declared in
        last); returns the task id."""
        queue, task_id = self._periodic().run(name, self.clock.now())
        self._audit("periodic.run", queue, task_ids=[task_id], state=name)
        return task_id

    @translate
    def audit_log(self, limit: int = 100, offset: int = 0) -> list[AuditEntry]:
        """Operator actions, newest first (the log keeps the last ``AUDIT_MAX_ENTRIES``)."""
        limit, offset = int(AUDIT_LIMIT.check(limit, "limit")), int(AUDIT_OFFSET.check(offset, "offset"))
        out = []
        for raw in self.redis.lrange(self.keys.audit, offset, offset + limit - 1):
            try:
                d = loads(raw)
                out.append(AuditEntry(at=seconds_to_datetime(d["at"]), actor=str(d["actor"]),  # type: ignore[arg-type]
                                      action=str(d["action"]), queue=d.get("queue"),
                                      task_ids=[str(t) for t in d.get("task_ids") or []], state=d.get("state"),
                                      count=int(d.get("count") or 0), outcome=str(d.get("outcome") or "ok")))
            except (ValueError, KeyError, TypeError, OverflowError):
                continue
        return out

    # -- chosen tasks (the dashboard's selections) ------------------------------------------------

    def _admin_script(self, action: str, q: QueueKeys, task_id: str, only_from: tuple[str, ...] = ()) -> None:
        """The one dispatch from an action name to its operator script, for one task; with ``only_from``,
        a task in another state is left as it is (``InvalidTaskState``). Cancel acts on active tasks only."""
        now_ms = to_ms(self.clock.now())
        if action == TaskAction.RUN:
            self.scripts.admin_run_task(q, task_id, now_ms=now_ms, only_from=only_from)
        elif action == TaskAction.ARCHIVE:
            self.scripts.admin_archive_task(q, task_id, now_ms=now_ms, only_from=only_from)
        elif action == TaskAction.DELETE:
            self.scripts.admin_delete_task(q, task_id, only_from=only_from)
        elif action == TaskAction.CANCEL:
            self.scripts.admin_cancel_task(q, task_id)
        else:  # pragma: no cover - callers check the action first
            raise ConfigurationError(f"invalid action {action!r}")

    def act_on_tasks(self, queue: str, action: str, task_ids: list[str] | tuple[str, ...], *,
                     from_state: str | None = None) -> TaskBatchResult:
        """Run, archive, delete or cancel each of ``task_ids`` of ``queue``, as one audited action.

        Tasks that are gone, or in a state the action does not apply to, are left as they are and
        reported in ``failed`` (id -> reason); the others are done. With ``from_state`` (the list they
        were chosen from), a task that has left that state since is left as it is too. One audit entry
        records the batch (``tasks.<action>``). ``BrokerError`` stops the batch; what was done is still
        audited.
        """
        from queuecore.core.errors import BrokerError

        action = self._check_action(action)
        state = None if from_state is None else self._check_state(from_state)
        only_from = () if state is None else (state,)
        ids = list(dict.fromkeys(task_ids))
        for task_id in ids:
            validate_task_id(task_id)
        q = self._queue(queue)
        done: list[str] = []
        failed: dict[str, str] = {}
        try:
            with broker_errors():
                for task_id in ids:
                    try:
                        self._admin_script(action, q, task_id, only_from)
                    except (TaskNotFound, InvalidTaskState) as exc:
                        failed[task_id] = str(exc)
                    else:
                        done.append(task_id)
        except BrokerError as exc:
            self._audit(f"tasks.{action}", queue, task_ids=ids, state=state, count=len(done), outcome=str(exc))
            raise
        outcome = "ok" if not failed else f"{len(failed)} of {len(ids)} not done; first: {next(iter(failed.values()))}"
        self._audit(f"tasks.{action}", queue, task_ids=ids, state=state, count=len(done), outcome=outcome)
        return TaskBatchResult(queue, action, done, failed)

    def cancel_all(self, queue: str) -> BulkResult:
        """Ask every running task of the queue to stop; each is archived as "cancelled by operator".

        Tasks that finish before the request reaches them are not counted.
        """
        (state,) = BULK_ACTION_STATES[TaskAction.CANCEL]  # active
        return self._bulk(queue, state, TaskAction.CANCEL.value)

    @translate
    def iter_tasks(self, queue: str, state: str, *, type: str | None = None, search: str | None = None,
                   order: str | None = None, limit: int | None = None, filter: str | None = None
                   ) -> Iterator[TaskInfo]:
        """Every task of ``queue`` in ``state`` that matches ``type`` and ``search`` (as ``list_tasks``,
        without its scan limit), in ``order``, read 500 at a time (for exports: ``export.py``); at most
        ``limit``. They are read from a copy of the state's ids taken when the reading begins (workers
        taking tasks from the list would shift the pages past the reader): each task in the state then
        comes once, as it is when it is read (a task deleted since is left out); one that enters the
        state later does not. With Redis full (no room for the copy), the state itself is read: a task
        that moves meanwhile can then be missed or come twice."""
        state = self._check_state(state)
        newest = (default_order(state) if order is None else _one_of(order, ORDERS, "order")) == "newest"
        if limit is not None:  # a negative one gave nothing, silently
            limit = int(EXPORT_LIMIT.check(limit, "limit"))
        q = self._require_queue(queue)
        keep = self._predicate(type, search, filter)
        return self._iter_tasks(q, state, newest, keep, limit)  # the checks above, at the call: not in the stream

    def _iter_tasks(self, q: QueueKeys, state: str, newest: bool, keep: Callable[[TaskInfo], bool] | None,
                    limit: int | None) -> Iterator[TaskInfo]:
        copy: str | None = None
        try:
            with broker_errors():
                copy_id = f"export{uuid.uuid4().hex[:16]}"
                if not self.scripts.bulk_snapshot(q, state, copy_id, ttl_ms=SNAPSHOT_TTL_MS):
                    return  # the state is empty
                copy = q.bulk_snapshot(copy_id)
        except RedisFull:
            copy = None  # no room for a copy: the state itself is read
        try:
            start, sent = 0, 0
            while limit is None or sent < limit:
                with broker_errors():
                    if copy is not None:
                        self.redis.pexpire(copy, SNAPSHOT_TTL_MS)  # kept while it is read
                    ids = self._ids(q, state, start, start + 499, newest, copy)
                    infos = [info for info in self._infos(q, state, ids) if keep is None or keep(info)]
                    infos = self._with_results(q, infos if limit is None else infos[:limit - sent])
                if not ids:
                    return
                start += len(ids)
                for info in infos:
                    yield info
                    sent += 1
                    if limit is not None and sent >= limit:
                        return
        finally:
            if copy is not None:
                with contextlib.suppress(redis.RedisError):  # it expires by itself
                    self.redis.delete(copy)

    # -- failures grouped by error (failures.py) -----------------------------------------------------

    @translate
    def failure_groups(self, queue: str | None = None, limit: int = FAILURE_SCAN_LIMIT) -> FailureReport:
        """The failed tasks (retry and archived) of ``queue``, or of every queue, grouped by the
        fingerprint of their last error, the biggest group first (the newest ``limit`` tasks of each
        list are read; ``FailureReport.scanned_all`` says whether that was all of them);
        ``FailureReport.of_type`` narrows it to one task type."""
        limit = int(FAILURES_SCANNED.check(limit, "limit"))
        queues = [self._require_queue(queue).queue] if queue is not None else self.queues()
        return read_failures(self.redis, self.keys, queues, limit)

    def type_report(self, queue: str, type: str, window: float | timedelta = timedelta(hours=1)) -> TypeReport:
        """One task type in ``queue``: its statistics over ``window``, its limits and their use, and its
        failed tasks grouped by error (``typereport.py``); ``TaskTypeNotFound`` when it never ran there."""
        validate_type_name(type)
        _stats_window(window)  # refused before any read
        if type not in self.task_types(queue):
            raise TaskTypeNotFound(f"no task of type {type!r} has run in queue {queue!r}")
        return self._type_reports(queue, [type], window)[0]

    def type_reports(self, queue: str, window: float | timedelta = timedelta(hours=1)) -> list[TypeReport]:
        """``type_report`` of every task type that has run in ``queue``, in name order, with the limits
        and the failed tasks read once for them all."""
        _stats_window(window)  # refused before any read
        return self._type_reports(queue, self.task_types(queue), window)

    def _type_reports(self, queue: str, types: list[str], window: float | timedelta) -> list[TypeReport]:
        limits = {info.type: info for info in self.limits()}
        failures = self.failure_groups(queue)
        return [TypeReport(self.type_stats(queue, name, window), limits.get(name), failures.of_type(name))
                for name in types]

    def act_on_failure_group(self, key: str, action: str, queue: str | None = None) -> BulkJob:
        """Run, archive or delete every task of the failure group ``key`` (of ``queue``, or of every
        queue), as a bulk job driven here until it ends; the finished job says how many were done and
        how many had left the group's state meanwhile (``skipped``)."""
        return self.run_bulk_job(self.start_bulk_job(action, queue=queue, group=key).id)


class InspectorBulkOperations:
    """What a bulk job's driver does to tasks (``bulkjobs.BulkOperations``), through an Inspector: the
    same scripts, scan and match as its one-request actions."""

    def __init__(self, inspector: Inspector) -> None:
        self.inspector = inspector

    def state_chunk(self, queue: str, state: str, action: str, limit: int, bound: BulkBound) -> BulkChunk:
        ins = self.inspector
        q, limit, now_ms = ins._require_queue(queue), min(limit, BULK_CHUNK), to_ms(ins.clock.now())
        if action == TaskAction.RUN:
            return ins.scripts.admin_run_all(q, state, now_ms=now_ms, limit=limit, bound=bound)
        if action == TaskAction.ARCHIVE:
            return ins.scripts.admin_archive_all(q, state, now_ms=now_ms, limit=limit, bound=bound)
        if action == TaskAction.DELETE:
            return ins.scripts.admin_delete_all(q, state, limit=limit, bound=bound)
        raise ConfigurationError(f"no bulk script for {action!r}")  # pragma: no cover - cancel is per task

    def snapshot(self, scope: BulkScope, job_id: str) -> int:
        ins = self.inspector
        assert scope.queue is not None and scope.state is not None
        return ins.scripts.bulk_snapshot(ins._require_queue(scope.queue), scope.state, job_id,
                                         ttl_ms=SNAPSHOT_TTL_MS)

    def drop_snapshot(self, scope: BulkScope, job_id: str) -> None:
        assert scope.queue is not None
        self.inspector.redis.delete(self.inspector._queue(scope.queue).bulk_snapshot(job_id))

    def scan(self, scope: BulkScope, start: int, count: int,
             snapshot_of: str | None = None) -> tuple[list[tuple[str, str, int]], int]:
        ins = self.inspector
        assert scope.queue is not None and scope.state is not None
        q = ins._require_queue(scope.queue)
        keep = ins._predicate(scope.type, scope.search, scope.filter) or (lambda _info: True)
        key = None
        if snapshot_of is not None:
            key = q.bulk_snapshot(snapshot_of)
            ins.redis.pexpire(key, SNAPSHOT_TTL_MS)  # kept while it is read: a long find outlives one TTL
        ids = ins._ids(q, scope.state, start, start + count - 1, default_order(scope.state) == "newest", key)
        places = {task_id: start + n for n, (task_id, _) in enumerate(ids)}
        return ([(scope.queue, info.id, places[info.id]) for info in ins._infos(q, scope.state, ids) if keep(info)],
                len(ids))

    def group_targets(self, scope: BulkScope, states: tuple[str, ...]) -> list[tuple[str, str]]:
        assert scope.group is not None
        group = self.inspector.failure_groups(scope.queue).group(scope.group)
        return [(failed.queue, failed.id) for failed in group.tasks if failed.state in states] if group else []

    def act(self, action: str, queue: str, tasks: list[tuple[str, int | None]], states: tuple[str, ...],
            taken: int, until_ms: int = 0) -> tuple[list[str], int]:
        ins = self.inspector
        if not is_valid_name(queue):
            return [], len(tasks)
        q = ins._queue(queue)
        now_ms = to_ms(ins.clock.now())
        if states == (TaskState.PENDING.value,) and action in PENDING_MANY_ACTIONS and all(
                place is not None for _, place in tasks):
            return self._act_on_pending(action, q, cast("list[tuple[str, int]]", tasks), taken, now_ms)
        task_ids = [task_id for task_id, _ in tasks]
        # a task gone, or moved on to another state since it was found, is left alone (checked in the script)
        outcomes = ins.scripts.admin_tasks(action, q, task_ids, now_ms=now_ms, only_from=states, until_ms=until_ms)
        done = [task_id for task_id, why in zip(task_ids, outcomes, strict=True) if why is None]
        return done, len(task_ids) - len(done)

    def _act_on_pending(self, action: str, q: QueueKeys, tasks: list[tuple[str, int]], taken: int,
                        now_ms: int) -> tuple[list[str], int]:
        """Archive or delete found pending tasks, taking them off the list near where they were found
        (``Scripts.admin_pending_many``), in runs whose places span at most ``PENDING_SPAN``."""
        done: list[str] = []
        run: list[tuple[str, int]] = []

        def flush() -> None:
            codes = self.inspector.scripts.admin_pending_many(q, action, run, now_ms=now_ms, slack=PENDING_SLACK)
            done.extend(task_id for (task_id, _), code in zip(run, codes, strict=True) if code == 1)
            run.clear()

        for task_id, place in sorted(tasks, key=lambda t: t[1]):
            here = max(0, place - taken - len(done))  # the tasks taken ahead of it moved it up
            if run and here - run[0][1] > PENDING_SPAN:
                flush()
                here = max(0, place - taken - len(done))
            run.append((task_id, here))
        if run:
            flush()
        return done, len(tasks) - len(done)

    def audit(self, job: BulkJob, outcome: str) -> None:
        action = f"tasks.{job.action}_all" if job.scope.group is None else f"failures.{job.action}"
        self.inspector.as_actor(job.actor)._audit(action, job.scope.queue, task_ids=list(job.sample),
                                                  state=job.scope.state, count=job.done,
                                                  outcome=f"{outcome}; {job.describe()}")


@dataclass(frozen=True)
class TaskCheck:
    """Whether a live worker would run a task of ``type`` on ``queue`` (``Inspector.check_task``).

    ``servers`` live worker processes, ``serving`` of them serve the queue, ``handling`` of those
    handle the type (or publish no types), ``fitting`` of those take the payload's argument names.
    """

    type: str
    queue: str
    runnable: bool
    problem: str | None = None  # why not
    payload_problem: bool = False  # the problem is the payload, not the lack of a worker
    warnings: list[str] = field(default_factory=list)
    servers: int = 0
    serving: int = 0
    handling: int = 0
    fitting: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def task_info(q: QueueKeys, task_id: str, h: dict[str, Any], state: str | None = None,
              score: float | None = None,
              holders: dict[tuple[str, str], WorkerInfo | WaitingTaskInfo] | None = None) -> TaskInfo:
    """A ``TaskInfo`` from the fields of a task HASH ``h``: ``state`` counts when the hash has none,
    ``score`` is its score in its state's ZSET (due time, when archived), ``holders`` the live
    heartbeat entries (an active task's worker and handler start)."""
    state_value = h.get("state") or state or "pending"
    try:
        m = TaskMessage.decode(task_id, q.queue, h.get("msg"))
        decode_error = None
    except TaskDecodeError as exc:
        m = TaskMessage(id=task_id, type="?", payload={}, queue=q.queue)
        decode_error = str(exc)
    try:
        task_state = TaskState(state_value)
    except ValueError:
        task_state = TaskState(state) if state else TaskState.PENDING
    next_at = archived_at = None
    if task_state in DUE_STATES and score is not None:
        next_at = ms_to_datetime(score)
    elif task_state is TaskState.PENDING:
        # pending since its last move back to pending, else since it was enqueued
        next_at = _stored_time(h.get("pending_since")) or (
            seconds_to_datetime(m.enqueued_at) if m.enqueued_at else None)
    elif task_state is TaskState.ARCHIVED and score is not None:
        archived_at = ms_to_datetime(score)
    started_at = _stored_time(h.get("started_at"))
    worker = fetched_at = None
    progress: Progress | None = None
    if task_state is TaskState.ACTIVE:
        # The hash holds when the task was fetched; its handler's start is in its worker's heartbeat.
        fetched_at, started_at = started_at, None
        holder = (holders or {}).get((q.queue, task_id))
        if holder is not None:
            worker = holder.server_id
            if isinstance(holder, WorkerInfo):
                started_at = holder.started_at
                progress = holder.progress
    result = _result(h.get("result"))
    return TaskInfo(
        id=task_id, queue=q.queue, type=m.type, state=task_state, payload=m.payload,
        retried=_int(h.get("retried")), max_retry=m.max_retry, last_error=h.get("error") or None,
        last_failed_at=_stored_time(h.get("failed_at")), next_process_at=next_at,
        enqueued_at=seconds_to_datetime(m.enqueued_at) if m.enqueued_at else None,
        started_at=started_at, completed_at=_stored_time(h.get("completed_at")),
        archived_at=archived_at, timeout=m.timeout, deadline=seconds_to_datetime(m.deadline),
        retention=m.retention, unique_key=m.unique_key, result=result, cancel_requested=bool(h.get("cancel")),
        decode_error=decode_error, worker=worker, fetched_at=fetched_at,
        attempts=parse_attempts(h.get("attempts")), priority=m.priority, archived_by=h.get("archived_by") or None,
        snoozed=_int(h.get("snoozed")),
        waiting=(h.get("waiting") or None) if task_state is TaskState.SCHEDULED else None, progress=progress,
        edits=_edits(h.get("edits")),
    )


def _stored_time(ms: Any) -> datetime | None:
    """A time field of a task hash (unix ms); None (not known) when it holds no such number: a corrupt
    field must not cost the whole task's page, nor a result read, a traceback."""
    try:
        return ms_to_datetime(ms)
    except (ValueError, TypeError, OverflowError, OSError):
        return None


def _task_types(raw: Any) -> dict[str, TaskSignature] | None:
    """The task types a worker publishes (``TaskRegistry.describe_json``); None when it publishes none
    or they cannot be read."""
    if not raw:
        return None
    try:
        types = loads(raw)["types"]
        return {str(name): TaskSignature(params=tuple(str(p) for p in d["params"]),
                                         required=tuple(str(p) for p in d["required"]),
                                         var_keyword=bool(d.get("var_keyword")))
                for name, d in types.items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


@dataclass(frozen=True)
class TaskBatchResult:
    """What ``Inspector.act_on_tasks`` did: the ids done, and the ids left alone with the reason."""

    queue: str
    action: str
    done: list[str]
    failed: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        return {"queue": self.queue, "action": self.action, "done": list(self.done), "failed": dict(self.failed)}


def _result(raw: str | None) -> Any:
    """A task's stored ``result`` decoded (JSON; text that is not JSON as it is); None when it has none.
    Read by ``json`` as it was written (``json_text``): orjson reads an integer over 64 bits as a float."""
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _pending_since(q: QueueKeys, task_id: str | None, row: Any) -> float:
    """When the pending task ``task_id`` became pending (unix seconds, 0 when unknown), from its
    ``pending_since`` and ``msg`` fields (``row``)."""
    if not task_id or not isinstance(row, list):
        return 0.0
    return queue_metrics.pending_since(q.queue, task_id, *row)
