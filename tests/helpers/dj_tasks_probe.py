"""Django tasks for ``tests/django/test_tasks_backend_probe.py``, run by ``manage.py runworker``
subprocesses (``tests/tasks_backend_probe_settings.py`` lists this module in ``TASK_MODULES``).

Import it only while ``TASKS`` points at ``queuecore.tasks_backend.QueuecoreBackend`` (see
``tests/helpers/dj_tasks.py``).

Its ``task_started`` and ``task_finished`` receivers do what receivers do in a site: they use the
database (one query, on the ORM's connection, which refuses to run on an event loop). With
``$DJ_PROBE_LOG`` set, each appends a JSON line to that file for the tasks of this module: the
``TaskResult`` it was sent, whether it ran on an event loop, and what the query returned.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from django.db import connection

try:
    from django.tasks import task
    from django.tasks.signals import task_finished, task_started
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import task
    from django_tasks.signals import task_finished, task_started


class ReceiverProblem(Exception):
    """Raised by the ``task_started`` receiver for the ``refused_*`` tasks."""


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _summary(task_result: Any) -> dict[str, Any]:
    def iso(value: Any) -> str | None:
        return value.isoformat() if value is not None else None

    return {"id": task_result.id, "name": task_result.task.name, "status": str(task_result.status),
            "attempt": task_result.attempts, "worker_ids": list(task_result.worker_ids),
            "errors": [e.exception_class_path for e in task_result.errors],
            "started_at": iso(task_result.started_at), "last_attempted_at": iso(task_result.last_attempted_at),
            "finished_at": iso(task_result.finished_at)}


def _receive(signal_name: str, task_result: Any) -> None:
    if task_result.task.module_path.rpartition(".")[0] != __name__:
        return
    in_loop = _in_event_loop()
    with connection.cursor() as cursor:  # SynchronousOnlyOperation on an event loop
        cursor.execute("SELECT 1")
        [db] = cursor.fetchone()
    path = os.environ.get("DJ_PROBE_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"signal": signal_name, "in_loop": in_loop, "db": db, **_summary(task_result)}) + "\n")
    if signal_name == "task_started" and task_result.task.name.startswith("refused_"):
        raise ReceiverProblem(f"{task_result.task.name} may not start")


def on_started(sender: Any, task_result: Any, **kwargs: Any) -> None:
    _receive("task_started", task_result)


def on_finished(sender: Any, task_result: Any, **kwargs: Any) -> None:
    _receive("task_finished", task_result)


task_started.connect(on_started, dispatch_uid="tests.helpers.dj_tasks_probe.started")
task_finished.connect(on_finished, dispatch_uid="tests.helpers.dj_tasks_probe.finished")


@task
def add_sync(a: int, b: int) -> int:
    return a + b


@task
async def add_async(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


@task(max_retry=0)
def refused_sync() -> int:
    return 1


@task(max_retry=0)
async def refused_async() -> int:
    return 1


def _seen(context: Any, attempt: int) -> dict[str, Any]:
    if context.attempt < attempt:
        raise RuntimeError(f"attempt {context.attempt} fails")
    return {"attempt": context.attempt, **_summary(context.task_result)}


@task(takes_context=True, max_retry=3)
def seen_sync(context: Any, attempt: int) -> dict[str, Any]:
    """Fail until attempt number ``attempt``; then return what ``context.task_result`` held."""
    return _seen(context, attempt)


@task(takes_context=True, max_retry=3)
async def seen_async(context: Any, attempt: int) -> dict[str, Any]:
    """``seen_sync``, async."""
    await asyncio.sleep(0)
    return _seen(context, attempt)
