"""What becomes of an attempt: the one place that decides between done, retry, archive, requeue
and nothing at all, and with which delay. Pure functions, tested without Redis.

``classify`` turns how a handler ended (a result, an exception, an interrupt with its reason) into
an ``Outcome``; ``decide`` turns an outcome and the task's retry budget into the ``Decision`` the
processor writes.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from queuecore.core.attempts import ATTEMPT_ERROR_CHARS, one_line
from queuecore.core.clock import format_duration
from queuecore.core.config import default_retry_delay
from queuecore.core.errors import (
    DeadlinePassed,
    PayloadMismatch,
    SkipRetry,
    Snooze,
    TaskCancelled,
    TaskDecodeError,
    TaskTimeout,
)
from queuecore.core.reasons import CANCELLED_BY_OPERATOR, DEADLINE_REACHED, LEASE_LOST, SHUTDOWN
from queuecore.core.text import error_message, storable_text

logger = logging.getLogger("queuecore.worker")

MAX_ERROR_CHARS = 8000
MAX_RETRY_DELAY = 365 * 24 * 3600.0


OutcomeKind = Literal["success", "failure", "skip_retry", "cancelled", "requeue", "lost", "snooze", "wait"]
RetryPolicy = Callable[[int, BaseException | None], float]


class Outcome:
    """How one attempt ended: ``kind``, with the handler's result or error."""

    __slots__ = ("error", "kind", "result")

    def __init__(self, kind: OutcomeKind, result: Any = None, error: BaseException | None = None) -> None:
        self.kind = kind
        self.result = result
        self.error = error

    def __repr__(self) -> str:
        return f"Outcome({self.kind!r}, error={self.error!r})"


def returned(result: Any) -> Outcome:
    """The outcome of a handler that returned ``result``: a success, or a snooze (``Snooze(seconds)``)."""
    if isinstance(result, Snooze):
        return Outcome("snooze", result.seconds)
    return Outcome("success", result)


def held_back(delay: float, reason: str) -> Outcome:
    """The outcome of an attempt a concurrency or rate limit held back: it waits ``delay`` seconds
    at most (``reason`` says for what), and no attempt is counted."""
    return Outcome("wait", (delay, reason))


def classify(exc: BaseException, cancel_reason: str | None) -> Outcome:
    """The outcome of a handler that raised ``exc`` while its task's cancel reason was ``cancel_reason``."""
    if isinstance(exc, (TaskCancelled, TaskTimeout, asyncio.CancelledError)) and cancel_reason:
        if cancel_reason == SHUTDOWN:
            return Outcome("requeue")
        if cancel_reason == LEASE_LOST:
            return Outcome("lost")
        if cancel_reason == CANCELLED_BY_OPERATOR:
            return Outcome("cancelled", error=exc)
        if isinstance(exc, DeadlinePassed):  # raised before the handler: the timeout seen was this deadline
            return Outcome("skip_retry", error=exc)
        # the public error, for hooks and policies, with the frames where the handler was interrupted
        return _timed_out(cancel_reason, exc.__traceback__)
    if isinstance(exc, Snooze):
        return Outcome("snooze", exc.seconds)
    if isinstance(exc, (SkipRetry, PayloadMismatch, DeadlinePassed)):  # retrying cannot help
        return Outcome("skip_retry", error=exc)
    if not isinstance(exc, Exception):
        # KeyboardInterrupt, SystemExit or a stray CancelledError from the handler: a failure.
        error = RuntimeError(f"handler raised {type(exc).__name__}: {error_message(exc)}").with_traceback(
            exc.__traceback__)
        return Outcome("failure", error=error)
    return Outcome("failure", error=exc)


def abandoned(cancel_reason: str | None) -> Outcome:
    """The outcome of a handler that ignored its interrupt and was abandoned."""
    reason = cancel_reason or "interrupted"
    text = f"{reason}; the handler did not stop and was abandoned"
    if reason == CANCELLED_BY_OPERATOR:
        return Outcome("cancelled", error=TaskCancelled(text))
    if reason == SHUTDOWN:
        return Outcome("requeue")
    if reason == LEASE_LOST:
        return Outcome("lost")
    return _timed_out(text, None)


def _timed_out(text: str, traceback: Any) -> Outcome:
    """A timeout's outcome: a failure (retried), or, when the limit reached was the task's deadline,
    ``DeadlinePassed`` archived at once (any retry would start after it)."""
    if text.startswith(DEADLINE_REACHED):
        return Outcome("skip_retry", error=DeadlinePassed(text).with_traceback(traceback))
    return Outcome("failure", error=TaskTimeout(text).with_traceback(traceback))


@dataclass(frozen=True)
class Decision:
    """What to write for an outcome.

    ``action``: ``done`` (acknowledge), ``retry`` (in ``retry_in`` seconds), ``archive``,
    ``requeue`` (hand back to pending, not an attempt) or ``nothing`` (the lease was lost: another
    worker owns the task). ``error`` is the text to record, ``error_type`` the class path of the error
    (kept in the attempt history, so that a caller's ``TaskFailed`` names it); ``count_failure`` says
    whether the archive counts as a failure in the statistics (a cancel does not).
    """

    action: Literal["done", "retry", "archive", "requeue", "nothing", "park"]
    error: str = ""
    retry_in: float = 0.0
    count_failure: bool = True
    error_type: str | None = None


