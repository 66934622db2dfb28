"""Django's Tasks API on queuecore (``queuecore.tasks_backend``): ``django.tasks`` on Django 6, the
``django-tasks`` backport on Django 5.2. The behaviours Django's own backend tests check (enqueue,
defer, priority, get_result, status transitions, errors with tracebacks, async enqueue and results,
context, signals), with real ``manage.py runworker`` processes running the tasks.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.checks import Error, Warning
from django.utils import timezone

from queuecore import Inspector, TaskFailed, TaskState
from queuecore.core.client import get_default_client
from queuecore.tasks_backend import MAX_ATTEMPTS_SHOWN, QueuecoreBackend, QueuecoreTask
from tests.conftest import wait_until
from tests.helpers.runworkers import BACKEND, runworkers, use_backend

try:
    from django.tasks import TaskResultStatus, default_task_backend, task, task_backends
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist, TaskResultMismatch
    from django.tasks.signals import task_enqueued
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import TaskResultStatus, default_task_backend, task, task_backends
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist, TaskResultMismatch
    from django_tasks.signals import task_enqueued

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def dj(settings, redis_url: str, key_prefix: str) -> Any:
    """The test tasks module, with TASKS on queuecore and QUEUECORE on the test's prefix."""
    return use_backend(settings, redis_url, key_prefix, "tests.helpers.dj_tasks")


@pytest.fixture
def inspector(dj: Any) -> Iterator[Inspector]:
    ins = Inspector(connection=get_default_client().connection)
    yield ins
    ins.close()


@pytest.fixture
def runworker(request: pytest.FixtureRequest, dj: Any, inspector: Inspector, redis_url: str, key_prefix: str,
              tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start ``manage.py runworker`` processes on the test's prefix (``tests/tasks_backend_settings.py``);
    each is running (its heartbeat published) when this returns; all are killed in teardown."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.tasks_backend_settings", "QUEUECORE_REDIS_URL": redis_url,
           "QUEUECORE_KEY_PREFIX": key_prefix, "DJ_TASKS_LOG": str(tmp_path / "signals.jsonl"),
           "PYTHONUNBUFFERED": "1"}
    with runworkers(request, inspector, env, tmp_path) as start:
        yield start


