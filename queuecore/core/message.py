"""Task messages, states and the read-model dataclasses the inspector returns.

A task is stored as one Redis hash. Its ``msg`` field holds the immutable message, encoded once
as JSON; the mutable fields (``state``, ``retried``, ``error`` ...) sit beside it so that Lua
scripts change state without decoding the message.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from queuecore.core.context import Progress
from queuecore.core.errors import InvalidPayload, TaskDecodeError
from queuecore.core.limits import MAX_PAYLOAD_DEPTH
from queuecore.core.states import TaskState as TaskState  # the vocabulary's home; re-exported here
from queuecore.core.tracing import clean_carrier

try:  # orjson is optional: faster, same output for our payloads
    import orjson as _orjson
except ImportError:  # pragma: no cover - exercised when orjson is absent
    _orjson = None

DEFAULT_MAX_RETRY = 25
DEFAULT_MAX_PAYLOAD_BYTES = 512 * 1024


def dumps(value: Any) -> str:
    """Encode ``value`` as compact JSON text; raise ``TypeError``/``ValueError`` when it cannot be."""
    if _orjson is not None:
        text: str = _orjson.dumps(value).decode()
        return text
    return _PAYLOAD_ENCODER.encode(value)  # json.dumps with options would build an encoder per call


def json_text(value: Any) -> str:
    """Encode a value a handler or a caller gave (a result) as compact JSON text with the standard
    library, whether or not orjson is installed: orjson writes NaN and infinities as ``null``,
    refuses integers over 64 bits and keys that are not strings, and encodes datetimes and UUIDs,
    where ``json`` refuses (the value is then kept as its ``repr()``): results must not depend on an
    optional extra. Raises ``TypeError``/``ValueError`` when it cannot."""
    return _PAYLOAD_ENCODER.encode(value)


def loads(text: str | bytes) -> Any:
    """Decode JSON text."""
    if _orjson is not None:
        return _orjson.loads(text)
    return json.loads(text)


# ``json.dumps`` with these options would build a new encoder on every call.
_PAYLOAD_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def encode_payload(payload: Any, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> str:
    """Validate and encode a payload (a JSON object or ``None``) to JSON text.

    Raises ``InvalidPayload`` when it is not a JSON object with string keys, holds a value JSON
    cannot encode (NaN, infinities, objects, a lone surrogate), nests objects and arrays more than
    ``MAX_PAYLOAD_DEPTH`` levels deep (the payload object included), or is over ``max_bytes``.
    """
    if payload is None:
        payload = {}
    if not isinstance(payload, dict):
        raise InvalidPayload(f"payload must be a JSON object (a dict of argument names), not {type(payload).__name__}")
    for key in payload:
        if not isinstance(key, str):
            raise InvalidPayload(f"payload keys must be strings, got {key!r}")
    try:
        text = _PAYLOAD_ENCODER.encode(payload) if payload else "{}"
    except RecursionError:
        raise InvalidPayload(_too_deep()) from None
    except (TypeError, ValueError) as exc:
        raise InvalidPayload(f"payload is not JSON-serialisable: {exc}") from None
    # What the text alone does not show needs a walk of the payload, which its text says can be
    # skipped for most payloads: nesting deeper than the limit takes more "{" and "[" than the limit
    # (or they sit in strings); a nested object's key needs a second "{"; an integer beyond 64 bits
    # needs a run of 19 digits (in a number, or only in a string).
    braces = text.count("{")
    if (braces + text.count("[") > MAX_PAYLOAD_DEPTH or braces > 1 or _LONG_DIGITS.search(text)) and (
            why := _walked_problem(payload)):
        raise InvalidPayload(why)
    try:
        size = len(text.encode())
    except UnicodeEncodeError as exc:  # a lone surrogate ("\ud800") has no UTF-8 encoding
        raise InvalidPayload(f"payload holds a lone surrogate {exc.object[exc.start:exc.end]!r}, which is not "
                             "text (strings must be valid Unicode)") from None
    if size > max_bytes:
        raise InvalidPayload(f"payload is {size} bytes, over the limit of {max_bytes} bytes")
    return text


_LONG_DIGITS = re.compile(r"\d{19}")
_INT_RANGE = (-(2**63), 2**64 - 1)  # what orjson reads back as an int (a wider one becomes a float)


def nesting(value: Any) -> int:
    """How deep ``value`` nests lists and dicts (0 for a scalar; a payload object is 1), counted
    without recursion."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (list, dict)):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _too_deep() -> str:
    return f"payload is nested more than {MAX_PAYLOAD_DEPTH} levels deep (objects and arrays)"


