"""The processor: fetches tasks, runs their handlers and writes each outcome back exactly once.

Sync handlers run on a thread pool, async handlers on one event loop thread. A supervisor
thread enforces timeouts and cancellation; a handler that cannot be interrupted is abandoned
(its slot freed, its task failed) after ``abandon_grace`` seconds.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import math
import queue as queue_module
import random
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from queuecore.core.clock import to_ms
from queuecore.core.context import TaskContext, reset_current, set_current
from queuecore.core.errors import SkipRetry, TaskCancelled, TaskDecodeError, TaskTimeout
from queuecore.core.keys import QueueKeys, stats_day, stats_minute
from queuecore.core.message import TaskMessage, dumps
from queuecore.core.redis_errors import is_connection_error
from queuecore.core.scripts import DoneItem

if TYPE_CHECKING:
    from queuecore.core.worker import Worker

logger = logging.getLogger("queuecore.worker")

MAX_ERROR_CHARS = 8000
MAX_RETRY_DELAY = 365 * 24 * 3600.0
CANCELLED_BY_OPERATOR = "cancelled by operator"
SHUTDOWN = "worker shutting down"
LEASE_LOST = "lease lost"


class Middleware(Protocol):
    """Wraps the start of every handler: ``middleware(ctx, call_next)`` returns ``call_next()``."""

    def __call__(self, ctx: TaskContext, call_next: Callable[[], Any]) -> Any: ...


@dataclass
class Running:
    """A task this process holds a lease on."""

    id: str
    queue: str
    lease: int
    retried: int
    message: TaskMessage
    ctx: TaskContext
    started: float  # wall clock seconds
    deadline: float | None
    lock: threading.Lock = field(default_factory=threading.Lock)
    finalized: bool = False
    in_handler: bool = False
    thread_ident: int | None = None
    async_task: asyncio.Task[Any] | None = None
    handed_back: bool = False
    interrupted_at: float | None = None  # monotonic
    cancel_seen_at: float | None = None  # monotonic


class Outcome:
    """What became of one attempt."""

    __slots__ = ("error", "kind", "result")

    def __init__(self, kind: str, result: Any = None, error: BaseException | None = None) -> None:
        self.kind = kind  # "success" | "failure" | "skip_retry" | "cancelled" | "requeue" | "lost"
        self.result = result
        self.error = error


def _set_async_exc(ident: int, exc_type: type[BaseException] | None) -> None:
    value = ctypes.py_object(exc_type) if exc_type is not None else None
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), value)


def format_error(error: BaseException) -> str:
    """``Type: message`` followed by the traceback, cut to ``MAX_ERROR_CHARS``."""
    head = f"{type(error).__name__}: {error}".rstrip(": ")
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename != __file__]
    text = head
    if frames:
        text += "\n\nTraceback (most recent call last):\n" + "".join(traceback.format_list(frames)) + head
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 20] + "\n... (truncated)"


class HandlerPool:
    """At most ``size`` threads running sync handlers; work beyond that waits in the pool's queue.

    An abandoned thread (a handler that ignored its interrupt) no longer counts, so a replacement
    is started in its place.
    """

    def __init__(self, name: str, size: int, on_drained: Callable[[], None] | None = None) -> None:
        self._on_drained = on_drained  # called when a thread takes the last queued piece of work
        self._work: queue_module.SimpleQueue[Callable[[], None] | None] = queue_module.SimpleQueue()
        self._lock = threading.Lock()
        self._size = size
        self._working = 0  # live threads that take work
        self._idle = 0  # of those, how many wait for work
        self._queued = 0  # submitted and not yet taken
        self._threads: set[threading.Thread] = set()
        self._abandoned: set[int] = set()
        self._name = name
        self._count = 0

    def submit(self, fn: Callable[[], None]) -> None:
        with self._lock:
            self._queued += 1
            thread = self._thread_if_short()
        self._work.put(fn)
        if thread is not None:
            thread.start()

    def abandon(self, ident: int) -> None:
        """Let the thread run on, but never give it work again; another takes its place."""
        with self._lock:
            self._abandoned.add(ident)
            self._working -= 1
            thread = self._thread_if_short()
        if thread is not None:
            thread.start()

    def _thread_if_short(self) -> threading.Thread | None:
        """A new (unstarted) thread when queued work outnumbers idle threads and the pool has room.
        The caller holds ``_lock`` and starts the thread after releasing it."""
        if self._queued <= self._idle or self._working >= self._size:
            return None
        self._working += 1
        self._count += 1
        thread = threading.Thread(target=self._run, name=f"{self._name}-{self._count}", daemon=True)
        self._threads.add(thread)
        return thread

    def _run(self) -> None:
        me = threading.current_thread()
        try:
            while True:
                with self._lock:
                    self._idle += 1
                fn = self._work.get()
                with self._lock:
                    self._idle -= 1
                    if fn is not None:
                        self._queued -= 1
                    drained = self._queued == 0
                if fn is None:
                    return
                if drained and self._on_drained is not None:
                    self._on_drained()
                try:
                    fn()
                except BaseException:  # pragma: no cover - _execute catches everything
                    logger.exception("handler thread crashed")
                with self._lock:
                    if me.ident in self._abandoned:
                        self._abandoned.discard(me.ident)
                        return
        finally:
            with self._lock:
                self._threads.discard(me)

    @property
    def queued(self) -> int:
        """Work submitted and not yet taken by a thread."""
        return self._queued

    def shutdown(self) -> None:
        with self._lock:
            n = len(self._threads)
        for _ in range(n):
            self._work.put(None)


class Processor:
    """Fetches tasks into free slots and processes them."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.config = worker.config
        self.scripts = worker.scripts
        self._fetch_scripts = worker.scripts.dedicated()  # used under _fetch_lock only
        self.keys = worker.keys
        self.clock = worker.clock
        self.registry = worker.registry
        # Keyed by (task id, lease): after losing a lease this process may run the same task again
        # while the stale attempt is still going, and the two must not be mixed up.
        self.running: dict[tuple[str, int], Running] = {}
        self._running_lock = threading.Lock()
        self._slots = threading.Condition()
        # Tasks held (leased) at once: the running ones plus a few fetched ahead, so a handler
        # thread never waits for a dequeue round-trip.
        self._free = self.config.concurrency + self.config.prefetch
        # Fetch in batches: wait until this many slots are free, unless the handlers are about to run
        # out of work (then fetch whatever fits at once). Fewer, larger dequeues cost Redis and this
        # process less per task.
        self._fetch_batch = max(1, min(self.config.prefetch, self._free // 2))
        self.wake = threading.Event()
        self._quiet = threading.Event()
        self._fetch_lock = threading.Lock()  # held across each quiet check + dequeue, so stop() is final
        self._stopping = threading.Event()
        self._done = threading.Event()
        self._pool = HandlerPool("queuecore-handler", self.config.concurrency, on_drained=self._wake_fetcher)
        self._async_slots: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._threads: list[threading.Thread] = []
        self._queue_keys = {name: self.keys.queue(name) for name in self.config.queues}
        self._write_deadline: float | None = None  # monotonic; past it, unwritable outcomes are given up
        self._acker = Acker(self)

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        self._acker.start()
        for target, name in ((self._fetch_loop, "fetcher"), (self._supervise_loop, "supervisor")):
            thread = threading.Thread(target=target, name=f"queuecore-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        """Stop fetching new tasks (quiet mode); running tasks go on.

        Once this returns no dequeue is in flight, so no task enqueued afterwards is taken.
        """
        with self._fetch_lock:
            self._quiet.set()
        self.wake.set()

    @property
    def quiet(self) -> bool:
        return self._quiet.is_set()

    def shutdown(self, timeout: float, force: threading.Event | None = None) -> int:
        """Stop fetching, wait up to ``timeout`` for running tasks, then hand the rest back.

        Returns how many tasks were handed back to pending.
        """
        self.stop()
        self._stopping.set()
        self.wake.set()
        with self._slots:
            self._slots.notify_all()
        deadline = time.monotonic() + timeout
        while self.running and time.monotonic() < deadline and not (force and force.is_set()):
            time.sleep(0.01)
        handed_back = 0
        remaining = self.snapshot()
        for running in remaining:
            running.ctx.request_cancel(SHUTDOWN)
            self._interrupt(running, TaskCancelled)
        self._write_deadline = time.monotonic() + max(5.0, self.config.cancel_grace)
        # Interrupted handlers hand their task back themselves; give them a moment, then hand back
        # the rest (a handler that is still running has its outcome ignored: already finalized).
        grace = time.monotonic() + min(1.0, self.config.cancel_grace)
        while any(not r.finalized for r in remaining) and time.monotonic() < grace:
            time.sleep(0.01)
        handed_back = sum(1 for r in remaining if r.finalized and r.handed_back)
        for running in remaining:
            if self._finalize(running, Outcome("requeue")):
                handed_back += 1
        self._acker.stop()  # writes every acknowledgement still queued (bounded by the write deadline)
        self._done.set()
        for thread in self._threads:
            thread.join(timeout=2)
        with self._fetch_lock:
            self._fetch_scripts.close()
        self._pool.shutdown()
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            if self._loop_thread is not None:
                self._loop_thread.join(timeout=2)
            if not self._loop.is_running():
                self._loop.close()
        return handed_back

    def queue_keys(self, name: str) -> QueueKeys:
        """The keys of one of this worker's queues, built and validated once at start."""
        return self._queue_keys.get(name) or self.keys.queue(name)

    def snapshot(self) -> list[Running]:
        with self._running_lock:
            return list(self.running.values())

    # -- fetching ---------------------------------------------------------------------------------

    def queue_order(self) -> list[str]:
        """Queues in the order to try: by weight when strict, else a weighted random permutation."""
        queues = self.config.queues
        if self.config.strict_priority:
            return sorted(queues, key=lambda q: -queues[q])
        names = list(queues)
        weights = [queues[q] for q in names]
        order: list[str] = []
        while names:
            pick = random.choices(range(len(names)), weights=weights)[0]
            order.append(names.pop(pick))
            weights.pop(pick)
        return order

    def _take_slots(self) -> int:
        """Block until a batch of slots is free, or at least one while the handlers have no work
        waiting; returns how many are free (0 when stopping)."""
        with self._slots:
            while not self._stopping.is_set() and not self._may_fetch():
                self._slots.wait(0.5)
            return 0 if self._stopping.is_set() else self._free

    def _may_fetch(self) -> bool:
        return self._free >= self._fetch_batch or (self._free > 0 and self._pool.queued == 0)

    def _release_slot(self) -> None:
        with self._slots:
            self._free += 1
            if self._may_fetch():
                self._slots.notify()

    def _wake_fetcher(self) -> None:
        with self._slots:
            if self._may_fetch():
                self._slots.notify()

    def _fetch_loop(self) -> None:
        backoff = 0.05
        while not self._stopping.is_set():
            if self._quiet.is_set():
                self._stopping.wait(0.2)
                continue
            free = self._take_slots()
            if not free:
                continue
            self.wake.clear()
            try:
                got = self.fetch(free)
                if backoff > 0.05:
                    self.worker.note_redis_ok()
                backoff = 0.05
            except Exception as exc:  # Redis away: log, back off, go on
                self.worker.report_redis_error("fetch", exc)
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            if not got:
                self.wake.wait(self.config.fetch_poll_interval)

    def fetch(self, free: int) -> int:
        """Dequeue up to ``free`` tasks from the queues in priority order and start them."""
        got = 0
        for name in self.queue_order():
            with self._fetch_lock:
                if got >= free or self._quiet.is_set():
                    break
                now = self.clock.now()
                items = self._fetch_scripts.dequeue(self.queue_keys(name), now_ms=to_ms(now),
                                             lease_until_ms=to_ms(now + self.config.lease_duration),
                                             count=free - got)
            for item in items:
                if item.msg is None:
                    logger.error("task %s of queue %s was pending but its data is gone; nothing to run", item.id,
                                 name)
                    continue
                self._start(name, item.id, item.msg, item.lease, item.retried, now)
                got += 1
            if got and not self.config.strict_priority:
                break  # one queue per round keeps the weighted order fair
        return got

    # -- running ----------------------------------------------------------------------------------

    def _start(self, queue: str, task_id: str, msg: str, lease: int, retried: int, now: float) -> None:
        try:
            message = TaskMessage.decode(task_id, queue, msg)
        except TaskDecodeError as exc:
            logger.error("%s; archiving it", exc)
            placeholder = TaskMessage(id=task_id, type="?", payload={}, queue=queue, max_retry=0)
            running = self._register(queue, task_id, lease, retried, placeholder, now)
            self._finalize(running, Outcome("skip_retry", error=exc))
            return
        running = self._register(queue, task_id, lease, retried, message, now)
        handler = self.registry.get(message.type)
        if handler is not None and handler.is_async:
            self._submit_async(running, handler.func)
        else:
            self._pool.submit(lambda: self._execute_sync(running, handler.func if handler else None))

    def _register(self, queue: str, task_id: str, lease: int, retried: int, message: TaskMessage,
                  now: float) -> Running:
        ctx = TaskContext(id=task_id, queue=queue, type=message.type, retried=retried,
                          max_retry=message.max_retry, payload=message.payload)
        running = Running(id=task_id, queue=queue, lease=lease, retried=retried, message=message, ctx=ctx,
                          started=now, deadline=message.deadline)
        with self._slots:
            self._free -= 1
        with self._running_lock:
            self.running[(task_id, lease)] = running
        return running

    def _begin(self, running: Running) -> None:
        """The handler starts now: its timeout counts from here (not from when it was fetched)."""
        now = self.clock.now()
        message = running.message
        timeout = message.timeout if message.timeout is not None else self.config.default_timeout
        deadline = now + timeout if timeout else None
        if message.deadline is not None:
            deadline = message.deadline if deadline is None else min(deadline, message.deadline)
        running.started = now
        running.deadline = running.ctx.deadline = deadline

    def _call_chain(self, ctx: TaskContext, call: Callable[[], Any]) -> Any:
        for middleware in reversed(self.config.middleware):
            call = (lambda m, nxt: lambda: m(ctx, nxt))(middleware, call)
        return call()

    def _execute_sync(self, running: Running, func: Callable[..., Any] | None) -> None:
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
                if running.ctx.cancelled:  # interrupted (deadline, cancel, shutdown) before it started
                    raise TaskCancelled(running.ctx.cancel_reason or "cancelled")
                if func is None:
                    raise LookupError(f"no handler is registered for task type {running.message.type!r} "
                                      "in this worker")
                result = self._call_chain(running.ctx, lambda: func(**running.message.payload))
                outcome = Outcome("success", result)
            except BaseException as exc:
                outcome = self._classify(running, exc)
            with running.lock:
                running.in_handler = False
                if running.interrupted_at is not None:
                    _set_async_exc(threading.get_ident(), None)  # drop an interrupt that came too late
        except (TaskCancelled, TaskTimeout) as exc:  # an interrupt landed between handler and here
            with running.lock:
                running.in_handler = False
            outcome = outcome or self._classify(running, exc)
        finally:
            reset_current(token)
        self._finalize(running, outcome)

    def _classify(self, running: Running, exc: BaseException) -> Outcome:
        reason = running.ctx.cancel_reason
        if isinstance(exc, (TaskCancelled, TaskTimeout, asyncio.CancelledError)) and reason:
            if reason == SHUTDOWN:
                return Outcome("requeue")
            if reason == LEASE_LOST:
                return Outcome("lost")
            if reason == CANCELLED_BY_OPERATOR:
                return Outcome("cancelled", error=exc)
            return Outcome("failure", error=TaskTimeoutError(reason))
        if isinstance(exc, SkipRetry):
            return Outcome("skip_retry", error=exc)
        if not isinstance(exc, Exception):
            # KeyboardInterrupt, SystemExit or a stray CancelledError from the handler: a failure.
            return Outcome("failure", error=RuntimeError(f"handler raised {type(exc).__name__}: {exc}"))
        return Outcome("failure", error=exc)

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()

            self._loop_thread = threading.Thread(target=run, name="queuecore-asyncio", daemon=True)
            self._loop_thread.start()
            ready.wait(5)
            self._loop = loop
        return self._loop

    def _submit_async(self, running: Running, func: Callable[..., Any]) -> None:
        loop = self._ensure_loop()

        async def run() -> None:
            token = set_current(running.ctx)
            try:
                if self._async_slots is None:
                    self._async_slots = asyncio.Semaphore(self.config.concurrency)
                async with self._async_slots:
                    self._begin(running)
                    if running.ctx.cancelled:
                        raise TaskCancelled(running.ctx.cancel_reason or "cancelled")
                    result = self._call_chain(running.ctx, lambda: func(**running.message.payload))
                    if asyncio.iscoroutine(result):
                        result = await result
                outcome = Outcome("success", result)
            except BaseException as exc:  # includes CancelledError
                outcome = self._classify(running, exc)
            finally:
                reset_current(token)
            if outcome.kind == "success":
                self._finalize(running, outcome)  # hands it to the acker: no blocking call, no thread hop
            else:
                await loop.run_in_executor(None, self._finalize, running, outcome)

        def schedule() -> None:
            running.async_task = loop.create_task(run())
            if running.ctx.cancelled:
                running.async_task.cancel()

        loop.call_soon_threadsafe(schedule)

    # -- interrupting -----------------------------------------------------------------------------

    def cancel(self, task_id: str, reason: str = CANCELLED_BY_OPERATOR) -> bool:
        """Ask a running task to stop; True when this process runs it.

        Async handlers are cancelled at once (at their next ``await``); sync handlers see
        ``ctx.cancelled`` and are interrupted after ``cancel_grace`` seconds if still running.
        """
        found = [r for r in self.snapshot() if r.id == task_id]
        for running in found:
            running.ctx.request_cancel(reason)
            if running.async_task is not None:
                self._interrupt(running, TaskCancelled)
        return bool(found)

    def _interrupt(self, running: Running, exc_type: type[BaseException]) -> None:
        """Interrupt the handler once. Repeating it (each lease renewal reports a cancel flag or a lost
        lease again) would break into the handler's cleanup; one that ignores it is abandoned instead."""
        with running.lock:
            if running.finalized or running.interrupted_at is not None:
                return
            running.interrupted_at = time.monotonic()
            if running.async_task is not None and self._loop is not None:
                self._loop.call_soon_threadsafe(running.async_task.cancel)
            elif running.in_handler and running.thread_ident is not None:
                _set_async_exc(running.thread_ident, exc_type)

    def _supervise_loop(self) -> None:
        while not self._done.wait(0.05):
            now = self.clock.now()
            mono = time.monotonic()
            for running in self.snapshot():
                if running.finalized:
                    continue
                ctx = running.ctx
                if running.deadline is not None and now >= running.deadline and not ctx.cancelled:
                    limit = running.deadline - running.started
                    ctx.request_cancel(f"timed out after {limit:.3g}s")
                    self._interrupt(running, TaskTimeout)
                elif ctx.cancelled and running.interrupted_at is None:
                    if running.cancel_seen_at is None:
                        running.cancel_seen_at = mono
                    if (running.async_task is not None or ctx.cancel_reason != CANCELLED_BY_OPERATOR
                            or mono - running.cancel_seen_at >= self.config.cancel_grace):
                        self._interrupt(running, TaskCancelled)
                elif running.interrupted_at is not None and mono - running.interrupted_at >= self.config.abandon_grace:
                    self._abandon(running)

    def _abandon(self, running: Running) -> None:
        """A handler ignored its interrupt: fail the task and free its slot; the thread runs on."""
        reason = running.ctx.cancel_reason or "interrupted"
        logger.error("task %s (%s) did not stop %.3gs after being interrupted (%s); abandoning its thread",
                     running.id, running.message.type, self.config.abandon_grace, reason)
        if running.thread_ident is not None:
            self._pool.abandon(running.thread_ident)
        error = TaskTimeoutError(f"{reason}; the handler did not stop and was abandoned")
        if reason == CANCELLED_BY_OPERATOR:
            self._finalize(running, Outcome("cancelled", error=error))
        elif reason == SHUTDOWN:
            self._finalize(running, Outcome("requeue"))
        elif reason == LEASE_LOST:
            self._finalize(running, Outcome("lost"))
        else:
            self._finalize(running, Outcome("failure", error=error))

    def lease_lost(self, task_id: str, lease: int) -> None:
        """The lease renewal found that this attempt no longer owns its task: stop it, write nothing."""
        running = self.running.get((task_id, lease))
        # A finalized attempt is written (or its acknowledgement queued, which logs a refusal itself).
        if running is not None and not running.finalized and running.ctx.cancel_reason != LEASE_LOST:
            logger.warning("lost the lease of task %s (%s); it will run elsewhere", task_id, running.message.type)
            running.ctx.request_cancel(LEASE_LOST)
            self._interrupt(running, TaskCancelled)

    # -- finishing --------------------------------------------------------------------------------

    def _finalize(self, running: Running, outcome: Outcome | None) -> bool:
        """Write the outcome to Redis exactly once and free the slot. True if this call did it.

        A success is handed to the acker, which acknowledges many tasks in one round-trip; its slot
        is freed at once, while the attempt stays in ``running`` (so its lease is renewed) until
        the acknowledgement is written.
        """
        with running.lock:
            if running.finalized:
                return False
            running.finalized = True
        if outcome is not None and outcome.kind == "success":
            result = self._encode_result(running, outcome)
            self._release_slot()
            self._acker.put(running, result)
            return True
        try:
            if outcome is not None:
                running.handed_back = outcome.kind == "requeue"
                self._write_outcome(running, outcome)
        finally:
            self.forget(running)
            self._release_slot()
        return True

    def forget(self, running: Running) -> None:
        """Drop a finished attempt whose outcome is written (or given up)."""
        with self._running_lock:
            if self.running.get((running.id, running.lease)) is running:
                del self.running[(running.id, running.lease)]

    def with_retries(self, what: str, write: Callable[[], Any]) -> tuple[bool, Any]:
        """Run ``write`` until Redis takes it: ``(True, reply)``, or ``(False, None)`` when given up.

        Connection errors are retried with backoff (at least once per heartbeat, so outcomes are
        written soon after Redis is back); other errors, or the shutdown write deadline, give up.
        """
        backoff = 0.05
        max_backoff = min(5.0, self.config.heartbeat_interval)
        failed = False
        while True:
            try:
                reply = write()
                break
            except Exception as exc:
                if not is_connection_error(exc) or (
                        self._write_deadline is not None and time.monotonic() > self._write_deadline):
                    logger.error("could not record %s: %s; the lease will expire and the task run again", what, exc)
                    return False, None
                failed = True
                self.worker.report_redis_error("ack", exc)
                time.sleep(backoff)
                backoff = min(backoff * 2, max_backoff)
        if failed:
            self.worker.note_redis_ok()
        return True, reply

    def _write_outcome(self, running: Running, outcome: Outcome) -> None:
        if outcome.kind == "lost":
            return
        if outcome.kind in ("failure", "skip_retry") and outcome.error is not None \
                and not isinstance(outcome.error, TaskDecodeError):
            self._call_error_handler(running, outcome.error)
        written, accepted = self.with_retries(f"the outcome of task {running.id} ({outcome.kind})",
                                              lambda: self._write_once(running, outcome))
        if written:
            self.log_outcome(running, outcome.kind, accepted)

    def log_outcome(self, running: Running, kind: str, accepted: bool) -> None:
        if not accepted:
            logger.warning("task %s finished (%s) after its lease was lost; another worker owns it, the result is "
                           "discarded", running.id, kind)
        elif logger.isEnabledFor(logging.DEBUG):
            logger.debug("task %s (%s) in %s: %s after %.3fs", running.id, running.message.type, running.queue,
                         _OUTCOME_WORDS.get(kind, kind), self.clock.now() - running.started)

    def _call_error_handler(self, running: Running, error: BaseException) -> None:
        hook = self.config.error_handler
        if hook is None:
            return
        try:
            hook(running.ctx, error)
        except Exception:
            logger.exception("error_handler raised for task %s", running.id)

    def _write_once(self, running: Running, outcome: Outcome) -> bool:
        q = self.queue_keys(running.queue)
        now = self.clock.now()
        now_ms = to_ms(now)
        day, minute = stats_day(now), stats_minute(now)
        message = running.message
        if outcome.kind == "requeue":
            return self.scripts.requeue(q, running.id, running.lease, now_ms=now_ms)
        error = outcome.error or RuntimeError("unknown error")
        if outcome.kind == "cancelled":
            text, count = CANCELLED_BY_OPERATOR, False
        else:
            text, count = format_error(error), True
        exhausted = message.max_retry >= 0 and running.retried >= message.max_retry
        if outcome.kind == "failure" and not exhausted:
            delay = self._retry_delay(running, error)
            return self.scripts.retry(q, running.id, running.lease, now_ms=now_ms, retry_at_ms=to_ms(now + delay),
                                      error=text, day=day, minute=minute)
        return self.scripts.archive(q, running.id, running.lease, now_ms=now_ms, error=text, day=day, minute=minute,
                                    max_archive_size=self.config.max_archive_size,
                                    archive_cutoff_ms=to_ms(now - self.config.archive_max_age), count_failure=count)

    def _retry_delay(self, running: Running, error: BaseException) -> float:
        handler = self.registry.get(running.message.type)
        policy = handler.retry_delay if handler is not None and handler.retry_delay else self.config.retry_delay
        try:
            delay = float(policy(running.retried, error))
            if not math.isfinite(delay):
                raise ValueError(f"retry delay {delay} is not finite")
            return min(max(0.0, delay), MAX_RETRY_DELAY)
        except Exception:
            logger.exception("retry_delay raised for task %s; using the default", running.id)
            from queuecore.core.config import default_retry_delay

            return default_retry_delay(running.retried, error)

    def _encode_result(self, running: Running, outcome: Outcome) -> str:
        if not running.message.retention:
            return ""
        try:
            return dumps(outcome.result)
        except (TypeError, ValueError):
            logger.warning("task %s returned a value that is not JSON; keeping its repr()", running.id)
            return dumps(repr(outcome.result))


ACK_BATCH = 500


class Acker:
    """Acknowledges succeeded tasks in batches: all that finished during the previous round-trip go
    in one ``done`` call per queue (group commit), with retries while Redis is away."""

    def __init__(self, processor: Processor) -> None:
        self.processor = processor
        self._items: list[tuple[Running, str]] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._scripts = processor.scripts.dedicated()  # used by the acker thread only
        self._thread = threading.Thread(target=self._loop, name="queuecore-acker", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def put(self, running: Running, result: str) -> None:
        with self._cond:
            self._items.append((running, result))
            self._cond.notify()

    def stop(self) -> None:
        """Write what is queued, then end the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join()
        self._scripts.close()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._items and not self._stopping:
                    self._cond.wait()
                if not self._items:
                    return
                batch, self._items = self._items[:ACK_BATCH], self._items[ACK_BATCH:]
            try:
                self._write(batch)
            except Exception:  # never let the acker die: the leases will bring the tasks back
                logger.exception("acknowledging %d task(s) failed", len(batch))
                for running, _ in batch:
                    self.processor.forget(running)

    def _write(self, batch: list[tuple[Running, str]]) -> None:
        processor = self.processor
        by_queue: dict[str, list[tuple[Running, str]]] = {}
        for running, result in batch:
            by_queue.setdefault(running.queue, []).append((running, result))
        for queue, group in by_queue.items():
            q = processor.queue_keys(queue)
            items = [DoneItem(r.id, r.lease, to_ms(r.message.retention), result, r.message.unique_key)
                     for r, result in group]

            def write(q: QueueKeys = q, items: list[DoneItem] = items) -> list[bool]:
                now = processor.clock.now()
                return self._scripts.done_many(q, items, now_ms=to_ms(now), day=stats_day(now),
                                                   minute=stats_minute(now))

            written, codes = processor.with_retries(f"the acknowledgement of {len(items)} task(s)", write)
            for index, (running, _) in enumerate(group):
                if written:
                    processor.log_outcome(running, "success", codes[index])
                processor.forget(running)


_OUTCOME_WORDS = {"success": "done", "failure": "failed", "skip_retry": "archived (SkipRetry)",
                  "cancelled": "cancelled", "requeue": "handed back"}


class TaskTimeoutError(Exception):
    """Recorded as the error of a task that ran past its timeout or deadline."""