def signals_log(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "signals.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines(keepends=True) if line.endswith("\n")]


def finished(result: Any, timeout: float = 30) -> Any:
    """Wait (polling ``refresh``) until ``result`` is finished; returns it."""
    wait_until(lambda: (result.refresh(), result.is_finished)[1], timeout=timeout, interval=0.02,
               message=f"task {result.id} to finish")
    return result


# -- the backend and its tasks --------------------------------------------------------------------------


def test_the_backend_and_its_capabilities(dj: Any) -> None:
    backend = task_backends["default"]
    assert isinstance(backend, QueuecoreBackend) and default_task_backend.alias == "default"
    assert isinstance(dj.add, QueuecoreTask) and dj.add.get_backend() is backend
    assert backend.supports_defer and backend.supports_async_task and backend.supports_get_result
    assert backend.supports_priority
    assert get_default_client().registry.get(dj.add.module_path) is not None  # a queuecore task type


def test_enqueue_stores_a_queuecore_task(dj: Any, inspector: Inspector) -> None:
    result = dj.add.enqueue(1, b=2)
    assert result.status == TaskResultStatus.READY and not result.is_finished
    assert result.args == [1] and result.kwargs == {"b": 2}
    assert result.task is dj.add and result.backend == "default"
    assert result.enqueued_at is not None and result.started_at is None and result.finished_at is None
    assert result.last_attempted_at is None and result.errors == [] and result.worker_ids == []
    with pytest.raises(ValueError, match="not finished"):
        _ = result.return_value
    queue, task_id = result.id.split("/")
    info = inspector.get_task(queue, task_id)  # the dashboard and adminctl read it like any task
    assert info.type == "tests.helpers.dj_tasks.add" and info.state is TaskState.PENDING
    assert info.payload == {"args": [1], "kwargs": {"b": 2}, "backend": "default"}
    assert info.retention == 24 * 3600  # Django's API promises results: kept a day by default
    assert not inspector.check_task(info.type, info.payload, queue).runnable  # no worker yet: it says why


def test_without_use_tz_times_are_naive_like_the_sites_own(dj: Any, settings) -> None:
    """With USE_TZ = False Django's times are naive (``timezone.now()``): a result's must be too, or
    ``timezone.now() - result.enqueued_at`` raises TypeError (in a site, or a takes_context task)."""
    from queuecore.tasks_backend import _datetime

    settings.USE_TZ = False
    result = dj.add.enqueue(1, b=2)
    assert timezone.is_naive(result.enqueued_at)
    assert abs((timezone.now() - result.enqueued_at).total_seconds()) < 60
    again = default_task_backend.get_result(result.id)
    assert timezone.is_naive(again.enqueued_at)
    assert abs((again.enqueued_at - result.enqueued_at).total_seconds()) < 1
    assert timezone.is_naive(_datetime(1.0))  # the worker's RUNNING result: started_at is timezone.now()
    settings.USE_TZ = True
    assert timezone.is_aware(default_task_backend.get_result(result.id).enqueued_at)


def test_arguments_are_normalised_and_checked_like_djangos(dj: Any) -> None:
    result = dj.echo.enqueue((1, 2), key=b"bytes")
    assert result.args == [[1, 2]] and result.kwargs == {"key": "bytes"}
    assert dj.echo.get_result(result.id).args == [[1, 2]]
    with pytest.raises(TypeError):
        dj.echo.enqueue(object())


def test_get_result_and_the_errors_for_what_is_not_there(dj: Any) -> None:
    result = dj.add.enqueue(2, 3)
    fetched = default_task_backend.get_result(result.id)
    assert fetched.id == result.id and fetched.status == TaskResultStatus.READY
    assert fetched.args == [2, 3] and fetched.task.func is dj.add.func and fetched.task.priority == 0
    assert dj.add.get_result(result.id).id == result.id
    with pytest.raises(TaskResultMismatch):
        dj.noop.get_result(result.id)
    for missing in (result.id + "x", "default/nope", "nope", "bad/id/x", ""):
        with pytest.raises(TaskResultDoesNotExist):
            default_task_backend.get_result(missing)
    plain = get_default_client().enqueue("tests.autodiscovered", {"value": 1})  # a queuecore task, not Django's
    with pytest.raises(TaskResultDoesNotExist, match="not a Django task"):
        default_task_backend.get_result(plain.result_id)


def test_get_result_of_corrupt_data_does_not_exist_and_says_why(dj: Any) -> None:
    """A ``state`` that is no task state raised a bare ValueError; a message that cannot be decoded
    was called "a '?' task, not a Django task"."""
    result = dj.add.enqueue(1, 2)
    client = get_default_client()
    key = client.keys.queue("default").task(result.id.split("/")[1])
    client.redis.hset(key, "state", "bogus")
    with pytest.raises(TaskResultDoesNotExist, match=r"corrupt data.*'bogus'"):
        default_task_backend.get_result(result.id)
    with pytest.raises(TaskResultDoesNotExist, match=r"corrupt data.*'bogus'"):
        asyncio.run(default_task_backend.aget_result(result.id))
    client.redis.hset(key, mapping={"state": "completed", "msg": "{truncated"})
    with pytest.raises(TaskResultDoesNotExist, match=r"corrupt data.*not valid JSON"):
        default_task_backend.get_result(result.id)


@pytest.mark.parametrize("number", [0, -3, 10**10])
def test_attempt_numbers_out_of_range_are_skipped(dj: Any, number: int) -> None:
    """An attempt line numbered 0 or below raised IndexError, one far beyond the task's attempts
    MemoryError (a list of that many worker ids)."""
    result = dj.add.enqueue(1, 2)
    client = get_default_client()
    key = client.keys.queue("default").task(result.id.split("/")[1])
    line = {"attempt": number, "worker": "lost", "result": "retry", "error": "E: x", "ended_at": 1_800_000_000_000}
    good = {**line, "attempt": 1, "worker": "w1"}
    client.redis.hset(key, mapping={"retried": 1, "attempts": "\n".join(json.dumps(a) for a in (line, good))})
    fetched = default_task_backend.get_result(result.id)
    assert fetched.status == TaskResultStatus.READY and fetched.worker_ids == ["w1"]
    client.redis.hset(key, mapping={"state": "active", "retried": 10**10})  # a corrupt retry count: bounded
    assert len(default_task_backend.get_result(result.id).worker_ids) == MAX_ATTEMPTS_SHOWN


def test_async_enqueue_and_results(dj: Any) -> None:
    async def main() -> tuple[Any, Any, Any]:
        result = await dj.add.aenqueue(4, 5)
        fetched = await default_task_backend.aget_result(result.id)
        await result.arefresh()
        with pytest.raises(TaskResultDoesNotExist):
            await default_task_backend.aget_result("default/nope")
        return result, fetched, await dj.add.aget_result(result.id)

    result, fetched, again = asyncio.run(main())
    assert result.status == fetched.status == again.status == TaskResultStatus.READY
    assert fetched.args == [4, 5] and again.id == result.id


def test_priority_puts_a_task_at_the_head_of_its_queue(dj: Any, inspector: Inspector) -> None:
    waiting = [dj.add.using(queue_name="low").enqueue(n, 0) for n in range(3)]
    urgent = dj.noop.enqueue()  # @task(queue_name="low", priority=10)
    later = dj.add.using(queue_name="low", priority=-50).enqueue(9, 9)
    assert urgent.task.priority == 10 and default_task_backend.get_result(urgent.id).task.priority == 10
    q = get_default_client().keys.queue("low")
    pending = get_default_client().redis.lrange(q.pending, 0, -1)  # workers take from the right end
    ids = [r.id.split("/")[1] for r in (*waiting, urgent, later)]
    assert pending == [ids[4], ids[2], ids[1], ids[0], ids[3]]
    with pytest.raises(InvalidTask, match="priority"):
        dj.add.using(priority=101)
    whole = dj.add.using(queue_name="low", priority=5.0).enqueue(1, 1)  # Django takes 5.0 as a whole number
    assert inspector.get_task("low", whole.id.split("/")[1]).priority == 5  # (it reached queuecore as 5.0)


def test_defer_with_run_after(dj: Any, inspector: Inspector) -> None:
    when = timezone.now() + timedelta(hours=1)
    result = dj.add.using(run_after=when).enqueue(1, 1)
    assert result.status == TaskResultStatus.READY
    fetched = default_task_backend.get_result(result.id)
    assert fetched.status == TaskResultStatus.READY and fetched.task.run_after == when
    info = inspector.get_task("default", result.id.split("/")[1])
    assert info.state is TaskState.SCHEDULED and abs(info.next_process_at.timestamp() - when.timestamp()) < 0.01
    with pytest.raises(InvalidTask, match="aware"):
        dj.add.using(run_after=when.replace(tzinfo=None)).enqueue(1, 1)


def test_invalid_tasks_are_refused(dj: Any, settings) -> None:
    with pytest.raises(InvalidTask, match="not valid for backend"):
        dj.add.using(queue_name="elsewhere")
    with pytest.raises(InvalidTask, match="timeout"):
        task(timeout=-1)(dj.add.func)
    with pytest.raises(InvalidTask, match="max_retry"):
        task(max_retry=10**9)(dj.add.func)
    with pytest.raises(InvalidTask, match="context"):
        task(takes_context=True)(dj.add.func)

    def local() -> None: ...

    with pytest.raises(InvalidTask, match="module level"):
        task(local)
    settings.TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": ["bad/name"]}}
    with pytest.raises(InvalidTask, match="invalid queue name"):
        dj.add.using(queue_name="bad/name")


def test_options_come_from_the_backend_and_the_task(dj: Any, settings, inspector: Inspector) -> None:
    settings.TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": ["default", "low"],
                                  "OPTIONS": {"TIMEOUT": 60, "MAX_RETRY": 2, "UNIQUE_FOR": 30, "RETENTION": 600}}}
    info = inspector.get_task("default", dj.add.enqueue(1, 2).id.split("/")[1])
    assert (info.timeout, info.max_retry, info.retention) == (60, 2, 600) and info.unique_key
    with pytest.raises(Exception, match="unique task"):
        dj.add.enqueue(1, 2)  # unique_for: the same call is refused for 30 s
    failing = inspector.get_task("default", dj.fail.enqueue("x").id.split("/")[1])
    assert failing.max_retry == 0  # @task(max_retry=0) wins over OPTIONS
    settings.TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": ["default", "low"]}}
    settings.QUEUECORE = {**settings.QUEUECORE, "DEFAULT_RETENTION": 120}
    assert inspector.get_task("default", dj.add.enqueue(3, 4).id.split("/")[1]).retention == 120


