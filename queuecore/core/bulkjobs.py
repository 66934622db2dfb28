"""Bulk jobs: an operator's action on every task of a state, a filter or a failure group, of any size,
carried out in chunks by whoever holds the job's lease, with its progress in Redis.

A job is a hash under the keys' global hash tag (``Keys.bulk_job``). It is created (``BulkJobStore.create``)
and then driven (``run_job``) by one driver at a time: the dashboard's thread, ``adminctl`` in the
foreground, or a worker's ``BulkJobRunner``, which picks up any job no driver holds — one queued from
``adminctl --background``, or one whose driver died (its lease lapsed). Each step renews the lease and
records the progress in one script (``bulk_job_step.lua``), so a driver that lost its lease stops
without writing.

How a job acts:

- **a whole state** (no filter), for run, archive and delete: the state's chunk scripts, 500 tasks a
  call, each going on from where the last stopped, acting only on the tasks that were in the state
  when the job was made: a task that entered it later (a task the job ran that failed again, a new
  or priority enqueue) is passed and left for the next job; an id whose task hash was gone is
  dropped and counted as skipped;
- **a filter, a failure group, or cancelling what runs**: first it *finds* the tasks (scanning the
  state and keeping the matches, or reading the group) into a list in Redis, then it *acts* on exactly
  those, 500 at a time, with the one-task scripts; a task that left the state meanwhile is skipped and
  counted as skipped. A restarted driver finds again (when it died while finding) or goes on from the
  last chunk recorded (while acting).

A cancel request is seen between chunks; the job then ends ``cancelled`` with what it had done. Every
finished job writes one audit entry with its final count.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol, cast

from queuecore.core.clock import Clock, to_ms
from queuecore.core.errors import (
    BrokerError,
    BulkJobNotFound,
    BulkLeaseRanOut,
    QueuecoreError,
    RedisFull,
    RedisUnavailable,
    TooManyBulkJobs,
)
from queuecore.core.failures import GROUP_ACTION_STATES
from queuecore.core.keys import Keys
from queuecore.core.message import dumps, loads, ms_to_datetime
from queuecore.core.scripts import BulkBound, BulkChunk, BulkCursor, Scripts

log = logging.getLogger("queuecore.bulk")

CHUNK = 500  # tasks acted on per Redis call
MAX_OPEN = 20  # queued or running jobs at once
KEEP = 200  # recent jobs listed
FINISHED_TTL_SECONDS = 7 * 86400  # a finished job's record is kept this long
LEASE_SECONDS = 30.0  # a driver renews its lease at every chunk; another may take over this long after it stops
MAX_TEXT = 1000  # characters of a filter or search kept with a job
SAMPLE_IDS = 100  # ids of the tasks acted on kept with a job (for its audit entry)

DONE_WORDS = {"run": "moved to pending", "archive": "archived", "delete": "deleted", "cancel": "asked to stop"}
QUEUED, RUNNING, DONE, CANCELLED, FAILED = "queued", "running", "done", "cancelled", "failed"
OPEN_STATUSES = (QUEUED, RUNNING)
FIND, ACT = "find", "act"


@dataclass(frozen=True)
class BulkScope:
    """Which tasks a bulk job acts on: the tasks of ``queue`` in ``state`` that match ``type``, ``search``
    and ``filter`` (none given: the whole state), or the tasks of failure group ``group`` (of ``queue``,
    or of every queue when it is None)."""

    queue: str | None
    state: str | None = None
    type: str | None = None
    search: str | None = None
    filter: str | None = None
    group: str | None = None

    @property
    def filtered(self) -> bool:
        return bool(self.type or self.search or self.filter)

    def describe(self) -> str:
        """``archived tasks of queue emails matching type:x``, ``tasks of failure group 3fa9 in every queue``."""
        if self.group is not None:
            where = f"queue {self.queue}" if self.queue else "every queue"
            return f"tasks of failure group {self.group} in {where}"
        text = f"{self.state} tasks of queue {self.queue}"
        terms = [f"type:{self.type}"] if self.type else []
        terms += [t for t in (self.filter, self.search) if t]
        return text + (f" matching {' '.join(terms)}" if terms else "")

    def to_dict(self) -> dict[str, Any]:
        return {"queue": self.queue, "state": self.state, "type": self.type, "search": self.search,
                "filter": self.filter, "group": self.group}

    @classmethod
    def from_dict(cls, data: Any) -> BulkScope:
        """The scope a job's record holds; a field that is not text (corrupt data) is left out."""
        if not isinstance(data, dict):
            data = {}
        return cls(**{k: v if isinstance(v := data.get(k), str) else None
                      for k in ("queue", "state", "type", "search", "filter", "group")})


