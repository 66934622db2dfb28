"""Failures grouped by what went wrong: the fingerprint of a task's last error.

A fingerprint is the exception type, its message with the parts that vary from task to task taken
out (numbers, ids, quoted values, addresses), and the handler's own frame (the outermost frame of
the traceback, which ``outcome.format_error`` writes without the worker's frames; file and function,
not the line, so an edit elsewhere in the file does not split a group; queuecore's own frames are
passed over). Tasks in the retry and
archived lists whose last errors share a fingerprint form a group: how many, first and last seen,
the task types and queues, and the tasks themselves, so an operator can run, archive or delete
them as one.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from queuecore.core.errors import TaskDecodeError
from queuecore.core.hashreads import read_task_fields
from queuecore.core.keys import Keys
from queuecore.core.message import TaskMessage, ms_to_datetime

FAILURE_STATES = ("retry", "archived")
GROUP_ACTIONS = ("run", "archive", "delete")  # what an operator may do to a whole group
# The tasks of a group each action takes, by state: an archived task has nothing to archive.
GROUP_ACTION_STATES = {"run": FAILURE_STATES, "archive": ("retry",), "delete": FAILURE_STATES}
SCAN_LIMIT = 10_000  # newest tasks read per queue and state; beyond, a report says it is partial
MESSAGE_CHARS = 200  # of a normalised message
# queuecore's own frames: the core, and the Django app's modules wrapped around every handler (the
# middleware that closes database connections): never the handler's frame.
_OWN_FRAME = re.compile(r"/queuecore/(?:core/[^/]+|[^/]+\.py)$")

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line \d+, in (?P<func>.+)$', re.MULTILINE)
# Order matters: the specific shapes first, then what is left of them.
_VARYING = [
    (re.compile(r"(?<!\w)'[^'\n]*'(?!\w)"), "'…'"),  # a quoted value, not the apostrophe of "can't"
    (re.compile(r'"[^"\n]*"'), '"…"'),
    (re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"), "<uuid>"),
    (re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"), "<address>"),
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), "<hex>"),
    (re.compile(r"\b(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{8,}\b"), "<id>"),
    (re.compile(r"\d+(?:\.\d+)?"), "<n>"),
]


@dataclass(frozen=True)
class Fingerprint:
    """What identifies a kind of failure; ``key`` is its short stable id (used in URLs and the CLI)."""

    error_type: str
    message: str  # normalised
    frame: str  # "<file>:<function>" of the handler's frame; "" without a traceback

    @property
    def key(self) -> str:
        digest = hashlib.blake2s(f"{self.error_type}\0{self.message}\0{self.frame}".encode(), digest_size=6)
        return digest.hexdigest()


def normalise_message(message: str) -> str:
    """``message`` with what varies between occurrences replaced by placeholders."""
    for pattern, placeholder in _VARYING:
        message = pattern.sub(placeholder, message)
    message = " ".join(message.split())
    return message if len(message) <= MESSAGE_CHARS else message[:MESSAGE_CHARS - 1] + "…"


def fingerprint(error_text: str) -> Fingerprint:
    """The fingerprint of a stored error (``Type: message`` then the traceback, as the worker writes it)."""
    head = error_text.split("\n", 1)[0].strip()
    error_type, sep, message = head.partition(": ")
    if not sep and " " in error_type:  # no "Type: " head: a free-form error recorded by the core
        error_type, message = "", head
    # the outermost frame that is not queuecore's own (the worker's way into the handler, as written
    # by any version, wherever it was installed)
    frames = [(path, func) for path, func in _FRAME.findall(error_text)
              if not _OWN_FRAME.search(path.replace("\\", "/"))]
    frame = ""
    if frames:
        path, function = frames[0]
        frame = f"{path.replace(chr(92), '/').rsplit('/', 1)[-1]}:{function.strip()}"
    return Fingerprint(error_type, normalise_message(message), frame)


@dataclass(frozen=True)
class FailedTask:
    queue: str
    state: str
    id: str
    type: str
    failed_at: datetime | None


@dataclass
class FailureGroup:
    """The failed tasks (retry and archived) whose last errors share one fingerprint."""

    fingerprint: Fingerprint
    example: str  # the first line of one of its errors, as written
    tasks: list[FailedTask] = field(default_factory=list)

    @property
    def key(self) -> str:
        return self.fingerprint.key

    @property
    def count(self) -> int:
        return len(self.tasks)

    @property
    def first_seen(self) -> datetime | None:
        times = [t.failed_at for t in self.tasks if t.failed_at]
        return min(times) if times else None

    @property
    def last_seen(self) -> datetime | None:
        times = [t.failed_at for t in self.tasks if t.failed_at]
        return max(times) if times else None

    @property
    def queues(self) -> list[str]:
        return sorted({t.queue for t in self.tasks})

    @property
    def types(self) -> list[str]:
        return sorted({t.type for t in self.tasks})

    def acted_on(self, action: str) -> int:
        """How many of its tasks ``action`` (one of ``GROUP_ACTIONS``) would take."""
        states = GROUP_ACTION_STATES[action]
        return sum(1 for t in self.tasks if t.state in states)

    def by_state(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for t in self.tasks:
            counts[t.state] = counts.get(t.state, 0) + 1
        return counts

    def to_dict(self, tasks: int = 0) -> dict[str, Any]:
        """A JSON-ready dict; with ``tasks``, up to that many of its tasks (newest first)."""
        first, last = self.first_seen, self.last_seen
        return {"key": self.key, "error_type": self.fingerprint.error_type, "message": self.fingerprint.message,
                "frame": self.fingerprint.frame, "example": self.example, "count": self.count,
                "by_state": self.by_state(), "queues": self.queues, "types": self.types,
                "first_seen": first.isoformat() if first else None, "last_seen": last.isoformat() if last else None,
                "tasks": [{"queue": t.queue, "state": t.state, "id": t.id, "type": t.type,
                           "failed_at": t.failed_at.isoformat() if t.failed_at else None}
                          for t in self.newest(tasks)]}

    def newest(self, n: int) -> list[FailedTask]:
        return sorted(self.tasks, key=lambda t: t.failed_at.timestamp() if t.failed_at else 0, reverse=True)[:n]


@dataclass
class FailureReport:
    """Every group, the most tasks first; ``scanned_all`` False when a list was longer than the scan."""

    groups: list[FailureGroup]
    scanned: int
    scanned_all: bool

    def group(self, key: str) -> FailureGroup | None:
        return next((g for g in self.groups if g.key == key), None)

    def of_type(self, type_name: str) -> FailureReport:
        """The same report with only the tasks of ``type_name`` (groups left without any dropped)."""
        groups = []
        for g in self.groups:
            tasks = [t for t in g.tasks if t.type == type_name]
            if tasks:
                groups.append(FailureGroup(g.fingerprint, g.example, tasks))
        return FailureReport(sorted(groups, key=lambda g: (-g.count, g.key)), self.scanned, self.scanned_all)


def read_failures(client: Any, keys: Keys, queues: Iterable[str], limit: int = SCAN_LIMIT) -> FailureReport:
    """Group the newest ``limit`` tasks of each queue's retry and archived lists by fingerprint; an
    archived task with no error (an operator archived it before it ever failed) is in no group."""
    groups: dict[str, FailureGroup] = {}
    scanned, complete = 0, True
    for queue in queues:
        q = keys.queue(queue)
        for state in FAILURE_STATES:
            ids: Sequence[str] = client.zrevrange(q.state_key(state), 0, limit - 1)
            if len(ids) == limit and client.zcard(q.state_key(state)) > limit:
                complete = False
            # The whole message, for its type only: a hash field has no partial read (HSTRLEN, no GETRANGE).
            rows = read_task_fields(client, [q.task(task_id) for task_id in ids], ("msg", "error", "failed_at"))
            for task_id, (msg, error, failed_at) in zip(ids, rows, strict=True):
                if msg is None or not error:
                    continue  # deleted between the two reads, or archived by an operator before it failed
                scanned += 1
                try:
                    type_name = TaskMessage.decode(task_id, queue, msg).type
                except TaskDecodeError:
                    type_name = "?"
                text = error
                found = fingerprint(text)
                group = groups.get(found.key)
                if group is None:
                    group = groups[found.key] = FailureGroup(found, text.split("\n", 1)[0][:300])
                group.tasks.append(FailedTask(queue, state, task_id, type_name, ms_to_datetime(failed_at)))
    ordered = sorted(groups.values(), key=lambda g: (-g.count, g.key))
    return FailureReport(ordered, scanned, complete)