def test_checks(dj: Any, settings) -> None:
    assert task_backends["default"].check() == []
    settings.TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": ["default", "bad/name", "unserved"],
                                  "OPTIONS": {"TIMEOUT": -1, "COLOUR": "red", "RETENTION": 0}}}
    messages = task_backends["default"].check()
    assert {(type(m), m.id) for m in messages} == {
        (Error, "queuecore.E101"), (Error, "queuecore.E102"), (Warning, "queuecore.W101"),
        (Warning, "queuecore.W102")}
    text = " ".join(m.msg for m in messages)
    assert "COLOUR" in text and "timeout is out of range" in text and "'unserved'" in text
    settings.INSTALLED_APPS = [app for app in settings.INSTALLED_APPS if app != "queuecore"]
    assert "queuecore.W103" in {m.id for m in task_backends["default"].check()}


def test_enqueued_signal(dj: Any) -> None:
    got: list[tuple[Any, Any]] = []

    def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:
        got.append((sender, task_result))

    task_enqueued.connect(receiver)
    try:
        result = dj.add.enqueue(1, 2)
    finally:
        task_enqueued.disconnect(receiver)
    assert got == [(QueuecoreBackend, result)]


# -- with worker processes --------------------------------------------------------------------------------


def test_status_transitions_and_result(dj: Any, runworker, inspector: Inspector, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    result = dj.wait_for.enqueue(str(gate))
    proc = runworker()
    wait_until(lambda: (result.refresh(), result.status == TaskResultStatus.RUNNING)[1], interval=0.02)
    assert result.started_at is not None and result.last_attempted_at == result.started_at
    assert result.finished_at is None and result.worker_ids == [""]  # running: one attempt, so far
    gate.touch()
    finished(result)
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == "opened"
    assert result.enqueued_at <= result.started_at <= result.finished_at
    server = next(s for s in inspector.servers() if s.pid == proc.pid)
    assert result.worker_ids == [server.id] and result.errors == []
    assert get_default_client().result(result.id).get(timeout=0) == "opened"  # queuecore's own handle


def test_a_failure_carries_its_class_and_traceback(dj: Any, runworker) -> None:
    result = dj.fail.enqueue("disk full")
    runworker()
    finished(result)
    assert result.status == TaskResultStatus.FAILED
    with pytest.raises(ValueError, match="failed"):
        _ = result.return_value
    [error] = result.errors
    assert error.exception_class_path == "tests.helpers.dj_tasks.TaskProblem"
    assert error.exception_class is dj.TaskProblem
    assert error.traceback.startswith("Traceback (most recent call last):\n")
    assert "in _fail_deeper" in error.traceback and error.traceback.rstrip().endswith("TaskProblem: disk full")
    assert result.finished_at is not None and len(result.worker_ids) == 1
    with pytest.raises(TaskFailed) as caught:  # queuecore's handle says the same
        get_default_client().result(result.id).get(timeout=0)
    assert caught.value.error_type == error.exception_class_path


def test_retries_context_and_signals(dj: Any, runworker, tmp_path: Path) -> None:
    result = dj.fail_until.enqueue(3)  # max_retry=3: attempts 1 and 2 fail, 3 succeeds
    context = dj.context_info.enqueue(tag="t")
    runworker()
    finished(result)
    finished(context)
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 3
    assert [e.exception_class_path for e in result.errors] == ["builtins.RuntimeError"] * 2
    assert len(result.worker_ids) == 3 and result.last_attempted_at > result.started_at
    value = context.return_value
    assert value == {"id": context.id, "attempt": 1, "status": "RUNNING", "tag": "t", "args": [],
                     "kwargs": {"tag": "t"}, "queue": "default", "enqueued": True, "workers": 1}
    mine = [(e["signal"], e["status"], e["attempt"]) for e in signals_log(tmp_path) if e["id"] == result.id]
    # started on every attempt; finished once, when no retry follows
    assert mine == [("task_started", "RUNNING", 1), ("task_started", "RUNNING", 2),
                    ("task_started", "RUNNING", 3), ("task_finished", "SUCCESSFUL", 3)]


def test_a_worker_on_another_prefix_than_the_settings_reads_its_tasks_history_there(
        request: pytest.FixtureRequest, dj: Any, inspector: Inspector, redis_url: str, key_prefix: str,
        tmp_path: Path) -> None:
    """A review: ``runworker --prefix P`` (or ``--redis-url``) served P, but the process's default client,
    which a retry reads the task's earlier attempts with, stayed on the settings' prefix: the running
    result of attempt 3 had no errors and worker ids ``['', '', id]`` (and a task's own enqueues went
    to the settings' prefix)."""
    result = dj.fail_until.enqueue(3)
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.tasks_backend_settings", "QUEUECORE_REDIS_URL": redis_url,
           "QUEUECORE_KEY_PREFIX": f"{key_prefix}-not-this", "DJ_TASKS_LOG": str(tmp_path / "signals.jsonl"),
           "PYTHONUNBUFFERED": "1"}
    with runworkers(request, inspector, env, tmp_path) as start:
        start("--prefix", key_prefix)
        finished(result)
    assert result.status == TaskResultStatus.SUCCESSFUL
    started = [e for e in signals_log(tmp_path) if e["id"] == result.id and e["signal"] == "task_started"]
    assert [(e["attempt"], len(e["errors"]), len([w for w in e["worker_ids"] if w])) for e in started] == [
        (1, 0, 1), (2, 1, 2), (3, 2, 3)]


