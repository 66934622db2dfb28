"""A backend for Django's Tasks API: ``django.tasks`` on Django 6.0+, and the ``django-tasks``
backport (module ``django_tasks``) on Django 5.2.

    TASKS = {"default": {
        "BACKEND": "queuecore.tasks_backend.QueuecoreBackend",
        "QUEUES": ["default", "low"],                       # queuecore queues of the same names
        "OPTIONS": {"TIMEOUT": 600, "MAX_RETRY": 3, "UNIQUE_FOR": None, "RETENTION": 86400},
    }}

A Django task is a first-class queuecore task: its type name is the function's module path
(``myapp.tasks.send_email``), its payload ``{"args": [...], "kwargs": {...}, "backend": alias}``
(``"run_after"`` too when it was deferred), and ``runworker`` runs it under a lease, with retries,
timeouts, cancel and pause, as any other task; the dashboard and ``adminctl`` show it. The worker finds
it in queuecore's registry: defining the task (``@task``, which validates it against this backend)
registers it, so its module must be imported by the worker (every app's ``tasks.py`` is; list others
in ``QUEUECORE['TASK_MODULES']``). Nothing is ever imported from a name stored in Redis.

- ``enqueue``/``aenqueue`` store the task (``task_enqueued`` is sent); the result id is queuecore's
  ``"<queue>/<task id>"``, so ``queuecore.result(result.id).get(timeout=...)`` waits for it.
- ``get_result``/``aget_result`` read it while its retention lasts (``TaskResultDoesNotExist`` after).
- ``run_after`` defers it; ``priority`` > 0 puts it at the head of its queue (it runs before the tasks
  already waiting there; among such tasks the most recent first), 0 or less at the tail, as every
  queuecore task (see the README's "Django's Tasks API").
- Options Django has no word for (``timeout``, ``max_retry``, ``unique_for``, ``retention``) come from
  ``OPTIONS`` (``TIMEOUT``, ``MAX_RETRY``, ``UNIQUE_FOR``, ``RETENTION``), and per task from
  ``@task(timeout=..., ...)`` (``QueuecoreTask``; Django 6.1 and the backport pass extra ``@task``
  arguments to the backend's task class). ``RETENTION`` defaults to ``QUEUECORE['DEFAULT_RETENTION']``
  when that is above 0, else one day: Django's API promises results.
- Status: pending, scheduled and retry are READY (retry: "ready to be executed again", with the failed
  attempts in ``errors``); active is RUNNING; completed SUCCESSFUL; archived FAILED (retries spent,
  cancelled or archived by an operator).
- The worker sends ``task_started`` as each attempt starts and ``task_finished`` when the task is
  finished: after a success, or a failure that will not be retried (a failed attempt that will be
  retried is READY again, and sends nothing). Receivers run in sync code (an async task's in a thread,
  off the event loop: they may use the ORM); a ``task_started`` receiver's exception fails the
  attempt, as in Django's own backends; a ``task_finished`` receiver's is logged, and changes nothing.
  A ``takes_context`` task gets a ``TaskContext`` whose ``attempt`` is the attempt's number; its
  ``task_result`` (and the signals') is the task as ``get_result`` shows it, the earlier attempts'
  errors, worker ids and first start included (read from the task's attempt history: one ``HMGET`` on
  a retry, nothing on a first attempt).
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from traceback import format_exception
from typing import Any

import redis
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core import checks
from django.utils import timezone

from queuecore.core.attempts import ATTEMPT_LINE_ERROR_CHARS, one_line, parse_attempts
from queuecore.core.client import check_default_values, get_default_client
from queuecore.core.context import TaskContext as QueuecoreContext
from queuecore.core.context import current_task
from queuecore.core.errors import ConfigurationError, PayloadMismatch, TaskDecodeError, TaskNotFound
from queuecore.core.keys import validate_queue_name
from queuecore.core.limits import MAX_RETRY_LIMIT
from queuecore.core.message import AttemptInfo, TaskInfo, json_text
from queuecore.core.outcome import class_path, classify, decide
from queuecore.core.reasons import CANCELLED_BY_OPERATOR
from queuecore.core.registry import Handler, default_registry
from queuecore.core.results import parse_result_id, result_id
from queuecore.core.states import TaskState
from queuecore.receivers import send_robustly

try:  # Django 6.0+
    from django.tasks import DEFAULT_TASK_BACKEND_ALIAS, TaskResultStatus, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskContext, TaskError, TaskResult
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json
except ImportError:  # Django 5.2 and the django-tasks backport
    try:
        from django_tasks import DEFAULT_TASK_BACKEND_ALIAS, TaskResultStatus, task_backends
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import Task, TaskContext, TaskError, TaskResult
        from django_tasks.exceptions import InvalidTaskError as InvalidTask
        from django_tasks.exceptions import TaskResultDoesNotExist
        from django_tasks.signals import task_enqueued, task_finished, task_started
        from django_tasks.utils import normalize_json
    except ImportError as exc:
        raise ImportError("queuecore.tasks_backend needs Django 6.0+ (django.tasks), or the django-tasks package "
                          "on Django 5.2: pip install django-tasks") from exc

logger = logging.getLogger("queuecore.worker")

DEFAULT_RESULT_RETENTION = 24 * 3600.0  # when neither OPTIONS nor QUEUECORE['DEFAULT_RETENTION'] sets one
# OPTIONS key -> the enqueue option and QueuecoreTask field (checked as @task's defaults are)
OPTIONS: dict[str, str] = {"TIMEOUT": "timeout", "MAX_RETRY": "max_retry", "UNIQUE_FOR": "unique_for",
                           "RETENTION": "retention"}
STATUS = {
    TaskState.PENDING: TaskResultStatus.READY, TaskState.SCHEDULED: TaskResultStatus.READY,
    TaskState.RETRY: TaskResultStatus.READY, TaskState.ACTIVE: TaskResultStatus.RUNNING,
    TaskState.COMPLETED: TaskResultStatus.SUCCESSFUL, TaskState.ARCHIVED: TaskResultStatus.FAILED,
}
MAX_ATTEMPTS_SHOWN = MAX_RETRY_LIMIT + 1  # worker ids a result lists at most (a corrupt retry count asks more)
LOST_ATTEMPT_ERROR = "queuecore.core.errors.WorkerLost"  # the class of an attempt the core ended itself
_TRACEBACK = "Traceback (most recent call last):\n"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class QueuecoreTask(Task):
    """Django's ``Task`` with queuecore's options; ``None`` takes the backend's ``OPTIONS`` default:
    ``@task(timeout=60, max_retry=3, unique_for=300, retention=3600)``."""

    timeout: float | timedelta | None = None
    max_retry: int | None = None
    unique_for: float | timedelta | None = None
    retention: float | timedelta | None = None


def _seconds(value: Any) -> Any:
    return value.total_seconds() if isinstance(value, timedelta) else value


def _check_option(key: str, value: Any) -> str | None:
    """Why ``value`` cannot be the queuecore option of ``OPTIONS[key]``; None when it can."""
    try:
        check_default_values({OPTIONS[key]: value})
    except ConfigurationError as exc:
        return str(exc)
    return None


class _TaskHandler(Handler):
    """A Django task in queuecore's registry: what the worker runs for its type name."""

    def __init__(self, task: Task) -> None:
        self.task = task
        runner = _async_runner(self) if inspect.iscoroutinefunction(task.func) else _sync_runner(self)
        super().__init__(runner, task.module_path, {})

    @property
    def default_queue(self) -> str | None:
        """The Django task's ``queue_name`` (its enqueue names it; queuecore's options hold none)."""
        return self.task.queue_name