def decide(outcome: Outcome, *, retried: int, max_retry: int, retry_delay: RetryPolicy,
           task_id: str = "?") -> Decision:
    """The one answer to "retry or archive?": a failure is retried while ``retried < max_retry``
    (``max_retry < 0`` retries forever) after ``retry_delay(retried, error)`` seconds; SkipRetry,
    an undecodable message, a cancel or a spent budget archive."""
    kind = outcome.kind
    if kind == "success":
        return Decision("done")
    if kind == "lost":
        return Decision("nothing")
    if kind == "requeue":
        return Decision("requeue")
    if kind == "snooze":  # run again later; no attempt consumed (park: retry_in seconds)
        return Decision("park", retry_in=float(outcome.result))
    if kind == "wait":  # held back by a limit: park until retry_in at most, error says why
        delay, reason = outcome.result
        return Decision("park", str(reason), retry_in=float(delay))
    error = outcome.error or RuntimeError("unknown error")
    if kind == "cancelled":
        return Decision("archive", CANCELLED_BY_OPERATOR, count_failure=False, error_type=class_path(TaskCancelled))
    exhausted = max_retry >= 0 and retried >= max_retry
    if kind == "failure" and not exhausted:
        return Decision("retry", format_error(error), retry_in=retry_delay_seconds(retry_delay, retried, error,
                                                                                     task_id),
                        error_type=class_path(type(error)))
    return Decision("archive", format_error(error), error_type=class_path(type(error)))


def class_path(cls: type) -> str:
    """``module.QualifiedName`` of a class (``builtins.ValueError``), as Django's task errors name them."""
    return storable_text(f"{cls.__module__}.{cls.__qualname__}")  # a class made at run time may be named anything


def retry_delay_seconds(policy: RetryPolicy, retried: int, error: BaseException, task_id: str = "?") -> float:
    """``policy(retried, error)`` as a finite delay within [0, one year]; a policy that raises or
    returns no finite number is logged and the default curve used instead."""
    try:
        delay = float(policy(retried, error))
        if not math.isfinite(delay):
            raise ValueError(f"retry delay {delay} is not finite")
        return min(max(0.0, delay), MAX_RETRY_DELAY)
    except Exception:
        logger.exception("retry_delay raised for task %s; using the default", task_id)
        return min(default_retry_delay(retried, error), MAX_RETRY_DELAY)


def format_error(error: BaseException) -> str:
    """``Type: message`` followed by the traceback, cut to ``MAX_ERROR_CHARS``.

    Frames of the worker's own modules are left out: they are the same for every task.
    """
    head = f"{type(error).__name__}: {error_message(error)}".rstrip(": ")  # a class's __name__ holds no surrogate
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename not in _WORKER_FILES]
    text = head
    if frames:
        text += "\n\nTraceback (most recent call last):\n" + "".join(traceback.format_list(frames)) + head
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 20] + "\n... (truncated)"


# The worker's own modules on the way into a handler (dispatch, attempt, tracing span, middleware chain,
# event loop); and the Django app's (its worker middleware, the django.tasks runner), by path: core imports no Django.
_WORKER_FILES = frozenset(
    [os.path.join(os.path.dirname(__file__), name)
     for name in ("processor.py", "runner.py", "tracing.py", "context.py", "handlers.py")]
    + [os.path.join(os.path.dirname(os.path.dirname(__file__)), name)
       for name in ("middleware.py", "tasks_backend.py")])


OUTCOME_WORDS = {"success": "done", "failure": "failed", "skip_retry": "archived (SkipRetry)",
                 "cancelled": "cancelled", "requeue": "handed back", "snooze": "snoozed",
                 "wait": "held back by a limit"}


def attempts_phrase(retried: int, max_retry: int) -> str:
    """``attempt 3 of 26`` for the attempt after ``retried`` retries (``of unlimited`` when negative)."""
    total = "unlimited" if max_retry < 0 else str(max_retry + 1)
    return f"attempt {retried + 1} of {total}"


def outcome_log_line(*, task_id: str, type_name: str, queue: str, retried: int, max_retry: int,
                     outcome: Outcome, decision: Decision, ran: float | None = None,
                     retry_at: float | None = None) -> str | None:
    """The worker's log line for an attempt that failed or was archived (None for anything else):
    ``task <id> (<type>) in queue <queue> failed after 0.31s, attempt 3 of 26: ValueError: boom;
    retry in 1m 21s (at 2026-11-21T13:45:02Z)``, or ``...; archived (retries spent)``.

    The error is its first line, control characters escaped, cut to 300 characters (the whole error,
    with its traceback, is stored on the task)."""
    if decision.action not in ("retry", "archive"):
        return None
    where = f"task {task_id} ({one_line(type_name, 200)}) in queue {queue}"
    count = attempts_phrase(retried, max_retry)
    after = f" after {format_duration(ran)}" if ran is not None else ""
    if outcome.kind == "cancelled":
        head = f"{where} cancelled by operator{after}, {count}"
    else:
        error = outcome.error
        reason = one_line(decision.error, ATTEMPT_ERROR_CHARS) if decision.error else (
            type(error).__name__ if error is not None else "unknown error")
        head = f"{where} failed{after}, {count}: {reason}"
    if decision.action == "retry":
        when = f" (at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(retry_at))})" if retry_at is not None else ""
        return f"{head}; retry in {format_duration(decision.retry_in)}{when}"
    return f"{head}; archived ({archive_reason(outcome)})"


def archive_reason(outcome: Outcome) -> str:
    """Why an outcome archives its task, in a few words."""
    error = outcome.error
    if outcome.kind == "cancelled":
        return "cancelled by operator"
    if outcome.kind == "skip_retry":
        if isinstance(error, TaskDecodeError):
            return "its message cannot be decoded"
        if isinstance(error, SkipRetry):
            return "SkipRetry: not retried"
        if isinstance(error, PayloadMismatch):
            return "at once: the payload does not fit the handler, a retry would fail the same way"
        return "not retried: a retry would fail the same way"
    return "retries spent"