def test_a_failure_that_ends_the_task_sends_task_finished(dj: Any, runworker, tmp_path: Path) -> None:
    result = dj.fail.enqueue("x")
    runworker()
    finished(result)
    wait_until(lambda: [e for e in signals_log(tmp_path) if e["id"] == result.id and e["signal"] == "task_finished"])
    [done] = [e for e in signals_log(tmp_path) if e["id"] == result.id and e["signal"] == "task_finished"]
    assert done["status"] == "FAILED" and done["errors"] == ["tests.helpers.dj_tasks.TaskProblem"]


def test_arguments_that_do_not_fit_end_the_task_with_both_signals(dj: Any, runworker, tmp_path: Path) -> None:
    result = dj.add.enqueue(1, 2, 3)  # Django does not check arguments against the function at enqueue
    runworker()
    finished(result)
    assert result.status == TaskResultStatus.FAILED
    assert [e.exception_class_path for e in result.errors] == ["queuecore.core.errors.PayloadMismatch"]
    wait_until(lambda: [e for e in signals_log(tmp_path) if e["id"] == result.id and e["signal"] == "task_finished"])
    mine = [(e["signal"], e["status"]) for e in signals_log(tmp_path) if e["id"] == result.id]
    assert mine == [("task_started", "RUNNING"), ("task_finished", "FAILED")]