def _walked_problem(payload: dict[str, Any]) -> str | None:
    """Why an encodable ``payload`` is refused, found in one walk (iterative: no recursion limit to
    hit), or None: it nests objects and arrays more than ``MAX_PAYLOAD_DEPTH`` levels deep (the
    payload is level 1), else a nested object has a key that is not a string, else it holds an
    integer beyond 64 bits."""
    key: tuple[object] | None = None  # (the key,): the key may be None itself
    wide: int | None = None
    stack: list[tuple[Any, int]] = [(payload, 1)]  # containers only
    while stack:
        container, level = stack.pop()
        if level > MAX_PAYLOAD_DEPTH:
            return _too_deep()
        if isinstance(container, dict):
            if key is None and level > 1:  # the payload's own keys are checked before it is encoded
                key = next(((k,) for k in container if not isinstance(k, str)), None)
            container = container.values()
        for child in container:
            if isinstance(child, (dict, list, tuple)):
                stack.append((child, level + 1))
            elif (wide is None and isinstance(child, int) and not isinstance(child, bool)
                  and not _INT_RANGE[0] <= child <= _INT_RANGE[1]):
                wide = child
    if key is not None:
        return (f"payload keys must be strings, got {key[0]!r} in a nested object (JSON would turn it into text, "
                "or drop the entry beside an equal text key)")
    if wide is not None:
        return (f"payload holds the integer {wide}, beyond 64 bits: send it as a string (JSON readers such as "
                "orjson, which queuecore uses when installed, or JavaScript, would read it back as an inexact float)")
    return None


