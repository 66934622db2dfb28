"""Global concurrency limits and rate limits per task type (``flow.py``), in-process workers on real Redis."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from queuecore import task
from queuecore.core.errors import ConfigurationError
from queuecore.core.flow import TaskLimits, parse_rate
from queuecore.core.outcome import Outcome
from tests.conftest import wait_until
from tests.core.worker_support import wait_state
from tests.helpers.state import seed_task

NOW = 1_800_000_000_000  # unix ms


class Gauge:
    """Counts handlers running at once (per key) and remembers the highest count."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now: dict[str, int] = {}
        self.max: dict[str, int] = {}
        self.starts: list[float] = []
        self.done = 0

    def enter(self, key: str = "") -> None:
        with self.lock:
            self.now[key] = self.now.get(key, 0) + 1
            self.max[key] = max(self.max.get(key, 0), self.now[key])
            self.starts.append(time.time())

    def leave(self, key: str = "") -> None:
        with self.lock:
            self.now[key] -= 1
            self.done += 1


def max_in_window(starts: list[float], window: float) -> int:
    """The most starts in any window of ``window`` seconds."""
    starts = sorted(starts)
    best, j = 0, 0
    for i, t in enumerate(starts):
        while starts[j] <= t - window:
            j += 1
        best = max(best, i - j + 1)
    return best