def test_stored_arguments_of_the_wrong_kind_end_the_task_instead_of_being_unpacked(dj: Any, runworker,
                                                                                     inspector: Inspector) -> None:
    """A Django task enqueued by hand (``adminctl enqueue``, an operator's edit) with ``"args": "12"``:
    its letters were passed as two arguments (``add("1", "2")`` returned "12"), and a result read of
    ``"kwargs": "x"`` raised ValueError."""
    client = get_default_client()
    bad_args = client.enqueue("tests.helpers.dj_tasks.add", {"args": "12", "kwargs": {}}, retention=600)
    bad_kwargs = client.enqueue("tests.helpers.dj_tasks.add", {"args": [1, 2], "kwargs": "x"}, retention=600)
    read = default_task_backend.get_result(bad_kwargs.result_id)  # shown with no arguments, not an error
    assert (read.args, read.kwargs) == ([], {})
    runworker()
    for handle, said in ((bad_args, "args of a Django task must be a list, not str"),
                         (bad_kwargs, "kwargs of a Django task must be an object, not str")):
        info = wait_until(lambda h=handle: (i := inspector.get_task(h.queue, h.id)).state is TaskState.ARCHIVED
                          and i, message="the task archived")
        assert said in (info.last_error or "") and info.retried == 0  # at once: a retry would fail the same way
        assert info.result is None


