"""The push hand-over: a worker with no handler running whose dequeue found a queue empty is listed as
waiting for it (``QueueKeys.idle``), and an enqueue into the empty queue leases the task straight to it and
publishes it on the worker's push channel, saving the dequeue round trip. A listed worker that is no
longer subscribed gets nothing: the task is pending as before, so nothing waits for a lease to end."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from queuecore import Client, Inspector, TaskRegistry, TaskState, task
from queuecore.core.clock import to_ms
from queuecore.core.errors import WrongKeyType
from queuecore.core.keys import QueueKeys
from queuecore.core.scripts import EnqueueItem, Scripts
from tests.conftest import wait_until
from tests.core.worker_support import let_worker_run
from tests.helpers.state import Subscription, make_msg

LEASE_MS = 30_000


@pytest.fixture
def q(connection) -> QueueKeys:
    return connection.keys.queue("default")


class Listener:
    """Worker "w1"'s push channel and the wake channel, each a ``Subscription`` (sharded on a Redis 7
    cluster, as the scripts publish there)."""

    def __init__(self, redis_client: redis.Redis, q: QueueKeys) -> None:
        self.channels = [Subscription(redis_client, q.push_channel("w1")), Subscription(redis_client, q.wake_channel)]

    def messages(self) -> list[tuple[str, str]]:
        """What each channel got since the last call, as (channel, data): the push channel's first."""
        return [(sub.channel, data) for sub in self.channels for data in sub.messages()]

    def close(self) -> None:
        for sub in self.channels:
            sub.close()


@pytest.fixture
def listener(redis_client: redis.Redis, q: QueueKeys) -> Iterator[Listener]:
    listening = Listener(redis_client, q)
    yield listening
    listening.close()


def enqueue(scripts: Scripts, q: QueueKeys, *ids: str, process_at_ms: int = 0, front: bool = False) -> list[Any]:
    items = [EnqueueItem(i, make_msg(i, q.queue), process_at_ms=process_at_ms, front=front) for i in ids]
    return scripts.enqueue_many(q, items, now_ms=redis_ms(scripts.redis), client=None)


def redis_ms(r: redis.Redis) -> int:
    seconds, micros = r.time()
    return seconds * 1000 + micros // 1000


def list_worker(r: redis.Redis, q: QueueKeys, worker_id: str = "w1", lapses_in_ms: int = 60_000,
                numbered: bool = False) -> str:
    """List a worker as waiting: as this version does (``numbered``: the push carries the lease's
    number), or as an earlier version did (lease 1)."""
    entry = f"{LEASE_MS}{'+' if numbered else ''} {worker_id}"
    r.zadd(q.idle, {entry: redis_ms(r) + lapses_in_ms})
    return entry


# -- the scripts ----------------------------------------------------------------------------------------


def test_an_enqueue_into_the_empty_queue_leases_the_task_to_a_listed_subscribed_worker(
        scripts: Scripts, redis_client: redis.Redis, q: QueueKeys, listener: Listener) -> None:
    list_worker(redis_client, q)
    before = redis_ms(redis_client)
    assert enqueue(scripts, q, "a") == [2]  # stored and pushed
    after = redis_ms(redis_client)
    assert listener.messages() == [(q.push_channel("w1"), "a " + make_msg("a", q.queue))]  # no wake-up: nothing pending
    assert redis_client.llen(q.pending) == 0
    fields = redis_client.hgetall(q.task("a"))
    assert fields["state"] == "active" and fields["lease"] == "1"
    assert before <= int(fields["started_at"]) <= after
    expiry = redis_client.zscore(q.active, "a")
    assert before + LEASE_MS <= expiry <= after + LEASE_MS  # the worker's lease, on Redis's clock
    assert redis_client.zcard(q.idle) == 0  # taken: the worker lists itself again when it waits again


