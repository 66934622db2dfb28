"""Django's Tasks API on queuecore (``queuecore.tasks_backend``), continued: the signals of async tasks
(sent from sync code, so receivers may use the ORM), the ``TaskResult`` a task sees in the worker (its
earlier attempts included), the times a result read shows (``next_process_at``, ``archived_at``, an
archived task's ``finished_at``), and the checks of ``RETENTION`` and ``QUEUES``. The worker tests run
real ``manage.py runworker`` processes (``tests/tasks_backend_probe_settings.py``).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.checks import Error, Warning
from django.utils import timezone

from queuecore import Inspector, TaskState
from queuecore.core.client import get_default_client
from tests.conftest import wait_until
from tests.helpers.runworkers import BACKEND, runworkers, use_backend

try:
    from django.tasks import TaskResultStatus, default_task_backend, task_backends
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import TaskResultStatus, default_task_backend, task_backends

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def dj(settings, redis_url: str, key_prefix: str) -> Any:
    """The probe tasks module, with TASKS on queuecore and QUEUECORE on the test's prefix."""
    return use_backend(settings, redis_url, key_prefix, "tests.helpers.dj_tasks_probe")


@pytest.fixture
def inspector(dj: Any) -> Iterator[Inspector]:
    ins = Inspector(connection=get_default_client().connection)
    yield ins
    ins.close()


@pytest.fixture
def runworker(request: pytest.FixtureRequest, dj: Any, inspector: Inspector, redis_url: str, key_prefix: str,
              tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start a ``manage.py runworker`` on the test's prefix; running (its heartbeat published) when this
    returns; killed in teardown."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.tasks_backend_probe_settings",
           "QUEUECORE_REDIS_URL": redis_url, "QUEUECORE_KEY_PREFIX": key_prefix,
           "DJ_PROBE_LOG": str(tmp_path / "probe.jsonl"), "PYTHONUNBUFFERED": "1"}
    with runworkers(request, inspector, env, tmp_path) as start:
        yield start


def probe_log(tmp_path: Path, result_id: str | None = None) -> list[dict[str, Any]]:
    path = tmp_path / "probe.jsonl"
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text().splitlines(keepends=True) if line.endswith("\n")]
    return [line for line in lines if result_id is None or line["id"] == result_id]


def finished(result: Any, timeout: float = 30) -> Any:
    """Wait (polling ``refresh``) until ``result`` is finished; returns it."""
    wait_until(lambda: (result.refresh(), result.is_finished)[1], timeout=timeout, interval=0.02,
               message=f"task {result.id} to finish")
    return result


def logged(tmp_path: Path, result_id: str, count: int) -> list[dict[str, Any]]:
    """The probe's lines of ``result_id``, once there are ``count`` of them."""
    def enough() -> list[dict[str, Any]] | None:
        lines = probe_log(tmp_path, result_id)
        return lines if len(lines) >= count else None

    return wait_until(enough, message=f"{count} signals of {result_id}")  # type: ignore[return-value]


# -- the signals of async tasks (D2) -------------------------------------------------------------------


def test_async_tasks_send_their_signals_from_sync_code(dj: Any, runworker, tmp_path: Path) -> None:
    """Receivers that use the ORM: an async task's, sent on the worker's event loop, raised
    SynchronousOnlyOperation, and every attempt failed (the sync task's succeeded)."""
    sync, async_ = dj.add_sync.enqueue(1, 2), dj.add_async.enqueue(20, 22)
    runworker()
    for result, value in ((sync, 3), (async_, 42)):
        finished(result)
        assert [e.exception_class_path for e in result.errors] == []
        assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == value
        lines = logged(tmp_path, result.id, 2)
        assert [(line["signal"], line["status"], line["in_loop"], line["db"]) for line in lines] == [
            ("task_started", "RUNNING", False, 1), ("task_finished", "SUCCESSFUL", False, 1)]


def test_a_receivers_exception_fails_the_attempt_of_an_async_task_as_of_a_sync_one(dj: Any, runworker,
                                                                                  tmp_path: Path) -> None:
    """Django's backends send ``task_started`` with ``send``: a receiver's exception is the task's; when it
    ends the task, ``task_finished`` says so (a review: nothing did)."""
    results = dj.refused_sync.enqueue(), dj.refused_async.enqueue()
    runworker()
    for result in results:
        finished(result)
        assert result.status == TaskResultStatus.FAILED
        assert [e.exception_class_path for e in result.errors] == ["tests.helpers.dj_tasks_probe.ReceiverProblem"]
        assert "may not start" in result.errors[0].traceback
        assert [(line["signal"], line["status"]) for line in logged(tmp_path, result.id, 2)] == [
            ("task_started", "RUNNING"), ("task_finished", "FAILED")]


# -- the TaskResult in the worker (D6) -----------------------------------------------------------------------


