"""Demo tasks of the bundled site, under fixed type names: demo.noop, demo.sleep, demo.fail, demo.echo."""

from __future__ import annotations

import time
from typing import Any

from queuecore import current_task, task


@task(name="demo.noop")
def noop() -> None:
    """Do nothing."""


@task(name="demo.sleep")
def sleep(seconds: float = 1.0) -> float:
    """Sleep for ``seconds`` in short steps, stopping early when cancelled."""
    ctx = current_task()
    deadline = time.monotonic() + float(seconds)
    while (left := deadline - time.monotonic()) > 0:
        if ctx.wait_cancelled(min(left, 0.1)):
            ctx.raise_if_cancelled()
    return float(seconds)


class DemoFailure(Exception):
    """The error demo.fail raises."""


@task(name="demo.fail", max_retry=3)
def fail(succeed_on: int | None = None, message: str = "demo failure") -> int:
    """Fail until attempt ``succeed_on`` (1 = the first attempt), or on every attempt when it is None."""
    attempt = current_task().retried + 1
    if succeed_on is None or attempt < int(succeed_on):
        raise DemoFailure(f"{message} (attempt {attempt})")
    return attempt


@task(name="demo.echo")
def echo(**payload: Any) -> dict[str, Any]:
    """Return the payload as the result (kept when the task has a retention)."""
    return payload
