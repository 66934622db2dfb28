"""Django tasks (``django.tasks`` on Django 6, the ``django_tasks`` backport on 5.2) for
``tests/django/test_tasks_backend.py``, run by ``manage.py runworker`` subprocesses.

Import it only while ``TASKS`` points at ``queuecore.tasks_backend.QueuecoreBackend``: defining a
task validates it against its backend, which registers it with queuecore (and ``max_retry=`` ...
are options of queuecore's task class). The worker processes import it through
``QUEUECORE['TASK_MODULES']`` (``tests/tasks_backend_settings.py``).

With ``$DJ_TASKS_LOG`` set, every ``task_started`` and ``task_finished`` signal (sent by the worker)
appends a JSON line to that file: an oracle outside Redis, as in ``tests/helpers/proc_tasks.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

from queuecore.core.client import get_default_client
from queuecore.core.errors import Snooze

try:
    from django.tasks import task, task_backends
    from django.tasks.signals import task_finished, task_started
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import task, task_backends
    from django_tasks.signals import task_finished, task_started


def quick_retry(retried: int, error: BaseException | None) -> float:
    """QUEUECORE['RETRY_DELAY'] of the worker processes: retry at once (tests wait for no backoff)."""
    return 0.05


def _log_signal(signal_name: str, task_result: Any) -> None:
    path = os.environ.get("DJ_TASKS_LOG")
    if not path:
        return
    line = {"signal": signal_name, "id": task_result.id, "status": str(task_result.status),
            "path": task_result.task.module_path, "attempt": task_result.attempts,
            "worker_ids": list(task_result.worker_ids), "pid": os.getpid(), "t": time.time(),
            "errors": [e.exception_class_path for e in task_result.errors],
            "started_at": task_result.started_at.isoformat() if task_result.started_at else None,
            "enqueued_at": task_result.enqueued_at.isoformat() if task_result.enqueued_at else None,
            "finished_at": task_result.finished_at.isoformat() if task_result.finished_at else None}
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


def on_started(sender: Any, task_result: Any, **kwargs: Any) -> None:
    _log_signal("task_started", task_result)


def on_finished(sender: Any, task_result: Any, **kwargs: Any) -> None:
    _log_signal("task_finished", task_result)


task_started.connect(on_started, dispatch_uid="tests.helpers.dj_tasks.started")
task_finished.connect(on_finished, dispatch_uid="tests.helpers.dj_tasks.finished")


@task
def add(a: int, b: int) -> int:
    return a + b


@task
async def add_async(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


@task(queue_name="low", priority=10)
def noop() -> None:
    return None


@task
def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"args": list(args), "kwargs": kwargs}


class TaskProblem(Exception):
    """Raised by ``fail``: found by its class path in ``TaskResult.errors``."""


@task(max_retry=0)
def fail(message: str = "boom") -> None:
    _fail_deeper(message)


def _fail_deeper(message: str) -> None:
    raise TaskProblem(message)


@task(takes_context=True)
def context_info(context: Any, tag: str = "") -> dict[str, Any]:
    result = context.task_result
    return {"id": result.id, "attempt": context.attempt, "status": str(result.status), "tag": tag,
            "args": list(result.args), "kwargs": dict(result.kwargs), "queue": result.task.queue_name,
            "enqueued": result.enqueued_at is not None, "workers": len(result.worker_ids)}


@task(takes_context=True, max_retry=3)
def fail_until(context: Any, attempt: int) -> int:
    """Fail until attempt number ``attempt``; then return the attempt number."""
    if context.attempt < attempt:
        raise RuntimeError(f"attempt {context.attempt} fails")
    return context.attempt


@task
def wait_for(path: str) -> str:
    """Wait (in small sleeps) until the file ``path`` exists."""
    while not os.path.exists(path):
        time.sleep(0.02)
    return "opened"


@task(timeout=0.3, max_retry=0)
def hang() -> None:
    while True:
        time.sleep(0.01)


@task(timeout=0.3, max_retry=0)
async def hang_async() -> None:
    while True:
        await asyncio.sleep(0.01)


@task(max_retry=0)
def bad_return() -> Any:
    return object()  # not JSON: the task fails, as in Django's own backends


@task(retention=0)
def unkept() -> int:
    return 1


@task(takes_context=True)
def snooze_once(context: Any) -> dict[str, int]:
    """Snooze on its first run; on the next, return its attempt number and the attempts ``get_result`` shows."""
    running = context.task_result
    if not get_default_client().result(running.id).snoozed:
        raise Snooze(0)
    return {"attempt": context.attempt, "shown": task_backends[running.backend].get_result(running.id).attempts}


def _count_run(path: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write("ran\n")


@task(max_retry=2)
def finished_receiver_raises(path: str) -> str:
    """Writes a line to ``path`` on each run; a ``task_finished`` receiver raises for it."""
    _count_run(path)
    return "done"


@task(max_retry=0)
def started_receiver_raises(path: str) -> str:
    """A ``task_started`` receiver raises for it: it never runs (a line in ``path`` would say it did)."""
    _count_run(path)
    return "ran"


def _refuse(name: str, task_result: Any) -> None:
    if task_result.task.func.__name__ == name:
        raise RuntimeError(f"this receiver is broken ({name})")


def refuse_start(sender: Any, task_result: Any, **kwargs: Any) -> None:
    _refuse("started_receiver_raises", task_result)


def refuse_finish(sender: Any, task_result: Any, **kwargs: Any) -> None:
    _refuse("finished_receiver_raises", task_result)


task_started.connect(refuse_start, dispatch_uid="tests.helpers.dj_tasks.refuse_start")  # after on_started
task_finished.connect(refuse_finish, dispatch_uid="tests.helpers.dj_tasks.refuse_finish")


@task(max_retry=0)
def returns(what: str) -> Any:
    """A value JSON can or cannot keep exactly, by name."""
    return {"nan": float("nan"), "inf": [float("inf")], "wide": 2 ** 70 + 1}[what]
