"""A handler reports how far it has come (``current_task().set_progress``); operators read it with the
task and with the worker's running tasks, as fresh as the last heartbeat."""

from __future__ import annotations

import threading

import pytest

from queuecore import current_task, task
from queuecore.core.context import Progress
from queuecore.core.errors import ConfigurationError
from tests.conftest import wait_until


def start_reporting_task(make_worker, registry, client, inspector) -> tuple[str, threading.Event]:
    """A running task that reported 3 of 10 rows and waits for ``release``; returns (its id, release)
    once operators can see the progress."""
    step, release = threading.Event(), threading.Event()

    @task(name="t.import", registry=registry)
    def import_rows() -> None:
        current_task().set_progress(3, 10, "rows of customers.csv")
        step.set()
        release.wait(10)

    make_worker(queues="default")
    task_id = client.enqueue("t.import", retention=60).id
    assert step.wait(10)
    wait_until(lambda: inspector.get_task("default", task_id).progress, 10, message="the progress")
    return task_id, release


def test_progress_reaches_operators_with_the_heartbeat(make_worker, registry, client, inspector) -> None:
    task_id, release = start_reporting_task(make_worker, registry, client, inspector)
    try:
        seen = inspector.get_task("default", task_id).progress
        assert seen == Progress(3.0, 10.0, "rows of customers.csv") and seen.fraction == 0.3  # type: ignore[union-attr]
        running = inspector.workers()
        assert [(w.task_id, w.progress) for w in running] == [(task_id, seen)]
        assert running[0].to_dict()["progress"] == {"done": 3.0, "total": 10.0, "note": "rows of customers.csv",
                                                     "fraction": 0.3}
    finally:
        release.set()
    done = wait_until(lambda: (t := inspector.get_task("default", task_id)).state == "completed" and t, 10,
                      message="completion")
    assert done.progress is None  # type: ignore[union-attr]  # only a running task has one


@pytest.mark.parametrize(("done", "total", "note"), [(-1, 10, None), (float("nan"), None, None), (1, 0, None),
                                                     (True, 5, None), ("3", 5, None), (1, float("inf"), None),
                                                     (1, 2, 7), (10**400, None, None), (1, 2**16609, None)],
                         ids=lambda v: f"int{v.bit_length()}bits" if isinstance(v, int) and v > 10**9 else None)
def test_bad_progress_is_refused(done, total, note) -> None:
    with pytest.raises(ConfigurationError, match="progress"):
        Progress.of(done, total, note)


def test_a_huge_integer_is_described_not_printed() -> None:
    with pytest.raises(ConfigurationError, match="progress total must be a finite number >= 0, got an integer of "
                                                 "16,610 bits"):
        Progress.of(1, 10**5000)


def test_a_count_without_total_and_a_long_note() -> None:
    p = Progress.of(42, note="x" * 500)
    assert (p.done, p.total, p.fraction, len(p.note or "")) == (42.0, None, None, 200)
    assert Progress.from_dict({"done": "x"}) is None and Progress.from_dict(None) is None
    assert Progress.of(12, 10).fraction == 1.0  # past the total: shown full