def _register(task: Task) -> None:
    """Put ``task`` in queuecore's registry under its module path (once per function)."""
    existing = default_registry.get(task.module_path)
    if isinstance(existing, _TaskHandler) and existing.task.func is task.func:
        return
    try:
        default_registry.register(_TaskHandler(task))
    except ConfigurationError as exc:
        raise InvalidTask(str(exc)) from None


def _backend_class(alias: str) -> type:
    try:
        return type(task_backends[alias])
    except Exception:  # not configured in this process: the signal still names a backend class
        return QueuecoreBackend


def _task_as_enqueued(task: Task, queue: str, backend: str, priority: int, run_after: str | None) -> Task:
    """The registered task with what it was enqueued with (``Task.using`` does the same)."""
    changes: dict[str, Any] = {"queue_name": queue, "backend": backend, "priority": priority}
    try:
        if run_after:
            changes["run_after"] = datetime.fromisoformat(run_after)
        return dataclasses.replace(task, **changes)
    except Exception:  # a queue since dropped from QUEUES, a run_after edited into no time: the task as defined
        return task


def _datetime(seconds: float | None) -> datetime | None:
    return _site_time(datetime.fromtimestamp(seconds, tz=UTC)) if seconds else None


def _site_time(value: datetime | None) -> datetime | None:
    """A time as the site's own are (``timezone.now()``): aware with ``USE_TZ``, else naive in its time zone."""
    if value is None or settings.USE_TZ or timezone.is_naive(value):
        return value
    return timezone.make_naive(value)