@pytest.mark.parametrize("chosen", [False, True], ids=["generated-id", "caller-chosen-id"])
def test_a_resent_enqueue_of_a_pushed_task_says_it_is_active_and_pushes_nothing(
        scripts: Scripts, redis_client: redis.Redis, q: QueueKeys, listener: Listener, chosen: bool) -> None:
    """A call sent again after a lost reply (the client's retry) found the task stored and replied 1,
    so the handle said pending though the first send had pushed it to a worker (a review)."""
    list_worker(redis_client, q)
    item = EnqueueItem("a", make_msg("a", q.queue), check_id=chosen)
    assert scripts.enqueue_many(q, [item], now_ms=redis_ms(redis_client)) == [2]
    assert len(listener.messages()) == 1
    list_worker(redis_client, q, "w2")  # another worker waits: the resend must not push the task again
    assert scripts.enqueue_many(q, [item], now_ms=redis_ms(redis_client)) == [2]
    assert listener.messages() == [] and redis_client.zcard(q.idle) == 1
    redis_client.hset(q.task("a"), "state", "pending")  # as if it had been handed back meanwhile
    assert scripts.enqueue_many(q, [item], now_ms=redis_ms(redis_client)) == [1]


def test_a_push_to_a_worker_of_this_version_carries_a_lease_number_no_earlier_holder_had(
        scripts: Scripts, redis_client: redis.Redis, q: QueueKeys, listener: Listener) -> None:
    """Lease 1 for every push let a worker paused past its lease acknowledge a new task enqueued under
    the same id (a review): a worker listed with "<ms>+" gets Redis's time in ms as the number."""
    list_worker(redis_client, q, numbered=True)
    before = redis_ms(redis_client)
    assert enqueue(scripts, q, "a") == [2]
    after = redis_ms(redis_client)
    [(channel, data)] = listener.messages()
    task_id, lease, msg = data.split(" ", 2)
    assert (channel, task_id, msg) == (q.push_channel("w1"), "a", make_msg("a", q.queue))
    assert before <= int(lease) <= after and redis_client.hget(q.task("a"), "lease") == lease


def test_a_listed_worker_no_longer_subscribed_is_dropped_and_the_task_is_pending(
        scripts: Scripts, redis_client: redis.Redis, q: QueueKeys, listener: Listener) -> None:
    list_worker(redis_client, q, "gone")  # nobody listens on its channel (a worker that died)
    assert enqueue(scripts, q, "a") == [1]
    assert redis_client.lrange(q.pending, 0, -1) == ["a"]
    assert redis_client.hget(q.task("a"), "state") == "pending"
    assert redis_client.zcard(q.active) == 0 and redis_client.zcard(q.idle) == 0
    assert listener.messages() == [(q.wake_channel, "1")]


def test_a_message_over_a_megabyte_is_never_pushed(scripts: Scripts, redis_client: redis.Redis, q: QueueKeys,
                                                    listener: Listener) -> None:
    """A review: a message past Redis's pub/sub output-buffer limit (32 MB by default) cut the worker's
    subscriber off after PUBLISH had counted it received, so the task was leased to a worker that
    never got it (and lost an attempt at the lease's end). Over 1 MB, a task waits for a fetch."""
    list_worker(redis_client, q, numbered=True)
    big = make_msg("big", q.queue, payload={"blob": "x" * 1_048_576})
    assert scripts.enqueue_many(q, [EnqueueItem("big", big)], now_ms=redis_ms(redis_client), client=None) == [1]
    assert redis_client.lrange(q.pending, 0, -1) == ["big"] and redis_client.hget(q.task("big"), "state") == "pending"
    assert listener.messages() == [(q.wake_channel, "1")]  # a wake-up for a fetch, no push
    assert redis_client.zcard(q.idle) == 1  # the worker stays listed for the next small task
    small = make_msg("small", q.queue, payload={"blob": "x" * 1_000_000})  # just under: pushed as ever
    redis_client.delete(q.pending)
    assert scripts.enqueue_many(q, [EnqueueItem("small", small)], now_ms=redis_ms(redis_client), client=None) == [2]
    assert [c for c, _ in listener.messages()] == [q.push_channel("w1")]


def test_after_a_gone_worker_the_next_listed_one_gets_the_task(
        scripts: Scripts, redis_client: redis.Redis, q: QueueKeys, listener: Listener) -> None:
    redis_client.zadd(q.idle, {f"{LEASE_MS} gone": redis_ms(redis_client) + 1_000,
                               f"{LEASE_MS} w1": redis_ms(redis_client) + 60_000})
    assert enqueue(scripts, q, "a") == [2]
    assert [c for c, _ in listener.messages()] == [q.push_channel("w1")]
    assert redis_client.zrange(q.active, 0, -1) == ["a"] and redis_client.zcard(q.idle) == 0


