"""The heartbeater: publishes this worker process's state and renews the leases it holds."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from queuecore.core.broker import Broker
from queuecore.core.clock import Clock, to_ms
from queuecore.core.component import Periodic
from queuecore.core.health import RedisHealth
from queuecore.core.leases import LeaseRenewer
from queuecore.core.message import dumps
from queuecore.core.reasons import LEASE_LOST
from queuecore.core.running import HeldTasks
from queuecore.core.scripts import Scripts


@dataclass
class ServerState:
    """What a worker process says about itself in its heartbeat; ``status`` and ``started_at``
    change over its life (the worker sets them)."""

    id: str
    host: str
    pid: int
    concurrency: int
    queues: Mapping[str, int]
    strict_priority: bool
    started_at: float = 0.0
    status: str = "idle"  # active | quiet | stopping | stopped
    max_archive_size: int | None = None  # archived tasks its janitor keeps per queue (MAX_ARCHIVE_SIZE)


class Heartbeater(Periodic):
    name = "heartbeater"

    def __init__(self, scripts: Scripts, broker: Broker, clock: Clock, interval: float, state: ServerState,
                 held: HeldTasks, renewer: LeaseRenewer, health: RedisHealth,
                 task_types: Callable[[], str] | None = None, on_beat: Callable[[str], None] | None = None,
                 align_clock: Callable[[], object] | None = None,
                 on_control: Callable[[str, str], None] | None = None) -> None:
        super().__init__(interval, health)
        self._scripts = scripts
        self._broker = broker
        self._clock = clock
        self._state = state
        self._held = held
        self._renewer = renewer
        self._task_types = task_types  # the registry's describe_json: the task types this process handles
        self._registered = False  # this process's queues are in the set of known queues
        self._on_beat = on_beat  # called with the status after each heartbeat Redis took (the liveness file)
        self._align_clock = align_clock  # re-measures the offset of this host's clock to Redis's (clock.py)
        self._on_control = on_control  # (command, actor) an operator left for this process: quiet, stop

    @property
    def ttl(self) -> float:
        """How long a heartbeat stays visible: three intervals, so one slow beat does not hide us."""
        return self.interval * 3

    def run_once(self) -> None:
        try:
            self._renewer.renew()
        finally:  # on one queue's refusal too (a task key of another type, its master away): else this
            # process's heartbeat (and health file) lapsed and a liveness probe killed it
            self.beat()
        if self._align_clock is not None:
            self._align_clock()
        if not self._registered:  # the first try (at start) failed: Redis was away or full
            self.register_queues()

    def register_queues(self) -> None:
        """Add this process's queues to the set of known queues (what the dashboard and CLI list),
        after moving the keys of no queue that an earlier version wrote (``upgrade.py``)."""
        self._broker.move_legacy_keys()
        self._broker.register_queues(self._state.queues)
        self._registered = True

    def beat(self) -> None:
        """Write this process's ``ServerInfo`` with a TTL.

        With it go the task types this process handles and their parameter names, so that operator
        tools refuse a task no live worker could run; they are as fresh as the last heartbeat, and
        vanish with it (three intervals after the process stops beating, at once on a clean exit).

        Two script calls (the process's own keys, then the index of live processes and the known
        queues, which it lists again: a Redis that restarted without its data lists them at once;
        two cluster slots), each beginning with a write that frees memory, so heartbeats go on while
        Redis is at maxmemory: a worker that is still working never drops out of the operators' server list.
        """
        state = self._state
        now = self._clock.now()
        # Running: the handler started (at most ``concurrency``). Waiting: fetched ahead, not started.
        running: list[dict[str, Any]] = []
        waiting: list[dict[str, Any]] = []
        for r in self._held.snapshot():
            if r.finalized or r.ctx.cancel_reason == LEASE_LOST:
                continue
            if r.begun:
                entry = {"task_id": r.id, "queue": r.queue, "type": r.message.type, "started_at": r.started,
                         "deadline": r.deadline}
                if r.ctx.progress is not None:
                    entry["progress"] = r.ctx.progress.to_dict()
                running.append(entry)
            else:
                waiting.append({"task_id": r.id, "queue": r.queue, "type": r.message.type, "fetched_at": r.fetched})
        info = {
            "id": state.id,
            "host": state.host,
            "pid": state.pid,
            "concurrency": state.concurrency,
            "queues": dict(state.queues),
            "strict_priority": state.strict_priority,
            "started_at": state.started_at,
            "status": state.status,
            "heartbeat_at": now,
            "workers": running,
            "waiting": waiting,
            "rss_bytes": resident_memory(),
            "max_archive_size": state.max_archive_size,
        }
        types = self._task_types() if self._task_types is not None else '{"types":{}}'
        control = self._scripts.heartbeat(state.id, dumps(info), ttl_ms=to_ms(self.ttl), task_types=types)
        if control and self._on_control is not None:
            command, _, actor = control.partition(" ")
            self._on_control(command, actor)
        self._scripts.heartbeat_index(state.id, expires_ms=to_ms(now + self.ttl), now_ms=to_ms(now),
                                      queues=state.queues)
        if self._on_beat is not None:
            self._on_beat(state.status)

    def clear(self) -> None:
        """Remove this process's heartbeat on clean exit (DEL and ZREM free memory: fine at maxmemory)."""
        self._broker.remove_server(self._state.id)


def resident_memory() -> int | None:
    """This process's resident memory (RSS) in bytes: from ``/proc/self/statm`` where there is one,
    else the peak RSS the OS reports; None when neither is known."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak) if sys.platform == "darwin" else int(peak) * 1024  # bytes on macOS, KiB elsewhere
    except (ImportError, OSError, ValueError):
        return None
