"""Every Redis key and channel name queuecore uses, built in one place.

All keys of one queue share the hash tag ``{<queue>}`` so that every script touches a single
Redis Cluster slot: ``<prefix>:{<queue>}:<suffix>``.
"""

from __future__ import annotations

import re
import time
import unicodedata
from dataclasses import dataclass
from functools import cached_property, lru_cache

DEFAULT_PREFIX = "qc"
GLOBAL_TAG = "/"  # the hash tag of the keys of no queue (Keys.global_base): never a queue name
NAME_MAX_LENGTH = 200  # characters in a queue name or task type
# Queue names and task types share one alphabet: any character but a control (Cc), format (Cf:
# zero-width, direction marks, tags), surrogate (Cs) or separator (Z*: every kind of space, line
# and paragraph separators) character, "/" (dashboard URLs hold the name as one path segment),
# "{" or "}" (every key holds the queue in a {hash tag}); and never "." or "..", which a browser
# would take as a path step. Whitespace of every kind is Cc or Z*.
_FORBIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zs", "Zl", "Zp"})
_FORBIDDEN_CHARS = frozenset("/{}")
_DOT_NAMES = frozenset({".", ".."})
# The alphabet as a regex: exact for ASCII, and for the format characters Unicode had when this was
# written; is_valid_name is the definition (it asks unicodedata), and what it refuses beyond this
# class only newer format characters can be. "(?!\.\.?/)" keeps a route's "./" and "../" out.
NAME_CHARACTER_CLASS = (r"[^\x00-\x20\x7f-\xa0/{}\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891"
                        r"\u08e2\u1680\u180e\u2000-\u200f\u2028-\u202f\u205f-\u2064\u2066-\u206f\u3000"
                        r"\ud800-\udfff\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U00013438"
                        r"\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]")
_ASCII_NAME = re.compile(rf"[\x21-\x2e\x30-\x7a|~]{{1,{NAME_MAX_LENGTH}}}")  # printable, no space / { }
_NAME_RULE = (f"1-{NAME_MAX_LENGTH} characters, none of them a control, zero-width or other format character, "
              "whitespace, '/', '{' or '}'; not '.' or '..'")
_PREFIX = re.compile(r"^[^\s{}]{1,64}$")
_TASK_ID = re.compile(r"^[A-Za-z0-9_.:\-]{1,200}$")


def is_valid_name(name: object) -> bool:
    """True when ``name`` may be a queue name or a task type (see ``NAME_CHARACTER_CLASS``)."""
    if not isinstance(name, str):
        return False
    if _ASCII_NAME.fullmatch(name):  # the common case: one regex, no per-character lookup
        return name not in _DOT_NAMES
    if not 0 < len(name) <= NAME_MAX_LENGTH or name in _DOT_NAMES:
        return False
    return not any(c in _FORBIDDEN_CHARS or unicodedata.category(c) in _FORBIDDEN_CATEGORIES for c in name)


def _check(pattern: re.Pattern[str], value: object, what: str, rule: str) -> str:
    from queuecore.core.errors import ConfigurationError, shown

    # fullmatch, not match: "$" would also accept a trailing newline ("default\n").
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise ConfigurationError(f"invalid {what} {shown(value)}: {rule}")
    return value


def _check_name(value: object, what: str) -> str:
    if not is_valid_name(value):
        from queuecore.core.errors import ConfigurationError, shown

        raise ConfigurationError(f"invalid {what} {shown(value)}: {_NAME_RULE}")
    return value  # type: ignore[return-value]  # is_valid_name checked it is a str


LIMIT_TAG_START = "lim:"  # the hash tag of a task type's limit keys starts so (LimitKeys): no queue's may


def validate_queue_name(name: object) -> str:
    """Return ``name`` if it is a valid queue name, else raise ``ConfigurationError`` (a name starting
    with ``lim:`` too: its keys would be a task type's limit keys, ``{lim:<type>}``)."""
    checked = _check_name(name, "queue name")
    if checked.startswith(LIMIT_TAG_START):
        from queuecore.core.errors import ConfigurationError

        raise ConfigurationError(f"invalid queue name {name!r}: a queue name may not start with "
                                 f"{LIMIT_TAG_START!r} (the keys of task types' limits do)")
    return checked


