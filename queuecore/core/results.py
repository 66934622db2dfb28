"""Results for every caller: the handle ``enqueue`` returns, lookup by result id, and waiting for a
task's outcome, sync and async, without polling Redis.

**Result ids.** A task is addressed by its queue and its id (every key of a queue carries the queue's
hash tag), so a result id names both: ``"<queue>/<task id>"``. Neither a queue name nor a task id
can hold a ``/``, so the split is unambiguous, and a lookup is one script call in one slot, with no
index to keep (for a scheduled, retry or archived task the script also reads its score in its
state's ZSET, in the same slot: its ``next_process_at`` or ``archived_at``). A bare task id is also
accepted: it is looked for in every known queue (one pipelined ``EXISTS`` per queue), and refused
when several queues hold it.

**Waiting.** A waiter runs the ``result`` script, which reads the task and, when it is not final
(neither completed nor archived), marks it watched. The script that makes a watched task final
(``done``, ``archive``, ``recover``, the operator's archive and delete) pushes a token onto the
task's wake LIST ``<prefix>:{<q>}:done:<id>``, kept for ``WAKE_TTL_MS``. The waiter blocks on that
list with ``BLMOVE list list RIGHT LEFT`` (a rotation: the token stays for every other waiter) for
at most ``WAIT_CHUNK`` seconds, then reads the task again. A task already final before the wait is
returned by the first read; one that turns final between the read and the block has left its
token, so the block returns at once. A token from an earlier final state (the task was run again
since) is dropped by the read that marks the task watched. A wake that is lost (Redis full, a key
of another type) costs at most one chunk. Each wait runs on a ``redis.asyncio`` connection of its
own, whose socket timeout outlasts a chunk (a sync wait runs the async one on an event loop of its
own); a wait with a timeout ends within it (and ``ANSWER_GRACE``) even when Redis stops answering.
Redis refuses ``BLMOVE`` (a write) while it is full: the waiter then reads the task again every
``FULL_POLL`` seconds until its timeout.

**Retention.** A result is kept for the task's retention (the ``retention`` option, else the
connection's ``default_retention``, 0 by default: not kept). Waiting for a task that keeps no
result raises ``ResultNotKept`` at once, whatever its state: once it succeeds it is deleted, and
nobody could tell that apart from an operator deleting it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import os
import re
import threading
import time
import weakref
from collections.abc import Callable, Coroutine
from dataclasses import fields
from typing import Any

import redis
import redis.asyncio

from queuecore.core.attempts import ATTEMPT_LINE_ERROR_CHARS, one_line
from queuecore.core.broker import Broker, wait_for_done
from queuecore.core.config import ConnectionConfig
from queuecore.core.errors import (
    ConfigurationError,
    InvalidOption,
    InvalidTaskState,
    ResultNotKept,
    ResultTimeout,
    TaskDecodeError,
    TaskFailed,
    TaskNotFound,
    TaskWasArchived,
    TaskWasCancelled,
    shown,
)
from queuecore.core.inspector import task_info
from queuecore.core.keys import QueueKeys, validate_queue_name, validate_task_id
from queuecore.core.limits import MAX_DURATION, Range
from queuecore.core.message import TaskInfo
from queuecore.core.reasons import CANCELLED_BY_OPERATOR
from queuecore.core.redis_errors import UNAVAILABLE, broker_errors, is_out_of_memory, is_wrong_type
from queuecore.core.scripts import Scripts
from queuecore.core.states import FINAL_STATES, STATES, TaskState
from queuecore.core.topology import async_like, is_cluster_client

WAIT_CHUNK = 10.0  # seconds one blocking wait lasts at most before the task is read again
MIN_BLOCK = 0.01  # Redis reads a blocking timeout in whole ms, and 0 ms blocks forever
CLOSE_WAIT = 5.0  # seconds Client.close() waits for its waiting loop to end; the rest ends in the loop's thread
ENDING_GRACE = 60.0  # seconds the waits that close() cancelled get to end (close their clients) before it stops
RECANCEL_EVERY = 1.0  # seconds between cancels of a wait that close() cancelled and that goes on
ANSWER_GRACE = 0.25  # seconds an async wait's last look may take past its timeout before it gives up on Redis
OUTAGE_RIDE = 30.0  # seconds a wait without a timeout goes on trying while Redis cannot be reached
OUTAGE_POLL = 0.25  # seconds between its tries meanwhile
FULL_POLL = 0.2  # seconds between looks at the task while Redis is full (it refuses the blocking wait then)
_TRACEBACK = "\n\nTraceback (most recent call last):\n"  # how outcome.format_error joins head and frames
_TYPE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


def result_id(queue: str, task_id: str) -> str:
    """The result id of a task: ``"<queue>/<task id>"``."""
    return f"{queue}/{task_id}"


def parse_result_id(value: str) -> tuple[str | None, str]:
    """``(queue, task id)`` of a result id; ``(None, task id)`` for a bare task id. Raises
    ``ConfigurationError`` for anything else."""
    if not isinstance(value, str):
        raise ConfigurationError(f"a result id is a string '<queue>/<task id>', got {shown(value)}")
    queue, slash, task_id = value.partition("/")
    if not slash:
        return None, validate_task_id(value)
    return validate_queue_name(queue), validate_task_id(task_id)


WAIT_TIMEOUT = Range(0, MAX_DURATION, note="(10 years; None waits as long as it takes)")


def _timeout(value: float | None) -> float | None:
    return None if value is None else WAIT_TIMEOUT.check(value, "timeout", InvalidOption)


class TaskHandle(TaskInfo):
    """What ``enqueue`` returns: the task as it was when this snapshot was taken (a ``TaskInfo``, so
    every field is there), its ``result_id``, and its outcome.

    ``get(timeout)`` waits until the task is final and returns its result or raises ``TaskFailed``
    (``TaskWasCancelled``, ``TaskWasArchived``); ``wait(timeout)`` returns the final ``TaskHandle``
    without raising for a failure; ``refresh()`` reads it again now. ``aget``, ``await_`` and
    ``arefresh`` are the same for asyncio. ``timeout`` is in seconds (``None``: as long as it takes;
    0: look once); past it ``ResultTimeout`` is raised. A task that keeps no result (retention 0)
    raises ``ResultNotKept`` at once; one that was deleted, or whose retention ran out, ``TaskNotFound``.
    """

    _results: Results | None = None

    @property
    def result_id(self) -> str:
        """``"<queue>/<task id>"``: what ``Client.result`` (and ``queuecore.result``) look up."""
        return result_id(self.queue, self.id)

    @property
    def finished(self) -> bool:
        """True when this snapshot is final: completed or archived."""
        return self.state in FINAL_STATES

    def _bound(self) -> Results:
        if self._results is None:
            raise ConfigurationError("this TaskHandle is not bound to a client: look it up with "
                                     "Client.result(result_id)")
        return self._results

    def refresh(self) -> TaskHandle:
        """The task as it is now (``TaskNotFound`` when it is gone)."""
        return self._bound().read(self.queue, self.id)

    def wait(self, timeout: float | None = None) -> TaskHandle:
        """Block until the task is final (completed or archived) and return it."""
        _require_kept(self)
        return self._bound().wait(self.queue, self.id, timeout)

    def get(self, timeout: float | None = None) -> Any:
        """Block until the task is final; its result, or ``TaskFailed`` with the remote error."""
        return outcome(self.wait(timeout))

    async def arefresh(self) -> TaskHandle:
        """``refresh`` for asyncio."""
        return await self._bound().aread(self.queue, self.id)

    async def await_(self, timeout: float | None = None) -> TaskHandle:
        """``wait`` for asyncio."""
        _require_kept(self)
        return await self._bound().await_(self.queue, self.id, timeout)

    async def aget(self, timeout: float | None = None) -> Any:
        """``get`` for asyncio."""
        return outcome(await self.await_(timeout))

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (Django's cache, a process's queue) as the snapshot alone: its client's connections
        and locks stay here, and the unpickled handle is bound to none (``Client.result(result_id)``)."""
        return (_unbound_handle, (self._fields(),))

    def __copy__(self) -> TaskHandle:
        return TaskHandle.of(TaskHandle(**self._fields()), self._results)

    def __deepcopy__(self, memo: dict[int, Any]) -> TaskHandle:
        return TaskHandle.of(TaskHandle(**copy.deepcopy(self._fields(), memo)), self._results)  # the same client

    def _fields(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def of(cls, info: TaskInfo, results: Results | None) -> TaskHandle:
        """A handle on the task ``info`` describes, bound to ``results``."""
        handle = info if type(info) is cls else cls(**{f.name: getattr(info, f.name) for f in fields(info)})
        object.__setattr__(handle, "_results", results)
        return handle


def _unbound_handle(values: dict[str, Any]) -> TaskHandle:
    return TaskHandle(**values)


def _score(value: Any) -> float | None:
    """A ZSCORE reply as a number (None when the task is not in that ZSET)."""
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def _require_kept(info: TaskInfo) -> None:
    """``ResultNotKept`` for a task that keeps no result, whatever its state (once it succeeded it
    would be gone, which nobody could tell apart from a deletion); ``TaskDecodeError`` first for one
    whose message cannot be decoded (its retention is not known)."""
    if info.decode_error:
        raise TaskDecodeError(f"corrupt data in Redis: {info.decode_error} (queue {info.queue}), so whether it keeps "
                              "a result is not known")
    if not info.retention:
        raise ResultNotKept(f"task {info.id} in queue {info.queue} keeps no result (its retention is 0): enqueue "
                            "it with retention=... or set default_retention (QUEUECORE['DEFAULT_RETENTION'])")


def outcome(info: TaskInfo) -> Any:
    """The outcome of a final task: its result when completed; ``TaskFailed`` raised when archived."""
    if info.state is TaskState.COMPLETED:
        return info.result
    if info.state is TaskState.ARCHIVED:
        raise task_failed(info)
    raise InvalidTaskState(f"task {info.id!r} in queue {info.queue!r} has not finished: it is {info.state}")


def task_failed(info: TaskInfo) -> TaskFailed:
    """The ``TaskFailed`` (or ``TaskWasCancelled``, ``TaskWasArchived``) an archived task stands for.

    The stored error is ``Type: message`` followed, when the handler had frames, by the traceback
    (``outcome.format_error``); the error's class path comes from the attempt that archived it.
    """
    error = info.last_error or ""
    head, _, frames = error.partition(_TRACEBACK)
    traceback = _TRACEBACK.lstrip("\n") + frames if frames else ""
    last = info.attempts[-1] if info.attempts else None
    # The newest attempt recorded this very error (its line keeps the error's first line): its class.
    same = last is not None and last.error is not None and last.error == one_line(error, ATTEMPT_LINE_ERROR_CHARS)
    error_type = last.error_type if same and last is not None else None
    name = error_type.rsplit(".", 1)[-1] if error_type else None
    if name is None and (found := _TYPE_NAME.match(head)) and head[found.end():found.end() + 2] in (": ", ""):
        name = found.group()  # an error stored before the class path was recorded
    message = head
    if name and head.startswith(name + ": "):
        message = head[len(name) + 2:]
    elif name and head == name:
        message = ""
    where = f"task {info.id} ({info.type}) in queue {info.queue}"
    kwargs: dict[str, Any] = dict(task_id=info.id, queue=info.queue, error_type=error_type, error_message=message,
                                  traceback=traceback, error=error, task=info)
    if info.archived_by == "operator":
        said = f": its last error was {head}" if head else ""
        return TaskWasArchived(f"{where} was archived by an operator before it finished{said}", **kwargs)
    if error == CANCELLED_BY_OPERATOR:
        return TaskWasCancelled(f"{where} was cancelled by an operator", **kwargs)
    return TaskFailed(f"{where} failed: {head or 'no error recorded'}", **kwargs)


class _WaitLoop:
    """The event loop that a client's sync waits run on, in a daemon thread of its own, with one
    asyncio client whose connections those waits share (a wait on an event loop made for it alone
    cost a new loop and a new connection: 3.5 ms for a task already final, against 0.16 ms on a
    pooled connection; on a Redis Cluster each wait has its own: ``Results._shared_client``). A
    process forked from one that had it starts its own, and never lets go of the one it inherited
    (``_keep_inherited_wait_loops``)."""

    def __init__(self, make_client: Callable[[], redis.asyncio.Redis | None]) -> None:
        self._pid = os.getpid()
        self._loop = asyncio.new_event_loop()
        self._client = make_client()  # None: each wait makes its own
        self._lock = threading.Lock()
        self._closed = False
        self._waiting: set[concurrent.futures.Future[TaskHandle]] = set()  # the waits in progress
        self._wait_tasks: set[asyncio.Task[Any]] = set()  # their tasks on the loop (used on the loop only)
        self._thread = threading.Thread(target=self._run, name="queuecore-waits", daemon=True)
        self._thread.start()
        _LIVE_WAIT_LOOPS.add(self)

    def _run(self) -> None:
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    def usable(self) -> bool:
        return self._pid == os.getpid() and not self._closed and not self._loop.is_closed()

    def run(self, wait: Callable[[redis.asyncio.Redis | None], Coroutine[Any, Any, TaskHandle]],
            what: str) -> TaskHandle:
        """Run ``wait(shared client)`` on the loop and block until it ends; a caller that is interrupted
        (or raises) cancels it. ``close()`` ends it with ``ResultTimeout``; ``what`` names its task."""
        with self._lock:
            if self._closed:
                raise _closed_during(what)
            future = asyncio.run_coroutine_threadsafe(self._tracked(wait(self._client)), self._loop)
            self._waiting.add(future)
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            if self._closed:
                raise _closed_during(what) from None
            raise
        except BaseException:
            future.cancel()
            raise
        finally:
            with self._lock:
                self._waiting.discard(future)

    async def _tracked(self, wait: Coroutine[Any, Any, TaskHandle]) -> TaskHandle:
        """``wait``, known as a wait while it runs (``_end_waits`` cancels those again, not their clients'
        closing)."""
        task = asyncio.current_task()
        assert task is not None  # nosec B101 - a coroutine run by the loop
        self._wait_tasks.add(task)
        try:
            return await wait
        finally:
            self._wait_tasks.discard(task)

    def close(self) -> None:
        """End the waits in progress (their callers get ``ResultTimeout`` at once), close the shared
        connections, and stop the loop: waits ``CLOSE_WAIT`` for that, and a slower end goes on in the
        loop's thread."""
        if not self.usable():
            return
        with self._lock:
            self._closed = True
            waiting = list(self._waiting)
        for future in waiting:
            future.cancel()  # its caller returns now; its coroutine is cancelled on the loop
        asyncio.run_coroutine_threadsafe(self._end_waits(), self._loop)
        self._thread.join(timeout=CLOSE_WAIT)

    async def _end_waits(self) -> None:
        """Let the cancelled waits end (each closing its own client, or its connection going back to
        the pool), close the pool, and stop the loop. A wait cut off by a stopped loop was left pending,
        its connections open, until the garbage collector threw it away."""
        try:
            me = asyncio.current_task()
            ends_by = time.monotonic() + ENDING_GRACE
            while (left := asyncio.all_tasks() - {me}) and time.monotonic() < ends_by:
                done, _ = await asyncio.wait(left, timeout=RECANCEL_EVERY)
                for task in done:  # their callers have returned: nothing else reads how they ended
                    if not task.cancelled():
                        task.exception()
                for task in list(self._wait_tasks):  # a cancel redis-py swallowed (it went on blocking):
                    task.cancel()  # again; a wait's client closing (shielded, a task of its own) is left to end
            if self._client is not None:
                await self._client.aclose()
        except Exception:  # Redis away: the connections go with the loop
            pass
        finally:
            self._loop.stop()


async def _close_shielded(client: redis.asyncio.Redis) -> None:
    """Close a wait's own client, to the end even when the wait is cancelled meanwhile (the close goes on
    as a task of its own)."""
    await asyncio.shield(client.aclose())


def _raise_if_cancelled() -> None:
    """``CancelledError`` when this task was cancelled: redis-py can turn a cancel that lands in a command
    into an error it retries, or one the wait rides as an outage, and the wait went on blocking."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def _closed_during(what: str) -> ResultTimeout:
    return ResultTimeout(f"{what}: the wait ended because its client was closed (Client.close()); the task goes on")


_LIVE_WAIT_LOOPS: weakref.WeakSet[_WaitLoop] = weakref.WeakSet()
_INHERITED_WAIT_LOOPS: list[_WaitLoop] = []


def _keep_inherited_wait_loops() -> None:
    """In a forked child, hold every wait loop the parent had for the child's whole life. The child
    shares the parent's epoll instance and sockets: an inherited connection finalized by the garbage
    collector while a loop runs in the child unregistered its socket from that epoll, and the
    parent's next wait on it never heard Redis answer (a ``ResultTimeout``)."""
    _INHERITED_WAIT_LOOPS.extend(_LIVE_WAIT_LOOPS)
    _LIVE_WAIT_LOOPS.clear()


os.register_at_fork(after_in_child=_keep_inherited_wait_loops)


class Results:
    """Reads and waits for tasks' outcomes for one client: its connection, Redis and scripts.

    A wait (sync or async) opens a ``redis.asyncio`` connection for its length, with a socket timeout
    that outlasts ``WAIT_CHUNK``, to the server of ``redis_client``: made like it when it is one
    server's client, else from the connection's URL, which ``url_names_client`` says names the same
    Redis (False: a client was given without its URL).
    """

    def __init__(self, connection: ConnectionConfig, redis_client: redis.Redis, scripts: Scripts,
                 broker: Broker, url_names_client: bool = True) -> None:
        self.connection = connection
        self.keys = connection.keys
        self.redis = redis_client  # waits get clients made like it
        self.scripts = scripts
        self.broker = broker
        self._url_names_client = url_names_client
        self._lock = threading.Lock()
        self._waits: _WaitLoop | None = None  # started by the first sync wait

    def handle(self, info: TaskInfo) -> TaskHandle:
        return TaskHandle.of(info, self)

    # -- reading ----------------------------------------------------------------------------------

    def _snapshot(self, q: QueueKeys, task_id: str, h: dict[str, Any]) -> TaskHandle:
        """The task the ``result`` script read: its hash, and "@score" (a scheduled, retry or archived
        task's due time or archive time) taken out of it."""
        if not h:
            raise TaskNotFound(f"no task {task_id!r} in queue {q.queue!r} (never enqueued, deleted, or completed "
                               "and past its retention)")
        state = h.get("state")
        if state and state not in STATES:
            raise TaskDecodeError(f"corrupt data in Redis: task {task_id} in queue {q.queue} ({q.task(task_id)}) has "
                                  f"state {state!r}, which is no task state")
        score = _score(h.pop("@score", None))
        return TaskHandle.of(task_info(q, task_id, h, state, score), self)

    def read(self, queue: str, task_id: str, *, watch: bool = False) -> TaskHandle:
        """The task now; with ``watch``, a task that is not final is marked watched (see the module)."""
        q = self.keys.queue(queue)
        with broker_errors():
            return self._snapshot(q, task_id, self.scripts.result(q, validate_task_id(task_id), watch=watch))

    async def _aread_on(self, client: redis.asyncio.Redis, q: QueueKeys, task_id: str, *,
                        watch: bool = False) -> TaskHandle:
        """``read`` on an asyncio client (``task_id`` already checked)."""
        return self._snapshot(q, task_id, await self.scripts.result(q, task_id, watch=watch, async_client=client))

    def lookup(self, result_id: str) -> TaskHandle:
        """The task a result id names (``"<queue>/<task id>"``, or a bare task id looked for in every
        queue); ``TaskNotFound`` when there is none."""
        queue, task_id = parse_result_id(result_id)
        if queue is None:
            queue = self._find_queue(task_id)
        return self.read(queue, task_id)

    def _find_queue(self, task_id: str) -> str:
        with broker_errors():
            found = self.broker.queues_holding(task_id)
        if not found:
            raise TaskNotFound(f"no task {task_id!r} in any queue")
        if len(found) > 1:
            raise TaskNotFound(f"task id {task_id!r} is in several queues ({', '.join(found)}): look it up by its "
                               "result id '<queue>/<task id>'")
        return found[0]

    # -- waiting ----------------------------------------------------------------------------------

    def _from_url(self) -> ConnectionConfig:
        """The connection, for a wait's client when the client's own settings cannot be copied (a
        cluster or sentinel client); refused when the client was given without its URL (the default
        URL may name another Redis)."""
        if not self._url_names_client:
            raise ConfigurationError("waiting for a result through a Redis client given without its URL needs that "
                                     f"URL ({type(self.redis).__name__} is not a single-server client whose "
                                     "settings queuecore can copy): Client(redis_url=..., redis_client=...)")
        return self.connection

    def _next_block(self, info: TaskHandle, deadline: float | None, chunk: float) -> float | None:
        """How long to block before looking again, or None when ``info`` ends the wait."""
        _require_kept(info)
        if info.state in FINAL_STATES:
            return None
        if deadline is None:
            return chunk
        left = deadline - time.monotonic()
        if left <= 0:
            raise ResultTimeout(f"task {info.id} in queue {info.queue} is still {info.state}")
        return max(MIN_BLOCK, min(chunk, left))

    def wait(self, queue: str, task_id: str, timeout: float | None = None) -> TaskHandle:
        """Block until the task is final and return it: the async wait, run on this client's waiting
        loop (``_WaitLoop``), so that the sync and async waits are one."""
        waits = self._waits
        if waits is None or not waits.usable():
            with self._lock:
                if self._waits is None or not self._waits.usable():
                    self._waits = _WaitLoop(self._shared_client)
                waits = self._waits
        return waits.run(lambda shared: self.await_(queue, task_id, timeout) if shared is None
                         else self._await_on(shared, queue, task_id, timeout), f"task {task_id} in queue {queue}")

    def close(self) -> None:
        """Stop the waiting loop of sync waits, and close its connections."""
        with self._lock:
            waits, self._waits = self._waits, None
        if waits is not None:
            waits.close()

    def _shared_client(self) -> redis.asyncio.Redis | None:
        """The client that the sync waits on the waiting loop share; None on a Redis Cluster, where each
        wait has its own: redis-py's asyncio cluster client, when it reads the cluster's layout again
        (after 5 MOVED replies, or CLUSTERDOWN), closes every connection, those other waits are
        blocked on too, which then failed with AttributeError."""
        return None if is_cluster_client(self.redis) else self._async_client()

    def _async_client(self) -> redis.asyncio.Redis:
        timeout = WAIT_CHUNK + self.connection.socket_timeout
        return async_like(self.redis, timeout) or self._from_url().connect_async(socket_timeout=timeout)

    async def aread(self, queue: str, task_id: str) -> TaskHandle:
        """``read`` for asyncio."""
        q = self.keys.queue(queue)
        validate_task_id(task_id)
        client = self._async_client()
        try:
            with broker_errors():
                return await self._aread_on(client, q, task_id)
        finally:
            await _close_shielded(client)

    async def await_(self, queue: str, task_id: str, timeout: float | None = None) -> TaskHandle:
        """``wait`` for asyncio: the same reads and blocking waits, on an asyncio connection of its own."""
        client = self._async_client()
        try:
            return await self._await_on(client, queue, task_id, timeout)
        finally:
            await _close_shielded(client)

    async def _await_on(self, client: redis.asyncio.Redis, queue: str, task_id: str,
                        timeout: float | None) -> TaskHandle:
        limit = _timeout(timeout)
        deadline = None if limit is None else time.monotonic() + limit
        q = self.keys.queue(queue)
        validate_task_id(task_id)
        with broker_errors():
            if limit is None:
                return await self._await_final(client, q, task_id, None)
            bound = asyncio.timeout(limit + ANSWER_GRACE)  # Redis that stops answering holds it no longer
            try:
                async with bound:
                    return await self._await_final(client, q, task_id, deadline)
            except TimeoutError:  # ResultTimeout is one too
                if not bound.expired():
                    raise
                raise ResultTimeout(f"task {task_id} in queue {queue}: Redis did not answer within the wait's "
                                    f"timeout ({limit:g} s)") from None

    async def _await_final(self, client: redis.asyncio.Redis, q: QueueKeys, task_id: str,
                           deadline: float | None) -> TaskHandle:
        unreachable_since: float | None = None
        while True:
            _raise_if_cancelled()
            try:
                info = await self._aread_on(client, q, task_id, watch=True)
                unreachable_since = None
                block = self._next_block(info, deadline, WAIT_CHUNK)
                if block is None:
                    return info
                _raise_if_cancelled()
                try:
                    await wait_for_done(client, q, task_id, block)
                except redis.ResponseError as exc:
                    if is_out_of_memory(str(exc)):
                        await asyncio.sleep(min(block, FULL_POLL))  # Redis refuses BLMOVE when full: look again
                    elif is_wrong_type(str(exc)):
                        await asyncio.sleep(block)  # a key of another type at the wake list: look again a chunk on
                    else:
                        raise
            except UNAVAILABLE:  # a failover, a restart: the wait goes on, within its timeout
                now = time.monotonic()
                unreachable_since = unreachable_since or now
                if deadline is None and now - unreachable_since >= OUTAGE_RIDE:  # no timeout: rides 30 s
                    raise
                if deadline is not None and now + OUTAGE_POLL >= deadline:  # a timeout: rides until then
                    raise
                await asyncio.sleep(OUTAGE_POLL)
