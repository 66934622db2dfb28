"""Where handlers run: a bounded thread pool for sync handlers, one event loop thread for async
ones, and the interrupt helper that breaks into a sync handler's thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import logging
import os
import queue as queue_module
import threading
from collections.abc import Callable, Coroutine
from typing import Any

logger = logging.getLogger("queuecore.worker")

# The size asyncio gives a loop's default executor (``asyncio.to_thread``).
_DEFAULT_EXECUTOR_SIZE = min(32, (os.cpu_count() or 1) + 4)


def interrupt_thread(ident: int, exc_type: type[BaseException] | None) -> None:
    """Raise ``exc_type`` in thread ``ident`` at its next bytecode (None withdraws a pending one)."""
    value = ctypes.py_object(exc_type) if exc_type is not None else None
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), value)


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
        """Run ``fn`` on a pool thread, starting one if all are busy and the pool has room."""
        with self._lock:
            self._queued += 1
            thread = self._thread_if_short()
        self._work.put(fn)
        if thread is not None:
            thread.start()

    def abandon(self, ident: int) -> None:
        """Let the thread run on, but never give it work again; another takes its place. A thread not
        of this pool (the subscriber's, which ran a pushed task itself) is left alone."""
        with self._lock:
            if not any(thread.ident == ident for thread in self._threads):
                return
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
                except BaseException:  # pragma: no cover - the processor's work catches everything
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

    @property
    def threads(self) -> int:
        """Threads alive in the pool, abandoned ones included until their handler returns."""
        with self._lock:
            return len(self._threads)

    def shutdown(self) -> None:
        """Tell every thread to end once it has no work left (running handlers are not waited for)."""
        with self._lock:
            n = len(self._threads)
        for _ in range(n):
            self._work.put(None)


class DaemonExecutor(concurrent.futures.ThreadPoolExecutor):
    """An executor on a ``HandlerPool``'s daemon threads: what a blocking call made from the event loop
    runs on. Unlike a ``ThreadPoolExecutor``'s, whose threads the interpreter joins at exit, a thread
    still blocked after the worker handed its task back does not keep the process alive.

    A ``ThreadPoolExecutor`` by class only, as ``loop.set_default_executor`` requires: its own threads
    and queue are never used."""

    def __init__(self, name: str, size: int) -> None:
        super().__init__(max_workers=size, thread_name_prefix=name)
        self._pool = HandlerPool(name, size)
        self._closed = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        if self._closed:
            raise RuntimeError("cannot schedule new futures after shutdown")
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:  # the caller's to see, as a ThreadPoolExecutor's
                future.set_exception(exc)
            else:
                future.set_result(result)

        self._pool.submit(run)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Take no more work; threads end once their work is done (never waited for)."""
        self._closed = True
        self._pool.shutdown()


class AsyncLoop:
    """One event loop thread, started on first use, running the async handlers the processor starts
    (its run slots bound how many run at once, sync and async together).

    The worker's own blocking calls (``in_thread``: writing an outcome, checking limits) have their
    executor, ``size`` threads (one per run slot), apart from the loop's default executor, which the
    handlers' ``asyncio.to_thread`` calls may fill. Both run on daemon threads."""

    def __init__(self, size: int = 1) -> None:
        self._size = size
        self._own: DaemonExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        # Work handed over from other threads, created on the loop by one call: a burst of starts
        # wakes the loop once, not once per task.
        self._handed: list[tuple[Callable[[], Coroutine[Any, Any, None]], Callable[[asyncio.Task[None]], None]]] = []
        self._create_scheduled = False

    def _ensure(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                loop.set_default_executor(DaemonExecutor("queuecore-to-thread", _DEFAULT_EXECUTOR_SIZE))
                self._own = DaemonExecutor("queuecore-async-io", self._size)
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                self._thread = threading.Thread(target=run, name="queuecore-asyncio", daemon=True)
                self._thread.start()
                ready.wait(5)
                self._loop = loop
            return self._loop

    def start(self, work: Callable[[], Coroutine[Any, Any, None]],
              started: Callable[[asyncio.Task[None]], None]) -> None:
        """Create a task of ``work()`` on the loop (from any thread); ``started(task)`` runs on the
        loop right after, so the caller can keep the task (to cancel it)."""
        loop = self._ensure()
        with self._lock:
            self._handed.append((work, started))
            if self._create_scheduled:
                return  # the loop has not yet taken the earlier ones: it takes this one with them
            self._create_scheduled = True
        loop.call_soon_threadsafe(self._create_handed, loop)

    def _create_handed(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            handed, self._handed = self._handed, []
            self._create_scheduled = False
        for work, started in handed:
            try:
                started(loop.create_task(work()))
            except Exception:  # pragma: no cover - the processor's callables catch everything
                logger.exception("could not start an async handler")  # its lease brings the task back

    def cancel(self, task: asyncio.Task[Any]) -> None:
        """Cancel ``task`` at its next ``await`` (from any thread)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(task.cancel)

    async def in_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run the worker's blocking ``fn(*args)`` off the loop, on the worker's own threads."""
        return await asyncio.get_running_loop().run_in_executor(self._own, fn, *args)

    def shutdown(self) -> None:
        """Stop the loop (tasks still on it are dropped: their outcomes are handled elsewhere)."""
        if self._loop is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=2)
        if not self._loop.is_running():
            self._loop.close()  # shuts its default executor down
        if self._own is not None:
            self._own.shutdown()