@pytest.mark.parametrize("why", ["paused", "not empty", "lapsed", "scheduled"])
def test_no_task_is_pushed_past_a_pause_a_waiting_task_or_its_due_time_nor_to_a_lapsed_listing(
        why: str, scripts: Scripts, redis_client: redis.Redis, q: QueueKeys, listener: Listener) -> None:
    if why == "not empty":
        enqueue(scripts, q, "older")  # before any worker is listed: it waits
        assert redis_client.llen(q.pending) == 1
        listener.messages()  # its wake-up
    list_worker(redis_client, q, lapses_in_ms=-1 if why == "lapsed" else 60_000)
    if why == "paused":
        redis_client.set(q.paused, "1")
    due = redis_ms(redis_client) + 60_000 if why == "scheduled" else 0
    assert enqueue(scripts, q, "a", process_at_ms=due) == [1]
    # a wake-up ("1", or "due <ms>" for a task due before any other), unless the queue was not empty
    assert [(c, d.split(" ")[0]) for c, d in listener.messages()] == {
        "not empty": [], "scheduled": [(q.wake_channel, "due")]}.get(why, [(q.wake_channel, "1")])
    assert redis_client.zcard(q.active) == 0
    assert redis_client.hget(q.task("a"), "state") == ("scheduled" if why == "scheduled" else "pending")
    assert redis_client.zcard(q.idle) == (0 if why == "lapsed" else 1)  # a lapsed listing is cleared


def test_of_a_batch_the_task_taken_first_is_pushed_and_the_rest_wait_in_order(
        scripts: Scripts, redis_client: redis.Redis, q: QueueKeys, listener: Listener) -> None:
    list_worker(redis_client, q)
    assert enqueue(scripts, q, "a", "b", "c") == [2, 1, 1]  # the first pushed
    assert [(c, d.split(" ")[0]) for c, d in listener.messages()] == [(q.push_channel("w1"), "a"),
                                                                     (q.wake_channel, "1")]
    assert list(reversed(redis_client.lrange(q.pending, 0, -1))) == ["b", "c"]  # in the order workers take them
    list_worker(redis_client, q)
    redis_client.delete(q.pending)
    items = [EnqueueItem("d", make_msg("d", q.queue)), EnqueueItem("e", make_msg("e", q.queue), front=True)]
    scripts.enqueue_many(q, items, now_ms=redis_ms(redis_client))
    assert [d.split(" ")[0] for c, d in listener.messages() if c != q.wake_channel] == ["e"]  # the priority one


def test_a_dequeue_that_finds_the_queue_empty_lists_the_worker_and_one_that_gets_a_task_takes_it_off(
        scripts: Scripts, redis_client: redis.Redis, q: QueueKeys) -> None:
    entry = f"{LEASE_MS} w1"
    now = redis_ms(redis_client)

    def dequeue(until_ms: int, entry: str = entry) -> list[str]:
        got = scripts.dequeue(q, now_ms=now, lease_until_ms=now + LEASE_MS, count=2, idle_entry=entry,
                              idle_until_ms=until_ms)
        return [d.id for d in got]

    assert dequeue(now + 5_000) == []
    assert redis_client.zrange(q.idle, 0, -1, withscores=True) == [(entry, now + 5_000)]
    enqueue(scripts, q, "a", "b", "c")  # "a" goes to w1 (no one listens: pending), all three wait
    assert redis_client.llen(q.pending) == 3 and redis_client.zcard(q.idle) == 0
    list_worker(redis_client, q)
    assert dequeue(now + 5_000) == ["a", "b"] and redis_client.zcard(q.idle) == 0  # it has work: not waiting
    list_worker(redis_client, q)
    assert dequeue(now + 6_000) == ["c"] and redis_client.zcard(q.idle) == 0  # fewer than asked, still work
    assert dequeue(now + 7_000, entry="") == []  # a busy worker gives no entry: not listed
    assert redis_client.zcard(q.idle) == 0
    assert dequeue(now + 8_000) == [] and redis_client.zscore(q.idle, entry) == now + 8_000


