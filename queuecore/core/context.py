"""The context of the task a handler is running, available through ``current_task()``."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from queuecore.core.errors import TaskCancelled

_current: contextvars.ContextVar[TaskContext | None] = contextvars.ContextVar("queuecore_task", default=None)


@dataclass
class TaskContext:
    """What a handler may want to know about the task it runs, and whether to stop."""

    id: str
    queue: str
    type: str
    retried: int
    max_retry: int
    payload: dict[str, Any]
    deadline: float | None = None  # unix seconds by which the attempt must finish
    enqueued_at: float | None = None  # unix seconds
    priority: int = 0  # the priority it was enqueued with (> 0: it went to the head of its queue)
    worker_id: str = ""  # the server id of the worker process running it
    _cancel: threading.Event = field(default_factory=threading.Event, repr=False)
    cancel_reason: str | None = None

    @property
    def cancelled(self) -> bool:
        """True once an operator (or shutdown, or a lost lease) asked this task to stop."""
        return self._cancel.is_set()

    def raise_if_cancelled(self) -> None:
        """Raise ``TaskCancelled`` when the task was asked to stop; call it in long loops."""
        if self._cancel.is_set():
            raise TaskCancelled(self.cancel_reason or "cancelled")

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Block up to ``timeout`` seconds for a cancel request; True if one came."""
        return self._cancel.wait(timeout)

    def request_cancel(self, reason: str) -> None:
        if not self._cancel.is_set():
            self.cancel_reason = reason
            self._cancel.set()


def current_task() -> TaskContext:
    """The context of the task the calling handler is running; ``RuntimeError`` outside a task."""
    ctx = _current.get()
    if ctx is None:
        raise RuntimeError("current_task() called outside a running queuecore task")
    return ctx


def set_current(ctx: TaskContext | None) -> contextvars.Token[TaskContext | None]:
    return _current.set(ctx)


def reset_current(token: contextvars.Token[TaskContext | None]) -> None:
    _current.reset(token)


class Middleware(Protocol):
    """Wraps the start of every handler: ``middleware(ctx, call_next)`` returns ``call_next()``."""

    def __call__(self, ctx: TaskContext, call_next: Callable[[], Any]) -> Any: ...


def call_with_middleware(middleware: Sequence[Middleware], ctx: TaskContext, call: Callable[[], Any]) -> Any:
    """Run ``call`` inside ``middleware``, the first one outermost."""
    for wrapper in reversed(middleware):
        call = (lambda m, nxt: lambda: m(ctx, nxt))(wrapper, call)
    return call()
