"""OpenTelemetry tracing (the ``otel`` extra: ``pip install 'queuecore[otel]'``).

A span ``send {queue}`` (kind PRODUCER) per enqueued task, and a span ``process {queue}`` (kind
CONSUMER) per attempt, around the handler and its middleware. Both carry the messaging semantic
conventions (``messaging.system="queuecore"``, ``messaging.destination.name``,
``messaging.message.id``, ``messaging.operation.type``/``.name``) plus ``queuecore.task.type`` and,
on ``process``, ``queuecore.task.attempt`` (1 for the first attempt). The ``send`` span's context
is stored in the task message (its ``trace`` field: the W3C ``traceparent`` and ``tracestate``, a
hundred bytes or so, outside the payload and its size bound), so the ``process`` span is its child,
and a web request's trace continues into the worker. A handler's exception is recorded on its span
(status ERROR) — but a ``Snooze``, which is not a failure; an interrupt (a timeout, a cancel) is
recorded with the reason it was asked to stop (``TaskTimeout: timed out after 1s``, as the worker's
log says). An enqueue Redis refuses (a held unique lock, a taken id, Redis full) ends its ``send``
span with that error. An attempt that fails before its handler could run (no handler for its type,
its deadline passed, an undecodable message) still counts as a processed and failed attempt: the
processor gives it a ``process`` span of its own, with its error (``failed_attempt``).

**Zero cost when the extra is not installed**: ``get()`` tries ``import opentelemetry`` once per
process and returns None; the ``Client`` and the ``Processor`` call it once when built and keep the
answer, so per task the disabled path is one ``is not None`` test. ``disable()`` turns tracing off
in a process where opentelemetry is installed (clients and workers built afterwards do not trace).
The spans go wherever the application's tracer provider sends them (none configured: the API's
no-op spans).
"""

from __future__ import annotations

import asyncio
import inspect
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

from queuecore.core.context import _current
from queuecore.core.errors import Snooze, TaskCancelled, TaskTimeout
from queuecore.core.reasons import NOT_TIMEOUTS, SHUTDOWN
from queuecore.core.text import error_message

MESSAGING_SYSTEM = "queuecore"
CARRIER_KEYS = ("traceparent", "tracestate")
MAX_CARRIER_VALUE = 512  # characters per stored field: a bound on what a message carries (W3C allows 512)

# Raised into a handler without a message (thrown into its thread, or its coroutine cancelled): the reason
# its task was asked to stop (``TaskContext.cancel_reason``) says what happened.
_INTERRUPTS = (TaskTimeout, TaskCancelled, asyncio.CancelledError)

_UNRESOLVED: Any = object()
_tracing: Any = _UNRESOLVED
_disabled = False


def get() -> Tracing | None:
    """The process's ``Tracing``, or None when opentelemetry is not installed (or ``disable()``d)."""
    global _tracing
    if _disabled:
        return None
    if _tracing is _UNRESOLVED:
        try:
            from opentelemetry import context, propagate, trace
        except ImportError:
            _tracing = None
        else:
            _tracing = Tracing(trace, propagate, context)
    return _tracing  # type: ignore[no-any-return]


def use(provider: Any | None) -> None:
    """Send queuecore's spans to ``provider`` (a ``TracerProvider``) instead of the global one; None
    goes back to the global provider. Clients and workers built afterwards follow it."""
    global _tracing
    if provider is None:
        _tracing = _UNRESOLVED
        return
    from opentelemetry import context, propagate, trace

    _tracing = Tracing(trace, propagate, context, provider=provider)


def disable() -> None:
    """No spans from clients and workers built from now on in this process."""
    global _disabled
    _disabled = True


def enable() -> None:
    """Undo ``disable()`` (tracing again when opentelemetry is installed)."""
    global _disabled
    _disabled = False


def clean_carrier(value: Any) -> dict[str, str] | None:
    """The trace fields of a stored message that are well-formed and bounded, or None."""
    if not isinstance(value, Mapping):
        return None
    carrier = {k: v for k in CARRIER_KEYS
               if isinstance(v := value.get(k), str) and 0 < len(v) <= MAX_CARRIER_VALUE}
    return carrier or None