def test_a_wrong_type_listing_key_is_refused_before_anything_is_written(
        scripts: Scripts, redis_client: redis.Redis, q: QueueKeys) -> None:
    redis_client.set(q.idle, "junk")
    now = redis_ms(redis_client)
    with pytest.raises(WrongKeyType, match="idle holds a string"):
        enqueue(scripts, q, "a")
    assert not redis_client.exists(q.task("a"), q.pending)
    enqueue_items = [EnqueueItem("b", make_msg("b", q.queue))]
    redis_client.rpush(q.pending, "x")  # not empty: no listing is looked at
    assert scripts.enqueue_many(q, enqueue_items, now_ms=now) == [1]
    with pytest.raises(WrongKeyType, match="idle holds a string"):
        scripts.dequeue(q, now_ms=now, lease_until_ms=now + LEASE_MS, count=5, idle_entry=f"{LEASE_MS} w1",
                        idle_until_ms=now + 5_000)
    assert redis_client.llen(q.pending) == 2 and redis_client.zcard(q.active) == 0


# -- a worker -----------------------------------------------------------------------------------------


@pytest.fixture
def ran(registry: TaskRegistry) -> list[str]:
    seen: list[str] = []
    lock = threading.Lock()

    @task(name="push.note", registry=registry)
    def note(tag: str) -> None:
        with lock:
            seen.append(tag)

    return seen


def test_an_idle_worker_gets_each_task_pushed_and_lists_itself_again(
        make_worker, client: Client, inspector: Inspector, redis_client: redis.Redis, ran: list[str]) -> None:
    worker = make_worker(fetch_poll_interval=30.0)  # a 30 s poll: only a wake-up or a push brings a task soon
    q = worker.keys.queue("default")
    wait_until(lambda: redis_client.zcard(q.idle) == 1, 10, message="the worker to list itself")
    missed = []
    for n in range(3):
        handle = client.enqueue("push.note", {"tag": str(n)}, retention=60)
        if handle.state is TaskState.PENDING:
            # Once in CI's Redis Cluster leg (1 run in many, never reproduced), SPUBLISH found no
            # subscriber on the worker's push channel, and logged nothing: redis-py renews a pub/sub
            # connection on its own. The task then waits for the wake-up, as it must; more than one
            # such miss in three is a failure.
            missed.append(n)
            warnings.warn(f"push {n} found no subscriber (listed: {redis_client.zcard(q.idle)}, subscribed: "
                          f"{worker.subscriber.subscribed.is_set()})", stacklevel=1)
        else:
            assert handle.state is TaskState.ACTIVE  # the handle says where it went (a review: it said pending)
            assert handle.fetched_at is not None and handle.fetched_at == handle.enqueued_at  # as written
        wait_until(lambda h=handle: inspector.get_task("default", h.id).state is TaskState.COMPLETED, 10,
                   message=f"task {n} to complete")  # a missed push too: its wake-up, not the 30 s poll
        wait_until(lambda: redis_client.zcard(q.idle) == 1, 10, message="the worker to list itself again")
    assert ran == ["0", "1", "2"]
    assert len(missed) <= 1 and worker.processor.pushed == 3 - len(missed)  # the others never went through pending
    info = inspector.get_task("default", handle.id)
    assert info.retried == 0
    # A push in the format of an earlier version ("<id> <message>", lease 1) is still taken.
    wait_until(lambda: redis_client.zcard(q.idle) == 1, 10, message="the worker to list itself again")
    redis_client.delete(q.idle)
    list_worker(redis_client, q, worker.server_id)
    handle = client.enqueue("push.note", {"tag": "old"}, retention=60)
    wait_until(lambda: inspector.get_task("default", handle.id).state is TaskState.COMPLETED, 10,
               message="the task pushed the old way to complete")
    assert ran[-1] == "old" and worker.processor.pushed == 4 - len(missed)


def test_a_worker_is_listed_only_once_its_subscription_is_in_place(
        make_worker, client: Client, inspector: Inspector, redis_client: redis.Redis, ran: list[str]) -> None:
    """CI's Redis Cluster leg: a starting worker listed itself from its first fetch, before its subscriber
    had subscribed to its push channel (slower on a cluster), so the first enqueue's push found no
    subscriber and the task waited for a poll. It is listed only once a push can reach it."""
    gate = threading.Event()
    worker = make_worker(start=False)
    real = worker.broker.pubsub

    def slow_subscription():  # the subscription takes its time
        gate.wait(10)
        return real()

    worker.broker.pubsub = slow_subscription  # type: ignore[method-assign]
    q = worker.keys.queue("default")
    try:
        worker.start()
        let_worker_run(inspector, worker, beats=3)  # several fetches, each finding the queue empty
        assert redis_client.zcard(q.idle) == 0 and not worker.subscriber.subscribed.is_set()
    finally:
        gate.set()
    wait_until(lambda: redis_client.zcard(q.idle) == 1, 10, message="the subscribed worker to list itself")
    handle = client.enqueue("push.note", {"tag": "first"}, retention=60)
    assert handle.state is TaskState.ACTIVE  # pushed
    wait_until(lambda: ran == ["first"], 10, message="the pushed task to run")


