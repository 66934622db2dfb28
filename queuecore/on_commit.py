"""Enqueue after the surrounding database transaction commits."""

from __future__ import annotations

import uuid
from typing import Any

from django.db import transaction

from queuecore.core.client import get_default_client
from queuecore.core.task import TaskFunction


def enqueue_on_commit(task: str | TaskFunction, payload: dict[str, Any] | None = None, *, using: str | None = None,
                      **options: Any) -> str:
    """Enqueue when the current transaction commits (at once outside one); returns the task id.

    The payload is validated now, so a bad call fails where it is made; if the transaction
    rolls back, nothing is enqueued.
    """
    client = get_default_client()
    options.setdefault("task_id", uuid.uuid4().hex)
    client.check(task, payload, **options)  # fail here, not after the commit
    transaction.on_commit(lambda: client.enqueue(task, payload, **options), using=using)
    return options["task_id"]
