"""The one watch loop (``stats --watch``): fetch once per interval, redraw in place.

On a terminal it drives a ``rich.live.Live`` with ``auto_refresh=False`` and calls
``update(render(snapshot), refresh=True)`` once per fetch, so the screen changes exactly when the
data does (no clear-and-sleep). When stdout is not a terminal (or ``--json`` was given) it writes
one JSON object per line per interval instead. Ctrl-C (SIGINT) and SIGTERM end it cleanly, exit 0.

If Redis stops answering after the first snapshot, the last snapshot stays on screen with the
error under it and the loop keeps trying; a first fetch that fails is an ordinary error.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from rich.console import RenderableType
from rich.live import Live

from queuecore.core.errors import BrokerError

from .terminal import Terminal

T = TypeVar("T")


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """Turn SIGTERM into KeyboardInterrupt while watching, so the terminal is restored either way."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class _Ticker:
    """Sleeps until the next multiple of ``interval`` after the start, so slow fetches do not drift."""

    def __init__(self, interval: float, sleep: Callable[[float], None]) -> None:
        self.interval = interval
        self.sleep = sleep
        self.next = time.monotonic()

    def wait(self) -> None:
        self.next += self.interval
        delay = self.next - time.monotonic()
        if delay < 0:  # fell behind (a slow fetch): start counting again from now
            self.next = time.monotonic()
            delay = 0.0
        self.sleep(delay)


def watch(fetch: Callable[[], T], render: Callable[[T, str | None], RenderableType],
          to_json: Callable[[T], dict[str, Any]], *, terminal: Terminal, interval: float, json_lines: bool,
          count: int | None = None, sleep: Callable[[float], None] = time.sleep) -> int:
    """Run until Ctrl-C, or ``count`` refreshes; returns the number of refreshes shown.

    ``render(snapshot, problem)`` draws a snapshot, with ``problem`` (an error text) when the latest
    fetch failed. The first ``fetch`` is done before anything is drawn, so its errors propagate.
    """
    shown = 0
    ticker = _Ticker(interval, sleep)
    try:
        with _sigterm_interrupts():
            snapshot = fetch()
            if json_lines:
                latest: T | None = snapshot
                while True:
                    if latest is not None:
                        terminal.json(to_json(latest), compact=True)
                        shown += 1
                        if count is not None and shown >= count:
                            break
                    ticker.wait()
                    try:
                        latest = fetch()
                    except BrokerError as exc:
                        terminal.warning(f"{exc} (retrying every {interval:g}s)")
                        latest = None
            else:
                problem: str | None = None
                with Live(console=terminal.out, auto_refresh=False, transient=False, redirect_stdout=False,
                          redirect_stderr=False) as live:
                    while True:
                        live.update(render(snapshot, problem), refresh=True)
                        shown += 1
                        if count is not None and shown >= count:
                            break
                        ticker.wait()
                        try:
                            snapshot = fetch()
                            problem = None
                        except BrokerError as exc:
                            problem = f"{time.strftime('%H:%M:%S')} {exc} (showing the last good data; retrying)"
    except KeyboardInterrupt:
        pass
    return shown
