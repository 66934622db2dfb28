"""The context of the task a handler is running, available through ``current_task()``."""

from __future__ import annotations

import contextvars
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from queuecore.core.errors import ConfigurationError, TaskCancelled
from queuecore.core.text import storable_text

_current: contextvars.ContextVar[TaskContext | None] = contextvars.ContextVar("queuecore_task", default=None)
# Guards the lazy creation of a context's cancel event (only a handler that waits for a cancel gets
# one: a threading.Event per task cost about 5 % of a no-op drain's GIL time).
_cancel_lock = threading.Lock()
NOTE_CHARS = 200  # of a progress note


def _finite(value: float) -> bool:
    """True for a number a float can hold that is not NaN or infinite (an int too large is not)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _shown(value: object) -> str:
    """``value`` for an error message, short (an integer too long to print as text is described)."""
    if isinstance(value, int) and value.bit_length() > 128:
        return f"an integer of {value.bit_length():,} bits"
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:40]}…"


@dataclass(frozen=True)
class Progress:
    """How far a running task has come, as its handler said (``TaskContext.set_progress``)."""

    done: float
    total: float | None = None
    note: str | None = None

    @classmethod
    def of(cls, done: float, total: float | None = None, note: str | None = None) -> Progress:
        """Checked: finite numbers, ``0 <= done``, ``total > 0`` when given; the note cut to 200 characters."""
        for name, value in (("done", done), ("total", total)):
            if value is None and name == "total":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not _finite(value) or value < 0:
                raise ConfigurationError(f"progress {name} must be a finite number >= 0, got {_shown(value)}")
        if total is not None and total == 0:
            raise ConfigurationError("progress total must be above 0")
        if note is not None and not isinstance(note, str):
            raise ConfigurationError(f"progress note must be text, got {type(note).__name__}")
        return cls(float(done), None if total is None else float(total),
                   storable_text(note[:NOTE_CHARS]) if note else None)

    @property
    def fraction(self) -> float | None:
        """``done / total`` between 0 and 1; None without a total."""
        return None if self.total is None else max(0.0, min(1.0, self.done / self.total))

    def to_dict(self) -> dict[str, Any]:
        return {"done": self.done, "total": self.total, "note": self.note, "fraction": self.fraction}

    @classmethod
    def from_dict(cls, data: Any) -> Progress | None:
        """A progress read back from a heartbeat; None when it is missing or malformed."""
        try:
            return cls.of(data["done"], data.get("total"), data.get("note"))
        except (ConfigurationError, TypeError, KeyError, AttributeError):
            return None


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
    cancel_reason: str | None = None
    progress: Progress | None = None  # what the handler last reported (``set_progress``)
    _cancelled: bool = field(default=False, repr=False)
    _cancel_event: threading.Event | None = field(default=None, repr=False)  # made by the first wait

    def set_progress(self, done: float, total: float | None = None, note: str | None = None) -> None:
        """Say how far the task has come: ``done`` of ``total`` (units of your choice; no total: a
        count), with an optional short ``note``. Kept in this process and published with its next
        heartbeat: the dashboard, ``adminctl task inspect`` and ``worker ls`` show it. Cheap: call it
        as often as you like."""
        self.progress = Progress.of(done, total, note)

    @property
    def cancelled(self) -> bool:
        """True once an operator (or shutdown, or a lost lease) asked this task to stop."""
        return self._cancelled

    def raise_if_cancelled(self) -> None:
        """Raise ``TaskCancelled`` when the task was asked to stop; call it in long loops."""
        if self._cancelled:
            raise TaskCancelled(self.cancel_reason or "cancelled")

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Block up to ``timeout`` seconds for a cancel request; True if one came."""
        with _cancel_lock:
            if self._cancelled:
                return True
            if self._cancel_event is None:
                self._cancel_event = threading.Event()
            event = self._cancel_event
        return event.wait(timeout)

    def request_cancel(self, reason: str) -> None:
        """Ask the task to stop (the first reason is kept); wakes a handler in ``wait_cancelled``."""
        with _cancel_lock:
            if self._cancelled:
                return
            self.cancel_reason = reason
            self._cancelled = True
            event = self._cancel_event
        if event is not None:
            event.set()


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
    """Wraps every handler: ``middleware(ctx, call_next)`` returns ``call_next()``. For an async handler
    that is its coroutine, not yet run: a middleware that acts after the run returns a coroutine of
    its own awaiting it (``queuecore.middleware.django_db_connections``)."""

    def __call__(self, ctx: TaskContext, call_next: Callable[[], Any]) -> Any: ...


def call_with_middleware(middleware: Sequence[Middleware], ctx: TaskContext, call: Callable[[], Any]) -> Any:
    """Run ``call`` inside ``middleware``, the first one outermost."""
    for wrapper in reversed(middleware):
        call = (lambda m, nxt: lambda: m(ctx, nxt))(wrapper, call)
    return call()