def test_rate_and_limit_options_are_parsed_and_checked() -> None:
    assert parse_rate("100/m") == (100, 60.0)
    assert parse_rate("5/10s") == (5, 10.0)
    assert parse_rate("20 / second") == (20, 1.0)
    assert parse_rate("5/.5s") == (5, 0.5)
    assert parse_rate("5/1.5m") == (5, 90.0)
    for bad in ("100", "0/s", "10/fortnight", "x/m", 5, "5/.s", "5/ .m", "5/..s", "5/1..5s"):
        with pytest.raises(ConfigurationError):
            parse_rate(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("rate_limit", ["5/.s", "5/ .m"])
def test_a_lone_dot_for_the_window_is_a_configuration_error(registry, rate_limit: str) -> None:
    with pytest.raises(ConfigurationError, match=r"invalid rate_limit"):
        @task(name="t.dot", registry=registry, rate_limit=rate_limit)
        def handler() -> None: ...
    for kwargs in ({"concurrency_limit": 0}, {"concurrency_limit": True}, {"concurrency_limit": 2.5},
                   {"limit_key": "tenant"}, {"concurrency_limit": 1, "limit_key": ""}):
        with pytest.raises(ConfigurationError):
            TaskLimits.build(**kwargs)
    assert TaskLimits.build() is None
    limits = TaskLimits.build(concurrency_limit=3, limit_key="tenant")
    assert limits is not None
    assert limits.key_for({"tenant": "acme"}) == "acme"
    assert limits.key_for({}) == "none"
    assert limits.key_for({"tenant": "a b{c}"}).startswith("~")  # hashed: never breaks a key or hash tag


def test_a_concurrency_limit_holds_across_workers_and_uses_no_attempt(make_worker, client, inspector, registry):
    gauge = Gauge()

    @task(name="t.limited", registry=registry, concurrency_limit=2, max_retry=0)
    def limited(n: int) -> None:
        gauge.enter()
        time.sleep(0.03)
        gauge.leave()

    infos = [client.enqueue(limited, {"n": i}, queue="q", retention=60) for i in range(30)]
    make_worker(queues={"q": 1}, concurrency=10)
    make_worker(queues={"q": 1}, concurrency=10)
    wait_until(lambda: gauge.done == 30, 30, message="every limited task to run")
    assert gauge.max[""] == 2
    for info in infos:
        done = wait_state(inspector, "q", info.id, "completed")
        assert (done.retried, done.snoozed) == (0, 0)  # held back: no attempt, no snooze counted
    assert inspector.queue_info("q").failed_today == 0


def test_a_limit_kept_per_key_limits_each_key_apart(make_worker, client, registry):
    gauge = Gauge()
    both = threading.Event()

    @task(name="t.tenant", registry=registry, concurrency_limit=1, limit_key="tenant")
    def per_tenant(tenant: str, n: int) -> None:
        gauge.enter(tenant)
        if sum(gauge.now.values()) >= 2:
            both.set()
        time.sleep(0.02)
        gauge.leave(tenant)

    for i in range(10):
        for tenant in ("acme", "globex"):
            client.enqueue(per_tenant, {"tenant": tenant, "n": i}, queue="q")
    make_worker(queues={"q": 1}, concurrency=8)
    wait_until(lambda: gauge.done == 20, 30, message="every task to run")
    assert gauge.max == {"acme": 1, "globex": 1}
    assert both.is_set()  # the two tenants ran side by side


def test_tasks_held_back_never_block_other_types_in_the_queue(make_worker, client, inspector, registry):
    release = threading.Event()
    started = threading.Event()
    ran = []

    @task(name="t.slow", registry=registry, concurrency_limit=1)
    def slow() -> None:
        started.set()
        release.wait(10)

    @task(name="t.free", registry=registry)
    def free(n: int) -> None:
        ran.append(n)

    try:
        client.enqueue(slow, {}, queue="q")
        make_worker(queues={"q": 1}, concurrency=4)
        wait_until(started.is_set, 10)
        held = [client.enqueue(slow, {}, queue="q") for _ in range(3)]
        for i in range(5):
            client.enqueue(free, {"n": i}, queue="q")
        wait_until(lambda: len(ran) == 5, 10, message="the unlimited tasks to run past the held-back ones")
        waiting = [wait_state(inspector, "q", h.id, "scheduled") for h in held]
        assert all(w.waiting and "concurrency limit of t.slow" in w.waiting for w in waiting)
        assert all(w.retried == 0 for w in waiting)
        (limit,) = inspector.limits()
        assert (limit.type, limit.concurrency_limit, limit.rate_limit) == ("t.slow", 1, 0)
        assert [(u.key, u.running, u.waiting) for u in limit.usage] == [("", 1, 3)]
    finally:
        release.set()
    wait_until(lambda: inspector.queue_info("q").size == 0, 10, message="the held-back tasks to run once freed")


def test_a_rate_limit_spaces_the_starts_and_uses_no_attempt(make_worker, client, inspector, registry):
    gauge = Gauge()

    @task(name="t.rated", registry=registry, rate_limit="10/s", max_retry=0)
    def rated(n: int) -> None:
        gauge.enter()
        gauge.leave()

    infos = [client.enqueue(rated, {"n": i}, queue="q", retention=60) for i in range(30)]
    began = time.time()
    make_worker(queues={"q": 1}, concurrency=10)
    wait_until(lambda: gauge.done == 30, 20, message="every rate-limited task to run")
    took = time.time() - began
    assert max_in_window(gauge.starts, 0.95) <= 10  # any window of the rate (less clock jitter)
    assert 1.8 < took < 6  # 30 starts at 10/s: two full windows after the first, plus the forwarder's ticks
    assert all(wait_state(inspector, "q", i.id, "completed").retried == 0 for i in infos)
    (limit,) = inspector.limits()
    assert (limit.rate_limit, limit.rate_window, limit.rate_text) == (10, 1.0, "10/1s")


def test_a_task_past_its_deadline_takes_no_rate_place(make_worker, client, inspector, registry, redis_client,
                                                        connection):
    """A review: a held-back task whose deadline passed took a start of its window (the limits were
    taken before the deadline was checked), then was archived without running."""
    ran: dict[str, float] = {}

    @task(name="t.rated", registry=registry, rate_limit="1/2s", max_retry=0)
    def rated(tag: str) -> None:
        ran[tag] = time.time()

    make_worker(queues={"q": 1}, concurrency=3)
    client.enqueue(rated, {"tag": "a"}, queue="q", retention=60)
    wait_until(lambda: "a" in ran, 10, message="the first task to run")
    late = client.enqueue(rated, {"tag": "b"}, queue="q", retention=60, deadline=time.time() + 0.5)
    archived = wait_state(inspector, "q", late.id, "archived", timeout=10)
    assert archived.last_error.startswith("DeadlinePassed: ") and "b" not in ran
    starts = redis_client.zrange(connection.keys.limit("t.rated").rate(), 0, -1)
    assert not [member for member in starts if late.id in member]  # the window's starts: the first task's only


def test_async_handlers_keep_the_limit_too(make_worker, client, registry):
    gauge = Gauge()

    @task(name="t.async_limited", registry=registry, concurrency_limit=1)
    async def limited_async(n: int) -> None:
        gauge.enter()
        await asyncio.sleep(0.02)
        gauge.leave()

    for i in range(8):
        client.enqueue(limited_async, {"n": i}, queue="q")
    make_worker(queues={"q": 1}, concurrency=4)
    make_worker(queues={"q": 1}, concurrency=4)
    wait_until(lambda: gauge.done == 8, 20, message="every async limited task to run")
    assert gauge.max[""] == 1


def test_rate_places_keep_their_turn_and_newcomers_queue_behind(scripts, connection) -> None:
    """limit_acquire alone, with its own clock: 2 starts per second; held-back tasks get places 500 ms
    apart, keep them, and a newcomer never passes one."""
    lim = connection.keys.limit("t.rate")

    def take(member: str, now: int) -> tuple[bool, str, int]:
        ok, kind, when, waiting = scripts.limit_acquire(lim, f"q {member}", key="", now_ms=now,
                                                        expires_ms=now + 30_000, concurrency=0, rate=2,
                                                        window_ms=1000)
        assert waiting == 0
        return ok, kind, when

    t0 = 1_800_000_000_000
    assert take("a", t0) == (True, "", 0)
    assert take("b", t0) == (True, "", 0)
    assert take("c", t0) == (False, "rate", t0 + 1000)  # when the window has room
    assert take("d", t0) == (False, "rate", t0 + 1500)  # its own place, window / limit later
    assert take("e", t0 + 1000) == (False, "rate", t0 + 2000)  # the window has room, but c and d come first
    assert take("c", t0 + 1000) == (True, "", 0)
    assert take("d", t0 + 1490) == (True, "", 0)  # 10 ms before its place, with room in the window: fine
    assert take("f", t0 + 1500) == (False, "rate", t0 + 2500)
    assert take("e", t0 + 1995) == (False, "rate", t0 + 2000)  # back early to a full window: keeps its turn
    assert take("e", t0 + 2000) == (True, "", 0)
    assert take("h", t0 + 2400) == (False, "rate", t0 + 3000)  # room in the window, but f comes first
    assert take("f", t0 + 2500) == (True, "", 0)


def test_the_place_of_a_task_deleted_while_held_back_is_dropped_an_hour_later(scripts, connection,
                                                                              redis_client) -> None:
    """A review: a held-back task's place was a field of the cursor HASH, which expires only when the
    type goes quiet; a task deleted while held back never came back to take its place, so under steady
    use the HASH grew by one field per such task for good. Places now sit in a ZSET trimmed by time."""
    lim = connection.keys.limit("t.gone")

    def take(member: str, now: int) -> bool:
        return scripts.limit_acquire(lim, f"q {member}", key="", now_ms=now, expires_ms=now + 30_000,
                                     concurrency=0, rate=1, window_ms=1000)[0]

    t0 = 1_800_000_000_000
    assert take("a", t0)
    held = [f"gone{n}" for n in range(20)]
    assert not any(take(member, t0) for member in held)  # each given a place; then all deleted
    assert redis_client.zcard(lim.places) == 20
    later = t0 + 20_000 + 1000 + 3_600_000 + 1  # an hour and a window after the last place
    assert take("b", later)
    assert redis_client.zcard(lim.places) == 0
    assert redis_client.hkeys(lim.cursor) == [""]  # the next place to hand out, and nothing else


def test_a_place_an_earlier_version_gave_is_still_taken_once(scripts, connection, redis_client) -> None:
    lim = connection.keys.limit("t.legacy")
    t0 = 1_800_000_000_000
    assert scripts.limit_acquire(lim, "q a", key="", now_ms=t0, expires_ms=t0 + 30_000, concurrency=0, rate=1,
                                 window_ms=1000)[0]
    redis_client.hset(lim.cursor, mapping={"": t0 + 5000, "|q old": t0 + 1000})  # as an earlier version kept it
    # the window has room again at t0 + 1000; a newcomer waits behind the cursor, the old place does not
    assert scripts.limit_acquire(lim, "q new", key="", now_ms=t0 + 1000, expires_ms=t0 + 30_000, concurrency=0,
                                 rate=1, window_ms=1000)[:2] == (False, "rate")
    assert scripts.limit_acquire(lim, "q old", key="", now_ms=t0 + 1000, expires_ms=t0 + 30_000, concurrency=0,
                                 rate=1, window_ms=1000)[0]
    assert redis_client.hget(lim.cursor, "|q old") is None


def test_a_long_line_for_a_slot_comes_back_by_itself_later_the_further_back_it_waits(scripts, connection) -> None:
    """Behind many others, a held-back task's backstop (should no freed slot be handed to it) is spread
    out: limit_acquire says how many wait ahead of it, and the gate waits up to BACKSTOP_SPREAD times longer."""
    from queuecore.core.clock import FakeClock
    from queuecore.core.flow import BACKSTOP_SPREAD, LimitGate

    clock = FakeClock(1_800_000_000.0)
    gate = LimitGate(scripts, connection.keys, {}, clock, lease_duration=10.0, renew_interval=5.0)
    limits = TaskLimits.build(concurrency_limit=2)
    assert limits is not None
    lim = connection.keys.limit("t.line")
    holds = [gate.acquire(limits, "t.line", "q", f"r{i}", {})[0] for i in range(2)]
    assert all(holds)
    waits = []
    for i in range(9):
        hold, wait, why = gate.acquire(limits, "t.line", "q", f"w{i}", {})
        assert hold is None and why.startswith("concurrency limit of t.line")
        assert scripts.limit_wait(lim, f"q w{i}", key="", now_ms=int(clock.now() * 1000), concurrency=2) is False
        waits.append(wait)
    assert waits[:2] == [10.0, 10.0]  # the first in line: when the earliest slot would expire
    assert waits[2:4] == [20.0, 20.0] and waits[-1] == 10.0 * BACKSTOP_SPREAD
    # Coming back while still in line: by its place, not by how many wait (the first in line came back
    # only after four times the backstop, its slot free since a killed worker's expired).
    again = {i: gate.acquire(limits, "t.line", "q", f"w{i}", {})[1] for i in (0, 1, 4, 8)}
    assert again == {0: 10.0, 1: 10.0, 4: 30.0, 8: 10.0 * BACKSTOP_SPREAD}
    gate.stop()


def test_one_limit_that_cannot_be_renewed_holds_up_no_other(scripts, connection, redis_client) -> None:
    """A review: a key of another type in one limit's slots ended the renewal round there, so the
    other limits' slots ran out under their running tasks."""
    from queuecore.core.clock import FakeClock
    from queuecore.core.errors import WrongKeyType
    from queuecore.core.flow import LimitGate

    clock = FakeClock(1_800_000_000.0)
    gate = LimitGate(scripts, connection.keys, {}, clock, lease_duration=10.0, renew_interval=5.0)
    limits = TaskLimits.build(concurrency_limit=1)
    assert limits is not None
    a = gate.acquire(limits, "t.a", "q", "a1", {}, 1)[0]
    b = gate.acquire(limits, "t.b", "q", "b1", {}, 1)[0]
    assert a is not None and b is not None
    broken = connection.keys.limit("t.a").running()
    redis_client.delete(broken)
    redis_client.set(broken, "garbage")
    clock.advance(8)
    with pytest.raises(WrongKeyType):
        gate._renew()
    assert redis_client.zscore(connection.keys.limit("t.b").running(), b.member) == (clock.now() + 10) * 1000
    gate.stop()


def test_an_attempt_ended_while_its_slot_was_being_taken_gives_the_slot_back(make_worker, client, inspector, registry,
                                                                              redis_client):
    """The attempt is finalized (abandoned, cancelled, its lease lost) while Redis is slow to answer its
    slot's acquire: the slot, taken in Redis by then, is released, not renewed for the life of the
    process (a reviewer's reproduction: CLIENT PAUSE during the acquire, a deadline, abandon_grace)."""
    ran = []

    @task(name="t.slow_slot", registry=registry, concurrency_limit=1, max_retry=0)
    def slow_slot(n: int) -> None:
        ran.append(n)

    worker = make_worker(queues={"q": 1}, concurrency=2)
    gate, processor = worker.processor.limits, worker.processor
    real_acquire = gate.acquire
    ended = []

    def acquire_while_the_attempt_ends(limits, type_name, queue, task_id, payload, *lease):
        reply = real_acquire(limits, type_name, queue, task_id, payload, *lease)
        if not ended:  # the first attempt ends meanwhile, from another thread as the supervisor ends it
            running, = processor.held.with_id(queue, task_id)
            ender = threading.Thread(target=processor._finalize, args=(running, Outcome("lost")))
            ender.start()
            ender.join()
            ended.append(task_id)
        return reply

    gate.acquire = acquire_while_the_attempt_ends
    first = client.enqueue(slow_slot, {"n": 1}, queue="q")
    wait_until(lambda: ended, 10, message="the first attempt to end during its acquire")
    running_key = worker.keys.limit("t.slow_slot").running()
    wait_until(lambda: redis_client.zcard(running_key) == 0, 10, message="the slot to be given back")
    assert ran == [] and not gate._held  # its handler never ran; the gate renews nothing
    second = client.enqueue(slow_slot, {"n": 2}, queue="q", retention=60)
    assert wait_state(inspector, "q", second.id, "completed")  # the one slot is free for the next task
    assert ran == [2] and first.id == ended[0]


def test_a_freed_slot_passes_over_a_waiter_deleted_meanwhile_to_the_next_in_line(make_worker, client, inspector,
                                                                                 registry, redis_client):
    """An operator deletes the task that waited longest for a slot: when the slot comes free, the next
    in line gets it at once, not when it would have come back by itself (its backstop: about a lease,
    60 s here)."""
    started, release, ran = threading.Event(), threading.Event(), []

    @task(name="t.one_at_a_time", registry=registry, concurrency_limit=1, max_retry=0)
    def one_at_a_time(n: int) -> None:
        ran.append(n)
        if n == 0:
            started.set()
            release.wait(10)

    make_worker(queues={"q": 1}, concurrency=3, lease_duration=60, heartbeat_interval=1)
    waiting_key = f"{client.keys.limit('t.one_at_a_time').waiting()}"
    try:
        client.enqueue(one_at_a_time, {"n": 0}, queue="q")
        assert started.wait(10)
        gone = client.enqueue(one_at_a_time, {"n": 1}, queue="q")
        wait_until(lambda: redis_client.zcard(waiting_key) == 1, 10, message="the first waiter to be listed")
        last = client.enqueue(one_at_a_time, {"n": 2}, queue="q", retention=60)
        wait_until(lambda: redis_client.zcard(waiting_key) == 2, 10, message="the second waiter to be listed")
        inspector.delete_task("q", gone.id)
    finally:
        release.set()
    assert wait_state(inspector, "q", last.id, "completed")
    assert ran == [0, 2] and redis_client.zcard(waiting_key) == 0


def test_limit_wake_counts_the_waiters_that_will_take_their_slot(scripts, connection, redis_client) -> None:
    """A release passes a slot on for each waiter its wake does not count: one deleted, or parked for
    another reason (snoozed). One its backstop already brought back (pending or running) takes the slot
    itself: counting it, the release wakes no second task for the same slot (a review's reproduction:
    two woken for one slot, and the oldest real waiter sent behind a newer one)."""
    q = connection.keys.queue("q")
    seed_task(redis_client, q, "parked", "scheduled", score=NOW + 60_000, waiting="concurrency limit")
    seed_task(redis_client, q, "back", "pending")  # its backstop came first
    seed_task(redis_client, q, "running", "active", score=NOW + 30_000)
    seed_task(redis_client, q, "snoozed", "scheduled", score=NOW + 60_000)  # parked, not by a limit
    assert scripts.limit_wake(q, ["parked", "back", "running", "snoozed", "deleted"], now_ms=NOW) == 3
    assert redis_client.lrange(q.pending, 0, -1) == ["back", "parked"]
    assert redis_client.zrange(q.scheduled, 0, -1) == ["snoozed"]


def test_a_limit_key_that_names_no_parameter_is_refused(registry) -> None:
    """A review: ``limit_key="tenent"`` (a typo of ``tenant``) was taken, and every task's key was the
    missing field's ``none``: one limit for every tenant, with no word said."""
    with pytest.raises(ConfigurationError, match=r"limit_key 'tenent' is not a parameter of its function "
                                                 r"\(it has order_id, tenant\)") as refused:
        @task(name="t.typo", registry=registry, concurrency_limit=2, limit_key="tenent")
        def call(tenant: str, order_id: int) -> None: ...
    assert refused.value.field == "limit_key" and registry.get("t.typo") is None

    @task(name="t.any", registry=registry, concurrency_limit=2, limit_key="tenant")
    def any_name(**fields: object) -> None: ...  # **kwargs takes any field: the key may be one

    @task(name="t.named", registry=registry, rate_limit="5/s", limit_key="tenant")
    def named(tenant: str) -> None: ...

    assert registry.get("t.any") is not None and registry.get("t.named") is not None