def _arguments(args: Any, kwargs: Any) -> tuple[list[Any], dict[str, Any]]:
    """The stored ``args`` (a list) and ``kwargs`` (an object), absent ones empty; ``PayloadMismatch``
    for others (a payload enqueued by hand, with ``adminctl enqueue``: a string's letters were passed
    as arguments, one each)."""
    if args is not None and not isinstance(args, list):
        raise PayloadMismatch(f"the stored args of a Django task must be a list, not {type(args).__name__}")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise PayloadMismatch(f"the stored kwargs of a Django task must be an object, not {type(kwargs).__name__}")
    return list(args or []), dict(kwargs or {})


def _bind(task: Task, args: list[Any], kwargs: dict[str, Any]) -> None:
    """``PayloadMismatch`` when the stored arguments do not fit the function: archived at once."""
    context = [None] if task.takes_context else []
    try:
        inspect.signature(task.func).bind(*context, *args, **kwargs)
    except TypeError as exc:
        raise PayloadMismatch(f"the arguments do not fit task {task.module_path}: {exc}") from None


def _text(value: Any) -> str | None:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _history(ctx: QueuecoreContext) -> tuple[list[AttemptInfo], str | None]:
    """The running task's earlier attempts and its last error, read from its hash (one ``HMGET`` of two
    fields) when it has had any (every failed attempt, a lost one included, counts in ``retried``; a
    first attempt reads nothing); none when Redis cannot tell (the attempt runs on regardless)."""
    if ctx.retried <= 0:
        return [], None
    client = get_default_client()
    try:
        attempts, error = client.redis.hmget(client.keys.queue(ctx.queue).task(ctx.id), ["attempts", "error"])
    except redis.RedisError:
        return [], None
    return parse_attempts(_text(attempts)), _text(error) or None


def _running_result(handler: _TaskHandler, args: list[Any], kwargs: dict[str, Any], backend: str,
                    run_after: str | None) -> TaskResult:
    """This attempt as a RUNNING ``TaskResult``, for the signals and a ``takes_context`` task: the task
    as ``get_result`` shows it (the earlier attempts' errors, worker ids and first start, from the task's
    attempt history), with this attempt's worker id and start."""
    ctx = current_task()
    task = _task_as_enqueued(handler.task, ctx.queue, backend, ctx.priority, run_after)
    now = timezone.now()
    history, last_error = _history(ctx)
    worker_ids = [*_worker_ids(history, ctx.retried), ctx.worker_id]  # TaskContext.attempt is this one's
    starts = [_site_time(start) for a in history if (start := a.started_at or a.fetched_at) is not None]
    return TaskResult(
        task=task, id=result_id(ctx.queue, ctx.id), status=TaskResultStatus.RUNNING,
        enqueued_at=_datetime(ctx.enqueued_at), started_at=min([now, *starts]), finished_at=None,
        last_attempted_at=now, args=args, kwargs=kwargs, backend=backend, errors=_errors(history, last_error),
        worker_ids=worker_ids,
    )


