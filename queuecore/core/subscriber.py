"""The subscriber: listens for cancel requests and for wake-ups when a queue gets work."""

from __future__ import annotations

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

    A message on a cancel channel (``<queue> <task id>``) calls ``on_cancel(task_id)``, which says
    whether this process runs the task; one on a wake channel calls ``on_wake()`` ("due <unix ms>":
    ``on_due(unix s)``, a scheduled task falls due then), as does every (re)subscription, for
    anything published while the connection was away; one on this worker's push channel of a queue
    (``push_channels``: channel -> queue) calls ``on_push(queue, "<task id> <message>")``. With ``sharded()`` true
    (a Redis 7 cluster; asked at each subscription), the channels are shard channels (``SSUBSCRIBE``),
    each followed on the master that holds its queue.
    """

    def __init__(self, broker: Broker, cancel_channels: Iterable[str], wake_channels: Iterable[str],
                 on_cancel: Callable[[str], bool], on_wake: Callable[[], None], health: RedisHealth,
                 sharded: Callable[[], bool] = lambda: False,
                 on_due: Callable[[float], None] | None = None, push_channels: Mapping[str, str] | None = None,
                 on_push: Callable[[str, str], None] | None = None) -> None:
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
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="queuecore-subscriber", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        self.done.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        backoff = 0.1
        refusals = 0  # error replies read in place of messages since the subscription last held
        while not self.done.is_set():
            pubsub = self._broker.pubsub()
            try:
                channels = sorted(self._cancel_channels | self._wake_channels | set(self._push_channels))
                sharded = self._sharded()
                if sharded:
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
                ping_every = MASTER_RECHECK if not sharded and self._broker.pubsub_must_ping() else None
                pinged = since = time.monotonic()
                held = False
                while not self.done.is_set():
                    if not held and time.monotonic() - since >= WAIT:  # read for a while without an error
                        held, backoff = True, 0.1
                        if refusals > 1:
                            logger.warning("the subscription works again")
                        refusals = 0
                    message = self._next_message(pubsub, sharded)
                    if message is None and sharded:
                        _wait_readable(pubsub, WAIT)
                        continue
                    if ping_every is not None and time.monotonic() - pinged >= ping_every:
                        pinged = time.monotonic()
                        self._broker.ping_subscription(pubsub)
                    if message is not None and message.get("type") in ("message", "smessage"):
                        self.handle(message["channel"], message["data"])
            except _ErrorReply as read:
                self.subscribed.clear()
                refusals += 1
                if refusals == 1:
                    # Once, the connection's replies out of step (seen on a cluster during a slot
                    # migration: a CLIENT SETINFO error of a connection's handshake read as a message): a
                    # new subscription starts in step, at once.
                    logger.warning("the subscription read an error reply in place of a message (%s: %s); "
                                   "subscribing again", type(read.error).__name__, read.error)
                    backoff = 0.1
                elif refusals == 2:  # again at once: Redis refuses the subscription itself (ACL, say)
                    logger.error("Redis refuses this worker's subscription (%s: %s): no wake-ups, pushed tasks "
                                 "or cancel requests reach it (it polls for tasks meanwhile); retrying with backoff",
                                 type(read.error).__name__, read.error)
                self.done.wait(backoff)
                backoff = min(backoff * 2, 5.0)
            except Exception as exc:
                self.subscribed.clear()
                refusals = 0  # an error reply after this one is out of step again, not a refusal
                self._health.report_error("subscriber", exc)
                self.done.wait(backoff)
                backoff = min(backoff * 2, 5.0)
            finally:
                try:
                    pubsub.close()
                except Exception:
                    pass

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

    def handle(self, channel: str, data: str) -> None:
        """Act on one pub/sub message."""
        queue = self._push_channels.get(channel)
        if queue is not None and self._on_push is not None:
            self._on_push(queue, str(data))
        elif channel in self._cancel_channels:
            queue, _, task_id = str(data).partition(" ")
            if self._on_cancel(task_id):
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
                    return
            self._on_wake()
