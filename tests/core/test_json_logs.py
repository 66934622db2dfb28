"""Structured logs: JsonFormatter writes one JSON object per record, with the task fields of the
worker's per-task records (task id, type, queue, attempt, duration, outcome)."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from queuecore import task
from queuecore.core.jsonlog import JsonFormatter
from tests.conftest import wait_until

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    """Records of the ``queuecore`` loggers, DEBUG and up, as JSON lines in a buffer."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    log = logging.getLogger("queuecore")
    old_level = log.level
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    yield stream
    log.removeHandler(handler)
    log.setLevel(old_level)


def events(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]  # every line is one JSON object


def test_task_events_carry_id_type_queue_attempt_duration_and_outcome(make_worker, client, registry, json_log):
    @task(name="t.ok", registry=registry)
    def ok() -> None:
        pass

    @task(name="t.boom", registry=registry, max_retry=0)
    def boom() -> None:
        raise ValueError("boom")

    good = client.enqueue(ok, {}, queue="jl")
    bad = client.enqueue(boom, {}, queue="jl")
    make_worker(queues={"jl": 1})

    def task_events() -> list[dict]:
        return [e for e in events(json_log) if "task_id" in e]

    wait_until(lambda: {e["task_id"] for e in task_events()} >= {good.id, bad.id}, timeout=10)
    by_id = {e["task_id"]: e for e in task_events()}
    success, failure = by_id[good.id], by_id[bad.id]
    assert success["type"] == "t.ok" and success["queue"] == "jl" and success["attempt"] == 1
    assert success["outcome"] == "success" and success["level"] == "DEBUG"
    assert isinstance(success["duration"], float) and 0 <= success["duration"] < 5
    assert failure["type"] == "t.boom" and failure["queue"] == "jl" and failure["attempt"] == 1
    assert failure["outcome"] == "failure" and failure["action"] == "archive" and failure["level"] == "WARNING"
    assert isinstance(failure["duration"], float)
    assert "ValueError: boom" in failure["message"]
    for event in events(json_log):  # the common fields of every record
        assert {"ts", "level", "logger", "message", "pid"} <= set(event)
        assert event["logger"].startswith("queuecore")


def test_formatter_writes_exceptions_and_odd_values_on_one_line():
    formatter = JsonFormatter()
    try:
        raise RuntimeError("line one\nline two")
    except RuntimeError:
        record = logging.LogRecord("queuecore.worker", logging.ERROR, __file__, 1, "failed: %s", ("x",),
                                   sys.exc_info())
    record.qc_task_id = "abc"
    record.qc_payload = object()  # not JSON: written as its repr
    line = formatter.format(record)
    assert "\n" not in line
    event = json.loads(line)
    assert event["message"] == "failed: x" and event["task_id"] == "abc" and event["level"] == "ERROR"
    assert event["payload"].startswith("<object object")
    assert "RuntimeError: line one\nline two" in event["exc"]
    assert event["ts"].endswith("+00:00")


@pytest.mark.slow
def test_runworker_log_format_json(redis_url, key_prefix, tmp_path):
    """runworker --log-format json: its stderr is JSON lines (the start-up line included)."""
    import os

    env = dict(os.environ, DJANGO_SETTINGS_MODULE="config.settings", QUEUECORE_REDIS_URL=redis_url,
               QUEUECORE_KEY_PREFIX=key_prefix, QUEUECORE_VAR_DIR=str(tmp_path), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "manage.py", "runworker", "--log-format", "json", "-v", "2",
                             "--metrics-port", "0"],  # its "metrics on ..." line was plain text on stdout
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in proc.stderr:  # reads until the worker announces itself
            lines.append(json.loads(line))
            if "starting" in lines[-1]["message"]:
                break
        assert lines[-1]["logger"] == "queuecore.worker" and lines[-1]["level"] == "INFO"
        (types,) = [line for line in lines if "task_types" in line]
        assert [line["logger"] for line in lines if line["message"].startswith("metrics on http://")] == [
            "queuecore.worker"]
        assert "demo.echo" in types["task_types"] and types["message"].startswith("registered task types: ")
    finally:
        proc.terminate()
        proc.wait(30)
    assert proc.stdout.read() == ""  # nothing but JSON, and all of it on stderr


def test_json_logs_reach_other_libraries_console_handlers() -> None:
    """With ``DEBUG`` on, Django's ``console`` handler writes the ``django`` loggers' records (the
    ``django.tasks`` lines of every task) to stderr in its own format: two lines of seven per task
    were not JSON. Every handler that writes to the terminal gets the JSON formatter; a file
    handler of the site's is left as it is."""
    import os

    from queuecore.core.jsonlog import JsonFormatter, install

    library = logging.getLogger("qct_library")
    console = logging.StreamHandler(sys.stderr)
    into_a_file = logging.FileHandler(os.devnull)
    plain = logging.Formatter("%(message)s")
    console.setFormatter(plain)
    into_a_file.setFormatter(plain)
    library.addHandler(console)
    library.addHandler(into_a_file)
    loggers = logging.root.manager.loggerDict.values()
    every = [logging.getLogger(), *(lg for lg in loggers if isinstance(lg, logging.Logger))]
    before = {handler: handler.formatter for logger in every for handler in logger.handlers}
    root_handlers = list(logging.getLogger().handlers)
    try:
        install()
        assert isinstance(console.formatter, JsonFormatter)
        assert into_a_file.formatter is plain
        console.stream = io.StringIO()
        library.warning("Task id=%s state=%s", "abc", "RUNNING")
        line = json.loads(console.stream.getvalue())
        assert (line["logger"], line["message"]) == ("qct_library", "Task id=abc state=RUNNING")
    finally:
        library.removeHandler(console)
        library.removeHandler(into_a_file)
        into_a_file.close()
        for handler, formatter in before.items():  # the other tests' handlers as they were
            handler.setFormatter(formatter)
        for handler in logging.getLogger().handlers[len(root_handlers):]:
            logging.getLogger().removeHandler(handler)


@pytest.mark.parametrize("encoding", ["latin-1", "ascii"])
def test_a_json_line_is_valid_whatever_the_stream_s_encoding(encoding: str) -> None:
    """A review: with a non-UTF-8 stderr, "é" was written as the byte 0xE9 (latin-1: not UTF-8) or as
    Python's backslash escape ``\\xe9`` (ascii: not a JSON escape); a lone surrogate from user text was
    an encoding error, and the record was lost."""
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding=encoding, errors="backslashreplace")
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    log = logging.getLogger(f"queuecore.test-encoding-{encoding}")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("café %s", "\ud800")
    finally:
        log.removeHandler(handler)
    stream.flush()
    line = raw.getvalue().decode("utf-8").strip()
    assert json.loads(line)["message"] == "café \ud800"