@dataclass(frozen=True, slots=True)
class TaskMessage:
    """The immutable part of a task, encoded once at enqueue."""

    id: str
    type: str
    payload: dict[str, Any]
    queue: str
    max_retry: int = DEFAULT_MAX_RETRY
    timeout: float | None = None
    deadline: float | None = None  # unix seconds
    retention: float = 0.0  # seconds to keep the completed task
    unique_key: str | None = None
    enqueued_at: float = 0.0  # unix seconds
    priority: int = 0  # -100..100; > 0 went to the head of its queue at enqueue
    trace: dict[str, str] | None = None  # W3C traceparent/tracestate of the enqueue's span (tracing.py)

    def encode(self, payload_json: str | None = None) -> str:
        """Encode the message; ``payload_json`` reuses an already validated encoding."""
        body = payload_json if payload_json is not None else dumps(self.payload)
        parts = [f'"type":{dumps(self.type)}', f'"payload":{body}', f'"enqueued_at":{self.enqueued_at!r}']
        if self.max_retry != DEFAULT_MAX_RETRY:  # absent means the default: 16 bytes less per task
            parts.append(f'"max_retry":{int(self.max_retry)}')
        if self.timeout is not None:
            parts.append(f'"timeout":{float(self.timeout)!r}')
        if self.deadline is not None:
            parts.append(f'"deadline":{float(self.deadline)!r}')
        if self.retention:
            parts.append(f'"retention":{float(self.retention)!r}')
        if self.unique_key is not None:
            parts.append(f'"unique_key":{dumps(self.unique_key)}')
        if self.priority:
            parts.append(f'"priority":{int(self.priority)}')
        if self.trace:
            parts.append(f'"trace":{dumps(self.trace)}')
        return "{" + ",".join(parts) + "}"

    @classmethod
    def decode(cls, task_id: str, queue: str, data: str | bytes | None) -> TaskMessage:
        """Decode a stored message; raise ``TaskDecodeError`` on anything malformed."""
        if data is None:
            raise TaskDecodeError(f"task {task_id}: message is missing")
        try:
            raw = loads(data)
        except (ValueError, TypeError, UnicodeDecodeError, RecursionError) as exc:  # RecursionError: too deep
            raise TaskDecodeError(f"task {task_id}: message is not valid JSON ({exc})") from None
        if not isinstance(raw, dict):
            raise TaskDecodeError(f"task {task_id}: message is not a JSON object")
        try:
            type_name = raw["type"]
            payload = raw.get("payload", {})
            max_retry = raw.get("max_retry", DEFAULT_MAX_RETRY)
            priority = raw.get("priority", 0)
            if not isinstance(priority, int) or isinstance(priority, bool):
                raise TypeError("priority must be an integer")
            if not isinstance(type_name, str) or not type_name:
                raise TypeError("type must be a non-empty string")
            if not isinstance(payload, dict):
                raise TypeError("payload must be an object")
            if not isinstance(max_retry, int) or isinstance(max_retry, bool):
                raise TypeError("max_retry must be an integer")
            return cls(
                id=task_id,
                type=type_name,
                payload=payload,
                queue=queue,
                max_retry=max_retry,
                timeout=_opt_float(raw.get("timeout")),
                deadline=_opt_float(raw.get("deadline")),
                retention=_opt_float(raw.get("retention")) or 0.0,
                unique_key=_opt_str(raw.get("unique_key")),
                enqueued_at=_opt_float(raw.get("enqueued_at")) or 0.0,
                priority=priority,
                trace=clean_carrier(raw["trace"]) if "trace" in raw else None,
            )
        except (KeyError, TypeError, ValueError, OverflowError) as exc:  # OverflowError: int too big for float
            raise TaskDecodeError(f"task {task_id}: malformed message ({exc})") from None