def validate_prefix(prefix: object) -> str:
    """Return ``prefix`` if it is a valid key prefix, else raise ``ConfigurationError``."""
    checked = _check(_PREFIX, prefix, "key prefix", "1-64 characters, no whitespace, '{' or '}'")
    if any(unicodedata.category(c) in _FORBIDDEN_CATEGORIES for c in checked):
        from queuecore.core.errors import ConfigurationError

        raise ConfigurationError(f"invalid key prefix {prefix!r}: no control, zero-width or other format character")
    return checked


def validate_task_id(task_id: object) -> str:
    """Return ``task_id`` if it is a safe token (letters, digits, ``_ . : -``; up to 200; not ``.``/``..``)."""
    checked = _check(_TASK_ID, task_id, "task id", "1-200 characters of A-Z a-z 0-9 _ . : -")
    if checked in _DOT_NAMES:
        from queuecore.core.errors import ConfigurationError

        raise ConfigurationError(f"invalid task id {task_id!r}: not '.' or '..'")
    return checked


def validate_type_name(name: object) -> str:
    """Return ``name`` if it is a valid task type name (the same alphabet as queue names)."""
    return _check_name(name, "task type")


@dataclass(frozen=True)
class QueueKeys:
    """The keys of one queue. Build with ``Keys.queue(name)``. Each key is built once, on first use
    (``cached_property``): the hot scripts name several per call."""

    prefix: str
    queue: str

    @cached_property
    def base(self) -> str:
        """``<prefix>:{<queue>}:``, the start of every key of this queue."""
        return f"{self.prefix}:{{{self.queue}}}:"

    @cached_property
    def pending(self) -> str:
        """LIST of task ids ready to run; pushed on the left, popped on the right."""
        return self.base + "pending"

    @cached_property
    def active(self) -> str:
        """ZSET of running task ids scored by lease expiry (unix ms): no active task without a lease."""
        return self.base + "active"

    @cached_property
    def scheduled(self) -> str:
        """ZSET of task ids scored by the time they are due (unix ms)."""
        return self.base + "scheduled"

    @cached_property
    def retry(self) -> str:
        """ZSET of failed task ids scored by their next attempt (unix ms)."""
        return self.base + "retry"

    @cached_property
    def archived(self) -> str:
        """ZSET of archived (dead) task ids scored by when they were archived (unix ms)."""
        return self.base + "archived"

    @cached_property
    def completed(self) -> str:
        """ZSET of completed task ids kept for retention, scored by when they expire (unix ms)."""
        return self.base + "completed"

    @cached_property
    def paused(self) -> str:
        """STRING present while the queue is paused."""
        return self.base + "paused"

    @cached_property
    def stats(self) -> str:
        """HASH of counters: ``processed``/``failed`` totals, per day ``d:`` and per minute ``m:``."""
        return self.base + "stats"

    @cached_property
    def repair(self) -> str:
        """HASH of the repair pass shared by the workers: ``cursor`` and ``next_at`` (unix ms)."""
        return self.base + "repair"

    @cached_property
    def recovery(self) -> str:
        """HASH of the recoverers' shared view of time: ``seen`` (Redis time of the last recovery
        round, ms) and ``grace_until`` (ms): see ``recover.lua``."""
        return self.base + "recovery"

    @cached_property
    def task_prefix(self) -> str:
        """The start of every task hash key of this queue (``...:t:<id>``)."""
        return self.base + "t:"

    def task(self, task_id: str) -> str:
        """HASH of one task: ``msg`` (encoded message), ``state`` and the mutable fields."""
        return self.task_prefix + task_id

    @cached_property
    def type_stats(self) -> str:
        """HASH type -> per-type counters since the type first ran; also the start of each type's
        per-minute and per-day HASHes (``typestats.py``)."""
        return self.base + "ts"

    @cached_property
    def done_prefix(self) -> str:
        """The start of every wake LIST of this queue (``...:done:<id>``)."""
        return self.base + "done:"

    def done(self, task_id: str) -> str:
        """LIST of wake tokens for callers waiting for one task's outcome: pushed (with a short TTL)
        when a watched task turns final; waiters block on it (``results.py``)."""
        return self.done_prefix + task_id

    def periodic(self, name: str) -> str:
        """HASH of one periodic entry whose fires go to this queue: ``def`` (JSON), ``mark`` (fire
        times up to it, unix ms, are claimed or skipped), ``next``, ``declared``, ``paused`` and the
        last fire's ``last_fire``/``last_id``/``last_kind``/``last_at`` (periodic.py, scheduler.py)."""
        return f"{self.base}periodic:{name}"

    def periodic_fires(self, name: str) -> str:
        """LIST of one periodic entry's recent fires, newest first: ``<fire ms> <claimed ms> <kind> <task id>``."""
        return f"{self.base}periodic:{name}:fires"

    def unique(self, type_name: str, digest: str) -> str:
        """STRING holding the id of the task that owns a uniqueness lock (with a TTL)."""
        return f"{self.base}unique:{type_name}:{digest}"

    def bulk_snapshot(self, job_id: str) -> str:
        """LIST or ZSET: a copy of one state's ids, taken when a filtered bulk job starts finding its
        tasks, or an export starts reading them (``bulk_snapshot.lua``), read by place while the state
        itself moves; it expires by itself."""
        return f"{self.base}bulk:{job_id}"

    def state_key(self, state: str) -> str:
        """The LIST or ZSET holding ids of tasks in ``state``."""
        return self.base + state

    @cached_property
    def wake_channel(self) -> str:
        """Pub/sub channel told when the queue turns non-empty, so idle workers fetch at once."""
        return self.base + "wake"

    @cached_property
    def idle(self) -> str:
        """ZSET of the workers waiting for this queue's next task, ``"<lease ms>+ <worker id>"`` -> when
        the listing lapses (unix ms): a worker with no handler running whose dequeue found the queue
        empty is listed (``dequeue.lua``); an enqueue that finds the queue empty leases the task to one
        of them and publishes it on that worker's push channel (``enqueue.lua``), taking it off the list."""
        return self.base + "idle"

    @cached_property
    def push_prefix(self) -> str:
        """The start of every worker's push channel of this queue (``push_channel``)."""
        return self.base + "push:"

    def push_channel(self, worker_id: str) -> str:
        """Pub/sub channel on which one worker gets ``<task id> <message>`` for a task an enqueue leased
        to it (lease 1, first attempt), in the queue's slot as the enqueue script publishes it."""
        return self.push_prefix + worker_id

    @cached_property
    def cancel_channel(self) -> str:
        """Pub/sub channel carrying ``<queue> <task id>`` cancel requests for this queue's tasks (in the
        queue's slot, so the cancel script can publish on it with sharded pub/sub)."""
        return self.base + "cancel"

    @cached_property
    def all_pattern(self) -> str:
        """A SCAN pattern matching every key of this queue."""
        return _escape_glob(self.base) + "*"


