"""Typed wrappers around the Lua scripts in ``lua/``, one per file.

This is the only module that knows each script's KEYS order and reply codes, and the only one
that runs ``EVALSHA``. Every key comes from ``keys.py``; so does every key-name prefix a script
builds keys from (passed in ARGV, never cut out of another key name in Lua). Every script runs
behind the helpers it uses of the shared prelude ``lua/_lib.lua`` (see ``script_source``).
"""

from __future__ import annotations

import codecs
import os
import re
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, NamedTuple

import redis
import redis.cluster
from redis.commands.core import Script

from queuecore.core.attempts import ATTEMPT_HISTORY, ATTEMPT_HISTORY_BYTES
from queuecore.core.errors import (
    BulkLeaseRanOut,
    DuplicateTask,
    InvalidTaskState,
    RedisFull,
    TaskIdConflict,
    TaskNotFound,
    WrongKeyType,
)
from queuecore.core.keys import Keys, LimitKeys, QueueKeys
from queuecore.core.limits import CALL_BYTES
from queuecore.core.message import DEFAULT_MAX_RETRY
from queuecore.core.reasons import (
    CANCELLED_BY_OPERATOR,
    REPAIR_NO_MESSAGE,
    REPAIR_UNKNOWN_STATE,
    WORKER_LOST,
    WORKER_LOST_UNDECODABLE,
)
from queuecore.core.redis_errors import full_message, is_out_of_memory, is_wrong_type, wrong_type_message
from queuecore.core.topology import is_cluster_client, sharded_pubsub
from queuecore.core.typestats import context as type_stats_context

_hiredis_pack: Callable[[tuple[Any, ...]], bytes] | None
try:  # the "fast" extra: script calls are packed by hiredis directly (see Scripts._send)
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # pragma: no cover - exercised without hiredis
    _hiredis_pack = None

SCRIPT_NAMES: tuple[str, ...] = (
    "enqueue", "dequeue", "done", "retry", "archive", "requeue", "extend_lease", "forward", "recover",
    "janitor", "repair", "admin_run_task", "admin_archive_task", "admin_delete_task", "admin_cancel_task",
    "admin_run_all", "admin_archive_all", "admin_delete_all", "heartbeat", "heartbeat_index", "audit", "result",
)
SCRIPT_NAMES += ("queue_metrics",)
SCRIPT_NAMES += ("periodic_sync", "periodic_fire", "periodic_forget", "admin_periodic_pause", "periodic_register")
SCRIPT_NAMES += ("alerts_apply",)
ALERT_SCRIPTS = ("alerts_apply",)  # the alerts' one key <prefix>:alerts, no queue's
PERIODIC_INDEX_SCRIPTS = ("periodic_register",)  # the periodic entries' index <prefix>:periodic, no queue's
SCRIPT_NAMES += ("park", "limit_wake", "admin_pause", "limit_acquire", "limit_wait", "limit_release",
                 "limit_extend")
LIMIT_SCRIPTS = ("limit_acquire", "limit_wait", "limit_release", "limit_extend")  # keys of a limit: {lim:<type>}
SCRIPT_NAMES += ("bulk_job_create", "bulk_job_step", "admin_pending_many", "bulk_snapshot")
BULK_SCRIPTS = ("bulk_job_create", "bulk_job_step")  # the bulk jobs' keys, no queue's: <prefix>:{/}:bulk...
SERVER_SCRIPTS = ("heartbeat", "heartbeat_index", "audit")  # keys of no queue: a worker's own, the audit log
PRELUDE = "_lib"  # lua/_lib.lua: helpers every script runs behind; not a script of its own

# The operator's script for each action on one task.
ADMIN_TASK_SCRIPTS = {"run": "admin_run_task", "archive": "admin_archive_task", "delete": "admin_delete_task",
                      "cancel": "admin_cancel_task"}

# Reply codes shared by the scripts.
OK = 1
PUSHED = 2  # enqueue: stored and leased to a waiting worker at once
LEASE_LOST = 0
ID_CONFLICT = 0
UNIQUE_HELD = -1
NOT_FOUND = -1
WRONG_STATE = -2
LEASE_CANCEL_REQUESTED = 2

# How long a wake token stays in a task's wake LIST (``QueueKeys.done``) after the task turned final:
# long enough for a caller between its look at the task and its blocking wait (results.py).
WAKE_TTL_MS = 60_000


def _lua_file(name: str) -> str:
    return resources.files("queuecore.core").joinpath("lua", f"{name}.lua").read_text()


@cache
def prelude_helpers() -> dict[str, str]:
    """The prelude's helpers by name, in its order: each one's text, from the comment lines above its
    ``local function qc_...(`` line to its closing ``end`` (the prelude holds nothing else but its header)."""
    helpers: dict[str, str] = {}
    comment: list[str] = []
    current: list[str] | None = None
    for line in _lua_file(PRELUDE).splitlines():
        if current is not None:
            current.append(line)
            if line == "end":
                found = re.match(r"local function (qc_\w+)\(", current[len(comment)])
                assert found, current[len(comment)]
                helpers[found[1]] = "\n".join(current)
                current, comment = None, []
        elif line.startswith("local function qc_"):
            current = [*comment, line]
        elif line.startswith("--"):
            comment.append(line)
        else:
            comment = []
    return helpers


def prelude_for(body: str) -> str:
    """The prelude's helpers that ``body`` calls, with the helpers they call, in the prelude's order.

    Each call of a script defines every helper in its text anew (a closure each), so a script carries
    only those it uses: with all 22, the enqueue script ran 1 µs (15 %) longer in Redis."""
    helpers = prelude_helpers()
    wanted: set[str] = set()
    todo = [body]
    while todo:
        for called in re.findall(r"\b(qc_\w+)\(", _without_comments(todo.pop())):
            if called in helpers and called not in wanted:
                wanted.add(called)
                todo.append(helpers[called])
    return "\n\n".join(text for helper, text in helpers.items() if helper in wanted)


def _without_comments(lua: str) -> str:
    return "\n".join(line.split("--", 1)[0] for line in lua.splitlines())


@cache
def script_source(name: str) -> str:
    """What Redis runs for script ``name``: the helpers of the prelude ``lua/_lib.lua`` that it uses
    (``prelude_for``), then ``lua/<name>.lua``.

    Both the registered SHA and a ``SCRIPT LOAD`` after ``NOSCRIPT`` use this text.
    """
    if name not in SCRIPT_NAMES:
        raise ValueError(f"no Lua script {name!r}")
    body = _lua_file(name)
    return prelude_for(body) + "\n" + body


@dataclass(frozen=True)
class Dequeued:
    """One task handed to a worker by ``dequeue``: its id, encoded message, lease number and retries."""

    id: str
    msg: str | None  # None when the task hash was gone
    lease: int
    retried: int


class DequeuedBatch(list[Dequeued]):
    """The tasks one ``dequeue`` took, in order; ``cut`` when it stopped at its byte budget with tasks
    left pending (a worker then asks again rather than wait for a wake-up)."""

    cut = False


