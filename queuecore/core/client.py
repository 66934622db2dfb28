"""The client: enqueue tasks, one by one or in a batch."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any, NamedTuple

import redis

from queuecore.core import tracing
from queuecore.core.broker import Broker
from queuecore.core.clock import AligningClock, Clock, to_ms
from queuecore.core.config import DEFAULT_QUEUE, ConnectionConfig
from queuecore.core.errors import (
    BatchEnqueueError,
    BrokerError,
    ConfigurationError,
    InvalidOption,
    InvalidPayload,
    QueuecoreError,
    RedisFull,
    RedisUnavailable,
    TaskIdConflict,
    WrongKeyType,
    shown,
)
from queuecore.core.keys import QueueKeys, validate_queue_name, validate_task_id, validate_type_name
from queuecore.core.limits import (
    MAX_DURATION,
    MAX_RETRY,
    PRIORITY,
    PROCESS_IN,
    RETENTION,
    TIMEOUT,
    UNIQUE_FOR,
    Range,
    call_chunks,
    utf8_size,
)
from queuecore.core.message import TaskMessage, encode_payload, seconds_to_datetime
from queuecore.core.redis_errors import (
    UNAVAILABLE,
    broker_errors,
    full_message,
    is_out_of_memory,
    is_wrong_type,
    unreachable_message,
    wrong_type_message,
)
from queuecore.core.registry import ENQUEUE_OPTIONS, Handler, TaskRegistry, TaskRequest, default_registry, over
from queuecore.core.results import Results, TaskHandle
from queuecore.core.scripts import OK, PUSHED, EnqueueItem, Scripts
from queuecore.core.states import TaskState

_QUEUE_REGISTRATION_TTL = 10.0  # seconds a client trusts that a queue is in the registry set
ENQUEUE_CHUNK = 1000  # tasks per script call: keeps each call to Redis short


def _seconds(value: Any, name: str, allowed: Range) -> float:
    """A duration option (seconds or a ``timedelta``) in its documented range, else ``InvalidOption``."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidOption(f"{name} must be a number of seconds or a timedelta, got {shown(value)}", field=name)
    return allowed.check(value, name, InvalidOption)


def check_default_values(options: dict[str, Any]) -> None:
    """Check the values of the enqueue options a task type sets as its defaults (``@task(queue=...,
    max_retry=...)``) as an enqueue checks them: where the type is defined, not at its every enqueue."""
    if options.get("queue") is not None:
        validate_queue_name(options["queue"])
    if options.get("max_retry") is not None:
        MAX_RETRY.check(options["max_retry"], "max_retry", InvalidOption)
    if options.get("priority") is not None:
        PRIORITY.check(options["priority"], "priority", InvalidOption)
    for name, allowed in (("timeout", TIMEOUT), ("retention", RETENTION), ("unique_for", UNIQUE_FOR)):
        if options.get(name) is not None:
            _seconds(options[name], name, allowed)


def _timestamp(value: Any, name: str, now: float) -> float:
    """A point in time (an aware datetime, a naive one in local time as ``datetime.timestamp`` reads
    it, or unix seconds) from 1970-01-01 UTC to ``MAX_DURATION`` after now, else ``InvalidOption``."""
    allowed = "a datetime (or unix seconds) from 1970-01-01 UTC to 10 years from now"
    if isinstance(value, datetime):
        try:
            seconds = value.timestamp()
        except (OverflowError, ValueError, OSError):  # e.g. a naive datetime(1, 1, 1) in local time
            raise InvalidOption(f"{name} is out of range: got {shown(value)}; allowed: {allowed}", field=name) from None
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidOption(f"{name} must be a datetime, got {shown(value)}", field=name)
    else:
        try:
            seconds = float(value)
        except OverflowError:
            seconds = math.inf
    if not math.isfinite(seconds) or not 0 <= seconds <= now + MAX_DURATION:
        raise InvalidOption(f"{name} is out of range: got {shown(value)}; allowed: {allowed}", field=name)
    return seconds


