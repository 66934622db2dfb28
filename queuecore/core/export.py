"""A task list written out for other tools: JSON Lines (every field, as ``TaskInfo.to_dict``) or CSV
(one row per task, the columns an operator sorts and filters in a spreadsheet). Both are generators
of text lines, so a caller streams a list of any length without holding it."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Iterator

from queuecore.core.message import TaskInfo, dumps

FORMATS = ("jsonl", "csv")
CSV_COLUMNS = ("id", "queue", "type", "state", "retried", "max_retry", "enqueued_at", "started_at", "last_failed_at",
               "next_process_at", "completed_at", "archived_at", "worker", "last_error", "payload")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet would run such a cell as a formula


def jsonl_lines(tasks: Iterable[TaskInfo]) -> Iterator[str]:
    """One JSON object per task, each ending with a newline."""
    for info in tasks:
        yield dumps(info.to_dict()) + "\n"


_NUMBER = re.compile(r"[-+]?[0-9]+(?:\.[0-9]+)?")  # a plain number: a spreadsheet reads it as one, no formula


def _cell(value: object) -> str:
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(_FORMULA_START) and not _NUMBER.fullmatch(text) else text


def csv_lines(tasks: Iterable[TaskInfo]) -> Iterator[str]:
    """A header row, then one row per task (RFC 4180 quoting; ``last_error`` is its first line; cells
    that a spreadsheet would read as a formula start with ``'``)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")

    def row(values: Iterable[object]) -> str:
        buffer.seek(0)
        buffer.truncate()
        writer.writerow([_cell(v) for v in values])
        return buffer.getvalue()

    yield row(CSV_COLUMNS)
    for info in tasks:
        data = info.to_dict()
        data["last_error"] = (info.last_error or "").split("\n", 1)[0]
        data["payload"] = dumps(info.payload)
        yield row(data.get(column) for column in CSV_COLUMNS)


def lines(fmt: str, tasks: Iterable[TaskInfo]) -> Iterator[str]:
    """``jsonl_lines`` or ``csv_lines`` by ``fmt``."""
    if fmt == "jsonl":
        return jsonl_lines(tasks)
    if fmt == "csv":
        return csv_lines(tasks)
    raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")


def incomplete_line(fmt: str, error: BaseException) -> str:
    """The last line of an export cut short by ``error`` (Redis gone mid-stream), so that a file that
    was downloaded in full cannot pass for the whole list: a JSON object with ``export_error`` and
    ``complete: false``, or a CSV row whose first cell starts ``# export incomplete:``."""
    message = f"{type(error).__name__}: {error}".strip()
    if fmt == "jsonl":
        return dumps({"export_error": message, "complete": False}) + "\n"
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\r\n").writerow([f"# export incomplete: {message}"])
    return buffer.getvalue()