def test_async_tasks_timeouts_and_bad_return_values(dj: Any, runworker, tmp_path: Path) -> None:
    """A review: the timeout's ``task_finished`` named the interrupt's class (``CancelledError`` for an
    async task), where ``get_result`` has the error the worker recorded (``TaskTimeout``)."""
    added = dj.add_async.enqueue(20, 22)
    hung = dj.hang.enqueue()
    hung_async = dj.hang_async.enqueue()
    bad = dj.bad_return.enqueue()
    runworker()
    assert finished(added).return_value == 42
    for result in (hung, hung_async):
        assert finished(result).status == TaskResultStatus.FAILED
        assert [e.exception_class_path for e in result.errors] == ["queuecore.core.errors.TaskTimeout"]
        wait_until(lambda r=result: [e for e in signals_log(tmp_path) if e["id"] == r.id
                                     and e["signal"] == "task_finished"])
        [done] = [e for e in signals_log(tmp_path) if e["id"] == result.id and e["signal"] == "task_finished"]
        assert done["errors"] == ["queuecore.core.errors.TaskTimeout"]
    assert finished(bad).status == TaskResultStatus.FAILED
    assert bad.errors[0].exception_class_path == "builtins.TypeError"


def test_return_values_json_cannot_keep_fail_and_wide_integers_come_back_exact(dj: Any, runworker) -> None:
    """A review: a task returning NaN or an infinity was SUCCESSFUL with ``return_value`` the text
    "nan" (the worker kept the value's repr()); and with the ``fast`` extra an integer over 64 bits
    came back a float (stored by ``json``, read back by orjson)."""
    nan, inf, wide = (dj.returns.enqueue(what) for what in ("nan", "inf", "wide"))
    runworker()
    for result in (nan, inf):
        assert finished(result).status == TaskResultStatus.FAILED
        [error] = result.errors
        assert error.exception_class_path == "builtins.ValueError" and "not JSON compliant" in error.traceback
    assert finished(wide).status == TaskResultStatus.SUCCESSFUL
    assert type(wide.return_value) is int and wide.return_value == 2 ** 70 + 1
    assert get_default_client().result(wide.id).get(timeout=0) == 2 ** 70 + 1


def test_a_broken_task_finished_receiver_neither_fails_nor_reruns_a_finished_task(dj: Any, runworker,
                                                                                    tmp_path: Path) -> None:
    """A review: a ``task_finished`` receiver that raised after a success failed the attempt, so the
    task ran again, once per retry (3 runs of a body with ``max_retry=2``), and ended FAILED."""
    runs = tmp_path / "runs"
    result = dj.finished_receiver_raises.enqueue(str(runs))
    worker = runworker()
    assert finished(result).status == TaskResultStatus.SUCCESSFUL and result.return_value == "done"
    assert runs.read_text() == "ran\n" and result.errors == []
    mine = [(e["signal"], e["status"]) for e in signals_log(tmp_path) if e["id"] == result.id]
    assert mine == [("task_started", "RUNNING"), ("task_finished", "SUCCESSFUL")]
    log = tmp_path / "runworker-0.log"
    wait_until(lambda: "refuse_finish failed" in log.read_text(), message="the receiver's failure logged")
    assert "this receiver is broken (finished_receiver_raises)" in log.read_text()
    assert worker.poll() is None


def test_a_broken_task_started_receiver_fails_the_attempt_before_the_task_runs(dj: Any, runworker,
                                                                                tmp_path: Path) -> None:
    """As in Django's own backends a ``task_started`` receiver's exception fails the attempt before the
    task runs; a review: when that ended the task, no ``task_finished`` was sent."""
    runs = tmp_path / "runs"
    result = dj.started_receiver_raises.enqueue(str(runs))
    runworker()
    assert finished(result).status == TaskResultStatus.FAILED and not runs.exists()
    assert [e.exception_class_path for e in result.errors] == ["builtins.RuntimeError"]
    wait_until(lambda: [e for e in signals_log(tmp_path) if e["id"] == result.id and e["signal"] == "task_finished"])
    mine = [(e["signal"], e["status"]) for e in signals_log(tmp_path) if e["id"] == result.id]
    assert mine == [("task_started", "RUNNING"), ("task_finished", "FAILED")]


