"""Task middleware the Django adapter installs in every worker."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any

from queuecore.core.context import TaskContext


@contextmanager
def fresh_connections() -> Iterator[None]:
    """Close this thread's stale or broken database connections before and after, as Django does
    around a request."""
    from django.db import close_old_connections

    close_old_connections()
    try:
        yield
    finally:
        close_old_connections()


def django_db_connections(ctx: TaskContext, call_next: Callable[[], Any]) -> Any:
    """Close stale or broken database connections before and after each task, as requests do.

    An async handler's ``call_next()`` only creates its coroutine: its ORM calls run later, in the
    thread ``sync_to_async`` gives them, so that thread's connections are closed around the
    coroutine's run, not here."""
    with fresh_connections():
        result = call_next()
    if inspect.iscoroutine(result):
        return _closing_around(result)
    return result


async def _closing_around(run: Coroutine[Any, Any, Any]) -> Any:
    from asgiref.sync import sync_to_async
    from django.db import close_old_connections

    close = sync_to_async(close_old_connections)  # thread_sensitive: the thread the handler's ORM calls use
    await close()
    try:
        return await run
    finally:
        await close()