def _worker_ids(attempts: list[AttemptInfo], count: int) -> list[str]:
    """One worker id per attempt, for attempts 1 to ``count`` (at most ``MAX_ATTEMPTS_SHOWN``): the
    attempt line's, ``""`` when none says (a line numbered outside that range, corrupt, is skipped)."""
    worker_ids = [""] * max(0, min(count, MAX_ATTEMPTS_SHOWN))
    for attempt in attempts:
        if 1 <= attempt.number <= len(worker_ids):
            worker_ids[attempt.number - 1] = attempt.worker or ""
    return worker_ids


def _finished(result: TaskResult, status: Any, *, value: Any = None, error: BaseException | None = None) -> None:
    object.__setattr__(result, "status", status)
    object.__setattr__(result, "finished_at", timezone.now())
    if error is not None:
        result.errors.append(TaskError(exception_class_path=class_path(type(error)),
                                       traceback="".join(format_exception(error))))
    else:
        object.__setattr__(result, "_return_value", value)


def _final_error(exc: BaseException) -> BaseException | None:
    """The error the worker records for ``exc`` (a timeout's ``TaskTimeout``, not the ``CancelledError``
    that interrupted the handler) when this failure ends the task, None when it will be retried: the
    worker's own decision (``outcome.decide``)."""
    ctx = current_task()
    outcome = classify(exc, ctx.cancel_reason)
    decision = decide(outcome, retried=ctx.retried, max_retry=ctx.max_retry, retry_delay=lambda retried, error: 0.0)
    return (outcome.error or exc) if decision.action == "archive" else None


class _Attempt:
    """One attempt of a Django task in the worker, as the sync and async runners share it: binds the
    arguments, sends ``task_started``, and on its end ``task_finished`` when that end finishes the task.
    Its methods (and the signals' receivers) run in sync code: an async task's runner calls them in a
    thread (``_off_the_loop``), so receivers may use the ORM, as with Django's own backends."""

    def __init__(self, handler: _TaskHandler, args: list[Any] | None, kwargs: dict[str, Any] | None,
                 backend: str, run_after: str | None) -> None:
        self.args, self.kwargs = _arguments(args, kwargs)
        self.result = _running_result(handler, self.args, self.kwargs, backend, run_after)
        self.sender = _backend_class(backend)
        try:  # a task_started receiver's exception, or arguments that do not fit the function, fail the
            # attempt before the task runs (as Django's own); when that ends the task: FAILED, with task_finished
            task_started.send(sender=self.sender, task_result=self.result)
            _bind(handler.task, self.args, self.kwargs)
        except BaseException as exc:
            self.failed(exc)
            raise
        self.context = [TaskContext(task_result=self.result)] if self.result.task.takes_context else []

    def failed(self, exc: BaseException) -> None:
        if (error := _final_error(exc)) is not None:
            _finished(self.result, TaskResultStatus.FAILED, error=error)
            self._send_finished()

    def succeeded(self, value: Any) -> Any:
        _finished(self.result, TaskResultStatus.SUCCESSFUL, value=value)
        self._send_finished()
        return value

    def _send_finished(self) -> None:
        """``task_finished`` to every receiver; one that raises is logged, and changes nothing: the task has
        finished (a success that a receiver's exception failed was run again, up to every retry)."""
        send_robustly(task_finished, logger, f"task {self.result.id} ({self.result.task.module_path}) "
                      f"{self.result.status.lower()}", self.sender, task_result=self.result)


def _kept(value: Any) -> Any:
    """The task's return value as Django normalizes it, which JSON must keep exactly: ``TypeError`` for a
    type it has no form for (as Django's own backends), ``ValueError`` for NaN, an infinity or text that
    is not valid Unicode (the worker would keep their repr(), and ``return_value`` would be text)."""
    value = normalize_json(value)
    json_text(value).encode()
    return value


