"""Workers on hosts whose clocks disagree: each keeps Redis's time (``RedisTimeClock``), so a worker
whose clock runs ahead does not take back a task whose lease is still being renewed elsewhere."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from queuecore import Client, task
from queuecore.core.clock import RedisTimeClock
from tests.conftest import wait_until

SKEW = 10.0  # seconds this "host" runs ahead: well past lease_duration - heartbeat_interval


class AheadClock:
    """A wall clock SKEW seconds fast, as on a host whose NTP is broken (not corrected)."""

    def now(self) -> float:
        return time.time() + SKEW


def run_with_a_second_worker(make_worker, registry, client: Client, second_clock) -> list[str]:
    """Worker B (a right clock) runs a task for 1.5 s (its 2 s lease renewed meanwhile) while worker A,
    with ``second_clock``, recovers every 0.3 s; returns the server ids of the attempts that started."""
    starts: list[str] = []
    lock = threading.Lock()
    release = threading.Event()

    @task(name="t.long", registry=registry)
    def long() -> None:
        from queuecore import current_task

        with lock:
            starts.append(current_task().worker_id)
        release.wait(1.5)

    first = make_worker(queues="default", concurrency=1)
    info = client.enqueue("t.long", retention=60)
    wait_until(lambda: starts, 10, message="the first attempt")
    make_worker(queues="default", concurrency=1, clock=second_clock)
    try:
        wait_until(lambda: client.results.read("default", info.id).state in ("completed", "archived")
                   or len(starts) > 1, 15, message="the task to finish or run again")
    finally:
        release.set()
    assert starts[0] == first.server_id
    return starts


def test_a_host_clock_running_ahead_is_corrected_to_redis_time(make_worker, registry, client,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="queuecore.worker"):
        starts = run_with_a_second_worker(make_worker, registry, client,
                                          RedisTimeClock(base=lambda: time.time() + SKEW))
    assert len(starts) == 1  # its lease was renewed: nobody took it back
    assert any(f"this host's clock is {SKEW:.1f} s ahead of Redis's" in r.getMessage() for r in caplog.records)


def test_without_the_correction_the_clock_ahead_steals_a_live_task(make_worker, registry, client) -> None:
    """The control: the same setup with the fast clock used as it is takes the task back while it
    runs, so it runs twice (what the correction prevents)."""
    starts = run_with_a_second_worker(make_worker, registry, client, AheadClock())
    assert len(starts) == 2 and starts[1] != starts[0]


def test_the_offset_moves_only_beyond_the_tolerance() -> None:
    now = [1000.0]
    clock = RedisTimeClock(base=lambda: now[0], tolerance=0.25)
    assert clock.align(lambda: 1000.1) == 0.0  # within tolerance: the host's time is kept
    assert clock.align(lambda: 990.0) == -10.0 and clock.now() == 990.0
    assert clock.align(lambda: 990.2) == -10.0  # jitter: no wobble
    assert clock.align(lambda: 1000.0) == 0.0