def _opt_float(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"expected a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number):  # JSON has no infinity, but 1e400 decodes as one
        raise ValueError(f"expected a finite number, got {value!r}")
    return number


def _opt_str(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value


def ms_to_datetime(ms: int | float | str | bytes | None) -> datetime | None:
    """Unix milliseconds (as stored in Redis) to an aware UTC datetime."""
    if ms in (None, b"", ""):
        return None
    return datetime.fromtimestamp(float(ms) / 1000.0, tz=UTC)


def seconds_to_datetime(seconds: float | None) -> datetime | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, tz=UTC)


@dataclass(frozen=True)
class TaskInfo:
    """A snapshot of one task, as stored in Redis."""

    id: str
    queue: str
    type: str
    state: TaskState
    payload: dict[str, Any]
    retried: int = 0
    max_retry: int = DEFAULT_MAX_RETRY
    last_error: str | None = None
    last_failed_at: datetime | None = None
    next_process_at: datetime | None = None
    enqueued_at: datetime | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None
    archived_at: datetime | None = None
    timeout: float | None = None
    deadline: datetime | None = None
    retention: float = 0.0
    unique_key: str | None = None
    result: Any = None
    cancel_requested: bool = False
    decode_error: str | None = None
    # An active task: the worker process holding it (server id), and when that worker fetched it.
    # Its ``started_at`` is when its handler started, as that worker's heartbeat reports it: None while
    # the task waits in the worker's prefetch buffer, or until the worker's next heartbeat lists it.
    worker: str | None = None
    fetched_at: datetime | None = None
    # Its last attempts, oldest first (at most 10; ``attempts.py``): when each started, how long it
    # ran, on which worker, and how it ended.
    attempts: list[AttemptInfo] = field(default_factory=list)
    priority: int = 0  # > 0: it went to the head of its queue when enqueued (the ``priority`` option)
    archived_by: str | None = None  # "operator" when an operator archived it (not its last attempt)
    snoozed: int = 0  # times its handler snoozed it (``Snooze``): never counted as retries
    waiting: str | None = None  # scheduled because a concurrency or rate limit held it back: which
    progress: Progress | None = None  # a running task: how far its handler said it has come (last heartbeat)
    # Operators' edits of its payload (``Inspector.edit_and_run``), newest first: at (unix s), actor,
    # before (the payload it replaced, compact JSON, cut to 2,000 characters), cut.
    edits: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with a stable shape (datetimes as ISO 8601 strings)."""
        out = asdict(self)
        for name, value in out.items():
            if isinstance(value, datetime):
                out[name] = value.isoformat()
            elif isinstance(value, TaskState):
                out[name] = value.value
        out["attempts"] = [a.to_dict() for a in self.attempts]
        return out


@dataclass(frozen=True)
class AttemptInfo:
    """One attempt of a task, from its attempt history (``TaskInfo.attempts``, oldest first; see
    ``attempts.py``: the last 10 attempts are kept)."""

    number: int  # 1 for the first attempt
    result: str  # "completed", "retry" (failed; runs again), "archived" (failed for good, or cancelled)
    error: str | None = None  # "Type: message", first line only
    worker: str | None = None  # server id of the worker process that ran it; None when its worker was lost
    started_at: datetime | None = None  # when its handler started; None when that is not known
    ended_at: datetime | None = None  # when it ended (for a lost worker: when its expired lease was found)
    fetched_at: datetime | None = None  # a lost attempt: when its worker fetched it
    error_type: str | None = None  # a failed attempt: the class path of its error ("myapp.mail.SMTPError")

    @property
    def duration(self) -> float | None:
        """Seconds from the handler's start to the end; None when the start is not known."""
        if self.started_at is None or self.ended_at is None:
            return None
        return max(0.0, (self.ended_at - self.started_at).total_seconds())

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for name in ("started_at", "ended_at", "fetched_at"):
            value = getattr(self, name)
            out[name] = value.isoformat() if value else None
        out["duration"] = self.duration
        return out


@dataclass(frozen=True)
class QueueInfo:
    """Sizes, counters and health of one queue."""

    name: str
    paused: bool
    pending: int
    active: int
    scheduled: int
    retry: int
    archived: int
    completed: int
    latency: float  # seconds since the task at the head (the next to run) became pending; 0 when empty
    memory_bytes: int | None  # sampled estimate; None when MEMORY USAGE is unavailable
    processed_today: int
    failed_today: int
    processed_total: int
    failed_total: int
    paused_until: datetime | None = None  # a timed pause: when the queue resumes by itself
    paused_by: str | None = None  # who paused it, from the audit log
    problem: str | None = None  # why its figures could not be read (a key of the wrong Redis type): all 0

    @classmethod
    def unreadable(cls, name: str, problem: str) -> QueueInfo:
        """A queue whose keys could not be read, with zeros for its figures and ``problem`` saying why."""
        return cls(name=name, paused=False, pending=0, active=0, scheduled=0, retry=0, archived=0, completed=0,
                   latency=0.0, memory_bytes=None, processed_today=0, failed_today=0, processed_total=0,
                   failed_total=0, problem=problem)

    @property
    def size(self) -> int:
        """Every task in the queue except completed ones (asynq's definition)."""
        return self.pending + self.active + self.scheduled + self.retry + self.archived

    @property
    def stored(self) -> int:
        """Every task the queue holds, completed ones (kept for their retention) included: what
        removing the queue deletes."""
        return self.size + self.completed

    @property
    def error_rate(self) -> float:
        """Failed over processed today, 0.0 when nothing was processed."""
        return self.failed_today / self.processed_today if self.processed_today else 0.0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["size"] = self.size
        out["error_rate"] = self.error_rate
        out["paused_until"] = self.paused_until.isoformat() if self.paused_until else None
        return out


@dataclass(frozen=True)
class DailyStats:
    """Processed and failed counts of one queue on one UTC day (or minute)."""

    queue: str
    date: str  # YYYY-MM-DD, or YYYY-MM-DDTHH:MM for minutes
    processed: int
    failed: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class WorkerInfo:
    """One task being processed right now by a worker process: its handler is running, and has been
    since ``started_at`` (a task fetched ahead and still waiting for a free slot is a ``WaitingTaskInfo``)."""

    server_id: str
    task_id: str
    queue: str
    type: str
    started_at: datetime
    deadline: datetime | None = None
    progress: Progress | None = None  # as its handler last reported it (``set_progress``), at the last heartbeat

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["started_at"] = self.started_at.isoformat()
        out["deadline"] = self.deadline.isoformat() if self.deadline else None
        out["progress"] = self.progress.to_dict() if self.progress else None
        return out


@dataclass(frozen=True)
class WaitingTaskInfo:
    """A task a worker process fetched ahead (leased, so no other worker takes it) whose handler has
    not started yet: it waits for one of the process's ``concurrency`` slots."""

    server_id: str
    task_id: str
    queue: str
    type: str
    fetched_at: datetime

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["fetched_at"] = self.fetched_at.isoformat()
        return out


@dataclass(frozen=True)
class TaskSignature:
    """What a worker publishes about one task type it handles: its handler's parameter names, those
    without a default (``required``), and whether it takes any other name (``**kwargs``)."""

    params: tuple[str, ...]
    required: tuple[str, ...]
    var_keyword: bool = False

    def misfit(self, payload: dict[str, Any]) -> str | None:
        """Why ``payload`` cannot be bound to the handler (missing or unexpected argument names);
        None when it fits."""
        missing = [name for name in self.required if name not in payload]
        unexpected = [] if self.var_keyword else sorted(set(payload) - set(self.params))
        problems = []
        if missing:
            problems.append("missing required argument(s) " + ", ".join(repr(n) for n in missing))
        if unexpected:
            problems.append("unexpected argument(s) " + ", ".join(repr(n) for n in unexpected))
        return "; ".join(problems) or None

    def to_dict(self) -> dict[str, Any]:
        return {"params": list(self.params), "required": list(self.required), "var_keyword": self.var_keyword}


@dataclass(frozen=True)
class ServerInfo:
    """One worker process, from its heartbeat.

    ``workers`` are the tasks whose handlers run now (never more than ``concurrency``); ``waiting``
    the tasks fetched ahead that wait for a free slot.
    """

    id: str
    host: str
    pid: int
    concurrency: int
    queues: dict[str, int]
    strict_priority: bool
    started_at: datetime
    status: str  # "active", "quiet" or "stopping"
    heartbeat_at: datetime
    workers: list[WorkerInfo] = field(default_factory=list)
    waiting: list[WaitingTaskInfo] = field(default_factory=list)
    # The task types it handles (published with its heartbeat): read by ``Inspector.servers(
    # task_types=True)``, else None; {} when it publishes none.
    task_types: dict[str, TaskSignature] | None = None
    rss_bytes: int | None = None  # its resident memory at its last heartbeat; None when not known
    max_archive_size: int | None = None  # archived tasks it keeps per queue; None from an older version

    @property
    def active_count(self) -> int:
        """How many handlers run now (busy slots)."""
        return len(self.workers)

    @property
    def waiting_count(self) -> int:
        """How many fetched tasks wait for a free slot."""
        return len(self.waiting)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["started_at"] = self.started_at.isoformat()
        out["heartbeat_at"] = self.heartbeat_at.isoformat()
        out["workers"] = [w.to_dict() for w in self.workers]
        out["waiting"] = [w.to_dict() for w in self.waiting]
        out["task_types"] = None if self.task_types is None else {
            name: signature.to_dict() for name, signature in self.task_types.items()}
        return out


@dataclass(frozen=True)
class AuditEntry:
    """One operator action: who did what to which tasks, when, and how it ended."""

    at: datetime
    actor: str
    action: str  # e.g. "task.run", "queue.pause", "tasks.archive_all"
    queue: str | None
    task_ids: list[str] = field(default_factory=list)
    state: str | None = None
    count: int = 0
    outcome: str = "ok"  # "ok", or the error's message

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["at"] = self.at.isoformat()
        return out
