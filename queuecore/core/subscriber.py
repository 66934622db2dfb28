"""The subscriber: listens for cancel requests and for wake-ups when a queue gets work."""

from __future__ import annotations

import contextvars
import logging
import select
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import redis

from queuecore.core.broker import Broker
from queuecore.core.health import RedisHealth
from queuecore.core.topology import MASTER_RECHECK

logger = logging.getLogger("queuecore.worker")

WAIT = 0.5  # seconds a quiet subscription waits before it looks at ``done`` again


class _ErrorReply(Exception):
    """An error reply the subscription read where a message (or its confirmation) belonged."""

    def __init__(self, error: redis.ResponseError) -> None:
        super().__init__(str(error))
        self.error = error


def _wait_readable(pubsub: Any, timeout: float) -> None:
    """Wait until a connection of a cluster's shard subscription (one per master) has something to
    read, or ``timeout``. The caller has drained every one first (redis-py buffers what it read)."""
    sockets = []
    for node_pubsub in list(getattr(pubsub, "node_pubsub_mapping", {}).values()):
        connection = getattr(node_pubsub, "connection", None)
        sock = getattr(connection, "_sock", None)
        if sock is not None:
            sockets.append(sock)
    if not sockets:  # none connected yet (or another redis-py): a short wait, then look again
        time.sleep(min(timeout, 0.01))
        return
    try:
        select.select(sockets, [], [], timeout)
    except (OSError, ValueError):  # a socket closed meanwhile: the next read reports it
        pass