@lru_cache(maxsize=16)
def _datetime(seconds: float) -> datetime | None:
    """``seconds_to_datetime``, shared by the tasks of a batch (they have one enqueue time)."""
    return seconds_to_datetime(seconds)


class _Resolved(NamedTuple):
    """A task type's enqueue options, checked: what the tasks of one type in one call share."""

    handler: Handler | None
    type_name: str
    queue: str
    task_id: str | None  # chosen by the caller; None: a random one per task
    max_retry: int
    timeout: float | None
    deadline: float | None
    process_at: float | None
    retention: float
    priority: int
    unique_ttl: float | None  # None: not unique


class _Prepared:
    __slots__ = ("chosen_id", "encoded", "message", "process_at", "span", "unique_key", "unique_ttl")

    def __init__(self, message: TaskMessage, encoded: str, process_at: float | None, unique_key: str | None,
                 unique_ttl: float, chosen_id: bool, span: Any = None) -> None:
        self.span = span  # the enqueue's "send" span while tracing (tracing.py), ended once it is sent
        self.chosen_id = chosen_id  # a caller-chosen id must be checked for duplicates; a random one cannot clash
        self.message = message
        self.encoded = encoded
        self.process_at = process_at
        self.unique_key = unique_key
        self.unique_ttl = unique_ttl

    def info(self, results: Results, reply: Any = OK) -> TaskHandle:
        """The task as enqueued, bound to ``results`` (its handle); active when the script's ``reply``
        says it went straight to a waiting worker, fetched at the enqueue's time (as Redis has it)."""
        m = self.message
        pushed = reply == PUSHED
        state = TaskState.ACTIVE if pushed else TaskState.SCHEDULED if self.process_at else TaskState.PENDING
        handle = _new_handle(
            id=m.id, queue=m.queue, type=m.type, payload=m.payload, max_retry=m.max_retry, timeout=m.timeout,
            state=state, fetched_at=_datetime(m.enqueued_at) if pushed else None,
            next_process_at=_datetime(self.process_at or m.enqueued_at),
            enqueued_at=_datetime(m.enqueued_at), deadline=seconds_to_datetime(m.deadline),
            retention=m.retention, unique_key=m.unique_key, priority=m.priority, _results=results,
        )
        return handle


_handle_defaults: tuple[dict[str, Any], tuple[tuple[str, Callable[[], Any]], ...]] | None = None


def _new_handle(**values: Any) -> TaskHandle:
    """``TaskHandle(**values)`` (plus ``_results``) without running the dataclass ``__init__``: a frozen
    dataclass of 30-odd fields sets each one through ``object.__setattr__``, which was 30 % of a
    batch enqueue's CPU. Here the defaults go in with one ``dict.update`` (a fresh value from each
    ``default_factory``); the result is equal to the constructor's (tested). ``TaskInfo`` has no
    ``__post_init__``."""
    global _handle_defaults
    if _handle_defaults is None:
        plain = {f.name: f.default for f in dataclasses.fields(TaskHandle) if f.default is not dataclasses.MISSING}
        made = tuple((f.name, f.default_factory) for f in dataclasses.fields(TaskHandle)
                     if f.default_factory is not dataclasses.MISSING)
        _handle_defaults = plain, made
    plain, made = _handle_defaults
    handle = object.__new__(TaskHandle)
    state = handle.__dict__
    state.update(plain)
    for name, factory in made:
        state[name] = factory()
    state.update(values)
    return handle