def _sync_runner(handler: _TaskHandler) -> Callable[..., Any]:
    def run(args: list[Any] | None = None, kwargs: dict[str, Any] | None = None,
            backend: str = DEFAULT_TASK_BACKEND_ALIAS, run_after: str | None = None) -> Any:
        attempt = _Attempt(handler, args, kwargs, backend, run_after)
        try:
            value = _kept(attempt.result.task.func(*attempt.context, *attempt.args, **attempt.kwargs))
        except BaseException as exc:
            attempt.failed(exc)
            raise
        return attempt.succeeded(value)

    run.__name__ = run.__qualname__ = handler.task.func.__name__
    return run


async def _off_the_loop(func: Callable[..., Any], *args: Any) -> Any:
    """``func(*args)`` in sync code, in a thread of the event loop's executor (a receiver that uses the ORM
    would raise ``SynchronousOnlyOperation`` on the loop), with the task's context; the database
    connections of that thread are closed before and after when stale, as around a request or a sync
    task (``queuecore.middleware``). A receiver's exception is raised here, as from a sync task's."""
    from queuecore.middleware import fresh_connections

    def call() -> Any:
        with fresh_connections():
            return func(*args)

    return await sync_to_async(call, thread_sensitive=False)()


def _async_runner(handler: _TaskHandler) -> Callable[..., Any]:
    async def run(args: list[Any] | None = None, kwargs: dict[str, Any] | None = None,
                  backend: str = DEFAULT_TASK_BACKEND_ALIAS, run_after: str | None = None) -> Any:
        attempt = await _off_the_loop(_Attempt, handler, args, kwargs, backend, run_after)
        try:
            value = _kept(await attempt.result.task.func(*attempt.context, *attempt.args, **attempt.kwargs))
        except BaseException as exc:
            await _off_the_loop(attempt.failed, exc)
            raise
        return await _off_the_loop(attempt.succeeded, value)

    run.__name__ = run.__qualname__ = handler.task.func.__name__
    return run


