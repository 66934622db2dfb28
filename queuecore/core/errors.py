"""One hierarchy of errors for everything queuecore raises on purpose."""

from __future__ import annotations

from typing import Any

SHOWN_CHARS = 200  # of a rejected value, in an error message


def shown(value: object) -> str:
    """``repr(value)`` for an error message, bounded: a long text is cut to ``SHOWN_CHARS``, and an
    integer past Python's 4,300-digit repr limit is named by its size (its repr raises ValueError)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 640:
        return f"<an integer of about {int(value.bit_length() * 0.30103):,} digits>"
    try:
        text = repr(value)
    except Exception:  # a repr that fails: say what it is
        return f"<{type(value).__name__} object>"
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 3] + "..."


class QueuecoreError(Exception):
    """Base class of every error queuecore raises on purpose."""


class ConfigurationError(QueuecoreError, ValueError):
    """A setting, option or name is invalid. ``field`` names the setting or option, when there is one."""

    def __init__(self, *args: object, field: str | None = None) -> None:
        super().__init__(*args)
        self.field = field


class InvalidOption(ConfigurationError):
    """An enqueue option has a value of the wrong type or outside its documented range; nothing was written."""


class InvalidPayload(QueuecoreError, ValueError):
    """A payload cannot be stored: not a JSON object, not serialisable, too large or not matching the handler."""


class PayloadMismatch(InvalidPayload):
    """A stored payload does not fit its handler's signature (a missing or unexpected argument name):
    the worker archives the task at once with this error, since a retry would fail the same way."""


class NoWorkerForTask(QueuecoreError):
    """No live worker would run this task: none is running, none serves its queue, or none of those
    handles its type (``Inspector.require_runnable``; ``adminctl enqueue --force`` skips the check)."""


class TaskNotFound(QueuecoreError, LookupError):
    """No task with that id exists in that queue."""


class QueueNotFound(QueuecoreError, LookupError):
    """No queue with that name is known."""


class PeriodicEntryNotFound(QueuecoreError, LookupError):
    """No live worker declares a periodic entry with that name."""


class FailureGroupNotFound(QueuecoreError, LookupError):
    """No failed task's last error has that fingerprint (any more)."""


class TaskTypeNotFound(QueuecoreError, LookupError):
    """No task of that type has run in that queue."""


class ServerNotFound(QueuecoreError, LookupError):
    """No live worker process has that server id."""


class BulkJobNotFound(QueuecoreError, LookupError):
    """No bulk job has that id (or it finished more than a week ago)."""


class TooManyBulkJobs(QueuecoreError):
    """As many bulk jobs as allowed are queued or running; wait for one to finish, or cancel one."""


class TaskIdConflict(QueuecoreError):
    """A task with the caller-chosen id already exists in the queue."""


class DuplicateTask(QueuecoreError):
    """A unique task with the same type, payload and queue is already held."""


class QueueNotEmpty(QueuecoreError):
    """A queue still holds tasks and cannot be removed without ``force``."""


class InvalidTaskState(QueuecoreError):
    """The operation does not apply to a task in its current state."""


class PageNotFound(QueuecoreError, LookupError):
    """No such page of a list: not a page number (below 1, or beyond ``MAX_PAGE``), or past the end."""


class BulkLeaseRanOut(QueuecoreError):
    """A bulk job's driver acted after its lease ran out (it stalled: another driver may have taken the
    job up); Redis refused those acts. ``done``: how many of the batch came in time and were done."""

    def __init__(self, done: int) -> None:
        super().__init__(f"the bulk job's lease ran out: {done} of the chunk done before it did")
        self.done = done


class BrokerError(QueuecoreError):
    """Redis could not be reached or refused the operation. The subclasses say which: ``RedisUnavailable``,
    ``RedisFull``, ``WrongKeyType``; a plain ``BrokerError`` is any other refusal (an ACL, a cluster's
    cross-slot refusal, an argument Redis rejects)."""


class WrongServer(BrokerError):
    """The server the Redis URL names is not what the URL says: no cluster node behind a
    ``redis+cluster://`` URL, no sentinel behind a ``redis+sentinel://`` one, or a database number
    beyond what that Redis has. A setting to correct, not an outage."""


class RedisUnavailable(BrokerError):
    """Redis could not be reached: connection refused or lost, a timeout, a cluster failing over, a
    sentinel naming no master."""


class RedisFull(BrokerError):
    """Redis is at ``maxmemory`` and refuses writes."""