@dataclass(frozen=True)
class StateCount:
    """How many tasks ``queue`` held in ``state``, counted from ``at`` (unix s): the figure an operator
    confirms before a bulk job on the whole state (``Inspector.state_count``), which then acts on at
    most that many, all of them in the state before ``at``."""

    queue: str
    state: str
    size: int
    at: float


@dataclass(frozen=True)
class BulkJob:
    """One bulk job and its progress.

    ``total`` is what the job expects to act on: the state's size when it was created (an estimate: the
    state changes meanwhile), then, once a filtered or group job has found its tasks, exactly how many
    it found. ``scanned`` counts the tasks a filter looked at while finding; ``done`` those acted on;
    ``skipped`` those found that had left the state (or the queue) by the time the job reached them.
    """

    id: str
    action: str
    scope: BulkScope
    actor: str
    status: str
    phase: str
    total: int | None
    exact_total: bool
    scanned: int
    done: int
    skipped: int
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    cancel_requested: bool = False
    error: str | None = None
    holder: str | None = None  # the driver holding the lease while it runs
    released_by: str | None = None  # the driver that last gave the lease up (stopped between two chunks)
    sample: tuple[str, ...] = ()  # the first ids acted on (a job that found its tasks first)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return self.status not in OPEN_STATUSES

    @property
    def fraction(self) -> float | None:
        """How far along (0 to 1), None when not known yet (a filter still finding its tasks in a state
        whose size is unknown)."""
        if self.status == DONE:
            return 1.0
        if self.phase == FIND:
            size = self.extra.get("state_size")
            return min(1.0, self.scanned / size) if size else None
        if not self.total:
            return None
        return min(1.0, (self.done + self.skipped) / self.total)

    def describe(self) -> str:
        return f"{self.action} {self.scope.describe()}"

    def progress_text(self) -> str:
        """Where it is: ``finding the tasks: 12,000 of 100,000 looked at``, ``1,500 of ~20,000``."""
        if self.phase == FIND and not self.finished:
            size = self.extra.get("state_size")
            return f"finding the tasks: {self.scanned:,}{f' of {size:,}' if size else ''} looked at"
        total = "?" if self.total is None else ("" if self.exact_total else "~") + f"{self.total:,}"
        return f"{self.done + self.skipped:,} of {total}"

    def summary(self) -> str:
        """What it did: ``deleted 1,234 task(s) (5 skipped: ...)``; for a job that ended early, how it ended."""
        text = f"{DONE_WORDS.get(self.action, self.action)} {self.done:,} task(s)"
        if self.skipped:
            text += f" ({self.skipped:,} skipped: gone or moved on since they were found)"
        if self.status == CANCELLED:
            return f"cancelled: {text} before it stopped" if self.done or self.skipped else (
                "cancelled before it acted on any task")
        if self.status == FAILED:
            return f"failed after it {text}: {self.error}"
        return text

    def to_dict(self) -> dict[str, Any]:
        def when(value: datetime | None) -> str | None:
            return value.isoformat() if value else None

        return {"id": self.id, "action": self.action, "queue": self.scope.queue, "state": self.scope.state,
                "count": self.done, "scope": self.scope.to_dict(), "description": self.describe(),
                "actor": self.actor, "status": self.status, "phase": self.phase, "total": self.total,
                "exact_total": self.exact_total, "scanned": self.scanned, "done": self.done, "skipped": self.skipped,
                "fraction": self.fraction, "progress": self.progress_text(), "summary": self.summary(),
                "cancel_requested": self.cancel_requested, "error": self.error,
                "created_at": when(self.created_at), "started_at": when(self.started_at),
                "finished_at": when(self.finished_at)}


