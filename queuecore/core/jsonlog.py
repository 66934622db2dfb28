"""Structured logs: ``JsonFormatter`` writes each log record as one JSON object on one line.

The worker's per-task records carry ``qc_*`` attributes (``recorder.py``): ``qc_task_id``,
``qc_queue``, ``qc_type``, ``qc_attempt``, ``qc_action`` (what was written: ``retry``,
``archive``, ...), ``qc_outcome`` (``success``, ``error``, ``timeout``, ``cancelled``, ...) and
``qc_duration`` (seconds the handler ran). They become the fields ``task_id``, ``queue``, ``type``,
``attempt``, ``action``, ``outcome`` and ``duration``; every record also has ``ts`` (ISO 8601, UTC),
``level``, ``logger``, ``message``, ``pid``, and ``exc`` when it carries a traceback.
``runworker --log-format json`` (or ``QUEUECORE['LOG_FORMAT'] = "json"``) installs it.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

PREFIX = "qc_"


class JsonFormatter(logging.Formatter):
    """One JSON object per record; never raises on odd values (they are written as ``repr``)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        for name, value in record.__dict__.items():
            if name.startswith(PREFIX):
                out[name[len(PREFIX):]] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exc"] = record.exc_text
        return json.dumps(out, default=repr)  # ASCII: valid JSON (and UTF-8) whatever the stream's encoding


def install(level: int = logging.INFO) -> None:
    """Make every log line JSON: the root logger gets a stderr handler if it has none; the handlers
    of the root and ``queuecore`` loggers (a site's ``LOGGING`` may give them their own), and every
    other logger's handlers that write to stderr or stdout (Django's ``console`` handler, which
    writes the ``django`` loggers' records with ``DEBUG`` on), get a ``JsonFormatter``."""
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(logging.StreamHandler())
        root.setLevel(level)
    for name, logger in [("", root), *logging.root.manager.loggerDict.items()]:
        if not isinstance(logger, logging.Logger):
            continue
        ours = name in ("", "queuecore") or name.startswith("queuecore.")
        for handler in logger.handlers:
            if ours or _writes_to_the_terminal(handler):
                handler.setFormatter(JsonFormatter())


def _writes_to_the_terminal(handler: logging.Handler) -> bool:
    return (isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler)
            and getattr(handler, "stream", None) in (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__))
