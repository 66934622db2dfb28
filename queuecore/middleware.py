"""Task middleware the Django adapter installs in every worker."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from queuecore.core.context import TaskContext


def django_db_connections(ctx: TaskContext, call_next: Callable[[], Any]) -> Any:
    """Close stale or broken database connections before and after each task, as requests do."""
    from django.db import close_old_connections

    close_old_connections()
    try:
        return call_next()
    finally:
        close_old_connections()