def test_a_stored_run_after_that_is_no_time_is_read_as_not_deferred(dj: Any, runworker) -> None:
    """A review: a Django task whose stored ``run_after`` is not an ISO time (an operator's edit, a hand
    enqueue) made ``get_result`` raise ValueError or TypeError, and its attempts fail."""
    client = get_default_client()
    handles = [client.enqueue("tests.helpers.dj_tasks.add", {"args": [1, 2], "kwargs": {}, "backend": "default",
                                                            "run_after": bad}, retention=600)
               for bad in ("tomorrow", 12345)]
    for handle in handles:
        read = default_task_backend.get_result(handle.result_id)
        assert read.status == TaskResultStatus.READY and read.task.run_after is None
    runworker()
    for handle in handles:
        assert finished(default_task_backend.get_result(handle.result_id)).return_value == 3


def test_cancel_and_pause_apply(dj: Any, runworker, inspector: Inspector, tmp_path: Path) -> None:
    blocked = dj.wait_for.enqueue(str(tmp_path / "never"))
    queue, task_id = blocked.id.split("/")
    inspector.pause_queue(queue)
    runworker()
    assert default_task_backend.get_result(blocked.id).status == TaskResultStatus.READY  # paused: not taken
    inspector.unpause_queue(queue)
    wait_until(lambda: default_task_backend.get_result(blocked.id).status == TaskResultStatus.RUNNING)
    inspector.cancel_task(queue, task_id)
    finished(blocked)
    assert blocked.status == TaskResultStatus.FAILED
    assert [e.exception_class_path for e in blocked.errors] == ["queuecore.core.errors.TaskCancelled"]


def test_priority_runs_first_and_deferred_tasks_wait(dj: Any, runworker, tmp_path: Path) -> None:
    first = [dj.add.using(queue_name="low").enqueue(n, 0) for n in range(3)]
    urgent = dj.noop.enqueue()
    deferred = dj.add.using(run_after=timezone.now() + timedelta(seconds=1)).enqueue(1, 1)
    runworker("--concurrency", "1", "--queues", "low,default")
    for result in (*first, urgent):
        finished(result)
    order = [e["id"] for e in signals_log(tmp_path) if e["signal"] == "task_started"]
    # Within its queue the urgent one runs first. (The deferred one, in another queue, may already be
    # due when a slow worker starts, and queues share the worker by weight.)
    assert next(i for i in order if i.startswith("low/")) == urgent.id
    finished(deferred)
    assert deferred.started_at >= deferred.task.run_after


def test_a_result_past_its_retention_does_not_exist(dj: Any, runworker) -> None:
    result = dj.unkept.enqueue()
    runworker()
    wait_until(lambda: not get_default_client().redis.exists(
        get_default_client().keys.queue("default").task(result.id.split("/")[1])))
    with pytest.raises(TaskResultDoesNotExist):
        result.refresh()


def test_a_snoozed_task_counts_the_attempt_it_runs_again_once(dj: Any, runworker) -> None:
    """A snooze consumes no attempt: the task run again is still attempt 1 (``TaskContext.attempt``),
    but ``get_result`` showed it running its second (the snooze's line, plus one for the running one)."""
    result = dj.snooze_once.enqueue()
    runworker()
    finished(result)
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == {"attempt": 1, "shown": 1}
    assert result.attempts == 1


def test_the_newest_error_keeps_its_traceback_after_a_snooze() -> None:
    """A review: the newest error was looked for among every attempt not completed, a snoozed one
    included (it has no error), so after a snooze the last failure lost its traceback in ``errors``."""
    from queuecore.core.message import AttemptInfo
    from queuecore.tasks_backend import _errors

    last_error = 'ValueError: boom\n\nTraceback (most recent call last):\n  File "t.py", line 1\nValueError: boom'
    attempts = [AttemptInfo(number=1, result="retry", error="ValueError: boom", error_type="builtins.ValueError"),
                AttemptInfo(number=2, result="snoozed")]
    [error] = _errors(attempts, last_error)
    assert error.traceback.startswith("Traceback (most recent call last):") and error.traceback.endswith("boom")
