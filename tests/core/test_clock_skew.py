"""Hosts whose clocks disagree: a worker keeps Redis's time (``RedisTimeClock``), so a worker whose
clock runs ahead does not take back a task whose lease is still being renewed elsewhere; a client and
an inspector keep it too (``AligningClock``), so a task enqueued on a host whose clock is off is due
when Redis's clock says and stamped with Redis's time."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from queuecore import Client, Inspector, task
from queuecore.core.broker import Broker
from queuecore.core.clock import AligningClock, RedisTimeClock
from queuecore.core.config import ConnectionConfig
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
    assert [r.name for r in caplog.records
            if f"this host's clock is {SKEW:.1f} s ahead of Redis's" in r.getMessage()] == ["queuecore.worker"]


def test_without_the_correction_the_clock_ahead_steals_a_live_task(make_worker, registry, client) -> None:
    """The control: the same setup with the fast clock used as it is takes the task back while it
    runs, so it runs twice (what the correction prevents)."""
    starts = run_with_a_second_worker(make_worker, registry, client, AheadClock())
    assert len(starts) == 2 and starts[1] != starts[0]


def test_the_offset_moves_only_beyond_the_tolerance() -> None:
    now = [1000.0]
    clock = RedisTimeClock(base=lambda: now[0], tolerance=0.25, monotonic=lambda: 0.0)
    assert clock.align(lambda: 1000.1) == 0.0  # within tolerance: the host's time is kept
    assert clock.align(lambda: 990.0) == -10.0 and clock.now() == 990.0
    assert clock.align(lambda: 990.2) == -10.0  # jitter: no wobble
    assert clock.align(lambda: 1000.0) == 0.0


def test_a_round_trip_too_long_to_tell_keeps_the_offset() -> None:
    """A worker stopped (SIGSTOP, a long GC, a starved CPU) in the middle of its TIME call measured the
    offset at the round trip's halfway point: 0.95 s off after a 1.9 s pause, past the tolerance, so
    its clock went 0.95 s back and a task fetched ahead whose lease had run out started without its
    lease being confirmed (test_processes' paused-worker test, 1 run in 12)."""
    now = [1000.0]
    clock = RedisTimeClock(base=lambda: now[0], tolerance=0.25, monotonic=lambda: now[0])  # a host with no step
    assert clock.align(lambda: 1000.0) == 0.0

    def paused_during_the_call() -> float:
        now[0] += 1.9  # the process was stopped after Redis answered, before it read the reply
        return 1000.0

    assert clock.align(paused_during_the_call) == 0.0 and clock.now() == now[0]
    assert clock.align(lambda: now[0] - 10.0) == -10.0  # a prompt round trip is still believed


class FakeHost:
    """A host's clocks, moved by hand: its wall clock (``wall``: ``base``), which a step moves alone; its
    monotonic clock (``monotonic``), which a drift moves alone; and Redis's (``redis_time``), REDIS_AHEAD
    seconds ahead of the wall clock until a step or a drift."""

    REDIS_AHEAD = 10.0

    def __init__(self) -> None:
        self.true = 1000.0  # the time as it passes (Redis's, less REDIS_AHEAD)
        self.wall_time = 1000.0
        self.elapsed = 0.0

    def wall(self) -> float:
        return self.wall_time

    def monotonic(self) -> float:
        return self.elapsed

    def redis_time(self) -> float:
        return self.true + self.REDIS_AHEAD

    def advance(self, seconds: float) -> None:
        self.true += seconds
        self.wall_time += seconds
        self.elapsed += seconds

    def step(self, seconds: float) -> None:
        """The wall clock set forward or back (an NTP step after a VM resumes, a manual change)."""
        self.wall_time += seconds


@pytest.mark.parametrize("step", [3600.0, -3600.0], ids=["forward", "back"])
def test_a_step_of_the_host_clock_moves_a_workers_clock_only_when_it_measures_again(step: float) -> None:
    """``now()`` was the wall clock plus the offset, so a step of the host's clock moved it by the whole
    step until the next heartbeat: an hour ahead, a worker took back a task whose lease had 30 s left
    and a periodic entry fired an hour's runs at once; an hour back, lease renewals wrote expiries in
    the past. Between measurements it now advances with the monotonic clock."""
    host = FakeHost()
    clock = RedisTimeClock(base=host.wall, monotonic=host.monotonic)
    assert clock.align(host.redis_time) == 10.0 and clock.now() == 1010.0
    host.advance(5.0)
    assert clock.now() == 1015.0
    host.step(step)
    assert clock.now() == 1015.0  # the step changes nothing yet
    host.advance(2.0)
    assert clock.now() == 1017.0  # time goes on, at the monotonic clock's pace
    assert clock.align(host.redis_time) == 10.0 - step  # the next heartbeat finds the new offset
    assert clock.now() == host.redis_time() == 1017.0  # still Redis's time
    host.advance(3.0)
    assert clock.now() == 1020.0


def test_a_clock_that_never_measured_follows_the_monotonic_clock_from_its_construction() -> None:
    host = FakeHost()
    clock = RedisTimeClock(base=host.wall, monotonic=host.monotonic)  # Redis never reached
    host.advance(3.0)
    host.step(-3600.0)
    assert clock.now() == 1003.0 and not clock.aligned


@pytest.mark.parametrize("step", [3600.0, -3600.0], ids=["forward", "back"])
def test_a_step_during_the_time_call_is_measured_as_it_is(step: float) -> None:
    """The round trip is timed with the monotonic clock: a forward step during it no longer reads as
    a call too long to tell (ignored), nor a backward one skews the offset by half the step."""
    host = FakeHost()
    clock = RedisTimeClock(base=host.wall, monotonic=host.monotonic)
    clock.align(host.redis_time)

    def stepped_during_the_call() -> float:
        host.advance(0.05)  # Redis reads its clock halfway through a 0.1 s round trip
        host.step(step)
        answer = host.redis_time()
        host.advance(0.05)
        return answer

    assert clock.align(stepped_during_the_call) == pytest.approx(10.0 - step)
    assert not clock.last_ignored and clock.now() == pytest.approx(host.redis_time())


def test_each_measurement_re_anchors_the_clock_so_the_monotonic_clock_does_not_drift_it_away() -> None:
    host = FakeHost()
    clock = RedisTimeClock(base=host.wall, monotonic=host.monotonic)
    clock.align(host.redis_time)
    host.elapsed += 0.2  # the monotonic clock ran 0.2 s fast (or the wall clock was slewed)
    assert clock.now() == pytest.approx(1010.2)
    assert clock.align(host.redis_time) == 10.0  # the offset kept (within the tolerance) ...
    assert clock.now() == 1010.0  # ... and the clock put back on Redis's time all the same


def test_an_aligning_clock_keeps_its_time_through_a_step_until_it_measures_again(
        caplog: pytest.LogCaptureFixture) -> None:
    host = FakeHost()
    calls = [0]

    def redis_time() -> float:
        calls[0] += 1
        return host.redis_time()

    clock = AligningClock(redis_time, every=3600, base=host.wall, monotonic=host.monotonic)
    assert clock.now() == 1010.0 and calls[0] == 1
    host.step(3600.0)
    host.advance(1.0)
    assert clock.now() == 1011.0 and calls[0] == 1  # measured an hour apart: not yet again
    with caplog.at_level(logging.WARNING, logger="queuecore.clock"):
        assert clock.align(redis_time) == -3590.0 and clock.now() == 1011.0
    assert [r.name for r in caplog.records if "3590.0 s ahead of Redis's" in r.getMessage()] == ["queuecore.clock"]


# -- clients and inspectors ------------------------------------------------------------------------

BEHIND = 3600.0  # seconds this "host" runs behind


class BehindClock:
    """A wall clock an hour slow, used as it is (the control)."""

    def now(self) -> float:
        return time.time() - BEHIND


def schedule_in_a_minute(client: Client, redis_client) -> tuple[float, float, float]:
    """Enqueue a task due in 60 s; (its due time, its enqueue time, Redis's time), in seconds."""
    info = client.enqueue("t.later", process_in=60, retention=60)
    seconds, micros = redis_client.time()
    due = redis_client.zscore(client.keys.queue("default").scheduled, info.id) / 1000
    task = Inspector(connection=client.connection, redis_client=client.redis).get_task("default", info.id)
    assert task.enqueued_at is not None
    return due, task.enqueued_at.timestamp(), seconds + micros / 1_000_000


def test_a_client_on_a_host_an_hour_behind_schedules_and_stamps_by_redis_time(connection: ConnectionConfig,
                                                                               registry, redis_client) -> None:
    client = Client(connection=connection, registry=registry)
    client.clock = AligningClock(client.broker.time, base=lambda: time.time() - BEHIND)
    try:
        due, enqueued, redis_now = schedule_in_a_minute(client, redis_client)
    finally:
        client.close()
    assert abs(due - (redis_now + 60)) < 5  # due a minute from now by Redis's clock
    assert abs(enqueued - redis_now) < 5


def test_without_the_correction_the_task_falls_due_an_hour_early(connection: ConnectionConfig, registry,
                                                             redis_client) -> None:
    """The control: the slow clock used as it is stamps the task an hour back and makes it due 59
    minutes ago, so it would run at once instead of in a minute."""
    client = Client(connection=connection, registry=registry, clock=BehindClock())
    try:
        due, enqueued, redis_now = schedule_in_a_minute(client, redis_client)
    finally:
        client.close()
    assert abs(due - (redis_now - BEHIND + 60)) < 5  # due 59 minutes ago: the forwarder's next round runs it
    assert abs(enqueued - (redis_now - BEHIND)) < 5


def test_clients_and_inspectors_keep_redis_time_by_default(connection: ConnectionConfig, registry) -> None:
    client = Client(connection=connection, registry=registry)
    inspector = Inspector(connection=connection)
    try:
        assert isinstance(client.clock, AligningClock) and isinstance(inspector.clock, AligningClock)
        assert not client.clock.aligned
        client.enqueue("t.now")
        inspector.all_queue_info()
        assert client.clock.aligned  # measured on first use, against this client's Redis
        assert inspector.as_actor("olga").clock is inspector.clock
    finally:
        client.close()
        inspector.close()


def test_an_aligning_clock_measures_on_first_use_then_every_interval_and_retries_after_a_failure(
        caplog: pytest.LogCaptureFixture) -> None:
    local = [1000.0]
    skew: list[float | None] = [None]  # None: Redis does not answer
    calls = [0]

    def redis_time() -> float:
        calls[0] += 1
        if skew[0] is None:
            raise ConnectionError("Redis is away")
        return local[0] + skew[0]

    hourly = AligningClock(redis_time, every=3600, retry=0, base=lambda: local[0], monotonic=lambda: 0.0)
    assert hourly.now() == 1000.0 and calls[0] == 1  # tried on first use; away: the host's time
    skew[0] = -10.0
    with caplog.at_level(logging.WARNING, logger="queuecore.clock"):
        assert hourly.now() == 990.0 and calls[0] == 2  # tried again (retry 0 s): measured
    # Logged as a client's or an inspector's, not under the worker's logger.
    assert [r.name for r in caplog.records if "10.0 s ahead of Redis's" in r.getMessage()] == ["queuecore.clock"]
    skew[0] = 5.0
    assert hourly.now() == 990.0 and calls[0] == 2  # measured an hour apart: not yet again
    every_call = AligningClock(redis_time, every=0, base=lambda: local[0], monotonic=lambda: 0.0)
    assert every_call.now() == 1005.0
    skew[0] = -2.0
    assert every_call.now() == 998.0
    skew[0] = None
    assert every_call.now() == 998.0  # a failed measurement keeps the offset it had


def test_a_measurement_too_long_to_tell_is_tried_again_soon() -> None:
    """A client's first TIME under load (a round trip past twice the tolerance) is ignored; the next
    measurement came a full ``every`` (60 s) later, the client's clock unaligned all that while. It now
    comes after ``retry``, as a failed one does."""
    local = [1000.0]
    slow = [True]
    calls = [0]

    def redis_time() -> float:
        calls[0] += 1
        if slow[0]:
            local[0] += 2.0  # a starved process: two seconds between sending TIME and reading the reply
        return local[0] - 10.0

    clock = AligningClock(redis_time, every=3600, retry=0, base=lambda: local[0], monotonic=lambda: local[0])
    assert clock.now() == 1002.0 and calls[0] == 1 and not clock.aligned  # ignored: the host's time
    slow[0] = False
    assert clock.now() == 992.0 and calls[0] == 2 and clock.aligned  # tried again at once (retry 0 s)
    assert clock.now() == 992.0 and calls[0] == 2  # then an hour apart


# -- an inspector's timed pause and its statistics' last minutes ----------------------------------


def slow_inspector(connection: ConnectionConfig, corrected: bool) -> Inspector:
    """An inspector on a host an hour slow: its clock corrected to Redis's (the default), or not."""
    if not corrected:
        return Inspector(connection=connection, clock=BehindClock())
    inspector = Inspector(connection=connection)
    inspector.clock = AligningClock(Broker(inspector.redis, inspector.keys).time, base=lambda: time.time() - BEHIND)
    return inspector


@pytest.mark.parametrize("corrected", [True, False], ids=["corrected", "uncorrected-control"])
def test_a_timed_pause_from_a_host_an_hour_behind_lasts_the_time_asked(connection: ConnectionConfig, client,
                                                                        redis_client, corrected: bool) -> None:
    client.enqueue("t.later", process_in=3600, retention=60)  # the queue exists
    inspector = slow_inspector(connection, corrected)
    try:
        inspector.pause_queue("default", for_=60)
        paused = inspector.queue_info("default").paused
    finally:
        inspector.close()
    left_ms = redis_client.pttl(client.keys.queue("default").paused)
    if corrected:
        assert paused and 55_000 < left_ms <= 60_000  # ends a minute from now by Redis's clock
    else:  # the control: its end is 59 minutes in the past, so the queue was never paused
        assert not paused and left_ms == -2


@pytest.mark.parametrize("corrected", [True, False], ids=["corrected", "uncorrected-control"])
def test_the_last_minutes_statistics_read_from_a_host_an_hour_behind_count_a_task_just_done(
        connection: ConnectionConfig, registry, client, make_worker, corrected: bool) -> None:
    @task(name="t.now", registry=registry)
    def now() -> None:
        pass

    info = client.enqueue("t.now", retention=60)
    make_worker(queues="default", concurrency=1)
    wait_until(lambda: client.results.read("default", info.id).state == "completed", 10, message="the task to run")
    inspector = slow_inspector(connection, corrected)
    try:
        last_two = inspector.minute_history("default", minutes=2)  # the minute may turn meanwhile
    finally:
        inspector.close()
    done = sum(m.processed for m in last_two)
    assert done == (1 if corrected else 0)  # the control reads the minutes of an hour ago