def test_a_worker_is_listed_only_while_no_handler_runs(
        make_worker, client: Client, inspector: Inspector, redis_client: redis.Redis, registry: TaskRegistry,
        ran: list[str]) -> None:
    started, release = threading.Event(), threading.Event()

    @task(name="push.block", registry=registry)
    def block() -> None:
        started.set()
        release.wait(10)

    worker = make_worker()  # polls every 0.2 s: each poll's dequeue finds the queue empty
    q = worker.keys.queue("default")
    try:
        wait_until(lambda: redis_client.zcard(q.idle) == 1, 10, message="the idle worker to list itself")
        client.enqueue("push.block", {})
        assert started.wait(10)
        let_worker_run(inspector, worker, beats=3)  # polls go by while the handler runs
        assert redis_client.zcard(q.idle) == 0  # busy: its tasks come through pending
        second = client.enqueue("push.note", {"tag": "beside"}, retention=60)
        wait_until(lambda: inspector.get_task("default", second.id).state is TaskState.COMPLETED, 10,
                   message="the second task to run beside the first")
        assert worker.processor.pushed == 1 and ran == ["beside"]
    finally:
        release.set()
    wait_until(lambda: redis_client.zcard(q.idle) == 1, 10, message="the worker, idle again, to list itself")


def test_a_task_pushed_to_a_worker_that_stopped_fetching_goes_back_to_pending(
        make_worker, client: Client, inspector: Inspector, redis_client: redis.Redis, ran: list[str]) -> None:
    worker = make_worker(fetch_poll_interval=30.0)
    q = worker.keys.queue("default")
    wait_until(lambda: redis_client.zcard(q.idle) == 1, 10, message="the worker to list itself")
    (entry, lapses), = redis_client.zrange(q.idle, 0, -1, withscores=True)
    worker.processor.stop()  # quiet: still subscribed; it takes itself off the list
    wait_until(lambda: redis_client.zcard(q.idle) == 0, 10, message="the quiet worker to take itself off the list")
    redis_client.zadd(q.idle, {entry: lapses})  # as if an enqueue had read the listing just before that
    handle = client.enqueue("push.note", {"tag": "late"})
    wait_until(lambda: redis_client.lrange(q.pending, 0, -1) == [handle.id], 10, message="the task to be handed back")
    info = inspector.get_task("default", handle.id)
    assert info.state is TaskState.PENDING and info.retried == 0
    assert ran == [] and worker.processor.pushed == 0
    assert redis_client.zcard(q.idle) == 0 and redis_client.zcard(q.active) == 0


def test_a_worker_that_stops_fetching_takes_itself_off_the_list(
        make_worker, client: Client, redis_client: redis.Redis, ran: list[str]) -> None:
    worker = make_worker(queues={"default": 1, "other": 1}, fetch_poll_interval=30.0)
    idle = [worker.keys.queue(name).idle for name in ("default", "other")]
    wait_until(lambda: all(redis_client.zcard(key) == 1 for key in idle), 10, message="the worker to list itself")
    worker.processor.stop()
    wait_until(lambda: all(redis_client.zcard(key) == 0 for key in idle), 10, message="the lists to empty")
    handle = client.enqueue("push.note", {"tag": "after"})
    assert redis_client.lrange(worker.keys.queue("default").pending, 0, -1) == [handle.id]  # not pushed: waits
    assert worker.processor.pushed == 0 and ran == []


def test_a_worker_that_shuts_down_is_off_the_list_when_shutdown_returns(make_worker, redis_client: redis.Redis) -> None:
    worker = make_worker(fetch_poll_interval=30.0)
    q = worker.keys.queue("default")
    wait_until(lambda: redis_client.zcard(q.idle) == 1, 10, message="the worker to list itself")
    worker.shutdown(timeout=2)
    assert redis_client.zcard(q.idle) == 0