class EnqueueItem(NamedTuple):
    """One task to store: id, encoded message, due time (unix ms, 0 = now) and uniqueness lock/TTL.
    (A named tuple: made once per enqueued task, it costs a third of a frozen dataclass.)"""

    id: str
    msg: str
    process_at_ms: int = 0
    unique_key: str | None = None
    unique_ttl_ms: int = 0
    check_id: bool = True  # False for generated random ids, which cannot collide
    front: bool = False  # pending at the head of the queue: runs before the tasks already waiting

    @property
    def flags(self) -> int:
        """The item's flags for the ``enqueue`` script: 1 check the id, 2 at the head of pending."""
        return (1 if self.check_id else 0) + (2 if self.front else 0)


class Forwarded(NamedTuple):
    """What one ``forward`` call did: ``moved`` ids taken off the ZSET (moved to pending, or dropped
    when their hash was gone), and ``next_due_ms``, the due time of the earliest one left (None: none)."""

    moved: int
    next_due_ms: int | None


class RecoveredTask(NamedTuple):
    """One task a ``recover`` call took back: ``how`` is one of ``RECOVERED_HOW``'s keys."""

    id: str
    how: int
    attempt: int  # the number of the attempt that was lost (1 = the first)
    max_retry: int
    type: str  # "?" when its message does not decode


ARCHIVED_WHY = {2: "retries spent", 3: "message undecodable", 4: "cancelled by operator"}  # the archived ``how``s
RECOVERED_HOW = {1: "requeued", **{how: f"archived ({why})" for how, why in ARCHIVED_WHY.items()}}


class Recovery(NamedTuple):
    """What one ``recover`` call did: ``counts`` is (requeued, archived, orphans); ``tasks`` says which."""

    requeued: int
    archived: int
    orphans: int
    grace_left_ms: int = 0  # > 0: in an outage grace, nothing was taken back
    silence_ms: int = 0  # > 0: this call found a silence this long and began the grace
    tasks: tuple[RecoveredTask, ...] = ()
    more: bool = False  # the call stopped early (4 MB of messages read): expired tasks may be left

    @property
    def counts(self) -> tuple[int, int, int]:
        return self.requeued, self.archived, self.orphans


class RepairStep(NamedTuple):
    """What one ``repair`` step did, and where the pass goes on (``cursor``, for the next step)."""

    cursor: str
    repaired: int
    archived: int
    seen: int  # task hashes looked at; -1: not this worker's turn, nothing was done
    complete: bool  # the pass is over (a step that stopped early at cursor "0" did not end it)


class DoneItem(NamedTuple):
    """One succeeded task to acknowledge: its id, lease, retention (ms), result (JSON) and unique lock.
    (A named tuple: the acker makes one per task.)"""

    id: str
    lease: int
    retention_ms: int
    result: str
    unique_key: str | None = None
    attempt: str = ""  # the attempt's line for the history of a kept task (attempts.py)
    started_ms: int | None = None  # when its handler started (kept as started_at of a kept task)
    type: str = ""  # its task type, for the per-type statistics ("" = not counted per type)
    duration_ms: int | None = None  # how long its handler ran (per-type statistics)


def _script_keys_from_arguments(parser: Any) -> None:
    """Make a cluster client's command parser read the keys of ``EVAL``/``EVALSHA`` from their
    arguments. redis-py's cluster pipelines ask the client's default node for them (``COMMAND
    GETKEYS``) once per script call: a round trip each, and, while that node is down, a failure
    that lasted until some other call replaced the default node (about a minute: enqueues that
    register their queue failed, into queues whose masters were up). Outside pipelines redis-py
    reads the arguments itself, as here."""
    if getattr(parser, "_qc_script_keys", False):
        return
    get_keys = parser.get_keys

    def keys(redis_conn: Any, *args: Any) -> Any:
        if len(args) > 2 and str(args[0]).upper() in ("EVAL", "EVALSHA"):
            return list(args[3:3 + int(args[2])])
        return get_keys(redis_conn, *args)

    parser.get_keys = keys
    parser._qc_script_keys = True



@dataclass(frozen=True)
class BulkCursor:
    """Where a whole-state bulk job is in its state: for a ZSET the (score, id) last looked at and how
    many ids at that score up to it were passed and left there; for the pending LIST (score and id
    "") how many tasks that joined it after the job was made were right of the job's tasks."""

    score: str = ""
    id: str = ""
    count: int = 0


@dataclass(frozen=True)
class BulkBound:
    """A whole-state bulk job's chunk: act only on tasks that were in the state at ``since_ms`` (the
    job's creation), at most ``quota`` of them, going on from ``cursor``."""

    since_ms: int
    quota: int
    cursor: BulkCursor = BulkCursor()


@dataclass(frozen=True)
class BulkChunk:
    """What a bulk job's chunk did: tasks acted on, ids dropped (their task hash was gone), where to go
    on from, and whether the state holds no more of the job's tasks."""

    acted: int
    dropped: int
    cursor: BulkCursor
    ended: bool


def _bound_args(state: str, bound: BulkBound) -> list[Any]:
    c = bound.cursor
    return [bound.since_ms, state, c.score, c.id, c.count, bound.quota]


def _bulk_chunk(reply: Any) -> BulkChunk:
    acted, dropped, score, task_id, count, ended = reply
    return BulkChunk(int(acted), int(dropped), BulkCursor(str(score or ""), str(task_id or ""), int(count)),
                     int(ended) == 1)

