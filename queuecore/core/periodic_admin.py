"""What the Inspector reads and does about periodic entries: list them, pause, resume, run now.

The entries are those some live worker declares (``<prefix>:periodic``, see ``scheduler.py``); each
one's state is its HASH and recent fires LIST in its queue's slot. A fire's outcome is its task's
state, read from the task hash (``done`` when the task completed and was not kept).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import redis

from queuecore.core.errors import PeriodicEntryNotFound, TaskIdConflict
from queuecore.core.keys import Keys, QueueKeys, is_valid_name
from queuecore.core.message import seconds_to_datetime
from queuecore.core.periodic import manual_task_id
from queuecore.core.scheduler import FIRED, NO_ENTRY, RECENT_FIRES, Prepare
from queuecore.core.scripts import Scripts

RECENT_SHOWN = 10


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _when(ms: Any) -> datetime | None:
    try:
        return seconds_to_datetime(int(ms) / 1000) if ms not in (None, "", "0") else None
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class PeriodicFire:
    """One recent fire of an entry: its time, when it was claimed, how (``schedule``, ``late``,
    ``manual``, ``skip``), its task and that task's outcome (its state; ``done`` when it completed
    and was not kept; ``skipped`` for missed fires that were skipped)."""

    fire_at: datetime | None
    claimed_at: datetime | None
    kind: str
    task_id: str | None
    outcome: str

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["fire_at"] = self.fire_at.isoformat() if self.fire_at else None
        out["claimed_at"] = self.claimed_at.isoformat() if self.claimed_at else None
        return out


@dataclass(frozen=True)
class PeriodicEntryInfo:
    """A periodic entry as the workers declare it, with its state."""

    name: str
    queue: str
    task: str
    schedule: str  # the cron expression, or "every N s"
    description: str  # the schedule in words
    timezone: str
    payload: dict[str, Any]
    options: dict[str, Any]
    missed: str  # "once" or "skip"
    paused: bool
    paused_by: str | None
    paused_at: datetime | None
    next_fire_at: datetime | None
    last_fire_at: datetime | None
    last_task_id: str | None
    last_kind: str | None
    last_outcome: str | None
    declared_at: datetime | None
    recent: list[PeriodicFire] = field(default_factory=list)
    # fire times so far by outcome: schedule, manual (enqueued), late (missed, run once late), skip
    # (missed, skipped), paused
    fires: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in asdict(self).items():
            out[key] = value.isoformat() if isinstance(value, datetime) else value
        out["recent"] = [f.to_dict() for f in self.recent]
        return out


class PeriodicAdmin:
    """Periodic entries for the ``Inspector`` (which audits the actions)."""

    def __init__(self, redis_client: redis.Redis, scripts: Scripts, keys: Keys, prepare: Prepare) -> None:
        self.redis = redis_client
        self.scripts = scripts
        self.keys = keys
        self.prepare = prepare

    def _members(self, now_ms: int) -> list[tuple[str, str]]:
        out = []
        for member in self.redis.zrangebyscore(self.keys.periodic, now_ms, "+inf"):
            name, _, queue = str(member).partition("/")
            if name and is_valid_name(queue):
                out.append((name, queue))
        return sorted(out)

    def entries(self, now_ms: int) -> list[PeriodicEntryInfo]:
        """Every entry a live worker declares, by name."""
        members = self._members(now_ms)
        pipe = self.redis.pipeline(transaction=False)
        for name, queue in members:
            q = self.keys.queue(queue)
            pipe.hgetall(q.periodic(name))
            pipe.lrange(q.periodic_fires(name), 0, RECENT_SHOWN - 1)
        replies = pipe.execute()
        raw = [(name, queue, replies[2 * i], replies[2 * i + 1]) for i, (name, queue) in enumerate(members)]
        raw = [r for r in raw if r[2].get("def")]
        ids: list[tuple[QueueKeys, str]] = []
        for _name, queue, h, fires in raw:
            q = self.keys.queue(queue)
            if h.get("last_id"):
                ids.append((q, h["last_id"]))
            ids += [(q, line.split(" ")[3]) for line in fires if len(line.split(" ")) == 4]
        states = self._states(ids)
        return [self._info(name, queue, h, fires, states) for name, queue, h, fires in raw]

    def _states(self, ids: list[tuple[QueueKeys, str]]) -> dict[tuple[str, str], str]:
        unique = list(dict.fromkeys((q, i) for q, i in ids if i != "-"))
        pipe = self.redis.pipeline(transaction=False)
        for q, task_id in unique:
            pipe.hget(q.task(task_id), "state")
        return {(q.queue, task_id): state or "done"
                for (q, task_id), state in zip(unique, pipe.execute(), strict=True)}

    def entry(self, name: str, now_ms: int) -> PeriodicEntryInfo:
        """One entry by name (of its copies in several queues, the one declared last: a rolling deploy
        that moved it to another queue leaves both a while); ``PeriodicEntryNotFound`` when no live
        worker declares it."""
        return max(self.copies(name, now_ms), key=lambda info: info.declared_at or _EPOCH)

    def copies(self, name: str, now_ms: int) -> list[PeriodicEntryInfo]:
        """The entry ``name`` in each queue live workers declare it in (one, but for a deploy under way)."""
        found = [info for info in self.entries(now_ms) if info.name == name]
        if not found:
            raise PeriodicEntryNotFound(f"no periodic entry named {name!r} (declared by a live worker)")
        return found

    @staticmethod
    def _info(name: str, queue: str, h: dict[str, str], fires: list[str],
              states: dict[tuple[str, str], str]) -> PeriodicEntryInfo:
        try:
            d = json.loads(h["def"])
        except ValueError:
            d = {}
        schedule = d.get("cron") or (f"every {d.get('every')} s" if d.get("every") else "?")
        recent = []
        for line in fires:
            parts = line.split(" ")
            if len(parts) != 4:
                continue
            fire_ms, claimed_ms, kind, task_id = parts
            outcome = "skipped" if kind == "skip" else states.get((queue, task_id), "done")
            recent.append(PeriodicFire(_when(fire_ms), _when(claimed_ms), kind, None if task_id == "-" else task_id,
                                       outcome))
        last_id = h.get("last_id")
        return PeriodicEntryInfo(
            name=name, queue=queue, task=str(d.get("task", "?")), schedule=str(schedule),
            description=str(d.get("describe", schedule)), timezone=str(d.get("timezone", "UTC")),
            payload=d.get("payload") or {}, options=d.get("options") or {}, missed=str(d.get("missed", "once")),
            paused="paused" in h, paused_by=h.get("paused_by"), paused_at=_when(h.get("paused_at")),
            next_fire_at=_when(h.get("next")), last_fire_at=_when(h.get("last_fire")), last_task_id=last_id,
            last_kind=h.get("last_kind"), last_outcome=states.get((queue, last_id), "done") if last_id else None,
            declared_at=_when(h.get("declared")), recent=recent,
            fires={k.removeprefix("fires_"): int(v) for k, v in h.items()
                   if k.startswith("fires_") and re.fullmatch(r"[0-9]{1,18}", v)})  # HINCRBY's; else corrupt

    def set_paused(self, name: str, pause: bool, actor: str, now_ms: int) -> tuple[list[str], bool]:
        """Pause or resume the entry in every queue it is declared in; returns (those queues, whether
        any changed)."""
        queues, changed = [], False
        for info in self.copies(name, now_ms):
            code = self.scripts.admin_periodic_pause(self.keys.queue(info.queue), name, pause=pause, actor=actor,
                                                     now_ms=now_ms)
            if code != NO_ENTRY:  # forgotten meanwhile: nothing to pause there
                queues.append(info.queue)
                changed = changed or code == 1
        if not queues:
            raise PeriodicEntryNotFound(f"no periodic entry named {name!r}")
        return queues, changed

    def run(self, name: str, now: float) -> tuple[str, str]:
        """Enqueue the entry's task now (the mark and schedule are left alone); returns (queue, task id)."""
        now_ms = round(now * 1000)
        info = self.entry(name, now_ms)
        q = self.keys.queue(info.queue)
        task_id = manual_task_id(name, now)
        msg = self.prepare(info.task, dict(info.payload), dict(info.options), task_id, now)
        code, _ = self.scripts.periodic_fire(q, name, now_ms=now_ms, fire_ms=now_ms, mark_ms=0, kind="manual",
                                             task_id=task_id, msg=msg, keep=RECENT_FIRES)
        if code == NO_ENTRY:
            raise PeriodicEntryNotFound(f"no periodic entry named {name!r}")
        if code != FIRED:
            raise TaskIdConflict(f"periodic entry {name!r} was already run at this moment ({task_id})")
        return info.queue, task_id