# -- a pushed task run by the subscriber's reading thread (no hop to a handler thread) -----------------


def idle_worker(make_worker, redis_client: redis.Redis, **options: Any) -> Any:
    """A started worker that polls every 30 s (only a push brings a task soon), once it is listed as
    waiting for the default queue."""
    worker = make_worker(fetch_poll_interval=30.0, **options)
    wait_until(lambda: redis_client.zcard(worker.keys.queue("default").idle) == 1, 10,
               message="the worker to list itself")
    return worker


def test_an_idle_worker_runs_a_pushed_task_on_the_thread_that_read_it_and_reads_on_meanwhile(
        make_worker, client: Client, inspector: Inspector, redis_client: redis.Redis, registry: TaskRegistry,
        ran: list[str]) -> None:
    """The reading thread hands the reading to the subscriber's other thread and runs the task itself;
    meanwhile that other thread reads: a cancel request for the running task reaches it. A second task
    is not pushed (the worker is busy, so not listed): it goes through pending to a handler thread."""
    threads: list[str] = []
    started = threading.Event()

    @task(name="push.where", registry=registry)
    def where() -> str:
        threads.append(threading.current_thread().name)
        started.set()
        if len(threads) == 1:
            from queuecore import current_task
            assert current_task().wait_cancelled(10)  # read by the other subscriber thread
        return "ok"

    worker = idle_worker(make_worker, redis_client)
    q = worker.keys.queue("default")
    first = client.enqueue("push.where", {}, retention=60)
    assert started.wait(10)
    assert threads[0].startswith("queuecore-subscriber")
    beside = client.enqueue("push.note", {"tag": "beside"}, retention=60)
    wait_until(lambda: inspector.get_task("default", beside.id).state is TaskState.COMPLETED, 10,
               message="the second task to run beside the first")
    assert ran == ["beside"]
    inspector.cancel_task("default", first.id)
    wait_until(lambda: inspector.get_task("default", first.id).state in (TaskState.COMPLETED, TaskState.ARCHIVED),
               10, message="the first task to end once its cancel request is read")
    assert worker.processor.pushed == 1
    # The thread that ran it stands by again: the next push on the idle worker is read and run by a
    # subscriber thread once more (whichever holds the reading now).
    wait_until(lambda: redis_client.zcard(q.idle) == 1, 10, message="the worker, idle again, to list itself")
    third = client.enqueue("push.where", {}, retention=60)
    wait_until(lambda: inspector.get_task("default", third.id).state is TaskState.COMPLETED, 10,
               message="the third task")
    assert threads[1].startswith("queuecore-subscriber") and worker.processor.pushed == 2


def test_a_pushed_task_goes_to_a_handler_thread_when_no_subscriber_thread_is_free(
        make_worker, client: Client, inspector: Inspector, redis_client: redis.Redis, registry: TaskRegistry) -> None:
    """Both subscriber threads busy reading or running a task that is still held (abandoned, say): a
    push is dispatched to a handler thread as before; the worker never waits for a reader."""
    threads: list[str] = []

    @task(name="push.thread", registry=registry)
    def thread_name() -> None:
        threads.append(threading.current_thread().name)

    worker = idle_worker(make_worker, redis_client)
    subscriber = worker.subscriber
    with subscriber._turn:  # the thread standing by is taken away, as if it ran a task of its own
        subscriber._standing_by -= 1
    try:
        handle = client.enqueue("push.thread", {}, retention=60)
        wait_until(lambda: inspector.get_task("default", handle.id).state is TaskState.COMPLETED, 10,
                   message="the task to run")
    finally:
        with subscriber._turn:
            subscriber._standing_by += 1
    assert threads == [threads[0]] and threads[0].startswith("queuecore-handler")
    assert worker.processor.pushed == 1


