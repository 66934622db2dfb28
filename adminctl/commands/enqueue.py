"""``adminctl enqueue TYPE``: put a task on a queue by hand."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, BinaryIO

import click

from queuecore.core.errors import InvalidPayload
from queuecore.core.limits import MAX_PAYLOAD_DEPTH
from queuecore.core.operator_enqueue import enqueue_checked

from ..app import App
from ..fmt import ago, escape
from ..options import Duration, json_option


def _utf8(raw: bytes, source: str) -> str:
    try:
        return raw.decode("utf-8-sig")  # JSON is UTF-8; a byte-order mark some editors write is dropped
    except UnicodeDecodeError as exc:
        raise InvalidPayload(f"{source} is not UTF-8 text (byte {exc.start}: {raw[exc.start:exc.start + 1]!r})") \
            from None


TEXT_PER_PAYLOAD_BYTE = 4  # JSON text read per byte of payload the connection takes: the text may be indented


def _read_bounded(stream: BinaryIO, source: str, max_payload_bytes: int) -> bytes:
    """At most ``TEXT_PER_PAYLOAD_BYTE`` times ``max_payload_bytes`` of ``stream``: more (an export given by
    mistake, /dev/zero) is refused, not read whole."""
    most = TEXT_PER_PAYLOAD_BYTE * max_payload_bytes
    raw = stream.read(most + 1)
    if len(raw) > most:
        raise InvalidPayload(f"{source} is over {most:,} bytes: no payload of at most {max_payload_bytes:,} "
                             "bytes (the connection's max_payload_bytes) is written that long")
    return raw


def parse_payload(text: str | None, max_payload_bytes: int) -> dict[str, Any] | None:
    """The ``--payload`` value: JSON text, ``@file.json``, or ``-`` for stdin (of a bounded length)."""
    if text is None:
        return None
    source = "--payload"
    if text == "-":
        text, source = _utf8(_read_bounded(sys.stdin.buffer, "stdin", max_payload_bytes), "stdin"), "stdin"
    elif text.startswith("@"):
        path = Path(text[1:])
        name = f"the payload file {str(path)!r}"
        try:
            with path.open("rb") as stream:
                raw = _read_bounded(stream, name, max_payload_bytes)
        except OSError as exc:
            raise InvalidPayload(f"cannot read the payload file {str(path)!r}: {exc.strerror}") from None
        text, source = _utf8(raw, name), str(path)
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise InvalidPayload(f"the payload ({source}) is not valid JSON: {exc}") from None
    except RecursionError:
        raise InvalidPayload(f"the payload ({source}) is nested too deeply (at most {MAX_PAYLOAD_DEPTH} levels)") \
            from None
    if not isinstance(value, dict):
        raise InvalidPayload(f"the payload must be a JSON object of argument names, not {type(value).__name__}")
    return value


@click.command()
@click.argument("type_name", metavar="TYPE")
@click.option("--payload", "-p", metavar="JSON", help="The task's arguments as a JSON object; @FILE reads a file, "
                                                    "- reads stdin. [default: {}]")
@click.option("--queue", "-q", "queue_name", metavar="QUEUE", default="default", show_default=True)
@click.option("--process-in", type=Duration(), metavar="S", help="Run after this long (e.g. 30, 90s, 5m, 2h).")
@click.option("--max-retry", type=int, metavar="N", help="Retries after the first attempt (negative: forever).")
@click.option("--timeout", type=Duration(minimum=0, minimum_open=True), metavar="S",
              help="How long one attempt may run.")
@click.option("--unique", "unique_for", type=Duration(minimum=0, minimum_open=True), metavar="S",
              help="Refuse another task of the same type, payload and queue for this long.")
@click.option("--task-id", metavar="ID", help="Your own id (letters, digits, _ . : -); must not exist yet.")
@click.option("--retention", type=Duration(), metavar="S", help="Keep the completed task and its result this long.")
@click.option("--force", is_flag=True,
              help="Enqueue even when no live worker would run the task (no worker running, none serving the "
                   "queue, none handling TYPE, or arguments that fit no worker's handler).")
@json_option
@click.pass_obj
def enqueue(app: App, type_name: str, payload: str | None, queue_name: str, process_in: float | None,
            max_retry: int | None, timeout: float | None, unique_for: float | None, task_id: str | None,
            retention: float | None, force: bool) -> None:
    """Enqueue a task of TYPE and print its id.

    With --json, prints the whole new task instead.

    The task is checked against what the live workers publish with their
    heartbeats (the task types they handle and their parameter names): it
    is refused when no worker is running, none serves the queue, none of
    those handles TYPE, or the payload's argument names fit none of their
    handlers. --force enqueues it anyway (say, before the workers that
    will run it are started). Exit code 1 for such a refusal, bad payload
    JSON, an option out of range, a duplicate --unique task or a taken
    --task-id.

    \b
    Examples:
      adminctl enqueue demo.noop
      adminctl enqueue billing.sync --force        # before any worker runs
      adminctl enqueue emails.send --payload '{"user_id": 7}' --queue critical
      adminctl enqueue reports.build --payload @report.json --process-in 10m
      adminctl enqueue billing.sync --unique 1h --max-retry 3 --timeout 2m
      echo '{"n": 1}' | adminctl enqueue demo.echo --payload - --json
    """
    options: dict[str, Any] = {"queue": queue_name, "process_in": process_in, "max_retry": max_retry,
                               "timeout": timeout, "unique_for": unique_for, "task_id": task_id,
                               "retention": retention}
    options = {k: v for k, v in options.items() if v is not None}
    body = parse_payload(payload, app.connection.max_payload_bytes)
    done = enqueue_checked(app.client, app.inspector, type_name, body, force=force,
                           refused_hint=" (--force enqueues it anyway)", **options)
    if done.forced:
        app.terminal.warning(f"enqueued anyway (--force): {done.forced}")
    for warning in done.warnings:
        app.terminal.warning(warning)
    info = done.task
    if app.json:
        app.terminal.json(info.to_dict())
        return
    app.terminal.line(info.id)
    when = f", due {ago(info.next_process_at, info.enqueued_at.timestamp())}" if info.state.value == "scheduled" \
        and info.next_process_at and info.enqueued_at else ""
    app.terminal.success(f"enqueued {escape(info.type)} in queue {escape(info.queue)} ({info.state.value}{when})")
