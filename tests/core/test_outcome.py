"""The outcome decision, tested without Redis: how an attempt ended -> what to write."""

from __future__ import annotations

import asyncio
import math

import pytest

from queuecore.core.errors import SkipRetry, TaskCancelled, TaskDecodeError, TaskTimeout
from queuecore.core.outcome import (
    CANCELLED_BY_OPERATOR,
    LEASE_LOST,
    MAX_ERROR_CHARS,
    MAX_RETRY_DELAY,
    SHUTDOWN,
    Decision,
    Outcome,
    RetryPolicy,
    abandoned,
    classify,
    decide,
    format_error,
    retry_delay_seconds,
)
from queuecore.core.runner import deadline_passed


def fixed(seconds: float) -> RetryPolicy:
    return lambda retried, error: seconds


@pytest.mark.parametrize(("exc", "reason", "kind"), [
    (ValueError("x"), None, "failure"),
    (SkipRetry("no"), None, "skip_retry"),
    (TaskCancelled("c"), SHUTDOWN, "requeue"),
    (TaskCancelled("c"), LEASE_LOST, "lost"),
    (TaskCancelled("c"), CANCELLED_BY_OPERATOR, "cancelled"),
    (asyncio.CancelledError(), CANCELLED_BY_OPERATOR, "cancelled"),
    (TaskTimeout("t"), "timed out after 2s", "failure"),
    (KeyboardInterrupt(), None, "failure"),
    (asyncio.CancelledError(), None, "failure"),  # a stray cancel from the handler itself
])
def test_classify(exc: BaseException, reason: str | None, kind: str) -> None:
    assert classify(exc, reason).kind == kind


def test_a_timeout_is_recorded_with_its_reason() -> None:
    outcome = classify(TaskTimeout("t"), "timed out after 2s")
    assert type(outcome.error) is TaskTimeout and str(outcome.error) == "timed out after 2s"  # the public error
    wrapped = classify(SystemExit(3), None)
    assert isinstance(wrapped.error, RuntimeError) and "SystemExit" in str(wrapped.error)


def test_a_start_past_the_deadline_is_archived_even_once_the_supervisor_saw_it_time_out() -> None:
    """CI (Redis Cluster leg): a task fetched after its deadline was ended by the supervisor's timeout
    before its start check raised, and was recorded "TaskTimeout: timed out after -1.49s", not archived
    as DeadlinePassed."""
    passed = deadline_passed(100.0, 101.49)
    outcome = classify(passed, "timed out after -1.49s")
    assert outcome.kind == "skip_retry" and outcome.error is passed
    assert classify(passed, SHUTDOWN).kind == "requeue" and classify(passed, LEASE_LOST).kind == "lost"


@pytest.mark.parametrize(("reason", "kind"), [(CANCELLED_BY_OPERATOR, "cancelled"), (SHUTDOWN, "requeue"),
                                              (LEASE_LOST, "lost"), ("timed out after 1s", "failure"),
                                              (None, "failure")])
def test_an_abandoned_handler(reason: str | None, kind: str) -> None:
    outcome = abandoned(reason)
    assert outcome.kind == kind
    if kind in ("cancelled", "failure"):
        assert "abandoned" in str(outcome.error)


def test_decide_success_lost_and_requeue() -> None:
    policy = fixed(5)
    assert decide(Outcome("success", 1), retried=0, max_retry=3, retry_delay=policy) == Decision("done")
    assert decide(Outcome("lost"), retried=0, max_retry=3, retry_delay=policy) == Decision("nothing")
    assert decide(Outcome("requeue"), retried=9, max_retry=3, retry_delay=policy) == Decision("requeue")


@pytest.mark.parametrize(("retried", "max_retry", "action"), [
    (0, 3, "retry"), (2, 3, "retry"), (3, 3, "archive"), (0, 0, "archive"), (1000, -1, "retry"),
])
def test_decide_a_failure_by_its_retry_budget(retried: int, max_retry: int, action: str) -> None:
    decision = decide(Outcome("failure", error=ValueError("boom")), retried=retried, max_retry=max_retry,
                      retry_delay=fixed(7))
    assert decision.action == action and decision.error.startswith("ValueError: boom")
    assert decision.count_failure
    assert decision.retry_in == (7.0 if action == "retry" else 0.0)


def test_skip_retry_and_undecodable_messages_archive_at_once() -> None:
    for error in (SkipRetry("bad input"), TaskDecodeError("cannot decode")):
        decision = decide(Outcome("skip_retry", error=error), retried=0, max_retry=25, retry_delay=fixed(1))
        assert decision.action == "archive" and decision.count_failure


def test_a_cancel_archives_without_counting_a_failure() -> None:
    decision = decide(Outcome("cancelled", error=TaskCancelled("x")), retried=0, max_retry=25, retry_delay=fixed(1))
    assert decision == Decision("archive", CANCELLED_BY_OPERATOR, count_failure=False,
                                error_type="queuecore.core.errors.TaskCancelled")


def test_retry_delay_is_bounded_and_falls_back_to_the_default(caplog: pytest.LogCaptureFixture) -> None:
    assert retry_delay_seconds(fixed(-5), 0, ValueError()) == 0.0
    assert retry_delay_seconds(fixed(1e300), 0, ValueError()) == MAX_RETRY_DELAY

    def broken(retried: int, error: BaseException | None) -> float:
        raise RuntimeError("policy bug")

    for policy in (broken, fixed(math.nan), fixed(math.inf)):
        delay = retry_delay_seconds(policy, 2, ValueError(), "t1")
        assert 2**4 + 15 <= delay <= 2**4 + 15 + 29 * 3  # the default curve for retried=2
    assert "retry_delay raised for task t1" in caplog.text
    # A review: the default curve it falls back on was not bounded (10**8 s at retry 100, and at
    # 10**6 retries a delay the failure's log line could not turn into a date).
    assert retry_delay_seconds(broken, 100, ValueError()) == MAX_RETRY_DELAY
    assert retry_delay_seconds(broken, 10**6, ValueError()) == MAX_RETRY_DELAY


def test_format_error_keeps_the_handler_frames_and_is_bounded() -> None:
    def handler() -> None:
        raise ValueError("bad thing")

    try:
        handler()
    except ValueError as exc:
        text = format_error(exc)
    assert text.startswith("ValueError: bad thing") and "in handler" in text and text.endswith("ValueError: bad thing")
    assert format_error(RuntimeError()) == "RuntimeError"
    long = format_error(ValueError("x" * (MAX_ERROR_CHARS * 2)))
    assert len(long) <= MAX_ERROR_CHARS and long.endswith("(truncated)")