class QueuecoreBackend(BaseTaskBackend):
    """Django's task backend on queuecore (see the module). It enqueues through queuecore's default
    client (``QUEUECORE``), so the Django queues are queuecore queues of the same names."""

    task_class = QueuecoreTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self._queues_setting = params.get("QUEUES")  # as given (self.queues is a set of it): for the checks
        if isinstance(self._queues_setting, str):  # Django took each letter as a queue, so every @task on the
            self.queues = {self._queues_setting}  # named queue failed at import, before E102 could say why

    # -- tasks ------------------------------------------------------------------------------------

    def validate_task(self, task: Task) -> None:
        """Django's checks, then queuecore's (a valid queue name, options in range); a valid task is
        registered, so the worker can run it."""
        super().validate_task(task)
        try:
            validate_queue_name(task.queue_name)
        except ConfigurationError as exc:
            raise InvalidTask(str(exc)) from None
        for key, name in OPTIONS.items():
            problem = _check_option(key, getattr(task, name, None))
            if problem:
                raise InvalidTask(f"task {task.module_path}: {problem}")
        _register(task)

    def _defaults(self, client: Any) -> dict[str, Any]:
        raw = self.options if isinstance(self.options, dict) else {}
        defaults = {name: raw.get(key) for key, name in OPTIONS.items()}
        if defaults["retention"] is None:
            kept = client.connection.default_retention
            defaults["retention"] = kept if kept > 0 else DEFAULT_RESULT_RETENTION
        return defaults

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        self.validate_task(task)
        args, kwargs = normalize_json(list(args)), normalize_json(dict(kwargs))
        client = get_default_client()
        payload: dict[str, Any] = {"args": args, "kwargs": kwargs, "backend": self.alias}
        # Django accepts a priority equal to a whole number (5.0); queuecore's options take whole numbers.
        options = {"queue": task.queue_name, "priority": int(task.priority)}
        for name, default in self._defaults(client).items():
            value = getattr(task, name, None)
            value = default if value is None else value
            if value is not None:
                options[name] = value
        if task.run_after is not None:
            options["process_at"] = task.run_after
            payload["run_after"] = task.run_after.isoformat()
        handle = client.enqueue(task.module_path, payload, **options)
        result = TaskResult(task=task, id=handle.result_id, status=TaskResultStatus.READY,
                            enqueued_at=_site_time(handle.enqueued_at), started_at=None, finished_at=None,
                            last_attempted_at=None, args=args, kwargs=kwargs, backend=self.alias, errors=[],
                            worker_ids=[])
        task_enqueued.send(type(self), task_result=result)
        return result

    # -- results ----------------------------------------------------------------------------------

    def get_result(self, result_id: str) -> TaskResult:
        try:
            info = get_default_client().result(result_id)
        except (TaskNotFound, TaskDecodeError, ConfigurationError) as exc:
            raise TaskResultDoesNotExist(str(exc)) from None
        return self._result(info)

    async def aget_result(self, result_id: str) -> TaskResult:
        try:
            queue, task_id = parse_result_id(result_id)
        except ConfigurationError as exc:
            raise TaskResultDoesNotExist(str(exc)) from None
        if queue is None:  # a bare task id: looked for in every queue
            return await super().aget_result(result_id)
        try:
            info = await get_default_client().results.aread(queue, task_id)
        except (TaskNotFound, TaskDecodeError) as exc:
            raise TaskResultDoesNotExist(str(exc)) from None
        return self._result(info)

    def _result(self, info: TaskInfo) -> TaskResult:
        """The ``TaskResult`` of a stored task (see the module for the status of each state)."""
        if info.decode_error:
            raise TaskResultDoesNotExist(f"{result_id(info.queue, info.id)}: corrupt data in Redis: "
                                         f"{info.decode_error}")
        handler = default_registry.get(info.type)
        if not isinstance(handler, _TaskHandler):
            raise TaskResultDoesNotExist(f"{result_id(info.queue, info.id)} is a {info.type!r} task, not a Django "
                                         "task this process knows (is its module imported?)")
        payload = info.payload
        try:
            args, kwargs = _arguments(payload.get("args"), payload.get("kwargs"))
        except PayloadMismatch:  # shown as stored nowhere else: here, no arguments
            args, kwargs = [], {}
        backend = str(payload.get("backend") or self.alias)
        task = _task_as_enqueued(handler.task, info.queue, backend, info.priority, payload.get("run_after"))
        attempts = info.attempts
        last = info.retried + 1  # the attempt running (TaskContext.attempt), or the last one that could have run
        count = last if info.state is TaskState.ACTIVE else max((a.number for a in attempts if a.number <= last),
                                                                default=0)
        worker_ids = _worker_ids(attempts, count)
        starts = [start for a in attempts if (start := a.started_at or a.fetched_at) is not None]
        if info.state is TaskState.ACTIVE and info.fetched_at:
            starts.append(info.fetched_at)
        finished_at = None
        if info.state is TaskState.COMPLETED:
            finished_at = info.completed_at
        elif info.state is TaskState.ARCHIVED:
            finished_at = info.last_failed_at or (attempts[-1].ended_at if attempts else None) or info.archived_at
        result = TaskResult(
            task=task, id=result_id(info.queue, info.id), status=STATUS[info.state],
            enqueued_at=_site_time(info.enqueued_at), started_at=_site_time(min(starts) if starts else None),
            finished_at=_site_time(finished_at), last_attempted_at=_site_time(max(starts) if starts else None),
            args=args, kwargs=kwargs, backend=backend,
            errors=_errors(info.attempts, info.last_error), worker_ids=worker_ids,
        )
        if info.state is TaskState.COMPLETED:
            object.__setattr__(result, "_return_value", info.result)
        return result

    # -- checks -----------------------------------------------------------------------------------

    def check(self, **kwargs: Any) -> list[Any]:
        """``queuecore.E101`` bad OPTIONS, ``E102`` a queue name queuecore refuses; ``W101`` results
        not kept, ``W102`` a queue no worker serves by default, ``W103`` the queuecore app missing."""
        messages = list(super().check(**kwargs))
        where = f"TASKS['{self.alias}']"
        if not isinstance(self.options, dict):
            return [*messages, checks.Error(f"{where}['OPTIONS'] must be a dict.", id="queuecore.E101")]
        unknown = sorted(set(self.options) - set(OPTIONS))
        if unknown:
            messages.append(checks.Error(f"{where}['OPTIONS'] has unknown key(s): {', '.join(unknown)}.",
                                         hint=f"Known keys: {', '.join(OPTIONS)}.", id="queuecore.E101"))
        for key in OPTIONS:
            problem = _check_option(key, self.options.get(key))
            if problem:
                messages.append(checks.Error(f"{where}['OPTIONS']['{key}']: {problem}", id="queuecore.E101"))
        served: set[str] = set()
        try:
            from queuecore.conf import get_config

            served = set(get_config().worker_config().queues)
        except Exception:  # reported by queuecore's own checks
            served = set()
        if isinstance(self._queues_setting, str):
            messages.append(checks.Error(f"{where}['QUEUES'] must be a list of queue names, not a string "
                                         f"({self._queues_setting!r}: Django takes each of its letters as a queue).",
                                         hint=f"{where}['QUEUES'] = [{self._queues_setting!r}]", id="queuecore.E102"))
        for queue in sorted(self.queues, key=lambda name: (not isinstance(name, str), str(name))):
            if not isinstance(queue, str):
                messages.append(checks.Error(f"{where}['QUEUES'] has {queue!r}, which is not a queue name (a string).",
                                             id="queuecore.E102"))
                continue
            try:
                validate_queue_name(queue)
            except ConfigurationError as exc:
                messages.append(checks.Error(f"{where}['QUEUES']: {exc}", id="queuecore.E102"))
                continue
            if served and queue not in served:
                messages.append(checks.Warning(
                    f"{where}['QUEUES'] has {queue!r}, which QUEUECORE['QUEUES'] does not list: runworker "
                    "does not serve it unless started with --queues.", id="queuecore.W102"))
        retention = self.options.get("RETENTION")
        if retention is not None and not isinstance(retention, bool) and _seconds(retention) == 0:
            messages.append(checks.Warning(
                f"{where}['OPTIONS']['RETENTION'] is 0: results are not kept, and get_result() fails once a task "
                "has finished.", id="queuecore.W101"))
        if "queuecore" not in {app.split(".")[0] for app in settings.INSTALLED_APPS}:
            messages.append(checks.Warning(
                "queuecore is not in INSTALLED_APPS: its settings, runworker and the discovery of tasks.py "
                "modules are missing.", hint="INSTALLED_APPS += ['queuecore']", id="queuecore.W103"))
        return messages


def _errors(attempts: list[AttemptInfo], last_error: str | None) -> list[TaskError]:
    """One ``TaskError`` per failed attempt the task remembers (its last 10): the class path of the
    error, and its traceback for the newest one (``last_error``; earlier ones keep their error's first line)."""
    out = []
    full = last_error or ""
    # the newest attempt with an error (a snoozed or held-back one after it has none)
    newest = max((a.number for a in attempts if a.result != "completed" and a.error), default=0)
    for attempt in attempts:
        if attempt.result == "completed" or not attempt.error:
            continue
        path = attempt.error_type or LOST_ATTEMPT_ERROR
        text = attempt.error
        if attempt.number == newest and full and one_line(full, ATTEMPT_LINE_ERROR_CHARS) == attempt.error:
            head, _, frames = full.partition("\n\n" + _TRACEBACK)
            text = _TRACEBACK + frames if frames else head
        if attempt.error == CANCELLED_BY_OPERATOR and not attempt.error_type:
            path = "queuecore.core.errors.TaskCancelled"
        out.append(TaskError(exception_class_path=path, traceback=text))
    return out