class BulkOperations(Protocol):
    """What a driver needs from the Inspector to act (``Inspector.bulk_operations``)."""

    def state_chunk(self, queue: str, state: str, action: str, limit: int, bound: BulkBound) -> BulkChunk:
        """Look at the next ``limit`` (at most ``CHUNK``) tasks of a whole state from ``bound.cursor`` and
        act on those that were there at ``bound.since_ms``, at most ``bound.quota``."""

    def snapshot(self, scope: BulkScope, job_id: str) -> int:
        """Copy the ids of the scope's state for ``scan`` to read (``RedisFull`` when Redis has no room);
        how many."""

    def drop_snapshot(self, scope: BulkScope, job_id: str) -> None:
        """Delete the copy ``snapshot`` made."""

    def scan(self, scope: BulkScope, start: int, count: int,
             snapshot_of: str | None = None) -> tuple[list[tuple[str, str, int]], int]:
        """The (queue, task id, place in the state's order) of the tasks matching ``scope`` among ``count``
        of its state from place ``start``; and how many were looked at (0: the end). With
        ``snapshot_of`` (a job id), the places are in that job's copy of the state."""

    def group_targets(self, scope: BulkScope, states: tuple[str, ...]) -> list[tuple[str, str]]:
        """The (queue, task id) of every task of the failure group in one of ``states``."""

    def act(self, action: str, queue: str, tasks: list[tuple[str, int | None]], states: tuple[str, ...],
            taken: int, until_ms: int = 0) -> tuple[list[str], int]:
        """Act on each task (id, its place when found, if known) still in one of ``states``; ``taken``: how
        many of the found tasks this job has taken off their state so far (the places ahead moved up
        by that many). Returns (the ids done, how many were skipped: gone, or moved on since they
        were found). ``until_ms``: the driver's lease, less a margin; an act Redis's clock finds past it
        is refused (``BulkLeaseRanOut``)."""

    def audit(self, job: BulkJob, outcome: str) -> None:
        """Record the finished job in the audit log, as its actor."""


def finds_first(action: str, scope: BulkScope) -> bool:
    """Whether a job finds its tasks before it acts (a filter, a failure group, cancelling what runs), or
    acts on a whole state with its chunk scripts."""
    return scope.filtered or scope.group is not None or action == "cancel"


def target_states(scope: BulkScope, action: str) -> tuple[str, ...]:
    """The states a found task must still be in to be acted on: the scope's (a job of a queue always
    has one: ``Inspector.start_bulk_job``); a failure group's, those ``action`` takes
    (``failures.GROUP_ACTION_STATES``)."""
    if scope.group is not None:
        return GROUP_ACTION_STATES[action]
    assert scope.state is not None
    return (scope.state,)


