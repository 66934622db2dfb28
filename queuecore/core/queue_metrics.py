"""What a metrics scrape reads from Redis, without any metrics library (``queuecore.metrics`` turns it
into Prometheus metric families).

One ``queue_metrics`` script call per queue, all in one pipeline: sizes per state, paused, the oldest
pending task (for the latency), a memory estimate, the queue's totals and its per-type counters
(``typestats.py``). The cost of a scrape grows with the number of queues (and live workers), never
with the number of tasks.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from queuecore.core.errors import TaskDecodeError
from queuecore.core.keys import QueueKeys
from queuecore.core.message import ServerInfo, TaskMessage
from queuecore.core.scripts import Scripts
from queuecore.core.typestats import unpack

STATES = ("pending", "active", "scheduled", "retry", "archived", "completed")
MEMORY_SAMPLE = 10  # task hashes sampled per queue for the memory estimate, shared out over its states


@dataclass(frozen=True)
class QueueMetrics:
    """One queue at scrape time."""

    queue: str
    sizes: dict[str, int]  # state -> tasks
    paused: bool
    latency: float  # seconds the task at the head (the next to run) has waited; 0 when none waits
    memory_bytes: int | None  # estimate; None when MEMORY is denied
    processed_total: int | None  # None: the stored total is not a number (the sample is left out)
    failed_total: int | None
    types: dict[str, list[int]] = field(default_factory=dict)  # type -> typestats vector


@dataclass(frozen=True)
class WorkerMetrics:
    """Live worker processes: how many, how many handlers run now, how many may run at once."""

    up: int
    busy: int
    concurrency: int


@dataclass(frozen=True)
class MetricsSnapshot:
    queues: list[QueueMetrics]
    workers: WorkerMetrics
    unreadable: list[str] = field(default_factory=list)  # queues left out: a key of the wrong Redis type


def read_queues(client: redis.Redis, scripts: Scripts, queues: Sequence[QueueKeys], now: float,
                sample: int = MEMORY_SAMPLE) -> tuple[list[QueueMetrics], list[str]]:
    """Every queue's metrics in one pipeline; queues whose keys Redis refuses are returned apart."""
    if not queues:
        return [], []
    pipe = client.pipeline(transaction=False)
    for q in queues:
        scripts.queue_metrics(q, sample=sample, offset=random.random(), client=pipe)
    replies = pipe.execute(raise_on_error=False)
    out, unreadable = [], []
    for q, reply in zip(queues, replies, strict=True):
        if isinstance(reply, Exception):
            unreadable.append(q.queue)
            continue
        out.append(parse(q, reply, now))
    return out, unreadable


def parse(q: QueueKeys, reply: list[Any], now: float) -> QueueMetrics:
    """A ``queue_metrics`` reply as ``QueueMetrics``."""
    oldest, since, msg = (_text(v) for v in reply[7:10])
    since_at = pending_since(q.queue, oldest, since, msg)
    memory = int(reply[10])
    rest = reply[13:]
    types = {_text(rest[i]): unpack(rest[i + 1]) for i in range(0, len(rest) - 1, 2)}
    return QueueMetrics(
        queue=q.queue, sizes={s: int(n) for s, n in zip(STATES, reply[:6], strict=True)}, paused=bool(reply[6]),
        latency=max(0.0, now - since_at) if since_at else 0.0,
        memory_bytes=memory if memory >= 0 else None, processed_total=_count(reply[11]),
        failed_total=_count(reply[12]), types=types)


def pending_since(queue: str, task_id: str, since: Any, msg: Any) -> float:
    """When a pending task became pending (unix seconds; 0 when unknown): its ``pending_since`` (ms),
    set whenever a task goes back to pending, else its message's ``enqueued_at`` (a first enqueue
    does not store one). A value that is not a number (hand-edited) falls back to the message."""
    if not task_id:
        return 0.0
    if since:
        try:
            return int(since) / 1000.0
        except (TypeError, ValueError):
            pass
    if not msg:
        return 0.0
    try:
        return TaskMessage.decode(task_id, queue, msg).enqueued_at
    except TaskDecodeError:
        return 0.0


def _count(value: Any) -> int | None:
    """A stored total as an int; None when it is not a whole number (a hand-edited value)."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def worker_metrics(servers: Sequence[ServerInfo]) -> WorkerMetrics:
    return WorkerMetrics(up=len(servers), busy=sum(s.active_count for s in servers),
                         concurrency=sum(s.concurrency for s in servers))


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else str(value)