@dataclass(frozen=True)
class LimitKeys:
    """The keys of one task type's concurrency and rate limits (``flow.py``). Build with
    ``Keys.limit(type)``. They carry the hash tag ``{lim:<type>}``: a limit is shared by every queue
    the type runs in, so it cannot live in a queue's slot; each limit script touches only these keys.
    A limit kept per key (``limit_key``) has its own ``running``/``waiting``/``rate`` keys, suffixed
    ``:<key>``, in the same slot."""

    prefix: str
    type: str

    @property
    def base(self) -> str:
        """``<prefix>:{lim:<type>}:``, the start of every key of this limit."""
        return f"{self.prefix}:{{{LIMIT_TAG_START}{self.type}}}:"

    def _suffixed(self, name: str, key: str) -> str:
        return self.base + name + (":" + key if key else "")

    def running(self, key: str = "") -> str:
        """ZSET of the attempts holding a concurrency slot, ``"<queue> <id> <lease>"`` scored by slot
        expiry (ms)."""
        return self._suffixed("running", key)

    def waiting(self, key: str = "") -> str:
        """ZSET of the tasks held back by the concurrency limit, ``"<queue> <id>"`` scored by since (ms)."""
        return self._suffixed("waiting", key)

    def rate(self, key: str = "") -> str:
        """ZSET of the starts in the current rate window, scored by start (ms)."""
        return self._suffixed("rate", key)

    @property
    def cursor(self) -> str:
        """HASH: limit key -> the next rate-window place handed out to a held-back task (ms)."""
        return self.base + "cursor"

    @property
    def places(self) -> str:
        """ZSET: ``"<key>|<queue> <id>"`` -> the rate-window place given to a held-back task (ms)."""
        return self.base + "places"

    @property
    def keys(self) -> str:
        """ZSET of the limit keys in use, scored by last use (ms): what operator tools list."""
        return self.base + "keys"