class WrongKeyType(BrokerError):
    """A key under our prefix holds the wrong Redis type (corrupt or foreign data); nothing was written.

    ``key`` names the key when it is known, ``task_id`` the task when the key is a task hash."""

    def __init__(self, *args: object, key: str | None = None, task_id: str | None = None) -> None:
        super().__init__(*args)
        self.key = key
        self.task_id = task_id


class TaskDecodeError(QueuecoreError, ValueError):
    """Stored task data could not be decoded."""


class TaskFailed(QueuecoreError):
    """A task ended without a result: archived after an attempt failed for good (its retries spent,
    ``SkipRetry``, a payload that does not fit its handler, a worker lost too often). Raised by
    ``TaskHandle.get``.

    It carries the remote error: ``error_type``, the class path of the exception the handler raised
    (``"myapp.mail.SMTPError"``; None when the core archived the task for a reason of its own, such as
    its worker being lost), ``error_message``, ``traceback`` (the handler's frames, ``""`` when there
    were none), ``error`` (the whole text stored on the task) and ``task`` (its final ``TaskInfo``).
    ``reason`` says how it ended: ``"failed"``, ``"cancelled"`` (``TaskWasCancelled``) or
    ``"archived"`` (``TaskWasArchived``).
    """

    reason = "failed"

    def __init__(self, message: str, *, task_id: str, queue: str, error_type: str | None = None,
                 error_message: str = "", traceback: str = "", error: str = "", task: Any = None) -> None:
        super().__init__(message)
        self.task_id = task_id
        self.queue = queue
        self.error_type = error_type
        self.error_message = error_message
        self.traceback = traceback
        self.error = error
        self.task = task


class TaskWasCancelled(TaskFailed):
    """An operator cancelled the task while it ran: it was archived as "cancelled by operator"."""

    reason = "cancelled"


class TaskWasArchived(TaskFailed):
    """An operator archived the task before it could finish (its last error, if any, is carried)."""

    reason = "archived"


class WorkerLost(QueuecoreError):
    """The error class of an attempt the core itself ended: its worker was lost (its lease expired),
    or its task was archived by the repair pass (Django's task results name it in ``errors``)."""


class ResultNotKept(QueuecoreError):
    """The task keeps no result (its retention is 0), so there is nothing to wait for: enqueue it with
    ``retention=`` or set the connection's ``default_retention`` (``QUEUECORE['DEFAULT_RETENTION']``)."""


class ResultTimeout(QueuecoreError, TimeoutError):
    """The task did not finish within the time a caller was willing to wait for it."""


class SkipRetry(Exception):
    """Raise from a handler to archive the task at once instead of retrying it."""


_TEN_YEARS = 10 * 365 * 24 * 3600.0  # limits.MAX_DURATION (limits imports this module)


class Snooze(Exception):
    """Raise or return ``Snooze(seconds)`` from a handler to run the task again after ``seconds``
    without consuming a retry (say, to poll an external job). Each snooze adds one to the task's
    ``snoozed`` count; its retries and ``max_retry`` are untouched. ``seconds``: 0 to 10 years."""

    def __init__(self, seconds: float) -> None:
        try:
            value = float(seconds)
        except (TypeError, ValueError):
            raise InvalidOption(f"Snooze seconds must be a number, got {seconds!r}") from None
        if not 0 <= value <= _TEN_YEARS:
            raise InvalidOption(f"Snooze seconds is out of range: got {seconds!r}; allowed: 0 to {_TEN_YEARS:.0f}")
        super().__init__(value)
        self.seconds = value


class TaskCancelled(BaseException):
    """Raised inside a handler that is cancelled by an operator.

    It derives from ``BaseException`` so that a handler's ``except Exception`` does not swallow it.
    """


class TaskTimeout(BaseException):
    """Raised inside a handler that ran past its timeout or deadline; also the error of that attempt
    as ``ERROR_HANDLER`` and ``RETRY_DELAY`` receive it (its message says after how long)."""


class DeadlinePassed(TaskTimeout):
    """The error of an attempt that would have started after its task's ``deadline``: the handler is
    not called and the task is archived at once (a retry could only start later still)."""


class BatchEnqueueError(QueuecoreError):
    """Some tasks of an ``enqueue_many`` batch were refused; the others were enqueued."""

    def __init__(self, enqueued: list[Any], errors: dict[int, QueuecoreError]) -> None:
        self.enqueued = enqueued
        self.errors = errors
        first = next(iter(errors.values()))
        super().__init__(f"{len(errors)} of {len(errors) + len(enqueued)} tasks were refused; first: {first}")