class Client:
    """Enqueues tasks into Redis.

    ``Client(redis_url=..., key_prefix=...)``; or pass a ``ConnectionConfig`` or an existing
    ``redis.Redis`` (which the client then does not close). A task enqueued without ``max_retry``
    (in the call or its ``@task``) gets the connection's ``default_max_retry``, one without
    ``retention`` its ``default_retention``.
    """

    def __init__(self, redis_url: str | None = None, key_prefix: str | None = None, *,
                 connection: ConnectionConfig | None = None, redis_client: redis.Redis | None = None,
                 registry: TaskRegistry | None = None, clock: Clock | None = None) -> None:
        connection_given = connection is not None
        if connection is None:
            connection = ConnectionConfig.default(redis_url=redis_url, key_prefix=key_prefix)
        self.connection = connection
        self.keys = connection.keys
        self._owns_redis = redis_client is None
        self.redis = redis_client if redis_client is not None else connection.connect()
        self.scripts = Scripts(self.redis, self.keys).per_thread()
        self.broker = Broker(self.redis, self.keys)
        self.registry = registry or default_registry
        # Redis's time, not this host's; an enqueue whose measurement of it finds Redis unreachable fails
        # at once, instead of waiting out the same timeout again on its own call
        self.clock = clock or AligningClock(self.broker.time, raise_unreachable=True)
        self._registered_queues: dict[str, float] = {}
        self._valid_names: set[tuple[str, str]] = set()
        self._queue_keys: dict[str, QueueKeys] = {}
        self._lock = threading.Lock()
        # A client given without its URL: the waits for results talk to its server, not the default URL's.
        url_names_client = redis_client is None or redis_url is not None or connection_given
        self.results = Results(connection, self.redis, self.scripts, self.broker, url_names_client)
        self._tracing = tracing.get()  # None without the otel extra: no per-task work at all

    def close(self) -> None:
        """Close the Redis connection if this client created it (and the connections of enqueues, and
        the loop of sync result waits)."""
        self.results.close()
        self.scripts.close()
        if self._owns_redis:
            self.redis.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- building messages ------------------------------------------------------------------------

    def _resolve(self, task: str | Handler, options: dict[str, Any], now: float) -> _Resolved:
        """Check the enqueue ``options`` (over the task type's own) and the names; what every task
        of the type enqueued with them at ``now`` shares. A batch resolves them once per type."""
        if not ENQUEUE_OPTIONS.issuperset(options):
            unknown = set(options) - ENQUEUE_OPTIONS
            raise ConfigurationError(f"unknown enqueue option(s): {', '.join(sorted(unknown))}")
        handler = task if isinstance(task, Handler) else self.registry.get(self._valid_name(task, "type"))
        type_name = task.name if isinstance(task, Handler) else task
        if handler is not None and handler.options:
            options = over(handler.options, options)
        queue = self._valid_name(DEFAULT_QUEUE if options.get("queue") is None else options["queue"], "queue")
        task_id = validate_task_id(options["task_id"]) if options.get("task_id") is not None else None
        max_retry = options.get("max_retry")
        if max_retry is None:
            max_retry = self.connection.default_max_retry
        max_retry = int(MAX_RETRY.check(max_retry, "max_retry", InvalidOption))
        timeout = options.get("timeout")
        if timeout is not None:
            timeout = _seconds(timeout, "timeout", TIMEOUT)
        deadline = options.get("deadline")
        if deadline is not None:
            deadline = _timestamp(deadline, "deadline", now)
        process_at: float | None = None
        if options.get("process_at") is not None and options.get("process_in") is not None:
            raise InvalidOption("give process_at or process_in, not both", field="process_at")
        if options.get("process_at") is not None:
            process_at = _timestamp(options["process_at"], "process_at", now)
        elif options.get("process_in") is not None:
            process_at = now + _seconds(options["process_in"], "process_in", PROCESS_IN)
        if process_at is not None and process_at <= now:
            process_at = None  # due already: straight to pending
        retention = self.connection.default_retention
        if options.get("retention") is not None:
            retention = _seconds(options["retention"], "retention", RETENTION)
        priority = 0
        if options.get("priority") is not None:
            priority = int(PRIORITY.check(options["priority"], "priority", InvalidOption))
        unique_ttl = None
        if options.get("unique_for") is not None:
            unique_ttl = _seconds(options["unique_for"], "unique_for", UNIQUE_FOR)
        return _Resolved(handler, type_name, queue, task_id, max_retry, timeout, deadline, process_at, retention,
                         priority, unique_ttl)

    def _prepare(self, task: str | Handler, payload: Any, options: dict[str, Any], now: float, *,
                 send: bool = True, resolved: _Resolved | None = None) -> _Prepared:
        """A task ready to send: its options resolved (or the ``resolved`` ones of its batch), its
        payload checked, its message encoded."""
        r = resolved if resolved is not None else self._resolve(task, options, now)
        payload_json = encode_payload(payload, self.connection.max_payload_bytes)
        payload = payload or {}
        if r.handler is not None:
            r.handler.check_payload(payload)
        task_id = r.task_id if r.task_id is not None else os.urandom(16).hex()
        unique_key = None
        if r.unique_ttl is not None:
            digest = hashlib.sha256(f"{r.type_name}\0{r.queue}\0{_canonical(payload)}".encode()).hexdigest()[:32]
            unique_key = self.keys.queue(r.queue).unique(r.type_name, digest)
        span = trace = None
        if self._tracing is not None and send:  # the opentelemetry extra: the send span, its context in the message
            span, trace = self._tracing.start_send(r.queue, task_id, r.type_name)
        message = TaskMessage(id=task_id, type=r.type_name, payload=payload, queue=r.queue, max_retry=r.max_retry,
                              timeout=r.timeout, deadline=r.deadline, retention=r.retention, unique_key=unique_key,
                              enqueued_at=now, priority=r.priority, trace=trace)
        return _Prepared(message, message.encode(payload_json), r.process_at, unique_key, r.unique_ttl or 0.0,
                         chosen_id=r.task_id is not None, span=span)

    def _valid_name(self, name: Any, kind: str) -> str:
        """Validate a queue or type name once per client; later uses are a set lookup."""
        if isinstance(name, str) and (kind, name) in self._valid_names:
            return name
        checked = validate_queue_name(name) if kind == "queue" else validate_type_name(name)
        if len(self._valid_names) < 10_000:
            self._valid_names.add((kind, checked))
        return checked

    def _send_traced(self, prepared: list[_Prepared], now: float) -> list[Any]:
        """``_send``, then end each task's ``send`` span with the error that refused it, if any: the
        call's (Redis full, a key of the wrong type, unreachable) or the task's own (``DuplicateTask``,
        ``TaskIdConflict``: the script's reply, which this turns into the error in its place)."""
        assert self._tracing is not None
        try:
            replies = self._send(prepared, now)
        except BaseException as exc:
            for p in prepared:
                self._tracing.end_send(p.span, exc)
            raise
        for index, (p, reply) in enumerate(zip(prepared, replies, strict=True)):
            error = reply if isinstance(reply, BaseException) else None
            if error is None:
                try:
                    Scripts.check_enqueue(reply, p.message.id, p.message.queue)
                except QueuecoreError as exc:
                    error = replies[index] = exc
            self._tracing.end_send(p.span, error)
        return replies

    def _send(self, prepared: list[_Prepared], now: float) -> list[Any]:
        """Store prepared tasks: one ``enqueue`` call per queue and chunk, all in one round-trip.

        Returns the script's reply for each task, in order. Each call stores all of its tasks or,
        when it is refused (malformed input, a key of the wrong type, Redis full), none. When
        every call is refused the error is raised; when only some are (a batch over several
        queues or chunks), the tasks of a refused call get its error in place of a reply.
        """
        register = self._queues_to_register([p.message.queue for p in prepared])
        if register:  # a round trip of its own (once per queue every few seconds), before any task is stored:
            with broker_errors():  # refused (an ACL, a key of another type), it stores nothing
                try:
                    self.broker.register_queues(register)
                except BaseException:
                    self._forget_registration(register)
                    raise
        if len(prepared) == 1:  # the common case: one task, one script call
            with broker_errors():
                try:
                    return [self._enqueue_call(prepared[0].message.queue, prepared, to_ms(now), None)[0]]
                except redis.ResponseError as exc:
                    raise _enqueue_error(exc) from exc
        by_queue: dict[str, list[int]] = {}
        for index, p in enumerate(prepared):
            by_queue.setdefault(p.message.queue, []).append(index)
        # At most ENQUEUE_CHUNK tasks a call, and none after the one whose message brings it to CALL_BYTES:
        # Redis runs a call whole, and 1,000 messages of 500 KB in one call held it 1.36 s.
        calls = [(queue, chunk) for queue, indexes in by_queue.items()
                 for chunk in call_chunks(indexes, lambda i: utf8_size(prepared[i].encoded), ENQUEUE_CHUNK)]
        now_ms = to_ms(now)
        with broker_errors():
            try:
                if len(calls) == 1:  # the common case: one call, no pipeline
                    queue, indexes = calls[0]
                    try:
                        groups = [self._enqueue_call(queue, [prepared[i] for i in indexes], now_ms, None)]
                    except redis.ResponseError as exc:
                        raise _enqueue_error(exc) from exc
                else:
                    pipe = self.broker.pipeline()
                    for queue, indexes in calls:
                        self._enqueue_call(queue, [prepared[i] for i in indexes], now_ms, pipe)
                    groups = pipe.execute(raise_on_error=False)
                    refused = [g for g in groups if isinstance(g, Exception)]
                    if refused and len(refused) == len(groups):  # nothing was stored
                        raise _enqueue_error(refused[0]) from refused[0]
            except BaseException:
                self._forget_registration(register)
                raise
        replies: list[Any] = [None] * len(prepared)
        for (_, indexes), group in zip(calls, groups, strict=True):
            if isinstance(group, Exception):
                error = _enqueue_error(group)
                for index in indexes:
                    replies[index] = error
                continue
            for index, reply in zip(indexes, group, strict=True):
                replies[index] = reply
        return replies

    def _enqueue_call(self, queue: str, prepared: list[_Prepared], now_ms: int, pipe: Any) -> Any:
        items = [EnqueueItem(p.message.id, p.encoded, to_ms(p.process_at) if p.process_at else 0, p.unique_key,
                             to_ms(p.unique_ttl), check_id=p.chosen_id, front=p.message.priority > 0)
                 for p in prepared]
        q = self._queue_keys.get(queue)
        if q is None:
            q = self.keys.queue(queue)
            if len(self._queue_keys) < 10_000:
                self._queue_keys[queue] = q
        return self.scripts.enqueue_many(q, items, now_ms=now_ms, client=pipe)

    def _queues_to_register(self, queues: list[str]) -> list[str]:
        now = time.monotonic()
        if len(queues) == 1 and self._registered_queues.get(queues[0], 0.0) > now:
            return []  # the common case, without the lock: registered a moment ago
        with self._lock:
            fresh = [q for q in set(queues) if self._registered_queues.get(q, 0.0) <= now]
            for q in fresh:
                self._registered_queues[q] = now + _QUEUE_REGISTRATION_TTL
        return fresh

    def result(self, result_id: str) -> TaskHandle:
        """The task a result id names (``TaskHandle.result_id``: ``"<queue>/<task id>"``; a bare task id
        is looked for in every queue), as it is now; ``TaskNotFound`` when there is none."""
        return self.results.lookup(result_id)

    def check(self, task: str | Handler, payload: dict[str, Any] | None = None, **options: Any) -> None:
        """Validate a task as ``enqueue`` would, without sending it; raises the same errors, but not
        ``BrokerError``: an outage is for the enqueue to report."""
        try:
            now = self.clock.now()
        except RedisUnavailable:  # the clock could not measure Redis's: it keeps the offset it had
            now = self.clock.now()
        self._prepare(task, payload, options, now, send=False)

    # -- enqueueing -------------------------------------------------------------------------------

    def enqueue(self, task: str | Handler, payload: dict[str, Any] | None = None, **options: Any) -> TaskHandle:
        """Enqueue one task; returns its ``TaskHandle`` (a ``TaskInfo`` of the task as enqueued, with
        ``result_id`` and ``get``/``wait`` for its outcome).

        Options (keyword-only): ``queue``, ``max_retry``, ``timeout``, ``deadline``, ``process_at``,
        ``process_in``, ``unique_for``, ``task_id``, ``retention``, ``priority``; each has a documented
        range (``queuecore.core.limits``). Raises ``InvalidPayload``, ``InvalidOption`` (an option out of
        its range), ``ConfigurationError`` (a bad name), ``DuplicateTask``, ``TaskIdConflict`` or
        ``BrokerError``; on any of them but ``BrokerError`` nothing was written.
        """
        now = self.clock.now()
        prepared = self._prepare(task, payload, options, now)
        reply = (self._send if self._tracing is None else self._send_traced)([prepared], now)[0]
        if isinstance(reply, QueuecoreError):
            raise reply
        Scripts.check_enqueue(reply, prepared.message.id, prepared.message.queue)
        return prepared.info(self.results, reply)

    def enqueue_many(self, requests: Iterable[TaskRequest | tuple[str, dict[str, Any] | None]],
                     **options: Any) -> list[TaskHandle]:
        """Enqueue a batch in one round-trip. ``options`` apply to every request without its own.

        Invalid input stores nothing: every request is validated before anything is sent (and the
        script checks every task of its call before its first write), and the first bad one raises
        ``InvalidPayload``, ``InvalidOption`` or ``ConfigurationError``.

        Conflicts found in Redis are per task: a taken ``task_id`` (``TaskIdConflict``; also a
        ``task_id`` given twice in the batch) or a held unique lock (``DuplicateTask``; also the
        second of two identical unique tasks in the batch) refuse that task only, the others are
        stored, and ``BatchEnqueueError`` reports both (``.enqueued``, ``.errors`` by index). A batch
        is one script call per queue and 1,000 tasks: a call refused as a whole (a key of the wrong
        type, Redis full) stores none of its tasks; if other calls were stored, its tasks appear in
        ``.errors`` with that error, else the error is raised.
        """
        now = self.clock.now()
        prepared: list[_Prepared] = []
        # The batch's options, resolved once per task type (by name, or by handler object), for the
        # requests that bring no options of their own: 2.5 of a task's 7.4 us of preparation.
        shared: dict[str | int, tuple[str | Handler, _Resolved]] = {}
        payload: dict[str, Any] | None
        own: dict[str, Any] | None
        try:
            for req in requests:
                if isinstance(req, TaskRequest):
                    task, payload, own = req.handler or req.type, req.payload, req.options
                elif isinstance(req, tuple) and len(req) == 2:
                    task, payload, own = req[0], req[1], None
                else:
                    raise InvalidPayload(f"enqueue_many takes TaskRequest or (type, payload) items, got {shown(req)}")
                if own:
                    prepared.append(self._prepare(task, payload, over(options, own), now))
                    continue
                key = task if isinstance(task, str) else id(task)
                known = shared.get(key)
                if known is None:  # kept with its task: an id stays that object's while the batch holds it
                    known = shared[key] = (task, self._resolve(task, options, now))
                prepared.append(self._prepare(task, payload, options, now, resolved=known[1]))
        except BaseException as exc:  # nothing is sent: the spans of the tasks prepared so far end with why
            if self._tracing is not None:
                for p in prepared:
                    self._tracing.end_send(p.span, exc)
            raise
        if not prepared:
            return []
        replies = self._send_unrepeated(prepared, now)
        enqueued: list[TaskHandle] = []
        errors: dict[int, QueuecoreError] = {}
        for index, (p, reply) in enumerate(zip(prepared, replies, strict=True)):
            try:
                if isinstance(reply, QueuecoreError):
                    raise reply
                Scripts.check_enqueue(reply, p.message.id, p.message.queue)
                enqueued.append(p.info(self.results, reply))
            except QueuecoreError as exc:
                errors[index] = exc
        if errors:
            raise BatchEnqueueError(enqueued, errors)
        return enqueued

    def _send_unrepeated(self, prepared: list[_Prepared], now: float) -> list[Any]:
        """Send a batch; a caller-chosen id given again in it (in the same queue) is not sent: its reply
        is ``TaskIdConflict`` (the script takes a task holding this very message for the retry of a
        call whose reply was lost, so the second of two identical requests came back as stored)."""
        send = self._send if self._tracing is None else self._send_traced
        seen: set[tuple[str, str]] = set()
        repeated: dict[int, QueuecoreError] = {}
        for index, p in enumerate(prepared):
            if p.chosen_id:
                where = (p.message.queue, p.message.id)
                if where in seen:
                    repeated[index] = TaskIdConflict(f"task id {p.message.id!r} is given twice in the batch "
                                                     f"(queue {p.message.queue!r})")
                seen.add(where)
        if not repeated:
            return send(prepared, now)
        if self._tracing is not None:
            for index, error in repeated.items():
                self._tracing.end_send(prepared[index].span, error)
        rest = [p for index, p in enumerate(prepared) if index not in repeated]
        sent = iter(send(rest, now) if rest else [])
        return [repeated[index] if index in repeated else next(sent) for index in range(len(prepared))]

    def _forget_registration(self, queues: list[str]) -> None:
        with self._lock:
            for q in queues:
                self._registered_queues.pop(q, None)