class Subscriber:
    """Holds one pub/sub connection; reconnects with backoff when Redis goes away.

    A message on a cancel channel (``<queue> <task id>``) calls ``on_cancel(queue, task_id)``, which says
    whether this process runs the task; one on a wake channel calls ``on_wake()`` ("due <unix ms>":
    ``on_due(unix s)``, a scheduled task falls due then), as does every (re)subscription, for
    anything published while the connection was away; one on this worker's push channel of a queue
    (``push_channels``: channel -> queue) calls ``on_push(queue, "<task id> <message>", run_here)``.
    With ``sharded()`` true (a Redis 7 cluster; asked at each subscription), the channels are shard
    channels (``SSUBSCRIBE``), each followed on the master that holds its queue.

    Two threads take turns: one reads, the other stands by. ``on_push`` given ``run_here`` true may
    return the pushed task's work (an idle worker's): the reading thread then hands the reading to the
    other and runs it itself, so the task starts without a hop to a handler thread, and stands by
    afterwards. Cancel requests, wake-ups and pushes are read meanwhile, by the other thread.
    """

    def __init__(self, broker: Broker, cancel_channels: Iterable[str], wake_channels: Iterable[str],
                 on_cancel: Callable[[str, str], bool], on_wake: Callable[[], None], health: RedisHealth,
                 sharded: Callable[[], bool] = lambda: False,
                 on_due: Callable[[float], None] | None = None, push_channels: Mapping[str, str] | None = None,
                 on_push: Callable[[str, str, bool], Callable[[], None] | None] | None = None) -> None:
        self._broker = broker
        self._cancel_channels = set(cancel_channels)
        self._wake_channels = set(wake_channels)
        self._push_channels = dict(push_channels or {}) if on_push is not None else {}
        self._on_push = on_push
        self._sharded = sharded
        self._on_cancel = on_cancel
        self._on_wake = on_wake
        self._on_due = on_due
        self._health = health
        self.done = threading.Event()
        self.subscribed = threading.Event()
        self._threads: list[threading.Thread] = []
        # The reading role: free (a thread standing by takes it), or held by the thread that reads.
        self._turn = threading.Condition()
        self._role_free = True
        self._standing_by = 0  # threads waiting for the role
        self._running_here: set[int] = set()  # threads running a pushed task (not joined at shutdown)
        # The subscription, kept across hand-overs: only the thread holding the role touches it.
        self._pubsub: Any = None
        self._is_sharded = False
        self._ping_every: float | None = None
        self._pinged = self._since = 0.0
        self._held = False
        self._backoff = 0.1
        self._refusals = 0  # error replies read in place of messages since the subscription last held

    def start(self) -> None:
        for name in ("queuecore-subscriber", "queuecore-subscriber-2"):
            thread = threading.Thread(target=self._run, name=name, daemon=True)
            self._threads.append(thread)
            thread.start()

    def shutdown(self) -> None:
        self.done.set()
        with self._turn:
            self._turn.notify_all()
        for thread in self._threads:
            if thread.ident not in self._running_here:  # a task's thread: the processor waits for its task
                thread.join(timeout=5)

    def _run(self) -> None:
        """The body of both threads: take the reading role when it is free, read until done or until
        a pushed task is to run here (the role is handed over first), run it, and stand by again."""
        while self._take_role():
            try:
                work = self._read()
            except BaseException:  # never leave the other thread waiting for a role no one holds
                self._hand_over()
                raise
            if work is None:
                return
            me = threading.get_ident()
            self._running_here.add(me)
            try:
                # In a context of its own: what a handler leaves in context variables stays with it.
                contextvars.copy_context().run(work)
            except BaseException:  # the runner catches what a handler raises: this would be the worker's own fault
                logger.exception("error running a pushed task on the subscriber's thread")
            finally:
                self._running_here.discard(me)

    def _take_role(self) -> bool:
        """Wait until the reading role is free and take it; False once done."""
        with self._turn:
            self._standing_by += 1
            try:
                while not self._role_free and not self.done.is_set():
                    self._turn.wait(WAIT)
            finally:
                self._standing_by -= 1
            if self.done.is_set():
                return False
            self._role_free = False
            return True

    def _hand_over(self) -> None:
        """Give the reading role to the thread standing by (``on_push`` was told one was)."""
        with self._turn:
            self._role_free = True
            self._turn.notify()

    def _read(self) -> Callable[[], None] | None:
        """Read (subscribing again after errors, with backoff) until done: None, the subscription
        closed; or until a pushed task is to run on this thread: its work, the role handed over."""
        try:
            while not self.done.is_set():
                try:
                    if self._pubsub is None:
                        self._subscribe()
                    work = self._read_messages()
                except _ErrorReply as read:
                    self._drop_subscription()
                    self._refused(read)
                    self._back_off()
                    continue
                except Exception as exc:
                    self._drop_subscription()
                    self._refusals = 0  # an error reply after this one is out of step again, not a refusal
                    self._health.report_error("subscriber", exc)
                    self._back_off()
                    continue
                if work is not None:
                    return work
        except BaseException:
            self._drop_subscription()
            raise
        self._drop_subscription()
        return None

    def _back_off(self) -> None:
        """Wait before subscribing again (until done), twice as long each time, at most 5 s."""
        self.done.wait(self._backoff)
        self._backoff = min(self._backoff * 2, 5.0)

    def _subscribe(self) -> None:
        pubsub = self._broker.pubsub()
        self._pubsub = pubsub
        channels = sorted(self._cancel_channels | self._wake_channels | set(self._push_channels))
        self._is_sharded = self._sharded()
        if self._is_sharded:
            pubsub.ssubscribe(*channels)
        else:
            pubsub.subscribe(*channels)
        self.subscribed.set()
        self._health.note_ok("subscriber")  # an error it reported (Redis full, say) is over
        self._on_wake()  # anything published while we were away
        # Behind sentinels, a PING now and then: the connection learns when it sends that its
        # server is no longer the master, and is closed (ConnectionError: subscribe again, to
        # the new one). Reading only, it stayed on a former master after a planned failover
        # until that one was demoted (~10 s with no wake-up, push or cancel message).
        self._ping_every = (MASTER_RECHECK if not self._is_sharded and self._broker.pubsub_must_ping()
                            else None)
        self._pinged = self._since = time.monotonic()
        self._held = False

    def _drop_subscription(self) -> None:
        self.subscribed.clear()
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            try:
                pubsub.close()
            except Exception:
                pass

    def _read_messages(self) -> Callable[[], None] | None:
        pubsub = self._pubsub
        while not self.done.is_set():
            if not self._held and time.monotonic() - self._since >= WAIT:  # read for a while without an error
                self._held, self._backoff = True, 0.1
                if self._refusals > 1:
                    logger.warning("the subscription works again")
                self._refusals = 0
            message = self._next_message(pubsub, self._is_sharded)
            if message is None and self._is_sharded:
                _wait_readable(pubsub, WAIT)
                continue
            if self._ping_every is not None and time.monotonic() - self._pinged >= self._ping_every:
                self._pinged = time.monotonic()
                self._broker.ping_subscription(pubsub)
            if message is not None and message.get("type") in ("message", "smessage"):
                work = self.handle(message["channel"], message["data"])
                if work is not None:
                    return work
        return None

    def _refused(self, read: _ErrorReply) -> None:
        self._refusals += 1
        if self._refusals == 1:
            # Once, the connection's replies out of step (seen on a cluster during a slot
            # migration: a CLIENT SETINFO error of a connection's handshake read as a message): a
            # new subscription starts in step, at once.
            logger.warning("the subscription read an error reply in place of a message (%s: %s); "
                           "subscribing again", type(read.error).__name__, read.error)
            self._backoff = 0.1
        elif self._refusals == 2:  # again at once: Redis refuses the subscription itself (ACL, say)
            logger.error("Redis refuses this worker's subscription (%s: %s): no wake-ups, pushed tasks "
                         "or cancel requests reach it (it polls for tasks meanwhile); retrying with backoff",
                         type(read.error).__name__, read.error)

    @staticmethod
    def _next_message(pubsub: Any, sharded: bool) -> dict[str, Any] | None:
        """The subscription's next message (None: none within ``WAIT``; a cluster's shards: none now). An
        error reply read there raises ``_ErrorReply``."""
        try:
            if sharded:
                # One connection per master: redis-py waits its timeout on each in turn and returns one
                # message, so a message on one master waited behind a quiet other. Take whatever any
                # has (the caller waits on all of them at once when none has any).
                message: dict[str, Any] | None = pubsub.get_sharded_message(ignore_subscribe_messages=True,
                                                                            timeout=0)
            else:
                message = pubsub.get_message(timeout=WAIT)
        except redis.ResponseError as exc:
            raise _ErrorReply(exc) from exc
        return message

    def handle(self, channel: str, data: str) -> Callable[[], None] | None:
        """Act on one pub/sub message. A push whose task is to run on this thread (see the class):
        the reading role handed over, its work is returned."""
        queue = self._push_channels.get(channel)
        if queue is not None and self._on_push is not None:
            # Whoever stands by now stands by until this thread frees the role: it can be handed over.
            work = self._on_push(queue, str(data), self._standing_by > 0)
            if work is not None:
                self._hand_over()
            return work
        if channel in self._cancel_channels:
            queue, _, task_id = str(data).partition(" ")
            if self._on_cancel(queue, task_id):
                logger.info("cancel requested for task %s in queue %s", task_id, queue)
        elif channel in self._wake_channels:
            text = str(data)
            if text.startswith("due "):  # a task scheduled to fall due at this unix ms
                try:
                    due = int(text[4:]) / 1000
                except (ValueError, OverflowError):  # not a time a float can hold: a plain wake-up
                    due = None
                if due is not None:
                    if self._on_due is not None:
                        self._on_due(due)
                    return None
            self._on_wake()
        return None
