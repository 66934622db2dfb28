"""Task handlers for the process-level tests (``tests/core/test_processes.py``).

A plain module: importing it registers the handlers in queuecore's default registry, so a worker
started by ``tests/helpers/worker_proc.py`` can run them. Every handler appends JSON lines to the
log file named by ``configure()`` (or ``$QC_PROC_LOG``), which gives the tests an oracle that does
not live in Redis:

- ``{"event": "start", ...}`` when the handler starts,
- ``{"event": "end", ...}`` when it returns normally,
- ``{"event": "abort", "error": "<exception type>", ...}`` when it raises (for example when a
  shutdown interrupts it).

Each line also carries the task ``id``, the ``attempt`` (``current_task().retried``), the worker
``pid`` and the wall-clock time ``t``. Lines are written with one ``write`` call on a file opened in
append mode, so concurrent handlers (and processes) never interleave within a line.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from typing import Any

from queuecore import current_task, task

STEP = 0.02  # seconds per sleep step: short, so an interrupt lands quickly

_log_path: str | None = None


def configure(log_path: str) -> None:
    """Write handler events to ``log_path``."""
    global _log_path
    _log_path = log_path


def record(event: str, **extra: Any) -> None:
    """Append one event line for the running task."""
    path = _log_path or os.environ.get("QC_PROC_LOG")
    if not path:
        raise RuntimeError("proc_tasks: no log file configured")
    ctx = current_task()
    line = json.dumps({"id": ctx.id, "attempt": ctx.retried, "pid": os.getpid(), "event": event,
                       "t": time.time(), **extra})
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()


class _logged:
    """Log start, then end (normal return) or abort (any exception, which is re-raised)."""

    def __init__(self, **extra: Any) -> None:
        self.extra = extra

    def __enter__(self) -> None:
        record("start", **self.extra)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if exc_type is None:
            record("end", **self.extra)
        else:
            record("abort", error=exc_type.__name__, **self.extra)


@task(name="proc.sleep")
def sleep(seconds: float, tag: str = "") -> None:
    """Sleep ``seconds`` in small steps."""
    with _logged(tag=tag):
        until = time.monotonic() + seconds
        while True:
            left = until - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(STEP, left))


@task(name="proc.noop")
def noop(tag: str = "") -> None:
    """Do nothing (but log it)."""
    with _logged(tag=tag):
        pass


@task(name="proc.limited", concurrency_limit=2)
def limited(seconds: float = 0.05, tag: str = "") -> None:
    """Sleep ``seconds``; at most 2 run at once across every worker (``tests/reliability/test_limits_processes.py``)."""
    with _logged(tag=tag):
        time.sleep(seconds)


@task(name="proc.limited_gate", concurrency_limit=1)
def limited_gate(path: str, tag: str = "") -> None:
    """As ``proc.gate`` (wait until the file ``path`` exists), with at most 1 running at once anywhere."""
    with _logged(tag=tag):
        while not os.path.exists(path):
            time.sleep(STEP)


@task(name="proc.rated", rate_limit="20/s")
def rated(tag: str = "") -> None:
    """Do nothing (but log it); at most 20 start per second across every worker."""
    with _logged(tag=tag):
        pass


@task(name="proc.block")
def block(tag: str = "") -> None:
    """Block forever in small sleeps: only an interrupt (shutdown, cancel, timeout) ends it."""
    with _logged(tag=tag):
        while True:
            time.sleep(STEP)


@task(name="proc.async_to_thread_block")
async def async_to_thread_block(tag: str = "") -> None:
    """An async handler blocked in ``asyncio.to_thread`` on a wait that never ends: a shutdown can
    cancel the coroutine, not the thread."""
    with _logged(tag=tag):
        await asyncio.to_thread(threading.Event().wait)


@task(name="proc.pause_once")
def pause_once(path: str, tag: str = "") -> None:
    """The first run (the one that creates the file ``path``) stops its own process with SIGSTOP and
    returns once it is continued: the test decides how long the worker stays frozen, and the worker
    resumes with this handler returning. Any later run returns at once. The stop is sent to this
    thread, so that it stops before the call returns (see ``ack_gap``)."""
    with _logged(tag=tag):
        if not os.path.exists(path):
            with open(path, "x", encoding="utf-8"):
                pass
            signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)


@task(name="proc.busy")
def busy(seconds: float, tag: str = "") -> int:
    """Burn CPU in a pure-Python loop for ``seconds``; returns the number of iterations."""
    with _logged(tag=tag):
        until = time.monotonic() + seconds
        n = 0
        while time.monotonic() < until:
            n += 1
        return n


@task(name="proc.gate")
def gate(path: str, tag: str = "") -> None:
    """Wait (in small sleeps) until the file ``path`` exists: lets a test decide when a task ends."""
    with _logged(tag=tag):
        while not os.path.exists(path):
            time.sleep(STEP)


@task(name="proc.ack_gap")
def ack_gap(stop: bool = True, tag: str = "") -> str:
    """Log start and end, then (with ``stop``), on the first attempt only, stop this whole process (SIGSTOP) before
    returning: the handler's work is done but its acknowledgement cannot have been written. The test
    then kills the stopped process (``kill -9``), which is a crash between return and ack.

    The stop is sent to this thread (``pthread_kill``): it stops before the call returns. Sent to the
    process (``os.kill``), another thread takes it, and this one usually returns first."""
    with _logged(tag=tag):
        pass
    if stop and current_task().retried == 0:
        record("stopping", tag=tag)
        signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
    return "ok"


@task(name="proc.gate_pid")
def gate_pid(path: str, tag: str = "") -> dict[str, int]:
    """Wait until the file ``path.format(attempt=<retried>)`` exists, then return this process's pid,
    so each attempt has its own gate and the stored result says which process completed the task."""
    with _logged(tag=tag):
        gate_path = path.format(attempt=current_task().retried)
        while not os.path.exists(gate_path):
            time.sleep(STEP)
        return {"pid": os.getpid()}


@task(name="proc.suicide")
def suicide(tag: str = "", how: str = "exit") -> None:
    """Kill this worker process on every attempt: ``os._exit(1)`` (``how="exit"``) or SIGKILL (``"kill"``)."""
    import signal

    record("start", tag=tag)
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(1)


def _quick_retry(retried: int, error: BaseException | None) -> float:
    return 0.2


@task(name="proc.fail", retry_delay=_quick_retry)
def fail(tag: str = "") -> None:
    """Fail every attempt (logged as an abort); retried after 0.2 s until its retries are spent."""
    with _logged(tag=tag):
        raise RuntimeError(f"proc.fail {tag}: fails every time")


@task(name="proc.skip")
def skip(tag: str = "") -> None:
    """Raise SkipRetry: archived at once, never retried."""
    from queuecore import SkipRetry

    with _logged(tag=tag):
        raise SkipRetry(f"proc.skip {tag}: not worth retrying")


@task(name="proc.echo")
def echo(value: Any = None, tag: str = "") -> Any:
    """Return ``value`` (its result, when the task keeps one)."""
    with _logged(tag=tag):
        return value


class ProcError(Exception):
    """The error ``proc.raise`` raises: a class of the handler's own module, found by its path."""


@task(name="proc.raise")
def raise_error(message: str = "boom", tag: str = "") -> None:
    """Raise ``ProcError(message)`` from a nested call, so the traceback has the handler's own frames."""
    with _logged(tag=tag):
        _raise_nested(message)


def _raise_nested(message: str) -> None:
    raise ProcError(message)