def new_holder() -> str:
    """A driver's id: ``host:pid:random``."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _sample(raw: Any) -> tuple[str, ...]:
    try:
        ids = loads(raw) if raw else []
    except (TypeError, ValueError):
        return ()
    return tuple(str(i) for i in ids[:SAMPLE_IDS]) if isinstance(ids, list) else ()


def _when(value: Any) -> datetime | None:
    """A time the record holds (unix ms); None when absent or not a time (corrupt data)."""
    ms = _int(value)
    try:
        return ms_to_datetime(ms) if ms else None
    except (OverflowError, OSError, ValueError):
        return None


class BulkJobStore:
    """The bulk jobs' records in Redis: create, read, list, cancel, and the driver's lease and progress."""

    def __init__(self, scripts: Scripts, keys: Keys, clock: Clock) -> None:
        self.scripts = scripts
        self.redis = scripts.redis
        self.keys = keys
        self.clock = clock

    def create(self, action: str, scope: BulkScope, actor: str, total: int | None, *, exact_total: bool,
               state_size: int | None = None, counted_from: float | None = None, holder: str | None = None) -> BulkJob:
        """A new queued job; ``TooManyBulkJobs`` when ``MAX_OPEN`` are queued or running already.
        ``counted_from``: when the count of ``total`` began (unix seconds), the job's ``created_at``: a
        whole-state job acts on the tasks that entered the state before it, and a task enqueued between
        the count and now must not be one of them (it is not in ``total``). ``holder``: the driver about
        to run it, whose lease it is made under (no worker takes it meanwhile)."""
        job_id = uuid.uuid4().hex[:16]
        now_ms = to_ms(self.clock.now() if counted_from is None else counted_from)
        fields = {"action": action, "scope": dumps(scope.to_dict()), "actor": actor, "status": QUEUED,
                  "phase": FIND if finds_first(action, scope) else ACT, "total": "" if total is None else total,
                  "exact_total": int(exact_total), "scanned": 0, "done": 0, "skipped": 0, "cursor": 0,
                  "created_at": now_ms, "state_size": "" if state_size is None else state_size}
        if holder:
            fields |= {"holder": holder, "lease_until": to_ms(self.clock.now()) + int(LEASE_SECONDS * 1000)}
        if not self.scripts.bulk_job_create(job_id, now_ms=now_ms, max_open=MAX_OPEN, keep=KEEP, fields=fields):
            raise TooManyBulkJobs(f"{MAX_OPEN} bulk jobs are queued or running already; wait for one to finish, "
                                  "or cancel one (adminctl bulk ls)")
        return self.get(job_id)

    def get(self, job_id: str) -> BulkJob:
        """The job; ``BulkJobNotFound`` when there is none of that id."""
        if not job_id or len(job_id) > 64 or not job_id.isalnum():
            raise BulkJobNotFound(f"no bulk job {job_id[:64]!r}")
        raw = cast("dict[str, Any]", self.redis.hgetall(self.keys.bulk_job(job_id)))
        if not raw or "action" not in raw:
            raise BulkJobNotFound(f"no bulk job {job_id!r} (finished jobs are kept for a week)")
        return self._job(job_id, raw)

    def _job(self, job_id: str, raw: dict[str, Any]) -> BulkJob:
        total = raw.get("total")
        size = raw.get("state_size")
        try:
            scope = BulkScope.from_dict(loads(raw.get("scope") or "{}"))
        except (ValueError, TypeError):
            scope = BulkScope(queue=None)
        return BulkJob(
            id=job_id, action=str(raw.get("action")), scope=scope, actor=str(raw.get("actor") or "?"),
            status=str(raw.get("status") or QUEUED), phase=str(raw.get("phase") or ACT),
            total=_int(total) if total not in (None, "") else None, exact_total=raw.get("exact_total") == "1",
            scanned=_int(raw.get("scanned")), done=_int(raw.get("done")), skipped=_int(raw.get("skipped")),
            created_at=_when(raw.get("created_at")) or _EPOCH, started_at=_when(raw.get("started_at")),
            finished_at=_when(raw.get("finished_at")), cancel_requested=raw.get("cancel") == "1",
            error=raw.get("error") or None, holder=raw.get("holder") or None,
            released_by=raw.get("released_by") or None, sample=_sample(raw.get("sample")),
            extra={"cursor": _int(raw.get("cursor")), "lease_until": _int(raw.get("lease_until")),
                   "state_cursor": raw.get("state_cursor"),
                   "state_size": _int(size) if size not in (None, "") else None},
        )

    def recent(self, limit: int = 50) -> list[BulkJob]:
        """The newest jobs first (open ones included), at most ``limit``."""
        ids = list(dict.fromkeys([*self.redis.zrevrange(self.keys.open_bulk_jobs, 0, limit - 1),
                                  *self.redis.zrevrange(self.keys.bulk_jobs, 0, limit - 1)]))
        pipe = self.redis.pipeline(transaction=False)
        for job_id in ids:
            pipe.hgetall(self.keys.bulk_job(job_id))
        jobs = [self._job(i, raw) for i, raw in zip(ids, pipe.execute(raise_on_error=False), strict=True)
                if isinstance(raw, dict) and raw.get("action")]
        return sorted(jobs, key=lambda j: j.created_at, reverse=True)[:limit]

    def open_ids(self) -> list[str]:
        """The queued and running jobs, oldest first."""
        return [str(i) for i in self.redis.zrange(self.keys.open_bulk_jobs, 0, MAX_OPEN * 2)]

    def request_cancel(self, job_id: str) -> tuple[BulkJob, bool]:
        """Ask the job to stop at its next chunk (a finished job is left as it is); returns the job, and
        whether it ended here (queued, no driver held it)."""
        job = self.get(job_id)
        ended_here = False
        if not job.finished:
            self.redis.hset(self.keys.bulk_job(job_id), "cancel", "1")
            if job.status == QUEUED and not job.holder:  # nobody drives it yet: it ends here
                ended_here, _ = self.step(job_id, new_holder(), {"status": CANCELLED,
                                                                 "finished_at": to_ms(self.clock.now())}, finish=True)
        return self.get(job_id), ended_here

    def step(self, job_id: str, holder: str, fields: dict[str, Any], *, targets: Sequence[str] = (),
             reset_targets: bool = False, finish: bool = False, release: bool = False) -> tuple[bool, bool]:
        """Take or renew the lease as ``holder`` and record ``fields`` (and push ``targets``); returns (held,
        cancel requested). With ``finish`` the job leaves the open set, its targets go and its record
        expires in a week; with ``release`` the lease is given up (another driver may go on)."""
        now_ms = to_ms(self.clock.now())
        until_ms = 0 if (finish or release) else now_ms + int(LEASE_SECONDS * 1000)
        return self.scripts.bulk_job_step(job_id, holder, now_ms=now_ms, lease_until_ms=until_ms,
                                          finish_ttl_ms=int(FINISHED_TTL_SECONDS * 1000) if finish else 0,
                                          reset_targets=reset_targets, fields=fields, targets=list(targets))

    def cancel_requested(self, job_id: str) -> bool:
        """Whether an operator asked the job to stop."""
        return bool(self.redis.hget(self.keys.bulk_job(job_id), "cancel") == "1")

    def targets(self, job_id: str, start: int, count: int) -> list[tuple[str, str, int | None]]:
        """``count`` of the tasks a job found, from position ``start``: (queue, task id, its place in the
        state's order when found, None when not known)."""
        out: list[tuple[str, str, int | None]] = []
        for item in self.redis.lrange(self.keys.bulk_job_targets(job_id), start, start + count - 1):
            queue, _, rest = str(item).partition(" ")
            task_id, _, place = rest.partition(" ")
            out.append((queue, task_id, int(place) if place.isdigit() else None))
        return out


class _Stop(Exception):
    """The driver lost its lease, or was asked to stop (a worker shutting down)."""


def run_job(store: BulkJobStore, ops: BulkOperations, job_id: str, *, holder: str | None = None,
            stop: threading.Event | None = None, on_progress: Callable[[BulkJob], None] | None = None) -> BulkJob:
    """Drive the job until it finishes, is cancelled, or this driver must stop; returns the job as it is
    then. A job another driver holds is returned as it is, untouched."""
    holder = holder or new_holder()
    job = store.get(job_id)
    if job.finished:
        return job
    held, cancel = store.step(job_id, holder, {"status": RUNNING, "started_at": to_ms(store.clock.now())}
                              if job.started_at is None else {"status": RUNNING})
    if not held:
        return store.get(job_id)
    if job.started_at is None:
        log.info("bulk job %s (%s by %s) started, driven by %s", job.id, job.describe(), job.actor, holder)
    elif holder in (job.holder, job.released_by):  # the same driver going on (adminctl after a Ctrl-C, to
        # cancel it; it gave the lease up between two chunks): no recovery
        log.info("bulk job %s (%s by %s) goes on, driven by %s", job.id, job.describe(), job.actor, holder)
    else:  # its driver stopped or died: a recovery, said at the default level
        log.warning("bulk job %s (%s by %s) taken up by %s at %s done; its driver %s stopped", job.id,
                    job.describe(), job.actor, holder, f"{job.done:,}", job.holder or job.released_by or "before")
    progress = _Progress(store, job_id, holder, job, stop, on_progress)
    progress.cancel = cancel
    try:
        if job.phase == FIND:
            _find(progress, ops, job)
        if job.phase == ACT or progress.fields.get("phase") == ACT:
            if finds_first(job.action, job.scope):
                _act_on_targets(progress, ops, job)
            else:
                _act_on_state(progress, ops, job)
    except BulkLeaseRanOut as exc:  # it stalled past its lease: another driver goes on (or took over)
        log.warning("bulk job %s: driver %s stalled past its lease, and Redis refused its late acts (%s); "
                    "it stops, another driver goes on", job_id, holder, exc)
        return store.get(job_id)
    except _Stop:
        if progress.held:
            store.step(job_id, holder, {**progress.fields, "released_by": holder}, release=True)
        return store.get(job_id)
    except BrokerError as exc:
        if not _is_transient(exc):  # a corrupt key, a refusal: the job cannot go on
            return _finish(progress, ops, FAILED, str(exc))
        log.warning("bulk job %s stopped: %s; another driver takes it up once Redis answers", job_id, exc)
        raise
    except QueuecoreError as exc:  # the queue was removed, a corrupt key: the job cannot go on
        return _finish(progress, ops, FAILED, str(exc))
    return _finish(progress, ops, CANCELLED if progress.cancel else DONE, None)


def _is_transient(exc: BrokerError) -> bool:
    return isinstance(exc, RedisUnavailable | RedisFull)


class _Progress:
    """A driver's view of its job: the counts so far, written at every chunk with the lease renewed."""

    def __init__(self, store: BulkJobStore, job_id: str, holder: str, job: BulkJob, stop: threading.Event | None,
                 on_progress: Callable[[BulkJob], None] | None) -> None:
        self.store, self.job_id, self.holder, self.stop, self.on_progress = store, job_id, holder, stop, on_progress
        self.fields: dict[str, Any] = {"done": job.done, "skipped": job.skipped, "scanned": job.scanned}
        self.held = True
        self.cancel = False
        self.lease_until = store.clock.now() + LEASE_SECONDS  # as the step just before wrote it, about

    def act_until_ms(self) -> int:
        """When this driver's acts must have run by (unix ms on Redis's clock): its lease, less a margin
        for the clocks of a cluster's masters. Renewed first when half of it went by (a stall, a slow
        chunk): a driver that stalled past it stops here rather than acting after another took over."""
        if self.store.clock.now() > self.lease_until - LEASE_SECONDS / 2:
            self.record()
        return to_ms(self.lease_until - LEASE_SECONDS / 6)

    def record(self, *, targets: Sequence[str] = (), reset_targets: bool = False, **fields: Any) -> None:
        self.fields.update(fields)
        stepped_at = self.store.clock.now()
        held, cancel = self.store.step(self.job_id, self.holder, self.fields, targets=targets,
                                       reset_targets=reset_targets)
        self.held = held
        if held:
            self.lease_until = stepped_at + LEASE_SECONDS
        self.cancel = self.cancel or cancel
        if not held:
            raise _Stop
        if self.on_progress is not None:
            self.on_progress(self.store.get(self.job_id))

    def should_end(self) -> bool:
        """True when the job is to end here (cancelled since the last chunk); raises ``_Stop`` when the
        driver must stop."""
        if self.stop is not None and self.stop.is_set():
            raise _Stop
        self.cancel = self.cancel or self.store.cancel_requested(self.job_id)
        return self.cancel


def _find(progress: _Progress, ops: BulkOperations, job: BulkJob) -> None:
    """Put the tasks the job acts on in its targets list (again from the start, when a driver died finding)."""
    progress.record(reset_targets=True, scanned=0, done=0, skipped=0, cursor=0)
    found = 0
    if job.scope.group is not None:
        targets = ops.group_targets(job.scope, target_states(job.scope, job.action))
        chunks: Iterator[list[tuple[str, str]]] = _chunks(targets)
        for chunk in chunks:
            found += len(chunk)
            progress.record(targets=[f"{q} {i}" for q, i in chunk], scanned=found)
            if progress.should_end():
                return
    else:
        # Read a copy of the state: in the state itself a task taken from its front (by a worker, the
        # forwarder) moves every later one a place forward, and the next chunk would start past some.
        snapshot_of: str | None = job.id
        try:
            ops.snapshot(job.scope, job.id)
        except RedisFull:
            snapshot_of = None
            log.warning("bulk job %s: Redis is full, no room to copy the %s tasks of queue %s; finding them in "
                        "the state itself, where tasks taken meanwhile may move others past the search",
                        job.id, job.scope.state, job.scope.queue)
        try:
            position = 0
            while True:
                matched, looked_at = ops.scan(job.scope, position, CHUNK, snapshot_of)
                if not looked_at:
                    break
                position += looked_at
                found += len(matched)
                progress.record(targets=[f"{q} {i} {place}" for q, i, place in matched], scanned=position)
                if progress.should_end():
                    return
        finally:
            if snapshot_of is not None:
                with contextlib.suppress(Exception):  # not deleted now (Redis went away): it expires by itself
                    ops.drop_snapshot(job.scope, job.id)
    progress.record(phase=ACT, total=found, exact_total=1, cursor=0)


def _chunks(items: list[tuple[str, str]]) -> Iterator[list[tuple[str, str]]]:
    for start in range(0, len(items), CHUNK):
        yield items[start:start + CHUNK]


def _act_on_targets(progress: _Progress, ops: BulkOperations, job: BulkJob) -> None:
    if progress.cancel:
        return
    cursor = _int(progress.fields.get("cursor", job.extra.get("cursor", 0)))
    done, skipped = _int(progress.fields.get("done")), _int(progress.fields.get("skipped"))
    sample: list[str] = list(job.sample)
    states = target_states(job.scope, job.action)
    while True:
        chunk = progress.store.targets(job.id, cursor, CHUNK)
        if not chunk:
            return
        by_queue: dict[str, list[tuple[str, int | None]]] = {}
        for queue, task_id, place in chunk:
            by_queue.setdefault(queue, []).append((task_id, place))
        for queue, tasks in by_queue.items():
            acted, left = ops.act(job.action, queue, tasks, states, done, progress.act_until_ms())
            done, skipped = done + len(acted), skipped + left
            sample += acted[:SAMPLE_IDS - len(sample)]
        cursor += len(chunk)
        progress.record(cursor=cursor, done=done, skipped=skipped, sample=dumps(sample))
        if progress.should_end():
            return


def _act_on_state(progress: _Progress, ops: BulkOperations, job: BulkJob) -> None:
    """Act on the tasks that were in the state when the job was made, and on no other: each chunk goes
    on from where the last one stopped (``BulkCursor``, recorded with the progress) and passes, leaving
    them as they are, the tasks that entered the state after ``job.created_at`` (a task the job ran
    that failed again, a new or priority enqueue, a task handed back). At most ``job.total`` (the count
    the operator confirmed) are acted on or dropped. An id whose task hash was gone is dropped from the
    state and counted as skipped."""
    assert job.scope.queue is not None and job.scope.state is not None
    done, skipped = _int(progress.fields.get("done")), _int(progress.fields.get("skipped"))
    cursor = _cursor(progress.fields.get("state_cursor", job.extra.get("state_cursor")))
    since_ms = to_ms(job.created_at.timestamp())
    bound = job.total
    while not progress.should_end():
        quota = CHUNK if bound is None else bound - done - skipped
        if quota <= 0:
            return
        chunk = ops.state_chunk(job.scope.queue, job.scope.state, job.action, CHUNK,
                                BulkBound(since_ms, min(quota, CHUNK), cursor))
        done, skipped, cursor = done + chunk.acted, skipped + chunk.dropped, chunk.cursor
        progress.record(done=done, skipped=skipped, state_cursor=dumps([cursor.score, cursor.id, cursor.count]))
        if chunk.ended:
            return


def _cursor(raw: Any) -> BulkCursor:
    """The cursor a job recorded (``[score, id, count]`` in JSON), or the start."""
    try:
        score, task_id, count = loads(raw) if raw else ("", "", 0)
        return BulkCursor(str(score), str(task_id), int(count))
    except (TypeError, ValueError):
        return BulkCursor()


def _finish(progress: _Progress, ops: BulkOperations, status: str, error: str | None) -> BulkJob:
    """Audit how the job ended, then record that it did: a job that shows finished has its audit
    entry already (a driver that lost its lease in between, stalled past it, leaves a second one)."""
    fields = {**progress.fields, "status": status, "finished_at": to_ms(progress.store.clock.now())}
    if error:
        fields["error"] = error[:MAX_TEXT]
    ending = replace(progress.store.get(progress.job_id), status=status, error=fields.get("error"),
                     done=_int(fields.get("done")), skipped=_int(fields.get("skipped")))
    outcome = {DONE: "ok", CANCELLED: f"cancelled after {ending.done:,}", FAILED: f"failed: {error}"}[status]
    if ending.skipped:
        outcome += f"; {ending.skipped:,} skipped (no longer {ending.scope.state or 'there'})"
    ops.audit(ending, f"bulk job {ending.id}: {outcome}")
    progress.store.step(progress.job_id, progress.holder, fields, finish=True)
    job = progress.store.get(progress.job_id)
    level = logging.WARNING if status == FAILED else logging.INFO
    log.log(level, "bulk job %s (%s by %s) %s: %s done, %s skipped%s", job.id, job.describe(), job.actor, status,
            f"{job.done:,}", f"{job.skipped:,}", f": {error}" if error else "")
    return job