def _canonical(payload: dict[str, Any]) -> str:
    """A checked payload's JSON with every object's keys sorted: equal payloads, whatever the order
    their dicts were built in, give one text (and one uniqueness lock)."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _enqueue_error(exc: BaseException) -> QueuecoreError:
    """The library's error for an ``enqueue`` call that Redis refused (none of its tasks was written)."""
    if isinstance(exc, QueuecoreError):
        return exc
    if isinstance(exc, UNAVAILABLE):  # a cluster failing over: nothing was written, try again later
        return RedisUnavailable(unreachable_message(exc))
    text = str(exc)
    if "QCINVALID" in text:
        found = re.search(r"QCINVALID (batch|item \d+) (\w+) ?(.*)", text, re.DOTALL)
        detail = f"{found[1]}: invalid {found[2]} {found[3][:100]!r}" if found else text
        return InvalidOption(f"refused by the enqueue script: {detail}")
    if is_out_of_memory(text):
        return RedisFull(full_message(text))
    if is_wrong_type(text):
        return WrongKeyType(wrong_type_message(text))
    return BrokerError(f"Redis refused the operation: {text}")


_default_client: Client | None = None
_default_factory: Callable[[], Client] | None = None
_default_lock = threading.Lock()


def set_default_client_factory(factory: Callable[[], Client] | None) -> None:
    """Set how the default client is built (the Django app points it at ``QUEUECORE``)."""
    global _default_client, _default_factory
    with _default_lock:
        old, _default_client, _default_factory = _default_client, None, factory
    if old is not None:
        old.close()


def get_default_client() -> Client:
    """The process-wide client used by ``queuecore.enqueue`` and ``fn.enqueue``.

    Built by the configured factory, else from ``QUEUECORE_REDIS_URL``/``QUEUECORE_KEY_PREFIX``.
    """
    global _default_client
    with _default_lock:
        if _default_client is None:
            _default_client = _default_factory() if _default_factory else Client()
        return _default_client


def enqueue(task: str | Handler, payload: dict[str, Any] | None = None, **options: Any) -> TaskHandle:
    """Enqueue a task on the default client: ``enqueue("demo.sleep", {"seconds": 2}, queue="low")``."""
    return get_default_client().enqueue(task, payload, **options)


def result(result_id: str) -> TaskHandle:
    """The task a result id names, on the default client: ``result("low/5f13...").get(timeout=10)``."""
    return get_default_client().result(result_id)
