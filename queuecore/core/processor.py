"""The processor: fetches tasks into free slots, dispatches each to its handler, supervises
timeouts and cancels, and finalizes each attempt (writes its outcome exactly once).

Fetched tasks wait in a buffer until one of the ``concurrency`` run slots is free (sync and async
handlers share them), then the ``Runner`` (runner.py) runs each: sync handlers on a
``HandlerPool`` thread, async handlers on an ``AsyncLoop``. What to write for an outcome is decided
in ``outcome.py`` and written by the ``Recorder``; successes are acknowledged in batches by the
``Acker``.
A handler that cannot be interrupted is abandoned (its slot freed, its task failed) after
``abandon_grace`` seconds.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from queue import SimpleQueue

from queuecore.core import tracing
from queuecore.core.acker import Acker
from queuecore.core.attempts import one_line
from queuecore.core.clock import Clock, format_duration, to_ms
from queuecore.core.config import WorkerConfig
from queuecore.core.context import TaskContext
from queuecore.core.errors import TaskCancelled, TaskDecodeError, TaskTimeout
from queuecore.core.flow import LimitGate
from queuecore.core.handlers import AsyncLoop, HandlerPool, interrupt_thread
from queuecore.core.health import RedisHealth
from queuecore.core.keys import QueueKeys
from queuecore.core.leases import LeaseRenewer
from queuecore.core.message import TaskMessage
from queuecore.core.outcome import Outcome, abandoned, classify
from queuecore.core.reasons import CANCELLED_BY_OPERATOR, DEADLINE_REACHED, SHUTDOWN
from queuecore.core.reasons import LEASE_LOST as LEASE_LOST_REASON
from queuecore.core.recorder import Recorder
from queuecore.core.redis_errors import is_connection_error, unavailable_reason
from queuecore.core.registry import TaskRegistry
from queuecore.core.runner import Runner, deadline_passed
from queuecore.core.running import HeldTasks, Running
from queuecore.core.scripts import LEASE_CANCEL_REQUESTED, LEASE_LOST, Scripts
from queuecore.core.slots import Slots

logger = logging.getLogger("queuecore.worker")

QUEUE_SET_ASIDE = 5.0  # seconds a queue whose dequeue failed is not asked again (the others are)


class Processor:
    """Fetches tasks into free slots and processes them.

    It receives what it uses: the worker's config, the scripts, the keys of its queues, the clock,
    the task registry, the set of held tasks (shared with the heartbeat, subscriber and
    recoverer) and the Redis health.
    """

    def __init__(self, config: WorkerConfig, scripts: Scripts, queue_keys: Mapping[str, QueueKeys], clock: Clock,
                 registry: TaskRegistry, held: HeldTasks, health: RedisHealth, worker_id: str = "",
                 on_due: Callable[[float], None] | None = None) -> None:
        self.config = config
        self._fetch_scripts = scripts.dedicated()  # used under _fetch_lock only
        self.queue_keys = queue_keys
        self.clock = clock
        self.registry = registry
        self.held = held
        self.health = health
        self.wake = threading.Event()
        self._quiet = threading.Event()
        self._fetch_lock = threading.Lock()  # held across each quiet check + dequeue, so stop() is final
        # Held by the thread that is fetching: the fetcher's, or the subscriber's in ``on_wake`` while the
        # fetcher is parked (``_parked``: every queue was drained and it waits for a wake-up).
        self._fetching = threading.Lock()
        self._parked = False
        self.fetched_on_wake = 0  # fetches ``on_wake`` made on the caller's thread
        # This worker's entry in each queue's list of waiting workers (QueueKeys.idle): a dequeue made
        # while no handler runs or waits to run, which finds the queue empty, lists it (until the
        # fetcher's next polls would have renewed it), and an enqueue into the empty queue may then
        # lease its task straight to this worker (``on_push``). A busy worker is never listed: its
        # tasks come through pending, in batches, and the subscriber's thread stays free.
        # "+": a push to it carries the lease's number (``on_push``).
        self._idle_entry = f"{to_ms(config.lease_duration)}+ {worker_id}" if worker_id else ""
        self._idle_for = 2 * config.fetch_poll_interval + 1.0
        # Whether a push would reach this process now (its subscriber's push channels are subscribed): it
        # is listed only then. Listed before, the first enqueue's push found no subscriber (on a cluster,
        # where subscribing takes longer), and the task waited for a poll or the subscription's wake-up.
        self.reachable_by_push: Callable[[], bool] = lambda: True
        self.pushed = 0  # tasks an enqueue leased straight to this worker
        self._unlisted = False  # quiet, and taken off the lists (``_unlist``)
        self._stopping = threading.Event()
        self._done = threading.Event()
        self.pool = HandlerPool("queuecore-handler", config.concurrency, on_drained=self._wake_fetcher)
        self.async_loop = AsyncLoop(config.concurrency)
        self._tracing = tracing.get()  # None without the otel extra: no per-task work at all
        # With it, attempts end through ``_finalize_traced``: one that never reached its span gets one.
        self._finish: Callable[[Running, Outcome | None], bool] = (
            self._finalize if self._tracing is None else self._finalize_traced)
        held_at_once = config.concurrency + (config.prefetch or 0)
        self._slots = Slots(held_at_once, max(1, min(config.prefetch or 0, held_at_once // 2)),
                            lambda: len(self._ready) + self.pool.queued)
        # Fetched attempts waiting for one of the ``concurrency`` run slots, and how many are taken:
        # sync and async handlers together never run more than ``concurrency`` at once.
        self._run_lock = threading.Lock()
        self._ready: deque[tuple[Running, Callable[[], None]]] = deque()
        self._running = 0
        self.threads: list[threading.Thread] = []
        # Outcomes the supervisor decides (a deadline passed while waiting, a handler abandoned) and those
        # of cancels of waiting attempts are written on a thread of their own: the supervisor must not wait
        # on Redis (an outage) or the error handler, or no other task's timeout or cancel is enforced.
        self._outcomes: SimpleQueue[tuple[Running, Outcome] | None] = SimpleQueue()
        self._drained = False  # the last fetch asked every queue and got less than it asked for
        self._set_aside: dict[str, tuple[float, str]] = {}  # queue -> (asked again from (monotonic s), why)
        self.recorder = Recorder(config, scripts, queue_keys, clock, registry, health, worker_id, on_due)
        self._acker = Acker(scripts.dedicated(), clock, queue_keys, self.recorder.with_retries, self._acknowledged)
        # Concurrency and rate limits of the task types that have them (flow.py); idle otherwise.
        self.limits = LimitGate(scripts, scripts.keys, queue_keys, clock, config.lease_duration,
                                config.heartbeat_interval)
        # Keeps the leases of the held tasks (renewed by the heartbeater and the recoverer); a renewal that
        # finds one lost or cancelled tells this processor.
        self.renewer = LeaseRenewer(scripts, clock, config.lease_duration, held, queue_keys,
                                    on_lost=self.lease_lost, on_cancel=self.cancel)
        self.runner = Runner(config.default_timeout, config.middleware, clock, self.limits, self.async_loop,
                             self._tracing, self._finish, self._free_run_slot, self._confirm_lease,
                             lease_margin=config.lease_duration / 4)

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        self._acker.start()
        for target, name in ((self._fetch_loop, "fetcher"), (self._supervise_loop, "supervisor"),
                             (self._write_outcomes, "outcomes")):
            thread = threading.Thread(target=target, name=f"queuecore-{name}", daemon=True)
            thread.start()
            self.threads.append(thread)

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
        deadline = time.monotonic() + timeout
        # With Redis away, a hand-back is given up once the shutdown's time is out (its lease expires
        # and the task is recovered): it never holds the shutdown for the length of the outage.
        self.recorder.write_deadline = deadline
        self.stop()
        self._stopping.set()
        self.wake.set()
        self._slots.wake_all()
        # Each hand-back pushes its task to the head of pending: the latest taken goes back first, so
        # that the tasks run next in the order they were taken.
        waiting = self._take_ready()  # fetched ahead, never started: back at once, for others to run
        for running in reversed(waiting):
            self._finish(running, Outcome("requeue"))
        while len(self.held) and time.monotonic() < deadline and not (force and force.is_set()):
            time.sleep(0.01)
        remaining = self.held.snapshot()
        for running in reversed(self._take_ready()):  # fetched before the fetcher stopped: never started
            self._finish(running, Outcome("requeue"))
        for running in remaining:
            running.ctx.request_cancel(SHUTDOWN)
            self._interrupt(running, TaskCancelled)
        self.recorder.write_deadline = time.monotonic() + max(5.0, self.config.cancel_grace)
        # Interrupted handlers hand their task back themselves; give them a moment, then hand back
        # the rest (a handler that is still running has its outcome ignored: already finalized).
        grace = time.monotonic() + min(1.0, self.config.cancel_grace)
        while any(not r.finalized for r in remaining) and time.monotonic() < grace:
            time.sleep(0.01)
        handed_back = sum(1 for r in remaining if r.finalized and r.handed_back) + len(waiting)
        for running in reversed(remaining):
            if self._finish(running, Outcome("requeue")):
                handed_back += 1
        self._outcomes.put(None)  # the outcome writer ends once those queued are written
        self._acker.stop()  # writes every acknowledgement still queued (bounded by the write deadline)
        self.limits.stop()  # frees the concurrency slots of the attempts that ended
        self._done.set()
        for thread in self.threads:
            thread.join(timeout=2)
        with self._fetch_lock:
            self._fetch_scripts.close()
        self.pool.shutdown()
        self.async_loop.shutdown()
        return handed_back

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

    def _wake_fetcher(self) -> None:
        self._slots.recheck()

    def _fetch_loop(self) -> None:
        backoff = 0.05
        while not self._stopping.is_set():
            if self._quiet.is_set():
                self._unlist()
                self._stopping.wait(0.2)
                continue
            if not self._slots.take(self._stopping):
                continue
            with self._fetching:
                self.wake.clear()
                free = self._slots.free  # ``on_wake`` may have fetched since ``take`` returned
                began = time.monotonic()
                try:
                    got = self.fetch(free) if free > 0 else 0
                    self.health.note_ok("fetch")
                    backoff = 0.05
                except Exception as exc:  # Redis away: log, back off, go on
                    self.health.report_error("fetch", exc, began=began)
                    got = None
                self._parked = got is not None and free > 0 and (not got or self._drained)
            if got is None:
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, 5.0)
            elif self._parked:
                # Every queue gave less than was asked: the next task comes with a wake-up (published
                # when a pending list turns non-empty; ``wake`` was cleared before this fetch, so
                # one published meanwhile is not missed) or the poll. No empty dequeue right after.
                # Meanwhile ``on_wake`` fetches on the subscriber's thread.
                self.wake.wait(self.config.fetch_poll_interval)
                with self._fetching:
                    self._parked = False
        self._unlist()  # shutting down (it may never have seen quiet alone)

    def _unlist(self) -> None:
        """Once quiet or shutting down, take this worker off every queue's list of waiting workers, so
        enqueues stop pushing to it (one pushed meanwhile is handed back by ``on_push``). Best effort:
        a listing left behind lapses by itself within ``_idle_for``."""
        if self._unlisted or not self._idle_entry:
            return
        self._unlisted = True
        with self._fetch_lock:
            for name, keys in self.queue_keys.items():
                try:
                    self._fetch_scripts.unlist(keys, self._idle_entry)
                except Exception as exc:  # Redis away: harmless, the listing lapses
                    logger.info("could not take this worker off queue %s's idle list (%s); it lapses "
                                "within %.0f s", name, one_line(unavailable_reason(exc), 300), self._idle_for)

    def on_wake(self) -> None:
        """A queue got work (called on the subscriber's thread). While the fetcher is parked (every
        queue drained), fetch here and now: the task starts a thread hop sooner than if the fetcher
        were woken to fetch it. Otherwise, or when more may be waiting, wake the fetcher."""
        if self._parked and not self._quiet.is_set() and self._fetching.acquire(blocking=False):
            try:
                free = self._slots.free
                if self._parked and free > 0:
                    self.fetch(free)
                    self.health.note_ok("fetch")
                    self.fetched_on_wake += 1
                    if self._drained:
                        return  # every queue gave all it had: the fetcher stays parked
            except Exception:  # the fetcher meets the same error, reports it and backs off
                pass
            finally:
                self._fetching.release()
        self.wake.set()

    def on_push(self, queue: str, data: str, run_here: bool = False) -> Callable[[], None] | None:
        """An enqueue leased a new task straight to this worker, which its last dequeue of ``queue``
        listed as waiting: ``data`` is ``"<task id> <lease> <message>"`` (its first attempt; an enqueue
        of an earlier version sends ``"<task id> <message>"``, under lease 1). It runs like
        a fetched task; a worker that has stopped fetching hands it back at once. Once no handler runs,
        the fetcher's next dequeue lists the worker again (``_free_run_slot``). Called on the
        subscriber's thread.

        With ``run_here`` (the subscriber can spare this thread), the work of a sync handler that
        starts at once, since nothing else runs, is returned for the caller to run on its thread
        instead of being handed to a handler thread: one thread hop less before the task starts
        (0.45 -> 0.41 ms from enqueue to handler, p50, an idle worker in a probe)."""
        task_id, _, msg = data.partition(" ")
        lease = 1
        if msg[:1].isdigit():  # the lease's number comes first (a message is a JSON object)
            number, _, msg = msg.partition(" ")
            lease = int(number) if number.isdigit() else 0
        if not task_id or not msg or not lease:
            logger.error("ignored a malformed push on queue %s: %.80r", queue, data)
            return None
        here: list[Callable[[], None] | None] | None = None
        with self._fetch_lock:
            now = self.clock.now()
            quiet = self._quiet.is_set()
            if not quiet:
                self.pushed += 1
                here = [] if run_here and self._idle() else None
                self._dispatch(queue, task_id, msg, lease, 0, now, pushed=True, here=here)
        if quiet:  # a hand-back needs the task's id and lease only: its message is not decoded here
            self._finalize(self._hold(queue, task_id, lease, 0, _placeholder(task_id, queue), now),
                           Outcome("requeue"))
        return here[0] if here else None

    def fetch(self, free: int) -> int:
        """Dequeue up to ``free`` tasks from the queues in priority order and start them.

        Afterwards ``_drained`` says whether every queue was asked and together they gave fewer
        tasks than asked for (so the fetcher waits for a wake-up before it asks again)."""
        got = 0
        order = self.queue_order()
        self._drained = False
        failed: list[tuple[str, Exception]] = []
        answered = False
        for tried, name in enumerate(order, 1):
            if self._set_aside.get(name, (0.0, ""))[0] > time.monotonic():
                self._drained = tried == len(order) and got < free
                continue  # it failed a moment ago: the other queues go first
            with self._fetch_lock:
                if got >= free or self._quiet.is_set():
                    break
                now = self.clock.now()
                try:
                    items = self._fetch_scripts.dequeue(self.queue_keys[name], now_ms=to_ms(now),
                                                        lease_until_ms=to_ms(now + self.config.lease_duration),
                                                        count=free - got,
                                                        idle_entry=self._idle_entry
                                                        if self._idle() and self.reachable_by_push() else "",
                                                        idle_until_ms=to_ms(now + self._idle_for))
                except Exception as exc:  # this queue (a corrupt key, a cluster master away) holds up no other
                    failed.append((name, exc))
                    self._drained = tried == len(order) and got < free
                    continue
            answered = True
            if name in self._set_aside and self._set_aside.pop(name)[1]:  # its error was logged: say it ended
                logger.warning("queue %s: its tasks are fetched again", name)
            self._drained = tried == len(order) and got + len(items) < free and not items.cut
            for item in items:
                if item.msg is None:
                    logger.error("task %s of queue %s was pending but its data is gone; nothing to run", item.id,
                                 name)
                    continue
                self._dispatch(name, item.id, item.msg, item.lease, item.retried, now)
                got += 1
            if items.cut:
                break  # this queue has more (its fetch stopped at the byte budget): the next round starts over
            if got and not self.config.strict_priority:
                break  # one queue per round keeps the weighted order fair
        if failed and not answered:
            raise failed[0][1]  # no queue answered (Redis away, say): the fetcher reports it and backs off
        for name, error in failed:
            self._set_queue_aside(name, error)
        return got

    def _set_queue_aside(self, name: str, exc: Exception) -> None:
        """A queue whose dequeue failed while another answered is not asked again for ``QUEUE_SET_ASIDE``
        seconds; an error that is not an outage (a corrupt key) is logged once while it lasts."""
        text = "" if is_connection_error(exc) else f"{type(exc).__name__}: {exc}"  # "": said by the health
        seen = self._set_aside.get(name, (0.0, ""))[1]
        self._set_aside[name] = (time.monotonic() + QUEUE_SET_ASIDE, text)
        if text and text != seen:
            logger.error("queue %s: its tasks cannot be fetched (%s); asked again every %gs, the other queues "
                         "go on", name, text, QUEUE_SET_ASIDE)
        elif not text:
            self.health.report_error(f"fetch from queue {name}", exc)

    # -- dispatching ------------------------------------------------------------------------------

    def _dispatch(self, queue: str, task_id: str, msg: str, lease: int, retried: int, now: float,
                  pushed: bool = False, here: list[Callable[[], None] | None] | None = None) -> None:
        """Hold the attempt and start it when a run slot is free: a sync handler's on a handler thread
        or, given ``here`` and started within this call on this thread, appended to ``here`` for the
        caller to run (else ``None`` is, closing ``here`` to a start made later)."""
        try:
            message = TaskMessage.decode(task_id, queue, msg)
        except TaskDecodeError as exc:
            logger.error("%s; archiving it", exc)
            running = self._hold(queue, task_id, lease, retried, _placeholder(task_id, queue), now)
            self._finish(running, Outcome("skip_retry", error=exc))
            return
        # A pushed task was leased by its enqueue: when that was, its message says (the client's clock).
        # A push read long after (this process was paused or starved) may have lost its lease meanwhile:
        # from this expiry the runner confirms it before its handler starts.
        leased_at = min(now, message.enqueued_at) if pushed and message.enqueued_at else now
        running = self._hold(queue, task_id, lease, retried, message, now, leased_at + self.config.lease_duration)
        handler = self.registry.get(message.type)
        start: Callable[[], None]
        if handler is not None and handler.is_async:
            def start() -> None:
                self.async_loop.start(lambda: self.runner.run_async(running, handler),
                                      lambda task: self._keep_async_task(running, task))
        else:
            caller = threading.get_ident() if here is not None else None

            def start() -> None:
                def work() -> None:
                    self.runner.run_sync(running, handler)

                # Only on the caller's thread, during this call: ``_start_ready`` on another thread
                # may start it too, and that one hands it to the pool.
                if here is not None and not here and threading.get_ident() == caller:
                    here.append(work)
                else:
                    self.pool.submit(work)
        with self._run_lock:
            self._ready.append((running, start))
        self._start_ready()
        if here is not None and not here:  # not started during this call: a later start goes to the pool
            here.append(None)

    # -- run slots --------------------------------------------------------------------------------

    def _start_ready(self) -> None:
        """Start fetched attempts, oldest first, while fewer than ``concurrency`` handlers run."""
        starts = []
        with self._run_lock:
            while self._ready and self._running < self.config.concurrency:
                running, start = self._ready.popleft()
                if running.finalized:  # handed back (shutdown) while it waited
                    continue
                running.run_slot = True
                self._running += 1
                starts.append(start)
            drained = not self._ready
        for start in starts:
            start()
        if starts and drained:
            self._slots.recheck()  # the buffer ran dry: the fetcher may fetch before a batch is free

    def _free_run_slot(self, running: Running) -> None:
        """The attempt's thread or coroutine is free (or it was abandoned): its run slot goes to the
        next fetched attempt. Once per attempt. When none is left to run while the fetcher is parked,
        the fetcher is woken: its dequeue lists the worker as waiting (or takes what came meanwhile)."""
        with self._run_lock:
            if not running.run_slot:
                return
            running.run_slot = False
            self._running -= 1
        self._start_ready()
        if self._parked and self._idle():
            self.wake.set()

    def _idle(self) -> bool:
        """No handler runs and none waits for a run slot."""
        return self._running == 0 and not self._ready

    def _end_waiting(self, running: Running, outcome: Outcome) -> bool:
        """End an attempt that waits for a run slot (fetched ahead, its handler never called) with
        ``outcome``, at once. False when it has left the buffer (started, or ended otherwise)."""
        with self._run_lock:
            for index, (waiting, _) in enumerate(self._ready):
                if waiting is running:
                    del self._ready[index]
                    break
            else:
                return False
        self._finish_elsewhere(running, outcome)
        return True

    def _finish_elsewhere(self, running: Running, outcome: Outcome) -> None:
        """Have the outcome writer write ``outcome`` (here when it is not running: not started, or ended)."""
        writer = next((t for t in self.threads if t.name == "queuecore-outcomes"), None)
        if writer is None or not writer.is_alive():
            self._finish(running, outcome)
            return
        running.ending = True
        self._outcomes.put((running, outcome))

    def _write_outcomes(self) -> None:
        while (item := self._outcomes.get()) is not None:
            running, outcome = item
            try:
                self._finish(running, outcome)
            except Exception:  # the recorder logs Redis errors itself: this would be the worker's own fault
                logger.exception("could not write the outcome of task %s", running.id)

    def _take_ready(self) -> list[Running]:
        """Empty the buffer of fetched attempts that have not started."""
        with self._run_lock:
            taken = [running for running, _ in self._ready]
            self._ready.clear()
        return taken

    def _hold(self, queue: str, task_id: str, lease: int, retried: int, message: TaskMessage,
              now: float, lease_until: float | None = None) -> Running:
        ctx = TaskContext(id=task_id, queue=queue, type=message.type, retried=retried,
                          max_retry=message.max_retry, payload=message.payload,
                          enqueued_at=message.enqueued_at or None, priority=message.priority,
                          worker_id=self.recorder.worker_id)
        running = Running(id=task_id, queue=queue, lease=lease, retried=retried, message=message, ctx=ctx,
                          started=now, deadline=message.deadline, fetched=now,
                          lease_until=now + self.config.lease_duration if lease_until is None else lease_until)
        self._slots.use()
        self.held.add(running)
        return running

    def _keep_async_task(self, running: Running, task: asyncio.Task[None]) -> None:
        running.async_task = task
        task.add_done_callback(lambda done: self._async_attempt_done(running, done))
        if running.ctx.cancelled:
            task.cancel()

    def _async_attempt_done(self, running: Running, task: asyncio.Task[None]) -> None:
        """On the loop, once an async attempt's task is done. One cancelled before it wrote its outcome
        (before its first step, or while it confirmed its lease or took its limits) never reached the
        code that does, nor perhaps its ``finally``: it ends here, as its handler's cancel would have.
        It held its run slot until the supervisor abandoned it, with an ERROR, ``abandon_grace`` later."""
        if task.cancelled() and not running.finalized and not running.ending:
            reason = running.ctx.cancel_reason
            self._finish_elsewhere(running, classify(asyncio.CancelledError(), reason) if reason
                                   else Outcome("requeue"))
        self._free_run_slot(running)

    # -- supervising ------------------------------------------------------------------------------

    def cancel(self, queue: str, task_id: str, reason: str = CANCELLED_BY_OPERATOR) -> bool:
        """Ask a running task of ``queue`` to stop; True when this process runs it (a task of the same
        id in another queue is another task).

        Async handlers are cancelled at once (at their next ``await``); sync handlers see
        ``ctx.cancelled`` and are interrupted after ``cancel_grace`` seconds if still running.
        """
        found = self.held.with_id(queue, task_id)
        for running in found:
            running.operator_cancel = running.operator_cancel or reason == CANCELLED_BY_OPERATOR
            running.ctx.request_cancel(reason)
            if running.async_task is not None:
                self._interrupt(running, TaskCancelled)
        return bool(found)

    def lease_lost(self, queue: str, task_id: str, lease: int) -> None:
        """The lease renewal found that this attempt no longer owns its task: stop it, write nothing."""
        running = self.held.get(queue, task_id, lease)
        # A finalized attempt is written (or its acknowledgement queued, which logs a refusal itself).
        if running is not None and not running.finalized and not running.lease_lost \
                and running.ctx.cancel_reason != LEASE_LOST_REASON:
            running.lease_lost = True  # a cancel asked earlier keeps its reason: this is not said again
            logger.warning("lost the lease of task %s (%s); it will run elsewhere", task_id, running.message.type)
            running.ctx.request_cancel(LEASE_LOST_REASON)
            self._interrupt(running, TaskCancelled)

    def _confirm_lease(self, running: Running) -> bool:
        """The attempt's lease ran out (as this process last extended it) before its handler started:
        this process was paused or starved past it, and another worker may have recovered and run the
        task meanwhile. Extend the lease now if it is still this attempt's; False when it is not, or
        Redis cannot say (the task is then recovered as any expired lease is)."""
        late = format_duration(self.clock.now() - running.lease_until)
        try:
            code = self.renewer.confirm(running)
        except Exception as exc:
            logger.warning("task %s (%s): its lease ran out %s before its handler could start (this worker was "
                           "paused or starved), and it could not be extended (%s); not run here: it is recovered "
                           "once its lease is seen expired", running.id, running.message.type, late, exc)
            return False
        if code == LEASE_LOST:
            logger.warning("task %s (%s): its lease ran out %s before its handler could start (this worker was "
                           "paused or starved) and another worker has taken the task; not run here",
                           running.id, running.message.type, late)
            running.ctx.request_cancel(LEASE_LOST_REASON)
            return False
        if code == LEASE_CANCEL_REQUESTED:
            self.cancel(running.queue, running.id)
        return True

    def _interrupt(self, running: Running, exc_type: type[BaseException]) -> None:
        """Interrupt the handler once. Repeating it (each lease renewal reports a cancel flag or a lost
        lease again) would break into the handler's cleanup; one that ignores it is abandoned instead.
        An attempt still waiting for a run slot has nothing to interrupt: it ends at once."""
        reason = running.ctx.cancel_reason
        if not running.run_slot and self._end_waiting(running, classify(exc_type(reason or "interrupted"), reason)):
            return
        with running.lock:
            if running.finalized or running.interrupted_at is not None:
                return
            running.interrupted_at = time.monotonic()
            if running.async_task is not None:
                self.async_loop.cancel(running.async_task)
            elif running.in_handler and running.thread_ident is not None:
                interrupt_thread(running.thread_ident, exc_type)

    def _supervise_loop(self) -> None:
        while not self._done.wait(0.05):
            now = self.clock.now()
            mono = time.monotonic()
            for running in self.held.snapshot():
                if running.finalized or running.ending:
                    continue
                ctx = running.ctx
                if running.deadline is not None and now >= running.deadline and not ctx.cancelled:
                    if not running.run_slot and self._end_waiting(running, _deadline_passed_waiting(running, now)):
                        continue
                    if running.message.deadline is not None and running.started >= running.message.deadline:
                        continue  # it starts past its deadline: its start check archives it, the handler never runs
                    limit = running.deadline - running.started
                    deadline = running.message.deadline
                    reached = deadline is not None and running.deadline >= deadline  # not the timeout
                    ctx.request_cancel(f"{DEADLINE_REACHED if reached else 'timed out'} after {limit:.3g}s")
                    self._interrupt(running, TaskTimeout)
                elif ctx.cancelled and running.interrupted_at is None:
                    if running.cancel_seen_at is None:
                        running.cancel_seen_at = mono
                    waited = mono - running.cancel_seen_at
                    if (running.async_task is not None or not running.run_slot
                            or ctx.cancel_reason != CANCELLED_BY_OPERATOR or waited >= self.config.cancel_grace):
                        self._interrupt(running, TaskCancelled)
                elif running.interrupted_at is not None and mono - running.interrupted_at >= self.config.abandon_grace:
                    self._abandon(running)

    def _abandon(self, running: Running) -> None:
        """A handler ignored its interrupt: fail the task and free its slot; the thread runs on."""
        logger.error("task %s (%s) did not stop %.3gs after being interrupted (%s); abandoning its thread",
                     running.id, running.message.type, self.config.abandon_grace,
                     running.ctx.cancel_reason or "interrupted")
        if running.thread_ident is not None:
            self.pool.abandon(running.thread_ident)
        self._finish_elsewhere(running, abandoned(running.ctx.cancel_reason))
        self._free_run_slot(running)  # the thread runs on, outside the count; another takes the slot

    # -- finalizing -------------------------------------------------------------------------------

    def _finalize(self, running: Running, outcome: Outcome | None) -> bool:
        """Write the outcome to Redis exactly once and free the slot. True if this call did it.

        A success is handed to the acker, which acknowledges many tasks in one round-trip; its slot
        is freed at once, while the attempt stays held (so its lease is renewed) until the
        acknowledgement is written.
        """
        with running.lock:
            if running.finalized:
                return False
            running.finalized = True
            hold = running.limit_hold  # read under the lock _admit sets it with (see there)
        if hold is not None:  # its concurrency slot goes back (in the background)
            self.limits.release(hold)
        if outcome is not None and outcome.kind == "success":
            result = self.recorder.encode_result(running, outcome)
            if running.message.retention:  # kept: its history says when it ran, and where
                running.attempt = self.recorder.attempt_line(running, "completed", self.clock.now())
            self._slots.release()
            self._acker.put(running, result)
            return True
        if outcome is not None and running.operator_cancel and outcome.kind in ("failure", "snooze", "wait"):
            # The operator's cancel was accepted: a handler that failed, snoozed or was held back by a
            # limit within its cancel grace ends archived as cancelled, not retried or parked to run again.
            outcome = Outcome("cancelled", error=TaskCancelled(CANCELLED_BY_OPERATOR))
        try:
            if outcome is not None:
                running.handed_back = outcome.kind == "requeue"
                self.recorder.record(running, outcome)
        finally:
            self.held.forget(running)
            self._slots.release()
        return True

    def _finalize_traced(self, running: Running, outcome: Outcome | None) -> bool:
        """``_finalize`` while tracing (the otel extra). An attempt counted as processed and failed that
        never reached its ``process`` span (no handler for its type, its deadline passed before it
        started, an undecodable message, an interrupt before its handler) gets one now, with its error."""
        done = self._finalize(running, outcome)
        if done and not running.traced and outcome is not None and outcome.kind in ("failure", "skip_retry") \
                and outcome.error is not None and self._tracing is not None:
            message = running.message
            self._tracing.failed_attempt(running.queue, running.id, message.type, running.retried + 1,
                                         message.trace, outcome.error)
        return done

    def _acknowledged(self, running: Running, accepted: bool | None) -> None:
        if accepted is not None:
            self.recorder.log(running, "success", accepted)
        self.held.forget(running)


def _deadline_passed_waiting(running: Running, now: float) -> Outcome:
    """The outcome of an attempt whose task's deadline passed while it waited for a run slot: archived
    (a retry would start later still), its handler never called."""
    assert running.deadline is not None
    return Outcome("skip_retry", error=deadline_passed(running.deadline, now))


def _placeholder(task_id: str, queue: str) -> TaskMessage:
    """The message an attempt is held with when its own cannot be (or need not be) decoded."""
    return TaskMessage(id=task_id, type="?", payload={}, queue=queue, max_retry=0)
