"""Failures are visible (issue 11, item 10): each failed attempt and each archive is a WARNING line
in the worker's log; a timeout reaches error hooks as the public ``queuecore.TaskTimeout``; and a
task keeps a bounded history of its attempts (when each started, how long it ran, on which worker,
how it ended), read through the Inspector."""

from __future__ import annotations

import json
import logging
import re
import time
from typing import Any

import pytest
import redis

import queuecore
from queuecore import Client, Inspector, current_task, task
from queuecore.core.attempts import ATTEMPT_HISTORY, ATTEMPT_HISTORY_BYTES, attempt_line, parse_attempts
from queuecore.core.clock import to_ms
from queuecore.core.keys import QueueKeys, stats_day, stats_minute
from queuecore.core.scripts import Scripts
from tests.conftest import wait_until
from tests.core.worker_support import SOON, wait_state
from tests.helpers.state import seed_task

FAST_RETRY = {"retry_delay": lambda retried, error: 0.05}


def warnings_about(caplog: pytest.LogCaptureFixture, task_id: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "queuecore.worker" and r.levelno == logging.WARNING and task_id in r.getMessage()]


def test_each_failed_attempt_and_the_archive_are_logged_at_warning(make_worker, client: Client, registry,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="queuecore.worker")  # the default level: nothing below WARNING

    @task(name="t.fail", registry=registry)
    def fail() -> None:
        raise ValueError("boom\nsecond line of the message")

    info = client.enqueue("t.fail", max_retry=2)
    make_worker(**FAST_RETRY)
    wait_state(Inspector(connection=client.connection), "default", info.id, "archived")
    wait_until(lambda: len(warnings_about(caplog, info.id)) == 3, SOON, message="three warnings")
    lines = warnings_about(caplog, info.id)
    head = rf"^task {info.id} \(t\.fail\) in queue default failed after \d+\.\d+s, attempt"
    assert re.match(head + r" 1 of 3: ValueError: boom; retry in 0\.05s \(at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\)$",
                    lines[0]), lines[0]
    assert re.match(head + r" 2 of 3: ValueError: boom; retry in 0\.05s \(at .*Z\)$", lines[1]), lines[1]
    assert re.match(head + r" 3 of 3: ValueError: boom; archived \(retries spent\)$", lines[2]), lines[2]
    record = next(r for r in caplog.records if r.getMessage() == lines[2])
    assert (record.qc_task_id, record.qc_queue, record.qc_type, record.qc_attempt, record.qc_action) == (  # type: ignore[attr-defined]
        info.id, "default", "t.fail", 3, "archive")


def test_a_timeout_reaches_error_hooks_as_the_public_task_timeout(make_worker, client: Client, inspector: Inspector,
                                                                  registry, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="queuecore.worker")
    seen: list[tuple[Any, BaseException]] = []
    delays: list[BaseException | None] = []

    @task(name="t.slow", registry=registry)
    def slow() -> None:
        while True:
            time.sleep(0.01)

    def policy(retried: int, error: BaseException | None) -> float:
        delays.append(error)
        return 0.05

    info = client.enqueue("t.slow", timeout=0.3, max_retry=1)
    make_worker(error_handler=lambda ctx, error: seen.append((ctx, error)), retry_delay=policy)
    archived = wait_state(inspector, "default", info.id, "archived")
    assert [type(error) for _, error in seen] == [queuecore.TaskTimeout] * 2
    assert str(seen[0][1]) == "timed out after 0.3s" and seen[0][0].id == info.id
    assert [type(error) for error in delays] == [queuecore.TaskTimeout]
    assert archived.last_error is not None and archived.last_error.startswith("TaskTimeout: timed out after 0.3s")
    wait_until(lambda: len(warnings_about(caplog, info.id)) == 2, SOON, message="two warnings")
    assert warnings_about(caplog, info.id)[1].endswith(
        "attempt 2 of 2: TaskTimeout: timed out after 0.3s; archived (retries spent)")