def test_the_running_result_has_the_earlier_attempts(dj: Any, runworker, inspector: Inspector,
                                                     tmp_path: Path) -> None:
    """On attempt 3 of a task that failed twice, ``context.task_result`` (and the signals' result) had
    no errors, ``worker_ids`` ``['', '', '<this worker>']`` and this attempt's start as ``started_at``."""
    results = dj.seen_sync.enqueue(3), dj.seen_async.enqueue(3)
    proc = runworker()
    server = next(s for s in inspector.servers() if s.pid == proc.pid)
    for result in results:
        finished(result)
        assert result.status == TaskResultStatus.SUCCESSFUL
        assert [e.exception_class_path for e in result.errors] == ["builtins.RuntimeError"] * 2
        assert result.worker_ids == [server.id] * 3
        seen = result.return_value  # context.task_result on attempt 3
        assert seen["attempt"] == 3 and seen["status"] == "RUNNING"
        assert seen["errors"] == ["builtins.RuntimeError"] * 2
        assert seen["worker_ids"] == result.worker_ids
        assert datetime.fromisoformat(seen["started_at"]) == result.started_at  # the first attempt's start
        assert datetime.fromisoformat(seen["last_attempted_at"]) > result.started_at
        lines = logged(tmp_path, result.id, 4)
        started = [line for line in lines if line["signal"] == "task_started"]
        assert [(line["attempt"], len(line["errors"]), line["worker_ids"]) for line in started] == [
            (1, 0, [server.id]), (2, 1, [server.id] * 2), (3, 2, [server.id] * 3)]
        # attempts 2 and 3: the first's start, as recorded; attempt 1: its own, as the worker saw it
        assert [line["started_at"] for line in started[1:]] == [result.started_at.isoformat()] * 2
        assert abs(datetime.fromisoformat(started[0]["started_at"]) - result.started_at) < timedelta(seconds=1)
        [done] = [line for line in lines if line["signal"] == "task_finished"]
        assert done["status"] == "SUCCESSFUL" and done["errors"] == ["builtins.RuntimeError"] * 2
        assert done["worker_ids"] == result.worker_ids and done["started_at"] == result.started_at.isoformat()


# -- what a result read shows (D4) -----------------------------------------------------------------------------


def test_a_read_shows_when_a_task_is_due_and_when_it_was_archived(dj: Any, inspector: Inspector) -> None:
    client = get_default_client()
    handle = client.enqueue(dj.add_sync.module_path, {"args": [1, 2]}, process_in=3600, retention=600)
    due = inspector.get_task(handle.queue, handle.id).next_process_at  # its score: whole ms
    assert handle.state is TaskState.SCHEDULED and due is not None
    assert abs(due - handle.next_process_at) < timedelta(milliseconds=1)
    for read in (client.result(handle.result_id), handle.refresh(), asyncio.run(handle.arefresh())):
        assert read.state is TaskState.SCHEDULED and read.next_process_at == due and read.archived_at is None
    inspector.archive_task(handle.queue, handle.id)
    archived_at = inspector.get_task(handle.queue, handle.id).archived_at
    assert archived_at is not None
    for read in (handle.refresh(), client.result(handle.result_id), handle.wait(timeout=0),
                 asyncio.run(handle.arefresh()), asyncio.run(handle.await_(timeout=0))):
        assert read.state is TaskState.ARCHIVED and read.archived_at == archived_at
        assert read.next_process_at is None


def test_a_django_task_archived_before_it_ran_has_finished(dj: Any, inspector: Inspector) -> None:
    result = dj.add_sync.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1, 2)
    queue, task_id = result.id.split("/")
    inspector.archive_task(queue, task_id)
    archived_at = inspector.get_task(queue, task_id).archived_at
    for read in (default_task_backend.get_result(result.id), asyncio.run(default_task_backend.aget_result(result.id)),
                 (result.refresh(), result)[1]):
        assert read.status == TaskResultStatus.FAILED and read.is_finished
        assert read.finished_at == archived_at and read.errors == [] and read.started_at is None


# -- checks (D10, QUEUES) ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("retention", [0, 0.0, timedelta(0)])
def test_a_retention_of_0_in_any_form_warns(dj: Any, settings, retention: Any) -> None:
    settings.TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": ["default", "low"],
                                  "OPTIONS": {"RETENTION": retention}}}
    assert [(type(m), m.id) for m in task_backends["default"].check()] == [(Warning, "queuecore.W101")]


def test_a_retention_above_0_does_not_warn(dj: Any, settings) -> None:
    settings.TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": ["default", "low"],
                                  "OPTIONS": {"RETENTION": timedelta(hours=1)}}}
    assert task_backends["default"].check() == []


def test_queues_that_are_not_names_are_reported_not_a_crash(dj: Any, settings) -> None:
    settings.TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": ["default", "low", 5]}}
    messages = task_backends["default"].check()
    assert [(type(m), m.id) for m in messages] == [(Error, "queuecore.E102")]
    assert "TASKS['default']['QUEUES']" in messages[0].msg and "5" in messages[0].msg
    settings.TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": "default"}}
    messages = task_backends["default"].check()
    assert [(type(m), m.id) for m in messages] == [(Error, "queuecore.E102")]
    assert "must be a list of queue names, not a string" in messages[0].msg
    # A review: Django took each letter as a queue, so every task on "default" failed when its module was
    # imported (QueuecoreConfig.ready(), before any check ran): the one queue named is taken meanwhile.
    task_backends["default"].validate_task(dj.add_sync)