def test_a_pushed_task_abandoned_on_a_subscriber_thread_leaves_the_pool_and_the_reading_alone(
        make_worker, client: Client, inspector: Inspector, redis_client: redis.Redis, registry: TaskRegistry,
        ran: list[str]) -> None:
    """A handler run by a subscriber thread that ignores its timeout's interrupt is abandoned as any:
    the task is archived and its run slot freed; the handler pool's count of threads is untouched (the
    thread is not the pool's), and the other subscriber thread reads on: the next push runs."""
    release, finished, where = threading.Event(), threading.Event(), []

    @task(name="push.stuck", registry=registry, timeout=0.3, max_retry=0)
    def stuck() -> None:
        where.append(threading.current_thread().name)
        try:
            release.wait(30)  # blocks in C: the timeout's asynchronous exception cannot land
        finally:
            finished.set()

    worker = idle_worker(make_worker, redis_client, concurrency=1, abandon_grace=0.5)
    q = worker.keys.queue("default")
    pool = worker.processor.pool
    try:
        threads_before = pool.threads
        blocked = client.enqueue("push.stuck", {})
        archived = wait_until(lambda: (info := inspector.get_task("default", blocked.id)).state
                              is TaskState.ARCHIVED and info, 10, message="the stuck task to be abandoned")
        assert "abandoned" in archived.last_error and where[0].startswith("queuecore-subscriber")
        assert pool._working == threads_before == pool.threads  # no pool thread was counted as abandoned
        wait_until(lambda: redis_client.zcard(q.idle) == 1, 10, message="the worker, idle again, to list itself")
        after = client.enqueue("push.note", {"tag": "after"}, retention=60)
        wait_until(lambda: inspector.get_task("default", after.id).state is TaskState.COMPLETED, 10,
                   message="the next pushed task")
        assert ran == ["after"] and not finished.is_set()
    finally:
        release.set()
    assert finished.wait(10)


def test_a_worker_shutting_down_waits_for_a_pushed_task_run_on_a_subscriber_thread(
        make_worker, client: Client, inspector: Inspector, redis_client: redis.Redis, registry: TaskRegistry) -> None:
    started, release = threading.Event(), threading.Event()

    @task(name="push.slow", registry=registry)
    def slow() -> str:
        started.set()
        release.wait(10)
        return "finished"

    worker = idle_worker(make_worker, redis_client)
    handle = client.enqueue("push.slow", {}, retention=60)
    assert started.wait(10)
    stopping = threading.Thread(target=worker.shutdown, kwargs={"timeout": 10})
    stopping.start()
    try:
        let_worker_run(inspector, worker, beats=1)  # shutting down, the task still runs
        assert inspector.get_task("default", handle.id).state is TaskState.ACTIVE
    finally:
        release.set()
    stopping.join(15)
    assert not stopping.is_alive()
    info = inspector.get_task("default", handle.id)
    assert info.state is TaskState.COMPLETED and info.result == "finished"
    assert not any(t.is_alive() for t in worker.subscriber._threads)


def test_a_pushed_task_started_after_its_dispatch_returned_goes_to_a_handler_thread(
        make_worker, client: Client, registry: TaskRegistry) -> None:
    """The race a review found: the worker looked idle when the push came, but another attempt took the
    run slot first, so the push's start waited. Started later on the same (subscriber) thread by its
    next dispatch, it must go to a handler thread: the push's call had returned, and nobody would run
    work left for it (the task was held for good, its lease renewed, a run slot lost)."""
    threads: list[str] = []

    @task(name="push.later", registry=registry)
    def later() -> None:
        threads.append(threading.current_thread().name)

    worker = make_worker(start=False, concurrency=1)  # its own fetcher would take the task
    processor, clock = worker.processor, worker.clock
    client.enqueue("push.later", {})
    with processor._fetch_lock:  # as if the fetcher's dequeue had taken it
        (item,) = processor._fetch_scripts.dequeue(worker.keys.queue("default"), now_ms=to_ms(clock.now()),
                                                   lease_until_ms=to_ms(clock.now() + 30), count=1)
    here: list[Any] = []
    with processor._run_lock:
        processor._running += 1  # the one run slot is taken meanwhile
    processor._dispatch("default", item.id, item.msg, item.lease, 0, clock.now(), pushed=True, here=here)
    assert here == [None] and threads == []  # it waits for the slot; nothing is left for the caller to run
    with processor._run_lock:
        processor._running -= 1
    processor._start_ready()  # on this, the dispatching thread: as its next dispatch would
    wait_until(lambda: threads, 10, message="the task's handler to run")
    assert len(threads) == 1 and threads[0].startswith("queuecore-handler")