class Scripts:
    """Runs the Lua scripts against one Redis client, registered lazily (NOSCRIPT is handled)."""

    def __init__(self, client: redis.Redis, keys: Keys, *, type_stats: bool = True) -> None:
        self.redis = client
        # Asked once: isinstance against redis-py's cluster classes (ABCs) was 2 us of every enqueue.
        self._cluster = is_cluster_client(client)
        if self._cluster:
            _script_keys_from_arguments(client.commands_parser)  # type: ignore[attr-defined]
        self.keys = keys
        self._scripts: dict[str, Script] = {}
        # False: the scripts that record outcomes get no per-type data and write no per-type statistics
        # (WorkerConfig.type_stats).
        self.type_stats = type_stats
        self._publish_command: str | None = None
        # hiredis's packer when it is installed and the client encodes text as strict UTF-8, else None
        self._pack = _hiredis_pack if _encodes_utf8_strictly(client) else None

    @property
    def publish_command(self) -> str:
        """How the scripts publish wake-ups and cancels: ``SPUBLISH`` on a Redis 7 cluster (sharded
        pub/sub), else ``PUBLISH`` (``topology.sharded_pubsub``; asked once)."""
        if self._publish_command is None:
            sharded = sharded_pubsub(self.redis)
            if sharded is None:  # the cluster cannot be asked now: publish classically, ask again next time
                return "PUBLISH"
            self._publish_command = "SPUBLISH" if sharded else "PUBLISH"
        return self._publish_command

    def _wake(self, q: QueueKeys) -> str:
        """The wake target the scripts publish on (``qc_publish`` in ``lua/_lib.lua``)."""
        return f"{self.publish_command} {q.wake_channel}"

    def _push(self, q: QueueKeys) -> str:
        """The push target of ``enqueue.lua`` (a worker id is appended), or "" where a task is never
        leased straight to a waiting worker: on a cluster without sharded pub/sub, where ``PUBLISH``
        counts only the subscribers of the node it ran on, so a live worker could not be told apart
        from a gone one."""
        command = self.publish_command
        if command == "PUBLISH" and self._cluster:
            return ""
        return f"{command} {q.push_prefix}"

    def publish(self, channel: str, message: str) -> None:
        """Publish outside a script, as the scripts do (``publish_command``)."""
        self.redis.execute_command(self.publish_command, channel, message)  # type: ignore[no-untyped-call]

    def _ts_context(self, q: QueueKeys, now_ms: int) -> list[Any]:
        """The per-type statistics context; with statistics off, an empty prefix (nothing written)."""
        if self.type_stats:
            return type_stats_context(q.type_stats, now_ms)
        return ["", 0, 0, "", 0, 0, 0]

    def _script(self, name: str) -> Script:
        script = self._scripts.get(name)
        if script is None:
            script = self._scripts[name] = self.redis.register_script(script_source(name))
        return script

    def _call(self, name: str, keys: list[str], args: list[Any], client: Any = None) -> Any:
        """Run script ``name``; with a pipeline as ``client`` the call is queued and returns it.

        A key of the wrong Redis type raises ``WrongKeyType`` (the scripts check types before writing);
        a write refused at ``maxmemory`` raises ``RedisFull``.
        """
        try:
            if client is None:
                return self._on_pooled_connection(name, keys, args)
            if isinstance(client, redis.cluster.ClusterPipeline):
                # redis-py refuses EVALSHA in a cluster pipeline (a node may not have the script): the
                # source goes along, and each node caches it as it would after SCRIPT LOAD
                return client.execute_command(  # type: ignore[no-untyped-call]
                    "EVAL", script_source(name), len(keys), *keys, *args)
            return self._script(name)(keys=keys, args=args, client=client)
        except redis.ResponseError as exc:
            if is_wrong_type(str(exc)):
                raise WrongKeyType(wrong_type_message(str(exc))) from exc
            if is_out_of_memory(str(exc)):
                raise RedisFull(full_message(str(exc))) from exc
            raise

    def _on_pooled_connection(self, name: str, keys: list[str], args: list[Any]) -> Any:
        """``EVALSHA`` on a connection of the client's pool, without redis-py's per-command layers.

        A pooled connection found closed (the server restarted or dropped it) is replaced once; a
        timeout is not retried (the server may be stalled, or may have run the script).
        """
        pool = getattr(self.redis, "connection_pool", None)
        if pool is None:  # not a plain redis.Redis (a cluster client, say): its own command path
            return self._script(name)(keys=keys, args=args)
        for attempt in (1, 2):
            connection = self._take_connection(pool)
            try:
                return self._evalsha_or_drop(connection, name, keys, args)  # a closed one reconnects
            except redis.ConnectionError:
                if attempt == 2:
                    raise
            finally:
                self._give_back(pool, connection)
        raise AssertionError("unreachable")  # pragma: no cover

    def _take_connection(self, pool: Any) -> Any:
        """The connection for one script call: one of the pool's."""
        return pool.get_connection()

    def _give_back(self, pool: Any, connection: Any) -> None:
        pool.release(connection)

    def _evalsha_or_drop(self, connection: Any, name: str, keys: list[str], args: list[Any]) -> Any:
        """``_evalsha``; on anything but an error reply (a dropped connection, a timeout, an interrupt
        mid-reply) the connection's state is unknown, so it is closed before the error propagates."""
        try:
            return self._evalsha(connection, name, keys, args)
        except redis.ResponseError:
            raise
        except BaseException:
            connection.disconnect()
            raise

    def _evalsha(self, connection: Any, name: str, keys: list[str], args: list[Any]) -> Any:
        """Send ``EVALSHA`` on ``connection`` and read the reply; ``NOSCRIPT`` (a restarted or flushed
        server) loads the script and runs it again."""
        command = ("EVALSHA", self._script(name).sha, len(keys), *keys, *args)
        self._send(connection, command)
        try:
            return connection.read_response()
        except redis.exceptions.NoScriptError:
            pass
        connection.send_command("SCRIPT", "LOAD", script_source(name))
        connection.read_response()
        self._send(connection, command)
        return connection.read_response()

    def _send(self, connection: Any, command: tuple[Any, ...]) -> None:
        """Send ``command``: packed by hiredis when it is installed and the client encodes text as
        strict UTF-8 (what redis-py would send, byte for byte, without first converting every
        argument in Python: 1 µs against 3 for an enqueue's 15 arguments), else by redis-py."""
        if self._pack is not None:
            try:
                packed = self._pack(command)
            except TypeError as exc:  # an argument of a type Redis cannot take: redis-py's error
                raise redis.DataError(str(exc)) from None
            connection.send_packed_command([packed])  # a list of chunks, as redis-py's packer returns
        else:
            connection.send_command(*command)

    def dedicated(self) -> Scripts:
        """Scripts over one connection of their own, for a single hot thread (the worker's fetcher
        and acker): no pool lookup, no fork check and no client-side retry layer per call. Not
        thread-safe; ``close()`` it when done."""
        return DedicatedScripts(self.redis, self.keys, type_stats=self.type_stats)

    def per_thread(self) -> Scripts:
        """Scripts over a connection of each calling thread's own, kept across calls (the Client's:
        one script call per enqueue, from whatever threads the application runs): no pool lookup
        per call. ``close()`` closes every thread's."""
        return PerThreadScripts(self.redis, self.keys, type_stats=self.type_stats)

    def close(self) -> None:
        """Release what this object holds of its own (nothing: it uses the client's pool)."""

    # -- client -----------------------------------------------------------------------------------

    def enqueue(self, q: QueueKeys, task_id: str, msg: str, *, now_ms: int, process_at_ms: int = 0,
                unique_key: str | None = None, unique_ttl_ms: int = 0) -> Any:
        """Store one new task as pending (or scheduled when ``process_at_ms``). See ``check_enqueue``."""
        item = EnqueueItem(task_id, msg, process_at_ms, unique_key, unique_ttl_ms)
        return self.enqueue_many(q, [item], now_ms=now_ms)[0]

    def enqueue_many(self, q: QueueKeys, items: list[EnqueueItem], *, now_ms: int, client: Any = None) -> Any:
        """Store new tasks of one queue in one call: a reply per task (see ``check_enqueue``); with a
        pipeline as ``client`` the call is queued and its reply comes from ``execute()``."""
        keys = [q.pending, q.scheduled, q.active, q.paused, q.idle] + [q.task(item.id) for item in items]
        args: list[Any] = [now_ms, self._wake(q), len(items), self._push(q)]
        for item in items:
            unique_index = 0
            if item.unique_key and item.unique_ttl_ms > 0:
                keys.append(item.unique_key)
                unique_index = len(keys)
            args += [item.id, item.msg, item.process_at_ms, item.unique_ttl_ms if unique_index else 0, unique_index,
                     item.flags]
        return self._call("enqueue", keys, args, client)

    @staticmethod
    def check_enqueue(reply: Any, task_id: str, queue: str) -> None:
        """Raise the typed error an ``enqueue`` reply stands for, if any."""
        if reply in (OK, PUSHED):
            return
        if reply == ID_CONFLICT:
            raise TaskIdConflict(f"a task with id {task_id!r} already exists in queue {queue!r}")
        if isinstance(reply, list) and reply and reply[0] == UNIQUE_HELD:
            raise DuplicateTask(f"a unique task with the same type and payload is already held in queue "
                                f"{queue!r} by task {reply[1]!r}")
        raise RuntimeError(f"unexpected enqueue reply {reply!r}")  # pragma: no cover

    # -- worker -----------------------------------------------------------------------------------

    def dequeue(self, q: QueueKeys, *, now_ms: int, lease_until_ms: int, count: int, idle_entry: str = "",
                idle_until_ms: int = 0) -> DequeuedBatch:
        """Move up to ``count`` pending tasks to active under new leases; [] when paused or empty.
        A call takes no task after the one whose message brings what it read to 4 MB (``cut``: tasks
        were left pending). With ``idle_entry`` (``"<lease ms> <worker id>"``; a worker with no handler
        running) the worker is listed as waiting for the queue's next task until ``idle_until_ms`` when
        none came (``QueueKeys.idle``), and taken off the list when some came."""
        reply = self._call("dequeue", [q.pending, q.active, q.paused, q.idle],
                           [now_ms, lease_until_ms, count, q.task_prefix, idle_entry, idle_until_ms])
        batch = DequeuedBatch(Dequeued(reply[i], reply[i + 1] or None, int(reply[i + 2]), int(reply[i + 3]))
                              for i in range(0, len(reply) - 3, 4))
        batch.cut = len(reply) % 4 == 1
        return batch

    def unlist(self, q: QueueKeys, idle_entry: str) -> None:
        """Take a worker's entry off the queue's list of waiting workers (it stopped fetching)."""
        self.redis.zrem(q.idle, idle_entry)

    def done(self, q: QueueKeys, task_id: str, lease: int, *, now_ms: int, retention_ms: int, result: str,
             day: str, minute: str, unique_key: str | None = None) -> bool:
        """Finish a task that succeeded; False when the lease was lost (fencing)."""
        item = DoneItem(task_id, lease, retention_ms, result, unique_key)
        return self.done_many(q, [item], now_ms=now_ms, day=day, minute=minute)[0]

    def done_many(self, q: QueueKeys, items: list[DoneItem], *, now_ms: int, day: str, minute: str) -> list[bool]:
        """Finish many succeeded tasks of one queue in one call; per task, False when its lease was lost."""
        if not items:
            return []
        keys = [q.active, q.completed, q.stats] + [q.task(item.id) for item in items]
        args: list[Any] = [now_ms, day, minute, len(items), ATTEMPT_HISTORY, ATTEMPT_HISTORY_BYTES, q.done_prefix,
                           WAKE_TTL_MS]
        for item in items:
            unique_index = 0
            if item.unique_key:
                keys.append(item.unique_key)
                unique_index = len(keys)
            args += [item.id, item.lease, item.retention_ms, item.result, unique_index, item.attempt,
                     "" if item.started_ms is None else item.started_ms]
        args += self._ts_context(q, now_ms)
        if self.type_stats:  # off: nothing per task
            for item in items:
                args += [item.type, -1 if item.duration_ms is None else item.duration_ms]
        return [code == OK for code in self._call("done", keys, args)]

    def retry(self, q: QueueKeys, task_id: str, lease: int, *, now_ms: int, retry_at_ms: int, error: str,
              day: str, minute: str, attempt: str = "", started_ms: int | None = None, type_name: str = "",
              duration_ms: int | None = None) -> bool:
        """Schedule the next attempt of a failed task; False when the lease was lost.

        ``attempt`` is the attempt's line for the task's history (``attempts.py``), ``started_ms``
        when its handler started (kept as the task's ``started_at``); ``type_name`` and
        ``duration_ms`` (the handler's) count it in the per-type statistics.
        """
        keys = [q.task(task_id), q.active, q.retry, q.stats]
        args = [task_id, lease, now_ms, retry_at_ms, error, day, minute, attempt,
                "" if started_ms is None else started_ms, ATTEMPT_HISTORY, ATTEMPT_HISTORY_BYTES,
                *self._ts_context(q, now_ms), type_name if self.type_stats else "",
                -1 if duration_ms is None else duration_ms]
        reply: int = self._call("retry", keys, args)
        return reply == OK

    def archive(self, q: QueueKeys, task_id: str, lease: int, *, now_ms: int, error: str, day: str,
                minute: str, max_archive_size: int, archive_cutoff_ms: int, count_failure: bool = True,
                attempt: str = "", started_ms: int | None = None, type_name: str = "",
                duration_ms: int | None = None) -> bool:
        """Archive a task that failed for good; False when the lease was lost. ``attempt``,
        ``started_ms``, ``type_name`` and ``duration_ms`` as for ``retry``."""
        keys = [q.task(task_id), q.active, q.archived, q.stats, q.done(task_id)]
        args = [task_id, lease, now_ms, error, day, minute, max_archive_size, archive_cutoff_ms,
                1 if count_failure else 0, q.task_prefix, attempt, "" if started_ms is None else started_ms,
                ATTEMPT_HISTORY, ATTEMPT_HISTORY_BYTES, WAKE_TTL_MS, *self._ts_context(q, now_ms),
                type_name if self.type_stats else "", -1 if duration_ms is None else duration_ms, q.base]
        reply: int = self._call("archive", keys, args)
        return reply == OK

    def requeue(self, q: QueueKeys, task_id: str, lease: int, *, now_ms: int) -> bool:
        """Hand an unfinished task back to the front of pending; False when the lease was lost."""
        keys = [q.task(task_id), q.active, q.pending]
        reply: int = self._call("requeue", keys, [task_id, lease, now_ms, self._wake(q)])
        return reply == OK

    def heartbeat(self, server_id: str, info: str, *, ttl_ms: int, task_types: str = "{}") -> str:
        """Write a worker process's heartbeat (``info``, JSON) and the task types it handles (JSON),
        with a TTL; works at maxmemory. Returns the command an operator left for the process
        (``"quiet <actor>"``, ``"stop <actor>"``), taken once, or ``""``."""
        keys = [self.keys.server(server_id), self.keys.server_task_types(server_id),
                self.keys.server_control(server_id)]
        return str(self._call("heartbeat", keys, [info, ttl_ms, task_types]) or "")

    def audit(self, entry: str, *, keep: int) -> None:
        """Put an operator action (JSON) at the head of the audit log, keeping ``keep`` entries; works
        at maxmemory."""
        self._call("audit", [self.keys.audit], [entry, keep])

    def heartbeat_index(self, server_id: str, *, expires_ms: int, now_ms: int, queues: Iterable[str] = ()) -> None:
        """List a worker process as live until ``expires_ms``, drop expired ones, and list the ``queues``
        it serves among the known queues (again); works at maxmemory."""
        self._call("heartbeat_index", [self.keys.servers, self.keys.queues], [server_id, expires_ms, now_ms,
                                                                             *sorted(set(queues))])

    def extend_lease(self, q: QueueKeys, held: list[tuple[str, int]], *, lease_until_ms: int) -> list[int]:
        """Renew leases of ``(task id, lease)`` pairs; one code each: 1 ok, 2 cancel requested, 0 lost."""
        if not held:
            return []
        keys = [q.active] + [q.task(task_id) for task_id, _ in held]
        args: list[Any] = [lease_until_ms]
        for task_id, lease in held:
            args += [task_id, lease]
        return [int(code) for code in self._call("extend_lease", keys, args)]

    def forward(self, q: QueueKeys, source: str, *, now_ms: int, limit: int) -> Forwarded:
        """Move due tasks of ``source`` ("scheduled" or "retry") to pending: how many were taken, and
        when the earliest task left falls due."""
        keys = [q.state_key(source), q.pending]
        taken, next_due = self._call("forward", keys, [now_ms, limit, self._wake(q), q.task_prefix])
        return Forwarded(int(taken), None if int(next_due) < 0 else int(next_due))

    def recover(self, q: QueueKeys, *, now_ms: int, limit: int, day: str, minute: str,
                default_max_retry: int = DEFAULT_MAX_RETRY, outage_ms: int = 0, grace_ms: int = 0) -> Recovery:
        """Take back tasks whose lease expired: returns (requeued, archived, orphans dropped, grace
        left in ms, silence in ms that began a grace in this call).

        A message without ``max_retry`` has ``default_max_retry`` (the one the encoding leaves out).
        With ``outage_ms > 0``, a call that finds no call ran for longer than that (Redis's clock)
        takes nothing back and starts a grace of ``grace_ms``, during which no call takes anything
        back: owners cut off by the outage renew their leases first (``recover.lua``). A call stops
        early once it has read 4 MB of messages (``more``): call again for the rest.
        """
        keys = [q.active, q.pending, q.archived, q.stats, q.recovery]
        args = [now_ms, limit, day, minute, self._wake(q), q.task_prefix, default_max_retry, WORKER_LOST,
                WORKER_LOST_UNDECODABLE, CANCELLED_BY_OPERATOR, outage_ms, grace_ms, ATTEMPT_HISTORY,
                ATTEMPT_HISTORY_BYTES, q.done_prefix, WAKE_TTL_MS, *self._ts_context(q, now_ms)]
        reply = self._call("recover", keys, args)
        tasks = tuple(RecoveredTask(str(reply[i]), int(reply[i + 1]), int(reply[i + 2]), int(reply[i + 3]),
                                    str(reply[i + 4])) for i in range(6, len(reply), 5))
        requeued, archived, orphans, grace_left_ms, silence_ms, more = (int(n) for n in reply[:6])
        return Recovery(requeued, archived, orphans, grace_left_ms, silence_ms, tasks, bool(more))

    def queue_metrics(self, q: QueueKeys, *, sample: int = 5, offset: float = 0.0, client: Any = None) -> Any:
        """One queue's gauges and counters for a metrics scrape (read-only; ``queue_metrics.lua``); with a
        pipeline as ``client`` the call is queued (``queue_metrics.parse`` reads the reply). ``sample``
        task hashes, shared out over the states, are measured for the memory estimate, from ``offset``
        (0 to 1) of the spacing between two samples on."""
        keys = [q.pending, q.active, q.scheduled, q.retry, q.archived, q.completed, q.paused, q.stats, q.type_stats]
        return self._call("queue_metrics", keys, [q.task_prefix, sample, f"{offset:.6f}"], client=client)

    def janitor(self, q: QueueKeys, *, now_ms: int, archive_cutoff_ms: int, max_archive_size: int,
                limit: int) -> tuple[int, int, int]:
        """Delete up to ``limit`` completed tasks past retention, and as many archived tasks past the age
        limit, and as many of the oldest archived beyond ``max_archive_size``; how many of each."""
        completed, aged, over_size = self._call("janitor", [q.completed, q.archived],
                                                [now_ms, archive_cutoff_ms, limit, q.task_prefix, max_archive_size,
                                                 q.base])
        return int(completed), int(aged), int(over_size)

    def repair(self, q: QueueKeys, *, now_ms: int, cursor: str = "0", count: int = 1000,
               turn_ms: int = 0) -> RepairStep:
        """One bounded SCAN step over the queue's task hashes, putting back each hash that no list or
        zset points at (``RepairStep``).

        ``cursor=""`` continues the pass shared by all workers (its cursor is kept in Redis). With
        ``turn_ms > 0`` the step runs only when no worker took a turn in the last ``turn_ms``;
        otherwise it returns ``RepairStep("", 0, 0, -1, False)``. A step that has read 4 MB of messages
        stops there and gives back the cursor it started from (the next step looks at the same keys
        again): a pass that stopped at cursor "0" is not complete.
        """
        keys = [q.pending, q.scheduled, q.retry, q.archived, q.completed, q.active, q.repair]
        args = [now_ms, cursor, count, self._wake(q), turn_ms, q.task_prefix, REPAIR_NO_MESSAGE,
                REPAIR_UNKNOWN_STATE, q.done_prefix, WAKE_TTL_MS]
        cursor, repaired, archived, seen, complete = self._call("repair", keys, args)
        return RepairStep(str(cursor), int(repaired), int(archived), int(seen), bool(int(complete)))

    # -- callers waiting for results ---------------------------------------------------------------

    def result(self, q: QueueKeys, task_id: str, *, watch: bool = False, async_client: Any = None) -> Any:
        """The task HASH as a dict ({} when there is no such task), with ``"@score"``, the task's score
        in its state's ZSET, for a scheduled, retry or archived one. With ``watch``, a task that is not
        final is marked watched, so the script that makes it final pushes a token onto its wake LIST
        (``QueueKeys.done``), and tokens an earlier final state left there are dropped (results.py).

        With a ``redis.asyncio.Redis`` as ``async_client``, returns an awaitable of the same dict.

        A result longer than ``CALL_BYTES`` is read apart, with HGET (Redis copies it to the client as it
        is, where the script copied it twice while nothing else ran); a task deleted in between is {}.
        """
        keys = [q.task(task_id), q.done(task_id)]
        args = [1 if watch else 0, q.base, task_id, CALL_BYTES]
        if async_client is not None:
            return self._result_async(async_client, keys, args)
        h = _pairs(self._call("result", keys, args))
        if "@result_bytes" in h:
            return _with_result(h, self.redis.hget(keys[0], "result"))
        return h

    async def _result_async(self, client: Any, keys: list[str], args: list[Any]) -> dict[str, Any]:
        h: dict[str, Any] = await self._call_async(client, "result", keys, args, _pairs)
        if "@result_bytes" in h:
            return _with_result(h, await client.hget(keys[0], "result"))
        return h

    async def _call_async(self, client: Any, name: str, keys: list[str], args: list[Any],
                          convert: Callable[[Any], Any]) -> Any:
        """``_call`` on an asyncio client: ``EVALSHA``, loading the script after ``NOSCRIPT``."""
        sha = self._script(name).sha
        try:
            # A new cluster client reads the cluster's layout at its first command, but routes that
            # command first, without it: to a random node, which answers MOVED (2 in 3 on 3 masters).
            await client.initialize()
            try:
                reply = await client.evalsha(sha, len(keys), *keys, *args)
            except redis.exceptions.NoScriptError:
                await client.script_load(script_source(name))
                reply = await client.evalsha(sha, len(keys), *keys, *args)
        except redis.ResponseError as exc:
            if is_wrong_type(str(exc)):
                raise WrongKeyType(wrong_type_message(str(exc))) from exc
            if is_out_of_memory(str(exc)):
                raise RedisFull(full_message(str(exc))) from exc
            raise
        return convert(reply)

    # -- operator ---------------------------------------------------------------------------------

    def _check_admin(self, reply: Any, q: QueueKeys, task_id: str, action: str) -> None:
        if reply == OK:
            return
        if reply == NOT_FOUND:
            raise TaskNotFound(f"no task {task_id!r} in queue {q.queue!r}")
        if isinstance(reply, list) and reply[0] == WRONG_STATE:
            raise InvalidTaskState(f"cannot {action} task {task_id!r}: it is {reply[1]}")
        raise RuntimeError(f"unexpected reply {reply!r}")  # pragma: no cover

    def _admin_request(self, name: str, q: QueueKeys, task_id: str, now_ms: int, new_msg: str = "",
                       edit: str = "", only_from: tuple[str, ...] = ()) -> tuple[str, list[str], list[Any]]:
        """The script, KEYS and ARGV of an operator's script on one task (``ADMIN_TASK_SCRIPTS``): the one
        place that knows them, for one call or a pipeline of many. ``only_from``: the states it may act
        from (none: every state it can)."""
        allowed = " ".join(only_from)
        if name == "admin_run_task":
            return (name, [q.task(task_id), q.pending, q.scheduled, q.retry, q.archived],
                    [task_id, now_ms, self._wake(q), new_msg, edit, allowed])
        if name == "admin_archive_task":
            return (name, [q.task(task_id), q.pending, q.scheduled, q.retry, q.archived, q.done(task_id)],
                    [task_id, now_ms, WAKE_TTL_MS, allowed])
        if name == "admin_delete_task":
            return (name, [q.task(task_id), q.pending, q.scheduled, q.retry, q.archived, q.completed,
                           q.done(task_id)], [task_id, q.base, WAKE_TTL_MS, allowed])
        if name == "admin_cancel_task":
            return (name, [q.task(task_id)], [f"{self.publish_command} {q.cancel_channel}", f"{q.queue} {task_id}"])
        raise ValueError(f"no operator script {name!r}")  # pragma: no cover - callers name one

    def admin_run_task(self, q: QueueKeys, task_id: str, *, now_ms: int, new_msg: str = "", edit: str = "",
                       only_from: tuple[str, ...] = ()) -> None:
        """Move a scheduled, retry or archived task (with ``only_from``, one in those states) to pending;
        with ``new_msg``, its message replaced (an edit, recorded by the ``edit`` line in the task's
        ``edits``), in the same step."""
        request = self._admin_request("admin_run_task", q, task_id, now_ms, new_msg, edit, only_from=only_from)
        self._check_admin(self._call(*request), q, task_id, "run")

    def admin_archive_task(self, q: QueueKeys, task_id: str, *, now_ms: int, only_from: tuple[str, ...] = ()) -> None:
        """Archive a pending, scheduled or retry task (with ``only_from``, one in those states)."""
        request = self._admin_request("admin_archive_task", q, task_id, now_ms, only_from=only_from)
        self._check_admin(self._call(*request), q, task_id, "archive")

    def admin_delete_task(self, q: QueueKeys, task_id: str, *, only_from: tuple[str, ...] = ()) -> None:
        """Delete a task that is not active (with ``only_from``, one in those states), releasing its unique lock."""
        request = self._admin_request("admin_delete_task", q, task_id, 0, only_from=only_from)
        self._check_admin(self._call(*request), q, task_id, "delete")

    def admin_cancel_task(self, q: QueueKeys, task_id: str) -> None:
        """Flag an active task as cancelled and tell workers on the cancel channel."""
        self._check_admin(self._call(*self._admin_request("admin_cancel_task", q, task_id, 0)), q, task_id, "cancel")

    def admin_tasks(self, action: str, q: QueueKeys, task_ids: list[str], *, now_ms: int,
                    only_from: tuple[str, ...] = (), until_ms: int = 0) -> list[str | None]:
        """The operator's ``action`` on each of ``task_ids`` of one queue, one script call each, sent in
        one round trip (a pipeline; each call is atomic, the batch is not). Per task: None when done,
        else why not ("no task ...", "cannot ... it is active"); with ``only_from``, a task in another
        state is left alone too (a bulk job's task that moved on since it was found). ``until_ms`` (with
        ``only_from``): a bulk job driver's lease, as Redis's clock must not have passed (else
        ``BulkLeaseRanOut``, raised once the calls that came in time are done). A key of the wrong type
        raises ``WrongKeyType``; Redis refusing writes, ``RedisFull``."""
        if not task_ids:
            return []
        allowed = (*only_from, f"until:{until_ms}") if until_ms and only_from else only_from
        pipe = self.redis.pipeline(transaction=False)
        for task_id in task_ids:
            self._call(*self._admin_request(ADMIN_TASK_SCRIPTS[action], q, task_id, now_ms, only_from=allowed),
                       client=pipe)
        out: list[str | None] = []
        ran_out = False
        for task_id, reply in zip(task_ids, pipe.execute(raise_on_error=False), strict=True):
            if isinstance(reply, redis.ResponseError) and str(reply).startswith("QCLEASE"):
                ran_out = True
                out.append("the bulk job's lease ran out")
                continue
            if isinstance(reply, redis.ResponseError):
                if is_wrong_type(str(reply)):
                    raise WrongKeyType(wrong_type_message(str(reply)))
                if is_out_of_memory(str(reply)):
                    raise RedisFull(full_message(str(reply)))
                raise reply
            try:
                self._check_admin(reply, q, task_id, action)
            except (TaskNotFound, InvalidTaskState) as exc:
                out.append(str(exc))
            else:
                out.append(None)
        if ran_out:
            raise BulkLeaseRanOut(sum(why is None for why in out))
        return out

    def admin_pending_many(self, q: QueueKeys, action: str, tasks: list[tuple[str, int]], *, now_ms: int,
                           slack: int) -> list[int]:
        """Archive or delete (``action``) many pending tasks of ``q`` in one call: ``tasks`` are (id, its
        place counted from the right end when it was found); the list is read once around those places
        (``slack`` more on each side) instead of one LREM per task. Per task: 1 done, -1 no such task,
        -2 not pending (left as it is)."""
        if not tasks:
            return []
        args: list[Any] = [action, now_ms, q.task_prefix, q.done_prefix, WAKE_TTL_MS, q.base, slack]
        for task_id, place in tasks:
            args += [task_id, place]
        return [int(code) for code in self._call("admin_pending_many", [q.pending, q.archived], args)]

    def bulk_snapshot(self, q: QueueKeys, state: str, job_id: str, *, ttl_ms: int) -> int:
        """Copy the ids of ``state`` to ``q.bulk_snapshot(job_id)`` (expiring after ``ttl_ms``); how many."""
        kind = "list" if state == "pending" else "zset"
        return int(self._call("bulk_snapshot", [q.state_key(state), q.bulk_snapshot(job_id)], [kind, ttl_ms]))

    def admin_run_all(self, q: QueueKeys, state: str, *, now_ms: int, limit: int, bound: BulkBound) -> BulkChunk:
        """A bulk job's chunk on a scheduled/retry/archived state: ``limit`` ids looked at, the tasks
        there at ``bound.since_ms`` moved to pending."""
        reply = self._call("admin_run_all", [q.state_key(state), q.pending],
                           [limit, now_ms, self._wake(q), q.task_prefix, *_bound_args(state, bound)])
        return _bulk_chunk(reply)

    def admin_archive_all(self, q: QueueKeys, state: str, *, now_ms: int, limit: int, bound: BulkBound) -> BulkChunk:
        """A bulk job's chunk on the pending/scheduled/retry state, archiving (as ``admin_run_all``)."""
        kind = "list" if state == "pending" else "zset"
        reply = self._call("admin_archive_all", [q.state_key(state), q.archived],
                           [limit, now_ms, kind, q.task_prefix, q.done_prefix, WAKE_TTL_MS,
                            *_bound_args(state, bound)])
        return _bulk_chunk(reply)

    def admin_delete_all(self, q: QueueKeys, state: str, *, limit: int, bound: BulkBound) -> BulkChunk:
        """A bulk job's chunk on a state other than active, deleting (as ``admin_run_all``)."""
        kind = "list" if state == "pending" else "zset"
        reply = self._call("admin_delete_all", [q.state_key(state)],
                           [limit, kind, q.task_prefix, q.base, q.done_prefix, WAKE_TTL_MS,
                            *_bound_args(state, bound)])
        return _bulk_chunk(reply)

    # -- periodic tasks (scheduler.py, periodic_ops.py) ----------------------------------------------

    def periodic_sync(self, q: QueueKeys, name: str, *, now_ms: int, definition: str,
                      next_ms: int) -> tuple[int, bool]:
        """Declare a periodic entry (its definition and next fire) and read its state: (mark, paused).
        A new entry's mark is now: it never fires for earlier times."""
        mark, paused = self._call("periodic_sync", [q.periodic(name)], [now_ms, definition, next_ms])
        return int(mark), bool(paused)

    def periodic_fire(self, q: QueueKeys, name: str, *, now_ms: int, fire_ms: int, mark_ms: int, kind: str,
                      task_id: str = "-", msg: str = "", front: bool = False, next_ms: int = 0,
                      keep: int = 20, fires: int = 1) -> tuple[int, int]:
        """Claim the fire ``fire_ms`` of an entry and enqueue its task in one step (``kind`` "schedule",
        "late" or "manual"), or skip missed fires up to ``mark_ms`` ("skip"); ``fires``: how many fire
        times a "late" or "skip" claim stands for (its count). Returns (code, mark): 1 enqueued, 2
        skipped, 0 already claimed, -1 no such entry, -2 paused (see ``periodic_fire.lua``)."""
        keys = [q.periodic(name), q.periodic_fires(name), q.pending, q.task(task_id)]
        args = [now_ms, fire_ms, mark_ms, kind, task_id, msg, self._wake(q), 1 if front else 0, next_ms, keep,
                max(1, int(fires))]
        code, mark = self._call("periodic_fire", keys, args)
        return int(code), int(mark)

    def periodic_forget(self, q: QueueKeys, name: str, *, declared_before_ms: int) -> bool:
        """Delete an entry's state when it was last declared before ``declared_before_ms``."""
        keys = [q.periodic(name), q.periodic_fires(name)]
        return int(self._call("periodic_forget", keys, [declared_before_ms])) == 1

    def periodic_register(self, members: list[str], *, lapsed_before_ms: int, until_ms: int) -> list[str]:
        """List ``<name>/<queue>`` members as declared until ``until_ms``; returns (and removes) the
        members whose declaration lapsed before ``lapsed_before_ms``."""
        return [str(m) for m in self._call("periodic_register", [self.keys.periodic],
                                           [lapsed_before_ms, until_ms, *members])]

    def admin_periodic_pause(self, q: QueueKeys, name: str, *, pause: bool, actor: str, now_ms: int) -> int:
        """Pause (or resume) a periodic entry: 1 changed, 0 already so, -1 no such entry."""
        return int(self._call("admin_periodic_pause", [q.periodic(name)], [1 if pause else 0, actor, now_ms]))


    # -- flow control: snooze, limits, timed pause (flow.py) ---------------------------------------

    def park(self, q: QueueKeys, task_id: str, lease: int, *, now_ms: int, due_ms: int, snooze: bool,
             waiting: str = "", attempt: str = "") -> bool:
        """Put an active task aside until ``due_ms`` without counting an attempt (a snooze when
        ``snooze``, else held back by a limit: ``waiting`` says why); False when the lease was lost."""
        keys = [q.task(task_id), q.active, q.scheduled]
        args = [task_id, lease, now_ms, due_ms, 1 if snooze else 0, waiting, attempt, ATTEMPT_HISTORY,
                ATTEMPT_HISTORY_BYTES]
        return int(self._call("park", keys, args)) == OK

    def limit_wake(self, q: QueueKeys, task_ids: list[str], *, now_ms: int) -> int:
        """Move tasks a limit held back (still waiting in scheduled) to the head of pending; how many
        will take their slot soon (moved, or already pending or running)."""
        if not task_ids:
            return 0
        return int(self._call("limit_wake", [q.scheduled, q.pending],
                              [now_ms, self._wake(q), q.task_prefix, *task_ids]))

    def admin_pause(self, q: QueueKeys, *, until_ms: int = 0) -> None:
        """Pause a queue; with ``until_ms`` it resumes by itself then (the key expires)."""
        self._call("admin_pause", [q.paused], [until_ms])

    def limit_acquire(self, lim: LimitKeys, member: str, *, key: str, now_ms: int, expires_ms: int,
                      concurrency: int, rate: int, window_ms: int, slot: str = "") -> tuple[bool, str, int, int]:
        """Take a concurrency slot (named ``slot``, ``"<queue> <id> <lease>"``: the attempt's; ``member``
        when empty) and a rate-window place for ``member`` (``"<queue> <id>"``):
        ``(True, "", 0, 0)``, or ``(False, "concurrency", earliest slot expiry ms, tasks waiting ahead of
        it)``, or
        ``(False, "rate", when the window has room for this task ms, 0)``."""
        keys = [lim.running(key), lim.waiting(key), lim.rate(key), lim.cursor, lim.keys, lim.places]
        reply = self._call("limit_acquire", keys,
                           [member, now_ms, expires_ms, concurrency, rate, window_ms, key, slot or member])
        if int(reply[0]) == OK:
            return True, "", 0, 0
        kind = reply[1].decode() if isinstance(reply[1], bytes) else str(reply[1])
        return False, kind, int(reply[2]), int(reply[3]) if len(reply) > 3 else 0

    def limit_wait(self, lim: LimitKeys, member: str, *, key: str, now_ms: int, concurrency: int) -> bool:
        """List a held-back task as waiting for a slot; True when one is free already (wake it)."""
        return int(self._call("limit_wait", [lim.running(key), lim.waiting(key)], [member, now_ms, concurrency])) == 1

    def limit_release(self, lim: LimitKeys, members: list[str], *, key: str, now_ms: int,
                      concurrency: int, most: int = 0) -> list[str]:
        """Free the slots of ``members``; the waiting members now handed a free slot, oldest first (at
        most ``most`` of them; 0: one per free slot)."""
        reply = self._call("limit_release", [lim.running(key), lim.waiting(key)],
                           [now_ms, concurrency, most, *members])
        return [m.decode() if isinstance(m, bytes) else str(m) for m in reply]

    def limit_extend(self, lim: LimitKeys, members: list[str], *, key: str, expires_ms: int) -> int:
        """Renew the concurrency slots of ``members`` until ``expires_ms``; how many were renewed."""
        if not members:
            return 0
        return int(self._call("limit_extend", [lim.running(key)], [expires_ms, *members]))

    # -- alerts (alerts.py) ----------------------------------------------------------------------------

    def alerts_apply(self, holder: str, *, now_ms: int, lease_until_ms: int, fire: Sequence[tuple[str, str]] = (),
                     pend: Sequence[tuple[str, str]] = (), resolve: Sequence[str] = ()
                     ) -> tuple[bool, list[str], list[tuple[str, str]]]:
        """Take or renew the alert evaluator's lease until ``lease_until_ms`` (0: give it up), then fire
        the ``(id, JSON)`` alerts not active, mark the ``pend`` ``(id, JSON)`` alerts pending since
        ``now_ms`` (unless they are) and record what each says, and end the ``resolve`` ids: resolved
        when active, no longer pending. Returns (held, fired ids, resolved (id, JSON)); nothing changes
        when another holder's lease runs."""
        args: list[Any] = [holder, now_ms, lease_until_ms, len(fire), len(pend)]
        for alert_id, body in (*fire, *pend):
            args += [alert_id, body]
        args += list(resolve)
        held, fired, resolved = self._call("alerts_apply", [self.keys.alerts], args)
        pairs = [(str(resolved[i]), str(resolved[i + 1])) for i in range(0, len(resolved), 2)]
        return bool(held), [str(f) for f in fired], pairs

    def bulk_job_create(self, job_id: str, *, now_ms: int, max_open: int, keep: int, fields: dict[str, Any]) -> bool:
        """Record a new queued bulk job unless ``max_open`` are queued or running; False then."""
        keys = [self.keys.bulk_job(job_id), self.keys.open_bulk_jobs, self.keys.bulk_jobs]
        args: list[Any] = [job_id, now_ms, max_open, keep, self.keys.bulk_job("")]
        for name, value in fields.items():
            args += [name, value]
        return bool(self._call("bulk_job_create", keys, args))

    def bulk_job_step(self, job_id: str, holder: str, *, now_ms: int, lease_until_ms: int, finish_ttl_ms: int,
                      reset_targets: bool, fields: dict[str, Any], targets: list[str]) -> tuple[bool, bool]:
        """Take or renew a bulk job's lease as ``holder`` (until ``lease_until_ms``; 0: give it up after)
        and record ``fields`` and push ``targets``; with ``finish_ttl_ms`` the job is finished. Returns
        (held, cancel requested); nothing is written unless held."""
        keys = [self.keys.bulk_job(job_id), self.keys.open_bulk_jobs, self.keys.bulk_job_targets(job_id)]
        args: list[Any] = [job_id, holder, now_ms, lease_until_ms, int(finish_ttl_ms > 0), finish_ttl_ms,
                           int(reset_targets), len(fields)]
        for name, value in fields.items():
            args += [name, value]
        held, cancel = self._call("bulk_job_step", keys, args + targets)
        return bool(held), bool(cancel)


