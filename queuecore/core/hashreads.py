"""Reads of many task hashes (the Inspector's lists, scans and exports, failure groups, the overdue
alert rule) in pipelines bounded in bytes: Redis copies a pipeline's replies into that client's output
buffer while it answers it, and every other client waits meanwhile (500 tasks of 500 KB in one
pipeline: 250 MB, and another client's PING waited 90 ms)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from queuecore.core.limits import CALL_BYTES

READ_BATCH = 500  # task hashes per pipeline, at most, however small


def read_task_fields(client: Any, keys: Sequence[str], fields: Sequence[str], sized: Sequence[str] = ("msg",),
                     *, raise_on_error: bool = True) -> list[Any]:
    """The HMGET of ``fields`` of each task HASH of ``keys``, in order (with ``raise_on_error`` False, an
    error reply in place of a row, as ``Pipeline.execute``).

    Read in pipelines that ask for at most ``CALL_BYTES`` of the fields ``sized`` (their lengths read
    first, ``READ_BATCH`` HSTRLENs a pipeline: O(1) each, a few bytes of reply), and at most
    ``READ_BATCH`` hashes: a task larger than ``CALL_BYTES`` is read alone. The other fields must be
    small (an error is at most a few KB). A field that changes between the two reads only moves the
    batch's boundary: each row is one HMGET, as before."""
    out: list[Any] = []
    for start in range(0, len(keys), READ_BATCH):
        part = keys[start:start + READ_BATCH]
        sizes = [0] * len(part)
        if sized:
            pipe = client.pipeline(transaction=False)
            for key in part:
                for name in sized:
                    pipe.hstrlen(key, name)
            lengths = pipe.execute(raise_on_error=False)  # a key of another type: its HMGET says so below
            sizes = [sum(n for n in lengths[i * len(sized):(i + 1) * len(sized)] if isinstance(n, int))
                     for i in range(len(part))]
        first, total = 0, 0
        for i, size in enumerate(sizes):
            if i > first and total + size > CALL_BYTES:
                out += _hmget_all(client, part[first:i], fields, raise_on_error)
                first, total = i, 0
            total += size
        out += _hmget_all(client, part[first:], fields, raise_on_error)
    return out


def _hmget_all(client: Any, keys: Sequence[str], fields: Sequence[str], raise_on_error: bool) -> list[Any]:
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.hmget(key, fields)
    replies: list[Any] = pipe.execute(raise_on_error=raise_on_error)
    return replies