@dataclass(frozen=True)
class Keys:
    """Key builder for one prefix."""

    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        validate_prefix(self.prefix)

    def queue(self, name: str) -> QueueKeys:
        return QueueKeys(self.prefix, validate_queue_name(name))

    def limit(self, type_name: str) -> LimitKeys:
        return LimitKeys(self.prefix, validate_type_name(type_name))

    @property
    def global_base(self) -> str:
        """``<prefix>:{/}:``, the start of every key that belongs to no queue: one hash tag, so they all
        share one Redis Cluster slot; ``/`` is in no queue name, so no queue's keys can match them."""
        return f"{self.prefix}:{{{GLOBAL_TAG}}}:"

    @property
    def queues(self) -> str:
        """SET of every known queue name."""
        return self.global_base + "queues"

    @property
    def servers(self) -> str:
        """ZSET of worker process ids scored by when their heartbeat expires (unix ms)."""
        return self.global_base + "servers"

    def server(self, server_id: str) -> str:
        """STRING (JSON) describing one worker process and its active tasks, with a TTL (its own hash
        tag: heartbeats spread over a cluster's nodes)."""
        return f"{self.prefix}:servers:{{{server_id}}}"

    def server_control(self, server_id: str) -> str:
        """STRING ``<command> <actor>`` an operator left for one worker process (``quiet`` or ``stop``),
        with a TTL; the process's next heartbeat takes it (same hash tag as ``server``: one slot)."""
        return f"{self.prefix}:servers:{{{server_id}}}:control"

    def server_task_types(self, server_id: str) -> str:
        """STRING (JSON) of the task types one worker process handles and their parameter names, with
        the TTL of its heartbeat (same hash tag as ``server``: one slot)."""
        return f"{self.prefix}:servers:{{{server_id}}}:types"

    @property
    def periodic(self) -> str:
        """ZSET of the periodic entries workers declare, ``<name>/<queue>`` scored by when the
        declaration lapses (unix ms); each entry's own keys live in its queue's slot (``QueueKeys.periodic``)."""
        return self.global_base + "periodic"

    @property
    def alerts(self) -> str:
        """HASH of the alert evaluator's lease (``lease``: holder, ``lease_until``: unix ms) and the
        active alerts (``a:<alert id>``: JSON); one key, so its script touches one slot (alerts.py)."""
        return self.global_base + "alerts"

    @property
    def audit(self) -> str:
        """LIST of operator actions (JSON, newest first), capped."""
        return self.global_base + "audit"

    @property
    def bulk_jobs(self) -> str:
        """ZSET of the recent bulk jobs' ids scored by when each was created (unix ms), trimmed to the newest."""
        return self.global_base + "bulk"

    @property
    def open_bulk_jobs(self) -> str:
        """ZSET of the ids of the bulk jobs not finished (queued or running), scored by creation (unix ms):
        what workers poll to carry them out (bulkjobs.py)."""
        return self.global_base + "bulk:open"

    def bulk_job(self, job_id: str) -> str:
        """HASH of one bulk job: what it does, who started it, its progress and its driver's lease; kept
        a week after it finished."""
        return self.global_base + "bulk:" + job_id

    def bulk_job_targets(self, job_id: str) -> str:
        """LIST of the tasks a filtered or failure-group bulk job acts on (``<queue> <task id>``), found
        before it acts, so it acts on exactly that set; deleted when the job finishes."""
        return self.global_base + "bulk:" + job_id + ":targets"

    def legacy_globals(self) -> list[tuple[str, str]]:
        """(old name, name now) of the keys that belonged to no queue before they shared a hash tag
        (``<prefix>:queues`` ... ``<prefix>:audit``): ``upgrade.py`` moves them."""
        return [(f"{self.prefix}:{name}", self.global_base + name)
                for name in ("queues", "servers", "periodic", "alerts", "audit")]

    @property
    def all_pattern(self) -> str:
        """A SCAN pattern matching every key under this prefix."""
        return _escape_glob(self.prefix) + ":*"


def _escape_glob(text: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def stats_day(unix_seconds: float) -> str:
    """The stats field suffix of a UTC day: ``YYYY-MM-DD``."""
    return _stats_minute(int(unix_seconds // 60))[:10]


def stats_minute(unix_seconds: float) -> str:
    """The stats field suffix of a UTC minute: ``YYYY-MM-DDTHH:MM``."""
    return _stats_minute(int(unix_seconds // 60))


@lru_cache(maxsize=4)
def _stats_minute(minute: int) -> str:  # called per acknowledgement batch: formatted once a minute
    return time.strftime("%Y-%m-%dT%H:%M", time.gmtime(minute * 60))
