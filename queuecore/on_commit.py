"""Enqueue after the surrounding database transaction commits.

``enqueue_on_commit(send_welcome, 7, template="promo")`` takes what ``send_welcome.enqueue(7,
template="promo")`` takes, and ``enqueue_on_commit(send_welcome.using(queue="mail"), 7)`` what the
bound task's ``.enqueue`` takes; ``enqueue_on_commit("reports.build", {"report_id": 3},
unique_for=60)`` what ``queuecore.enqueue`` takes. ``enqueue_on_commit_using("other", ...)`` waits
for a transaction on another database.
"""

from __future__ import annotations

import copy
import logging
import uuid
from typing import Any

from django.db import DEFAULT_DB_ALIAS, transaction

from queuecore.core.client import Client, get_default_client
from queuecore.core.registry import Handler
from queuecore.core.task import TaskFunction, _Bound

logger = logging.getLogger("queuecore")


def enqueue_on_commit(task: Any, /, *args: Any, **kwargs: Any) -> str:
    """Enqueue when the current transaction on the default database commits (at once outside one);
    returns the task id.

    ``task`` is a ``@task`` function or a ``.using(...)`` of one, followed by the arguments its
    ``.enqueue`` takes; or a type name followed by a payload dict and enqueue options, as
    ``queuecore.enqueue``. The call is validated now (payload, options, names), so a bad call fails
    where it is made; if the transaction rolls back, nothing is enqueued.
    """
    return enqueue_on_commit_using(DEFAULT_DB_ALIAS, task, *args, **kwargs)


def enqueue_on_commit_using(using: str, task: Any, /, *args: Any, **kwargs: Any) -> str:
    """``enqueue_on_commit`` waiting for the transaction of the database ``using``."""
    if _manual_transaction(transaction.get_connection(using)):
        # As Django's own on_commit: under set_autocommit(False) (or AUTOCOMMIT False) no commit is
        # announced, and enqueuing at once would outlive a rollback.
        raise transaction.TransactionManagementError(
            f"enqueue_on_commit cannot be used in manual transaction management (autocommit is off on database "
            f"{using!r}): wrap the work in transaction.atomic(), or commit first and enqueue with .enqueue()")
    target, payload, options, client = _resolve(task, args, kwargs)
    if options.get("task_id") is None:  # None means "choose one", as in enqueue: chosen here, to be returned
        options["task_id"] = uuid.uuid4().hex
    client.check(target, payload, **options)  # fail here, not after the commit
    # What the call was given, as it was: a dict the caller changes before the commit changes nothing.
    payload = copy.deepcopy(payload)
    task_id = str(options["task_id"])
    if not transaction.get_connection(using).in_atomic_block:
        client.enqueue(target, payload, **options)  # at once: its error is the caller's
        return task_id

    def enqueue_now() -> None:
        # After the commit an error can reach no caller: it is logged, and the transaction's other
        # hooks (other tasks, other apps) still run.
        try:
            client.enqueue(target, payload, **options)
        except Exception as exc:
            name = target if isinstance(target, str) else target.name
            logger.error("task %s (%s) was not enqueued after its transaction committed: %s: %s", task_id, name,
                         type(exc).__name__, exc, extra={"qc_task_id": task_id, "qc_type": name})

    transaction.on_commit(enqueue_now, using=using)
    return task_id


def _manual_transaction(connection: Any) -> bool:
    """True when ``connection`` runs with autocommit off outside an atomic block. Read without
    connecting (a connection is not opened on the event loop): one not yet open will start as its
    ``AUTOCOMMIT`` setting says."""
    if connection.in_atomic_block:
        return False
    if connection.connection is None:
        return not connection.settings_dict.get("AUTOCOMMIT", True)
    return not connection.autocommit


def _resolve(task: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
             ) -> tuple[str | Handler, dict[str, Any] | None, dict[str, Any], Client]:
    """What to enqueue: the handler or type name, the payload, the options and the client."""
    if isinstance(task, str):
        if len(args) > 1:
            raise TypeError("enqueue_on_commit(type_name, payload=None, **options): one payload dict at most")
        return task, args[0] if args else kwargs.pop("payload", None), kwargs, get_default_client()
    if isinstance(task, TaskFunction):
        task = task.using()
    if not isinstance(task, _Bound):
        raise TypeError(f"enqueue_on_commit takes a @task function, its .using(...), or a type name; got {task!r}")
    request = task.request(*args, **kwargs)  # binds the arguments now: InvalidPayload at the call
    return task.task, request.payload, dict(request.options), task.client or get_default_client()
