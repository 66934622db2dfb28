"""queuecore: a Redis-backed background task queue for Python and Django.

The public API is re-exported here from the pure core; nothing in this module needs Django
settings, so plain Python programs can enqueue tasks and run workers. Whenever Django settings are
configured, ``Client()``, ``Inspector()``, ``Worker()`` and ``queuecore.enqueue`` built without a
connection use the ``QUEUECORE`` setting's (``_django_connection`` below); otherwise the environment's.
"""

import sys

from queuecore.core.alerts import Alert, AlertEvent, WebhookSender
from queuecore.core.client import Client, enqueue, get_default_client, result, set_default_client_factory
from queuecore.core.clock import Clock, FakeClock, SystemClock
from queuecore.core.config import ConnectionConfig, WorkerConfig, default_retry_delay, set_connection_provider
from queuecore.core.context import TaskContext, current_task
from queuecore.core.errors import (
    BatchEnqueueError,
    BrokerError,
    ConfigurationError,
    DeadlinePassed,
    DuplicateTask,
    InvalidOption,
    InvalidPayload,
    InvalidTaskState,
    NoWorkerForTask,
    PageNotFound,
    PayloadMismatch,
    PeriodicEntryNotFound,
    QueuecoreError,
    QueueNotEmpty,
    QueueNotFound,
    RedisFull,
    RedisUnavailable,
    ResultNotKept,
    ResultTimeout,
    SkipRetry,
    TaskCancelled,
    TaskDecodeError,
    TaskFailed,
    TaskIdConflict,
    TaskNotFound,
    TaskTimeout,
    TaskWasArchived,
    TaskWasCancelled,
    WrongKeyType,
    WrongServer,
)
from queuecore.core.flow import LimitInfo, LimitUsage, Snooze
from queuecore.core.inspector import Inspector
from queuecore.core.message import (
    AuditEntry,
    DailyStats,
    QueueInfo,
    ServerInfo,
    TaskInfo,
    WaitingTaskInfo,
    WorkerInfo,
)
from queuecore.core.registry import TaskRegistry, TaskRequest, default_registry
from queuecore.core.results import TaskHandle
from queuecore.core.states import TaskState
from queuecore.core.task import TaskFunction, task
from queuecore.core.worker import Worker

__all__ = [
    "Alert",
    "AlertEvent",
    "AuditEntry",
    "BatchEnqueueError",
    "BrokerError",
    "Client",
    "Clock",
    "ConfigurationError",
    "ConnectionConfig",
    "DailyStats",
    "DeadlinePassed",
    "DuplicateTask",
    "FakeClock",
    "Inspector",
    "InvalidOption",
    "InvalidPayload",
    "InvalidTaskState",
    "LimitInfo",
    "LimitUsage",
    "NoWorkerForTask",
    "PageNotFound",
    "PayloadMismatch",
    "PeriodicEntryNotFound",
    "QueueInfo",
    "QueueNotEmpty",
    "QueueNotFound",
    "QueuecoreError",
    "RedisFull",
    "RedisUnavailable",
    "ResultNotKept",
    "ResultTimeout",
    "ServerInfo",
    "SkipRetry",
    "Snooze",
    "SystemClock",
    "TaskCancelled",
    "TaskContext",
    "TaskDecodeError",
    "TaskFailed",
    "TaskFunction",
    "TaskHandle",
    "TaskIdConflict",
    "TaskInfo",
    "TaskNotFound",
    "TaskRegistry",
    "TaskRequest",
    "TaskState",
    "TaskTimeout",
    "TaskWasArchived",
    "TaskWasCancelled",
    "WaitingTaskInfo",
    "WebhookSender",
    "Worker",
    "WorkerConfig",
    "WorkerInfo",
    "WrongKeyType",
    "WrongServer",
    "current_task",
    "default_registry",
    "default_retry_delay",
    "enqueue",
    "enqueue_on_commit",
    "get_default_client",
    "result",
    "set_default_client_factory",
    "task",
]


def _django_connection() -> ConnectionConfig | None:
    """``QUEUECORE``'s connection when Django settings are configured, else ``None`` (the environment).

    Django is never imported here: a program whose settings are configured has imported it already.
    """
    django_conf = sys.modules.get("django.conf")
    if django_conf is None or not django_conf.settings.configured:
        return None
    from queuecore.conf import default_connection

    return default_connection()


set_connection_provider(_django_connection)


def __getattr__(name: str) -> object:
    # Django-only helpers load on first use, so plain Python programs never import Django's ORM.
    if name == "enqueue_on_commit":
        from queuecore.on_commit import enqueue_on_commit

        return enqueue_on_commit
    raise AttributeError(f"module 'queuecore' has no attribute {name!r}")

__version__ = "0.1.0"