def _with_result(h: dict[str, Any], result: Any) -> dict[str, Any]:
    """The ``result`` script's task without its long result (``"@result_bytes"``), with ``result`` read
    apart; {} when the task was deleted in between."""
    del h["@result_bytes"]
    if result is None:
        return {}
    h["result"] = result
    return h


def _pairs(reply: Any) -> dict[str, Any]:
    """A flat ``field, value, ...`` reply (HGETALL's) as a dict."""
    return dict(zip(reply[::2], reply[1::2], strict=True))


def _encodes_utf8_strictly(client: Any) -> bool:
    """True when ``client``'s connections encode text as strict UTF-8 (redis-py's default)."""
    kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", None)
    if not isinstance(kwargs, dict):
        return False
    try:
        encoding = codecs.lookup(kwargs.get("encoding", "utf-8")).name
    except LookupError:
        return False
    return encoding == "utf-8" and kwargs.get("encoding_errors", "strict") == "strict"


class DedicatedScripts(Scripts):
    """``Scripts`` that send ``EVALSHA`` on one connection held for the object's lifetime.

    A connection error closes the connection and propagates (the caller retries; the next call
    reconnects).
    """

    def __init__(self, client: redis.Redis, keys: Keys, *, type_stats: bool = True) -> None:
        super().__init__(client, keys, type_stats=type_stats)
        self._connection: Any = None

    def _on_pooled_connection(self, name: str, keys: list[str], args: list[Any]) -> Any:
        if not hasattr(self.redis, "connection_pool"):
            return super()._on_pooled_connection(name, keys, args)
        if self._connection is None:  # made like the pool's, but outside its count of connections
            pool = self.redis.connection_pool
            self._connection = pool.connection_class(**pool.connection_kwargs)
        return self._evalsha_or_drop(self._connection, name, keys, args)  # a closed one reconnects next call

    def close(self) -> None:
        if self._connection is not None:
            self._connection.disconnect()
            self._connection = None