class Tracing:
    """Spans for enqueues and attempts, over the opentelemetry API modules it is given."""

    def __init__(self, trace: Any, propagate: Any, context: Any, provider: Any = None) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            own_version = version("queuecore")
        except PackageNotFoundError:  # running from a checkout that is not installed
            own_version = None
        self._trace = trace
        self._propagate = propagate
        self._context = context
        # The global provider's tracer is a proxy: it follows a provider the application sets later.
        self._tracer = trace.get_tracer("queuecore", own_version, tracer_provider=provider)
        # Without a provider of the application's (the API's proxy, or its no-op one) spans are no-ops
        # and nothing can be propagated: skip the span work (a type check per task).
        self._own_provider = provider is not None
        self._on = self._own_provider  # a provider is set (never unset again: the API allows one)
        self._next_check = 0.0  # monotonic: while none is set, look again at most once a second
        self._off_types = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
        self._producer = trace.SpanKind.PRODUCER
        self._consumer = trace.SpanKind.CONSUMER

    def active(self) -> bool:
        """True once a tracer provider is set (``trace.set_tracer_provider``, or ``use``); one set
        after this was built is seen within a second (looking costs an environment lookup)."""
        if self._on:
            return True
        now = time.monotonic()
        if now < self._next_check:
            return False
        self._next_check = now + 1.0
        self._on = not isinstance(self._trace.get_tracer_provider(), self._off_types)
        return self._on

    # -- producer -------------------------------------------------------------------------------------

    def start_send(self, queue: str, task_id: str, type_name: str) -> tuple[Any, dict[str, str] | None]:
        """Start the ``send {queue}`` span (a child of the current span); returns it and the carrier
        to store in the message; (None, None) while no provider is set."""
        if not self.active():
            return None, None
        span = self._tracer.start_span(f"send {queue}", kind=self._producer, attributes={
            "messaging.system": MESSAGING_SYSTEM, "messaging.destination.name": queue,
            "messaging.message.id": task_id, "messaging.operation.type": "send",
            "messaging.operation.name": "send", "queuecore.task.type": type_name})
        carrier: dict[str, str] = {}
        self._propagate.inject(carrier, context=self._trace.set_span_in_context(span))
        return span, clean_carrier(carrier)

    def end_send(self, span: Any, error: BaseException | None = None) -> None:
        if span is None:
            return
        if error is not None:
            self._fail(span, error)
        span.end()

    # -- consumer -------------------------------------------------------------------------------------

    def process(self, queue: str, task_id: str, type_name: str, attempt: int, carrier: Mapping[str, str] | None,
                call: Callable[[], Any]) -> Any:
        """Run ``call`` (the handler in its middleware) inside a ``process {queue}`` span, the child of
        the enqueue's span when the message carries one. A coroutine returned by ``call`` (an async
        handler) is wrapped, so the span covers its run and records its error."""
        if not self.active():
            return call()
        span = self._start_process(queue, task_id, type_name, attempt, carrier)
        token = self._context.attach(self._trace.set_span_in_context(span))
        try:
            result = call()
        except BaseException as exc:
            self._fail(span, exc)
            span.end()
            raise
        finally:
            self._context.detach(token)
        if inspect.iscoroutine(result):
            return self._awaited(span, result)
        _mark_returned(span, result)
        span.end()
        return result

    def failed_attempt(self, queue: str, task_id: str, type_name: str, attempt: int,
                       carrier: Mapping[str, str] | None, error: BaseException) -> None:
        """The ``process`` span of an attempt that failed before its handler could run (``error`` says
        why): started and ended at once, the child of the enqueue's span as any attempt's."""
        if not self.active():
            return
        span = self._start_process(queue, task_id, type_name, attempt, carrier)
        self._fail(span, error, classified=True)
        span.end()

    def _start_process(self, queue: str, task_id: str, type_name: str, attempt: int,
                       carrier: Mapping[str, str] | None) -> Any:
        parent = self._propagate.extract(carrier) if carrier else None
        return self._tracer.start_span(f"process {queue}", context=parent, kind=self._consumer, attributes={
            "messaging.system": MESSAGING_SYSTEM, "messaging.destination.name": queue,
            "messaging.message.id": task_id, "messaging.operation.type": "process",
            "messaging.operation.name": "process", "queuecore.task.type": type_name,
            "queuecore.task.attempt": attempt})

    async def _awaited(self, span: Any, coroutine: Any) -> Any:
        token = self._context.attach(self._trace.set_span_in_context(span))
        try:
            result = await coroutine
            _mark_returned(span, result)
            return result
        except BaseException as exc:
            self._fail(span, exc)
            raise
        finally:
            self._context.detach(token)
            span.end()

    def _fail(self, span: Any, error: BaseException, classified: bool = False) -> None:
        """Record ``error`` on ``span``: raised where the span was current (an interrupt then stands for
        the reason its task was asked to stop), or ``classified`` already (an outcome's error)."""
        if isinstance(error, Snooze):
            span.set_attribute("queuecore.task.snoozed", True)
            return
        if not classified and isinstance(error, _INTERRUPTS):
            task = _current.get()
            if task is not None and task.cancel_reason == SHUTDOWN:  # handed back to pending: no failure
                span.set_attribute("queuecore.task.handed_back", True)
                return
            error = _interrupt_error(error)
        message = error_message(error)
        try:
            span.record_exception(error)
        except Exception:  # the SDK reads str(error), which may raise: the same event, its message readable
            span.add_event("exception", {"exception.type": type(error).__name__, "exception.message": message,
                                         "exception.stacktrace": "".join(traceback.format_exception(error))})
        span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, f"{type(error).__name__}: {message}"))


def _mark_returned(span: Any, result: Any) -> None:
    """A handler that returned ``Snooze(...)`` snoozed, as one that raised it."""
    if isinstance(result, Snooze):
        span.set_attribute("queuecore.task.snoozed", True)


def _interrupt_error(error: BaseException) -> BaseException:
    """The error an interrupt stands for, as the worker records it (``outcome.classify``): a timeout's
    ``TaskTimeout`` with its reason (an async handler's is a ``CancelledError``), another interrupt with
    the reason its task was asked to stop when it came without a message of its own."""
    task = _current.get()
    reason = task.cancel_reason if task is not None else None
    if not reason:
        return error
    if reason not in NOT_TIMEOUTS:
        return TaskTimeout(reason).with_traceback(error.__traceback__)
    if error_message(error):
        return error
    try:
        return type(error)(reason).with_traceback(error.__traceback__)
    except Exception:  # a subclass whose constructor takes other arguments
        return error