def test_a_failed_task_shows_its_attempts_when_where_and_how_long(make_worker, client: Client, inspector: Inspector,
                                                                  registry) -> None:
    began: dict[int, float] = {}

    @task(name="t.flaky", registry=registry)
    def flaky() -> str:
        attempt = current_task().retried + 1
        began[attempt] = time.time()
        time.sleep(0.1)
        if attempt < 3:
            raise ValueError(f"no {attempt}")
        return "ok"

    info = client.enqueue("t.flaky", retention=60)
    a = make_worker(**FAST_RETRY)
    first = wait_until(lambda: (t := inspector.get_task("default", info.id)).retried == 1 and t, SOON,
                       message="the first attempt to fail")
    # The failed attempt's start survives the failure: when it started, and how long it ran.
    assert first.started_at is not None, "started_at is lost when an attempt fails"
    assert abs(first.started_at.timestamp() - began[1]) < 0.02
    assert first.last_failed_at is not None and first.last_failed_at >= first.started_at
    (one,) = first.attempts
    assert (one.number, one.worker, one.result, one.error) == (1, a.server_id, "retry", "ValueError: no 1")
    assert one.started_at == first.started_at and one.duration is not None and 0.1 <= one.duration < 1
    a.shutdown(timeout=2)

    b = make_worker(**FAST_RETRY)  # the next attempts run on another worker
    done = wait_state(inspector, "default", info.id, "completed")
    assert [(x.number, x.worker, x.result, x.error) for x in done.attempts] == [
        (1, a.server_id, "retry", "ValueError: no 1"), (2, b.server_id, "retry", "ValueError: no 2"),
        (3, b.server_id, "completed", None)]
    for attempt in done.attempts:
        assert attempt.started_at is not None and attempt.ended_at is not None
        assert abs(attempt.started_at.timestamp() - began[attempt.number]) < 0.02
        assert attempt.duration is not None and 0.1 <= attempt.duration < 1
    assert done.started_at == done.attempts[-1].started_at  # the successful attempt's own start
    data = done.to_dict()
    assert [a["number"] for a in data["attempts"]] == [1, 2, 3] and data["attempts"][0]["worker"] == a.server_id
    json.dumps(data)


def test_the_history_keeps_the_last_attempts_only(make_worker, client: Client, inspector: Inspector,
                                                  registry) -> None:
    @task(name="t.always", registry=registry)
    def always() -> None:
        raise RuntimeError(f"attempt {current_task().retried + 1}")

    info = client.enqueue("t.always", max_retry=-1)
    make_worker(**FAST_RETRY)
    many = ATTEMPT_HISTORY + 3
    latest = wait_until(lambda: (t := inspector.get_task("default", info.id)).retried >= many and t, 30,
                        message=f"{many} failed attempts")
    numbers = [x.number for x in latest.attempts]
    assert len(numbers) == ATTEMPT_HISTORY and numbers == list(range(numbers[0], numbers[0] + ATTEMPT_HISTORY))
    assert numbers[-1] >= many


def test_the_history_is_bounded_in_bytes_too(redis_client: redis.Redis, scripts: Scripts, connection) -> None:
    q: QueueKeys = connection.keys.queue("default")
    now = 1_800_000_000.0
    for n in range(1, 13):
        seed_task(redis_client, q, "big", "active", score=to_ms(now + 30), lease=n, retried=n - 1)
        # An error of 3-byte characters, as long as it likes: cut to one bounded line.
        line = attempt_line(number=n, worker="w" * 150, result="retry", started_ms=to_ms(now),
                            ended_ms=to_ms(now) + 5, error="E: " + "€" * 5000)
        assert len(line.encode()) < 1600
        assert scripts.retry(q, "big", n, now_ms=to_ms(now), retry_at_ms=to_ms(now) + 1, error="E", day=stats_day(now),
                             minute=stats_minute(now), attempt=line, started_ms=to_ms(now))
        stored = redis_client.hget(q.task("big"), "attempts")
        assert stored is not None and len(stored.encode()) <= ATTEMPT_HISTORY_BYTES
    kept = parse_attempts(redis_client.hget(q.task("big"), "attempts"))
    assert [x.number for x in kept] == list(range(13 - len(kept), 13)) and 5 <= len(kept) < ATTEMPT_HISTORY
    assert redis_client.hget(q.task("big"), "started_at") == str(to_ms(now))


def test_an_operators_run_after_the_retries_are_spent_is_the_next_attempt(make_worker, client: Client, registry,
                                                                          inspector: Inspector) -> None:
    """An operator's run of a task archived with its retries spent gives it one more attempt, which
    was numbered as the one before it (1, 2, 2, 2: the worker numbers attempts by the retries used,
    which such a run does not move). It is the next one."""
    @task(name="t.always_fails", registry=registry, max_retry=1)
    def always_fails() -> None:
        raise RuntimeError("still broken")

    info = client.enqueue("t.always_fails", retention=60)
    make_worker(**FAST_RETRY)
    archived = wait_state(inspector, "default", info.id, "archived")
    assert [(a.number, a.result) for a in archived.attempts] == [(1, "retry"), (2, "archived")]
    for runs in (3, 4):
        inspector.run_task("default", info.id)
        wait_until(lambda n=runs: len(inspector.get_task("default", info.id).attempts) == n
                   and inspector.get_task("default", info.id).state == "archived", SOON,
                   message=f"run {runs} archived")
    again = inspector.get_task("default", info.id)
    assert [(a.number, a.result) for a in again.attempts] == [(1, "retry"), (2, "archived"), (3, "archived"),
                                                              (4, "archived")]
    assert (again.retried, again.max_retry) == (1, 1)  # the retries used: an operator's run is none of them
