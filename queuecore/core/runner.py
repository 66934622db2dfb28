"""The runner: runs one fetched attempt, from its start to the outcome it hands to be finalized.

It admits the attempt through its task type's limits (``flow.py``), starts its timeout, binds the
payload and calls the handler inside the middleware (and the otel span), and classifies how the
call ended (``outcome.py``). The processor dispatches attempts to it and finalizes what it returns.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from queuecore.core.clock import Clock, format_duration
from queuecore.core.context import Middleware, call_with_middleware, reset_current, set_current
from queuecore.core.errors import DeadlinePassed, InvalidPayload, PayloadMismatch, TaskCancelled, TaskTimeout
from queuecore.core.flow import LimitGate
from queuecore.core.handlers import AsyncLoop, interrupt_thread
from queuecore.core.outcome import Outcome, classify, held_back, returned
from queuecore.core.registry import Handler
from queuecore.core.running import Running

logger = logging.getLogger("queuecore.worker")


class Runner:
    """Runs attempts (see the module). It receives the default timeout, the middleware, the clock,
    the limit gate, the event loop of async handlers and the otel tracer (None without the extra),
    and three callables of the processor's: ``finalize(running, outcome)`` (True when this call wrote
    the outcome), ``free_run_slot(running)`` and ``confirm_lease(running)`` (an attempt whose lease
    ran out, or is within ``lease_margin`` seconds of it, before it started: extend it if still its
    own, True then). The margin covers the clocks of this process and of the recoverers that may have
    taken the task: a renewal overdue by that much means this process was paused or starved."""

    def __init__(self, default_timeout: float | None, middleware: Sequence[Middleware], clock: Clock,
                 limits: LimitGate, async_loop: AsyncLoop, tracer: Any,
                 finalize: Callable[[Running, Outcome | None], bool],
                 free_run_slot: Callable[[Running], None],
                 confirm_lease: Callable[[Running], bool] = lambda running: True, lease_margin: float = 0.0) -> None:
        self._default_timeout = default_timeout
        self._middleware = middleware
        self._clock = clock
        self._limits = limits
        self._async_loop = async_loop
        self._tracing = tracer
        self._finalize = finalize
        self._free_run_slot = free_run_slot
        self._confirm_lease = confirm_lease
        self._lease_margin = lease_margin

    def _lease_ran_out(self, running: Running) -> bool:
        """Its lease, as this process last extended it, has run out or nearly (it waited for a run slot
        while the process was paused or starved): it must be confirmed before its handler runs."""
        return 0 < running.lease_until <= self._clock.now() + self._lease_margin and not running.finalized

    def _still_ours(self, running: Running) -> bool:
        """Confirm a lease that ran out (``_lease_ran_out``); when it is no longer this attempt's, the
        attempt ends writing nothing: another worker runs, or has run, the task."""
        if self._confirm_lease(running):
            return True
        self._finalize(running, Outcome("lost"))
        return False

    def _begin(self, running: Running) -> None:
        """The handler starts now: its timeout counts from here (not from when it was fetched)."""
        now = self._clock.now()
        message = running.message
        timeout = message.timeout if message.timeout is not None else self._default_timeout
        deadline = now + timeout if timeout else None
        if message.deadline is not None:
            deadline = message.deadline if deadline is None else min(deadline, message.deadline)
        running.started = now
        running.deadline = running.ctx.deadline = deadline
        running.begun = True

    def _call_handler(self, running: Running, handler: Handler, traced: bool = True) -> Any:
        """Bind the payload to the handler, then call it inside the middleware. A payload that does
        not fit the handler's signature (a missing or unexpected argument name) raises
        ``PayloadMismatch`` before any middleware runs: the task is archived at once, since a retry
        would fail the same way (a ``TypeError`` raised inside the handler is an ordinary failure).
        With the otel extra, all of it runs in the attempt's ``process`` span (tracing.py)."""
        if traced and self._tracing is not None:
            running.traced = True
            message = running.message
            return self._tracing.process(running.queue, running.id, message.type, running.retried + 1, message.trace,
                                         lambda: self._call_handler(running, handler, False))
        payload = running.message.payload
        try:
            handler.check_payload(payload)
        except InvalidPayload as exc:
            raise PayloadMismatch(str(exc)) from None
        func = handler.func
        return call_with_middleware(self._middleware, running.ctx, lambda: func(**payload))

    def _admit(self, running: Running, handler: Handler) -> bool:
        """A task type with limits takes its concurrency slot and rate-window place before its handler
        starts (one script call). When the limits hold it back, the attempt ends without counting:
        the task is parked until it may run (flow.py) and False is returned."""
        limits = handler.limits
        if limits is None or running.finalized or running.ctx.cancelled:
            return True
        message = running.message
        if message.deadline is not None and self._clock.now() >= message.deadline:
            return True  # it will not run (_check_start archives it): it takes no slot nor a rate place
        try:
            hold, wait, why = self._limits.acquire(limits, message.type, running.queue, running.id, message.payload,
                                                   running.lease)
        except Exception as exc:  # Redis away or a corrupt limit key: try again in a second
            logger.warning("could not check the limits of task %s (%s): %s", running.id, message.type, exc)
            hold, wait, why = None, 1.0, f"limits of {message.type} unavailable"
        if not why:
            with running.lock:  # as _finalize reads it: one of the two releases the slot
                if not running.finalized:
                    running.limit_hold = hold
                    return True
            # Ended while the slot was being taken (abandoned, cancelled, its lease lost, with Redis slow
            # to answer): no one else would give it back, and the gate would renew it for good.
            if hold is not None:
                self._limits.release(hold)
            return False
        if self._finalize(running, held_back(wait, why)) and why.startswith("concurrency"):
            try:
                self._limits.wait_for_slot(limits, message.type, running.queue, running.id, message.payload)
            except Exception as exc:  # it comes back by itself when the earliest slot would expire
                logger.warning("could not list task %s as waiting for a slot: %s", running.id, exc)
        return False

    def run_sync(self, running: Running, handler: Handler | None) -> None:
        """Run an attempt on this (handler) thread; its run slot is freed at the end."""
        try:
            if self._lease_ran_out(running) and not self._still_ours(running):
                return
            if handler is not None and handler.limits is not None and not self._admit(running, handler):
                return
            self._run_sync_attempt(running, handler)
        finally:
            self._free_run_slot(running)

    def _run_sync_attempt(self, running: Running, handler: Handler | None) -> None:
        outcome: Outcome | None = None
        token = set_current(running.ctx)
        try:
            try:
                with running.lock:
                    if running.finalized:
                        return
                    running.thread_ident = threading.get_ident()
                    running.in_handler = True
                    self._begin(running)
                _check_start(running)
                if handler is None:
                    raise LookupError(f"no handler is registered for task type {running.message.type!r} "
                                      "in this worker")
                outcome = returned(self._call_handler(running, handler))
            except BaseException as exc:
                outcome = classify(exc, running.ctx.cancel_reason)
            with running.lock:
                running.in_handler = False
                if running.interrupted_at is not None:
                    interrupt_thread(threading.get_ident(), None)  # drop an interrupt that came too late
        except (TaskCancelled, TaskTimeout) as exc:  # an interrupt landed between handler and here
            with running.lock:
                running.in_handler = False
            outcome = outcome or classify(exc, running.ctx.cancel_reason)
        finally:
            reset_current(token)
        self._finalize(running, outcome)

    async def run_async(self, running: Running, handler: Handler) -> None:
        """Run an attempt of an async handler on the event loop; its run slot is freed at the end."""
        try:
            if self._lease_ran_out(running) and not await self._async_loop.in_thread(self._still_ours, running):
                return
            if handler.limits is not None and not await self._async_loop.in_thread(self._admit, running, handler):
                return
            await self._run_async_attempt(running, handler)
        finally:
            self._free_run_slot(running)

    async def _run_async_attempt(self, running: Running, handler: Handler) -> None:
        if running.finalized:  # handed back while it waited to start
            return
        token = set_current(running.ctx)
        try:
            self._begin(running)
            _check_start(running)
            result = self._call_handler(running, handler)
            if asyncio.iscoroutine(result):
                result = await result
            outcome = returned(result)
        except BaseException as exc:  # includes CancelledError
            outcome = classify(exc, running.ctx.cancel_reason)
        finally:
            reset_current(token)
        if outcome.kind == "success":
            self._finalize(running, outcome)  # hands it to the acker: no blocking call, no thread hop
        else:
            await self._async_loop.in_thread(self._finalize, running, outcome)


def _check_start(running: Running) -> None:
    """Raise what ends an attempt before its handler is called (sync or async): an interrupt that came
    first (deadline, cancel, shutdown), or a start at or after its task's deadline (checked first: the
    supervisor may have seen that deadline pass while the attempt was being started)."""
    deadline = running.message.deadline
    if deadline is not None and running.started >= deadline:
        raise deadline_passed(deadline, running.started)
    if running.ctx.cancelled:
        raise TaskCancelled(running.ctx.cancel_reason or "cancelled")


def deadline_passed(deadline: float, now: float) -> DeadlinePassed:
    """The error of an attempt that would start at ``now``, after its task's ``deadline``."""
    return DeadlinePassed(f"the task's deadline passed {format_duration(now - deadline)} before this attempt "
                          "would have started; its handler was not run")
