"""Human units and safe text: durations, sizes, counts, ages, escaping and truncation.

Everything shown to an operator that came from Redis (payloads, errors, type and queue names) is
user data: it goes through ``escape`` so that control characters (an ANSI escape sequence in a
payload, a bidi override in a type name) are shown as escapes instead of acting on the terminal.
"""

from __future__ import annotations

import json
import math
import re
from datetime import datetime
from typing import Any

from queuecore.core.text import percent_text

_BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f"
_UNSAFE = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f{_BIDI}]")
_UNSAFE_KEEP_LINES = re.compile(f"[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f{_BIDI}]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(match: re.Match[str]) -> str:
    ch = match.group(0)
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape(text: Any, *, keep_newlines: bool = False) -> str:
    """``text`` with control and bidi-override characters written as escapes (``\\n``, ``\\x1b``).

    ``keep_newlines`` leaves newlines and tabs alone (for multi-line text shown whole).
    """
    value = text if isinstance(text, str) else str(text)
    pattern = _UNSAFE_KEEP_LINES if keep_newlines else _UNSAFE
    return pattern.sub(_escape_char, value)


def truncate(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, ending with an ellipsis when cut."""
    if limit < 1:
        return ""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def compact_json(value: Any) -> str:
    """One-line JSON, non-ASCII kept (and then escaped by ``escape`` where it is unsafe)."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)
    except (TypeError, ValueError):
        return repr(value)


def pretty_json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, indent=2, default=str)
    except (TypeError, ValueError):
        return repr(value)


def one_line(text: str, limit: int) -> str:
    """Escaped and truncated: the form of user data in a table cell."""
    return truncate(escape(text), limit)


def first_line(text: str | None) -> str:
    """The first non-empty line of an error (its ``Type: message``), without the traceback."""
    if not text:
        return ""
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def human_duration(seconds: float | None) -> str:
    """``850ms``, ``12s``, ``3m 4s``, ``2h 5m``, ``3d 4h``; ``-`` when unknown."""
    if seconds is None or (isinstance(seconds, float) and not math.isfinite(seconds)):
        return "-"
    seconds = max(0.0, float(seconds))
    if seconds < 1:
        return f"{int(seconds * 1000)}ms"
    if seconds < 10:
        return f"{seconds:.1f}s"
    total = int(seconds)
    if total < 60:
        return f"{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes}m {secs}s" if secs else f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h {minutes}m" if minutes else f"{hours}h"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h" if hours else f"{days}d"


def human_bytes(size: int | float | None) -> str:
    """``512 B``, ``1.5 KiB``, ``12.3 MiB``; ``-`` when unknown."""
    if size is None:
        return "-"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover - the loop always returns


def human_count(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


percent = percent_text  # one rule for the dashboard and the CLI (queuecore.core.text)


def ago(when: datetime | None, now: float) -> str:
    """``3m ago`` or ``in 5m`` relative to ``now`` (unix seconds)."""
    if when is None:
        return "-"
    delta = now - when.timestamp()
    if abs(delta) < 1:
        return "now"
    return f"{human_duration(delta)} ago" if delta > 0 else f"in {human_duration(-delta)}"


def timestamp(when: datetime | None, now: float) -> str:
    """ISO time (UTC, to the second) followed by the relative time: ``2024-05-01 12:00:03Z (3m ago)``."""
    if when is None:
        return "-"
    return f"{when.strftime('%Y-%m-%d %H:%M:%SZ')} ({ago(when, now)})"
