"""A task's attempt history: its last ``ATTEMPT_HISTORY`` attempts, kept in its hash (``attempts``).

Each attempt is one line of JSON, newest first. The script that records how an attempt ended
(``done`` for a task kept after success, ``retry``, ``archive``, ``recover`` for an attempt whose
worker was lost) puts the line in front and trims the field to ``ATTEMPT_HISTORY`` lines and
``ATTEMPT_HISTORY_BYTES`` bytes, so a task that fails forever keeps a bounded history. The worker
builds the line; ``parse_attempts`` reads the field back into ``AttemptInfo``s, oldest first.

A line: ``{"attempt": n, "worker": "<server id>", "started_at": ms, "ended_at": ms, "result": r,
"error": "Type: message", "error_type": "module.Class"}`` with ``result`` one of ``completed``,
``retry`` (failed, to run again), ``archived`` (failed for good, or cancelled); ``started_at`` is
when the handler started (absent when it never started), a lost attempt has ``fetched_at`` (when
its worker fetched it) and no worker, and ``error_type`` is the class path of a failed attempt's
error (absent when the core ended it for a reason of its own). Times are unix ms.

Pure: imports only the standard library, ``message`` and ``text``.
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any

from queuecore.core.message import AttemptInfo, ms_to_datetime
from queuecore.core.text import error_message

ATTEMPT_HISTORY = 10  # attempts kept per task, newest first
ATTEMPT_HISTORY_BYTES = 8192  # at most this many bytes of history per task (older lines dropped first)
ATTEMPT_ERROR_CHARS = 300  # of an attempt's error, the first line is kept, cut to this many characters
ATTEMPT_LINE_ERROR_CHARS = ATTEMPT_ERROR_CHARS + 80  # what a history line keeps of it (a little more)
_WORKER_CHARS = 200

RESULTS = ("completed", "retry", "archived")


def one_line(text: str, limit: int) -> str:
    """``text`` on one line: its first non-empty line, control characters shown as ``\\xNN`` escapes
    (an error message is user data: it must not forge a log line or move a terminal's cursor), cut
    to ``limit`` characters with an ellipsis."""
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    if any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in line):
        line = "".join(c if unicodedata.category(c) not in ("Cc", "Cf", "Zl", "Zp") else repr(c)[1:-1]
                       for c in line)
    return line if len(line) <= limit else line[: limit - 1] + "…"


def error_summary(error: BaseException | None) -> str | None:
    """``Type: first line of the message``, on one line and cut (``None`` for no error)."""
    if error is None:
        return None
    message = one_line(error_message(error), ATTEMPT_ERROR_CHARS)
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def attempt_line(*, number: int, worker: str, result: str, ended_ms: int, started_ms: int | None = None,
                 fetched_ms: int | None = None, error: str | None = None, error_type: str | None = None) -> str:
    """One attempt as the JSON line the scripts store (compact, on one line, bounded)."""
    entry: dict[str, Any] = {"attempt": number, "worker": worker[:_WORKER_CHARS], "result": result}
    if started_ms is not None:
        entry["started_at"] = started_ms
    elif fetched_ms is not None:
        entry["fetched_at"] = fetched_ms
    entry["ended_at"] = ended_ms
    if error:
        entry["error"] = one_line(error, ATTEMPT_LINE_ERROR_CHARS)
    if error_type:
        entry["error_type"] = error_type[:_WORKER_CHARS]
    return json.dumps(entry, separators=(",", ":"), ensure_ascii=False)


def parse_attempts(text: str | None) -> list[AttemptInfo]:
    """The ``attempts`` field as ``AttemptInfo``s, oldest first; a malformed line is skipped."""
    if not text:
        return []
    out = []
    for line in reversed(text.split("\n")):
        try:
            d = json.loads(line)
            out.append(AttemptInfo(
                number=int(d["attempt"]), result=str(d["result"]), error=_opt_str(d.get("error")),
                worker=_opt_str(d.get("worker")), started_at=ms_to_datetime(d.get("started_at")),
                ended_at=ms_to_datetime(d.get("ended_at")), fetched_at=ms_to_datetime(d.get("fetched_at")),
                error_type=_opt_str(d.get("error_type"))))
        except (ValueError, KeyError, TypeError, OverflowError, OSError):
            continue
    return out


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)
