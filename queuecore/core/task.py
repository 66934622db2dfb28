"""The ``@task`` decorator and ``TaskFunction``: a registered handler that can enqueue itself."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from queuecore.core.client import Client, check_default_values, get_default_client
from queuecore.core.errors import ConfigurationError, shown
from queuecore.core.flow import TaskLimits
from queuecore.core.registry import (
    DEFAULT_OPTIONS,
    Handler,
    TaskRegistry,
    TaskRequest,
    check_options,
    default_registry,
    over,
)
from queuecore.core.results import TaskHandle


class TaskFunction(Handler):
    """A registered handler. Call it to run it here; ``.enqueue(...)`` to run it on a worker."""

    def enqueue(self, *args: Any, **kwargs: Any) -> TaskHandle:
        """Enqueue a call with the task's default options, on the default client; returns its handle."""
        return _Bound(self, {}).enqueue(*args, **kwargs)

    def using(self, *, client: Client | None = None, **options: Any) -> _Bound:
        """The same task with some options (and optionally the client) overridden."""
        check_options(options)
        return _Bound(self, options, client)


class _Bound:
    """A task with overridden options, from ``TaskFunction.using``."""

    def __init__(self, task: TaskFunction, options: dict[str, Any], client: Client | None = None) -> None:
        self.task = task
        self.options = options
        self.client = client

    def using(self, *, client: Client | None = None, **options: Any) -> _Bound:
        check_options(options)
        return _Bound(self.task, over(self.options, options), client or self.client)

    def request(self, *args: Any, **kwargs: Any) -> TaskRequest:
        """A ``TaskRequest`` carrying the overridden options (they win over the batch's)."""
        return TaskRequest(self.task.name, self.task.bind(*args, **kwargs), dict(self.options), handler=self.task)

    def enqueue(self, *args: Any, **kwargs: Any) -> TaskHandle:
        client = self.client or get_default_client()
        return client.enqueue(self.task, self.task.bind(*args, **kwargs), **self.options)


def task(func: Callable[..., Any] | None = None, *, name: str | None = None,
         registry: TaskRegistry | None = None,
         retry_delay: Callable[[int, BaseException | None], float] | None = None,
         concurrency_limit: int | None = None, rate_limit: str | None = None,
         limit_key: str | Callable[[dict[str, Any]], Any] | None = None,
         **options: Any) -> Any:
    """Register a function (``def`` or ``async def``) as a task type.

    ``@task`` or ``@task(name="emails.send", queue="mail", max_retry=5, timeout=30)``. The type
    name defaults to ``module.function``. Options become the defaults of ``fn.enqueue``.

    ``concurrency_limit=N``: at most N tasks of this type run at once across all workers;
    ``rate_limit="100/m"``: at most 100 start per minute; ``limit_key``: a payload field name (or a
    callable of the payload) to keep those limits per value, say per tenant (``flow.py``).
    """
    check_options(options, DEFAULT_OPTIONS)
    check_default_values(options)
    if retry_delay is not None and not callable(retry_delay):
        raise ConfigurationError(
            f"retry_delay must be a callable (attempt, error) -> seconds, got {shown(retry_delay)}",
            field="retry_delay")
    limits = TaskLimits.build(concurrency_limit, rate_limit, limit_key)

    def decorate(f: Callable[..., Any]) -> TaskFunction:
        type_name = f"{f.__module__}.{f.__qualname__}" if name is None else name
        return (registry or default_registry).register(TaskFunction(f, type_name, dict(options), retry_delay,
                                                                       limits))

    return decorate(func) if func is not None else decorate
