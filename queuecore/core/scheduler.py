"""The scheduler: every worker's component that enqueues its periodic entries' fires.

Every worker that declares periodic entries runs one; they need not know of each other. For each
entry and each fire time the scheduler calls ``periodic_fire.lua``, which claims the fire (the
entry's *mark*, the latest fire time claimed or skipped, moves past it) and enqueues its task in one
atomic step; the other workers' calls for that fire find the mark past it and do nothing. So a fire
is enqueued once however many workers run, and a restarted worker never fires twice (the mark lives
in Redis). The task id derives from (entry, fire time) (``periodic.fire_task_id``).

A fire not claimed within ``MISFIRE_GRACE`` (60 s) of its time was missed (every worker was down or
stalled). The entry's policy decides: ``"once"`` (the default) enqueues one task late, for the first
missed fire time, whatever the number missed; ``"skip"`` enqueues nothing and records the skip. Fires
within the grace are each enqueued (a worker that stalled a few seconds catches up).

The scheduler also declares its entries: every ``declare_interval`` it writes each entry's
definition and next fire (``periodic_sync.lua``) and lists the entries in ``<prefix>:periodic`` as
live for three intervals (``periodic_register.lua``). An entry that no live worker declares for that
long is no longer listed. Its state (mark, pause, recent fires) is kept for ``STATE_KEPT`` more, so
that a restart or an outage of any length up to that resumes it as it was (a pause kept, missed
fires run as its ``missed`` says); then a scheduler, every worker runs one with or without entries,
deletes it (``periodic_forget.lua``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from queuecore.core.broker import Broker
from queuecore.core.clock import Clock, to_ms
from queuecore.core.component import Periodic
from queuecore.core.config import DEFAULT_QUEUE, ConnectionConfig
from queuecore.core.errors import BrokerError, QueuecoreError
from queuecore.core.health import RedisHealth
from queuecore.core.keys import Keys, QueueKeys
from queuecore.core.message import TaskMessage, encode_payload
from queuecore.core.periodic import MISFIRE_GRACE, PeriodicEntry, count_fires, fire_task_id
from queuecore.core.scripts import Scripts

logger = logging.getLogger("queuecore.scheduler")

MAX_FIRES_PER_ROUND = 100  # per entry and round: a long stall catches up over a few rounds
RECENT_FIRES = 20  # fires kept per entry for the dashboard
DECLARATION_LIFETIMES = 3  # an entry stays listed this many declare intervals after its last declaration
STATE_KEPT = 7 * 24 * 3600.0  # seconds an entry no longer listed keeps its state before it is deleted

# Builds a fire's task: (type, payload, options, task id, now) -> encoded message.
Prepare = Callable[[str, dict[str, Any], dict[str, Any], str, float], str]

# periodic_fire.lua reply codes
FIRED, SKIPPED, ALREADY, NO_ENTRY, PAUSED = 1, 2, 0, -1, -2


def message_builder(connection: ConnectionConfig) -> Prepare:
    """A ``Prepare`` that encodes a fire's task as the client would: the entry's options (already
    checked, with its handler's defaults merged by the worker), else the connection's defaults."""

    def prepare(task: str, payload: dict[str, Any], options: dict[str, Any], task_id: str, now: float) -> str:
        max_retry = options.get("max_retry")
        retention = options.get("retention")
        message = TaskMessage(
            id=task_id, type=task, payload=payload, queue=str(options.get("queue") or DEFAULT_QUEUE),
            max_retry=int(connection.default_max_retry if max_retry is None else max_retry),
            timeout=options.get("timeout"), enqueued_at=now,
            retention=float(getattr(connection, "default_retention", 0.0) if retention is None else retention))
        return message.encode(encode_payload(payload, connection.max_payload_bytes))

    return prepare


@dataclass
class _Entry:
    entry: PeriodicEntry
    q: QueueKeys
    definition: str
    mark: float | None = None  # seconds; None until read from Redis
    next: float = 0.0
    failing: str | None = None  # why its last fire could not be enqueued (logged once), None while it fires

    @property
    def member(self) -> str:
        return f"{self.entry.name}/{self.q.queue}"


class Scheduler(Periodic):
    """Enqueues the fires of ``entries``, exactly once across workers (see the module docstring)."""

    name = "scheduler"

    def __init__(self, scripts: Scripts, broker: Broker, keys: Keys, clock: Clock, entries: Sequence[PeriodicEntry],
                 prepare: Prepare, health: RedisHealth, *, declare_interval: float,
                 grace: float = MISFIRE_GRACE) -> None:
        super().__init__(declare_interval, health)
        self._scripts = scripts
        self._broker = broker
        self._keys = keys
        self._clock = clock
        self._prepare = prepare
        self._grace = grace
        self._entries = [_Entry(e, keys.queue(e.queue), e.definition()) for e in entries]
        self._declare_at = 0.0

    @property
    def entries(self) -> list[PeriodicEntry]:
        return [e.entry for e in self._entries]

    def run_once(self) -> int:
        """Declare the entries when due, then claim every due fire; returns how many tasks were enqueued."""
        now = self._clock.now()
        if now >= self._declare_at:
            self.declare(now)
        fired = 0
        for e in self._entries:
            try:
                if e.mark is None:
                    self._sync(e, now)
                fired += self._fire_due(e, now)
            except BrokerError:  # Redis away, full or corrupt: the round fails, as every component's
                raise
            except QueuecoreError as exc:  # this entry's fire cannot be enqueued: the others go on
                self._failed(e, exc, now)
            else:
                if e.failing is not None:
                    logger.info("periodic entry %s fires again", e.entry.name)
                    e.failing = None
        return fired

    def _failed(self, e: _Entry, exc: QueuecoreError, now: float) -> None:
        """Log an entry's failure once while it lasts; it is tried again an interval on."""
        if str(exc) != e.failing:
            logger.error("periodic entry %s: its fire cannot be enqueued (%s: %s); tried again every %gs, the other "
                         "entries go on", e.entry.name, type(exc).__name__, exc, self.interval)
            e.failing = str(exc)
        e.next = now + self.interval

    def declare(self, now: float) -> None:
        """List the entries as live, forget those whose declaration lapsed ``STATE_KEPT`` ago, and sync
        each entry."""
        lifetime = DECLARATION_LIFETIMES * self.interval
        if self._entries:
            self._broker.register_queues(e.q.queue for e in self._entries)
        lapsed = self._scripts.periodic_register([e.member for e in self._entries],
                                                 lapsed_before_ms=to_ms(now - STATE_KEPT),
                                                 until_ms=to_ms(now + lifetime))
        for member in lapsed:
            name, _, queue = member.partition("/")
            try:
                q = self._keys.queue(queue)
            except ValueError:
                continue
            if self._scripts.periodic_forget(q, name, declared_before_ms=to_ms(now - lifetime - STATE_KEPT)):
                logger.info("periodic entry %s (queue %s) was declared by no worker for %g days: its state is "
                            "deleted", name, queue, STATE_KEPT / 86400)
        for e in self._entries:
            self._sync(e, now)
        self._declare_at = now + self.interval

    def _sync(self, e: _Entry, now: float) -> None:
        next_fire = e.entry.schedule.next_after(now)
        mark_ms, _paused = self._scripts.periodic_sync(e.q, e.entry.name, now_ms=to_ms(now), definition=e.definition,
                                                       next_ms=next_fire * 1000)
        e.mark = mark_ms / 1000

    def _fire_due(self, e: _Entry, now: float) -> int:
        fired = 0
        schedule = e.entry.schedule
        for _ in range(MAX_FIRES_PER_ROUND):
            assert e.mark is not None
            fire = schedule.next_after(e.mark)
            if fire > now:
                e.next = fire
                break
            edge = now - self._grace
            fires = 1  # fire times this claim stands for (counted in the entry's fires_<kind>)
            if fire <= edge:  # missed: every worker was away past the grace
                kind = "late" if e.entry.missed == "once" else "skip"
                mark_ms = max(fire * 1000, to_ms(edge))
                fires = count_fires(schedule, fire, mark_ms / 1000)
            else:
                kind, mark_ms = "schedule", fire * 1000
            next_ms = schedule.next_after(mark_ms / 1000) * 1000
            task_id, msg = "-", ""
            if kind != "skip":
                task_id = fire_task_id(e.entry.name, fire)
                msg = self._prepare(e.entry.task, dict(e.entry.payload), dict(e.entry.options), task_id, now)
            code, mark = self._scripts.periodic_fire(e.q, e.entry.name, now_ms=to_ms(now), fire_ms=fire * 1000,
                                                     mark_ms=mark_ms, kind=kind, task_id=task_id, msg=msg,
                                                     next_ms=next_ms, keep=RECENT_FIRES, fires=fires)
            if code == NO_ENTRY:  # forgotten meanwhile: declare it again (a fresh mark) next round
                e.mark = None
                break
            e.mark = max(mark / 1000, e.mark)
            if code == FIRED:
                fired += 1
                if kind == "late":
                    logger.warning("periodic entry %s missed its fires from %s (no worker ran it in time): "
                                   "enqueued once late as %s", e.entry.name, fire, task_id)
            elif code == SKIPPED:
                logger.warning("periodic entry %s missed its fires from %s (no worker ran it in time): skipped",
                               e.entry.name, fire)
        else:
            e.next = now  # more to catch up: go on at once
        return fired

    def next_wait(self) -> float:
        """Seconds until the next fire of any entry or the next declaration, at most the interval
        (the interval after a failed round: no fast retries while Redis is away)."""
        if self.last_round_failed:
            return self.interval
        now = self._clock.now()
        soonest = self._declare_at
        for e in self._entries:
            if e.mark is not None:
                soonest = min(soonest, e.next)
        return min(self.interval, max(soonest - now, 0.0))