class PerThreadScripts(Scripts):
    """``Scripts`` that send ``EVALSHA`` on a connection of the calling thread's own, made like the
    pool's on the thread's first call and kept: redis-py's pool lookup and release, with their
    locks, fork check and bookkeeping, cost about a fifth of a single enqueue.

    A connection found closed (the server restarted or dropped it) is reconnected once, as the pool's
    path does; a connection made before a fork is never used after it (a new one is made in the
    child); ``close()`` closes every thread's connection.
    """

    def __init__(self, client: redis.Redis, keys: Keys, *, type_stats: bool = True) -> None:
        super().__init__(client, keys, type_stats=type_stats)
        self._local = threading.local()
        self._made: list[weakref.ref[Any]] = []
        self._made_lock = threading.Lock()

    def _take_connection(self, pool: Any) -> Any:
        """The calling thread's own connection (made on its first call, and again after a fork)."""
        local = self._local
        connection = getattr(local, "connection", None)
        if connection is None or local.pid != os.getpid():
            connection = pool.connection_class(**pool.connection_kwargs)
            local.connection, local.pid = connection, os.getpid()
            with self._made_lock:
                self._made = [ref for ref in self._made if ref() is not None] + [weakref.ref(connection)]
        return connection

    def _give_back(self, pool: Any, connection: Any) -> None:
        """Kept for the thread's next call."""

    def close(self) -> None:
        with self._made_lock:
            made, self._made = self._made, []
        for ref in made:
            connection = ref()
            if connection is not None and getattr(connection, "pid", os.getpid()) == os.getpid():
                connection.disconnect()
