"""The recoverer against hand-made damage and against itself: orphans repaired or archived within
two rounds, one undecodable task never blocks the others, and recoverers racing on the same expired
leases recover each task exactly once."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from queuecore import Worker
from queuecore.core.clock import to_ms
from queuecore.core.keys import stats_day, stats_minute
from queuecore.core.scripts import Scripts
from tests.conftest import FAST, wait_until
from tests.helpers import proc_tasks
from tests.helpers.state import add_id, make_msg, read_pending, seed_task
from tests.reliability.oracle import check_invariants, check_structure

Q = "default"


@pytest.fixture(scope="module")
def redis_url(keyspace_of_its_own: str) -> str:
    """The repair pass scans a bounded slice of the keyspace per turn: "within two rounds" holds on a
    Redis of these tests' own (with 200,000 other keys in the shared one, it did not)."""
    return keyspace_of_its_own


def test_orphans_are_repaired_or_archived_within_two_rounds(redis_client, connection, log: Path) -> None:
    proc_tasks.configure(str(log))
    from queuecore import default_registry

    q = connection.keys.queue(Q)
    past = to_ms(time.time()) - 10_000
    msg = lambda i: make_msg(i, Q, type="proc.noop", payload={"tag": i}, max_retry=3)  # noqa: E731
    # a lease without a task: an active id whose hash is gone
    add_id(redis_client, q, "active", "lease-no-task", past)
    # hashes without a list entry, in every state a task can be in
    for state in ("pending", "scheduled", "retry", "active"):
        seed_task(redis_client, q, f"lost-{state}", state, msg=msg(f"lost-{state}"), index=False, lease=1)
    seed_task(redis_client, q, "lost-archived", "archived", msg=msg("lost-archived"), index=False)
    seed_task(redis_client, q, "lost-weird", "nonsense", msg=msg("lost-weird"), index=False)
    # an undecodable task among expired good ones: it must not stop their recovery
    seed_task(redis_client, q, "garbled", "active", score=past, msg="{not json", lease=1)
    good = [f"good-{i}" for i in range(5)]
    for i in good:
        seed_task(redis_client, q, i, "active", score=past + 1, msg=msg(i), lease=1)

    worker = Worker(connection=connection, registry=default_registry, **{**FAST, "recover_interval": 3600})
    try:
        _repair_and_run(worker, redis_client, connection, q, good, log)
    finally:
        if worker.started_at:
            worker.shutdown(timeout=2)
        else:
            worker.redis.close()


def _repair_and_run(worker, redis_client, connection, q, good, log) -> None:
    for _ in range(2):  # two recoverer rounds, run by hand
        worker.recoverer.run_once()
    check_structure(redis_client, connection.keys)
    assert not redis_client.exists(q.task("lease-no-task"))
    assert redis_client.zscore(q.active, "lease-no-task") is None
    archived = {i: redis_client.hget(q.task(i), "error") for i in ("garbled", "lost-weird")}
    assert archived["garbled"].startswith("worker lost (lease expired); message undecodable")
    assert archived["lost-weird"].startswith("repair: task hash had no list entry")
    assert set(good) | {"lost-pending", "lost-active"} <= set(read_pending(redis_client, q))

    worker.start()  # now let it run everything that was put back
    runnable = [*good, "lost-pending", "lost-scheduled", "lost-retry", "lost-active"]
    wait_until(lambda: all(not redis_client.exists(q.task(i)) for i in runnable), 15, message="the repaired tasks")
    summary = check_invariants(redis_client, connection.keys, [*runnable, "garbled", "lost-archived", "lost-weird"],
                               log)
    print(f"\n{summary['counts']}")
    assert summary["counts"] == {"completed": 9, "archived": 3}


def test_racing_recoverers_recover_each_task_exactly_once(redis_client, connection, registry) -> None:
    q = connection.keys.queue(Q)
    past = to_ms(time.time()) - 10_000
    ids = [f"x{i}" for i in range(400)]
    pipe = redis_client.pipeline()
    for n, i in enumerate(ids):
        pipe.hset(q.task(i), mapping={"msg": make_msg(i, Q, max_retry=5 if n % 4 else 0), "state": "active",
                                      "lease": "1"})
        pipe.zadd(q.active, {i: past + n})
    pipe.execute()

    workers = [Worker(connection=connection, registry=registry, **FAST) for _ in range(6)]  # not started
    barrier = threading.Barrier(len(workers))
    results: list[tuple[int, int, int]] = []

    def race(w: Worker) -> None:
        barrier.wait()
        results.append(w.recoverer.run_once())

    threads = [threading.Thread(target=race, args=(w,)) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for w in workers:
        w.redis.close()
    requeued = sum(r[0] for r in results)
    archived = sum(r[1] for r in results)
    print(f"\nper recoverer (requeued, archived, orphans): {results}")
    assert (requeued, archived) == (300, 100)
    pending = read_pending(redis_client, q)
    assert len(pending) == len(set(pending)) == 300
    for n, i in enumerate(ids):
        h = redis_client.hgetall(q.task(i))
        assert (h["state"], h.get("retried")) == (("pending", "1") if n % 4 else ("archived", None)), h
    assert redis_client.zcard(q.active) == 0
    check_structure(redis_client, connection.keys)


def test_racing_recover_scripts_on_a_shared_clock(redis_client, connection) -> None:
    """The scripts alone, many clients at once, with every call at the same 'now'."""
    q = connection.keys.queue(Q)
    now = to_ms(time.time())
    for i in range(200):
        seed_task(redis_client, q, f"y{i}", "active", score=now - 1, lease=1, max_retry=3)
    clients = [connection.connect() for _ in range(8)]
    out: list[tuple[int, int, int]] = []
    barrier = threading.Barrier(len(clients))

    def go(c) -> None:
        s = Scripts(c, connection.keys)
        barrier.wait()
        while True:
            got = s.recover(q, now_ms=now, limit=7, day=stats_day(now / 1000), minute=stats_minute(now / 1000))
            out.append(got)
            if got.counts == (0, 0, 0):
                return

    threads = [threading.Thread(target=go, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for c in clients:
        c.close()
    assert sum(r[0] for r in out) == 200
    pending = read_pending(redis_client, q)
    assert sorted(pending) == sorted(f"y{i}" for i in range(200))
    assert {redis_client.hget(q.task(f"y{i}"), "retried") for i in range(200)} == {"1"}
    check_structure(redis_client, connection.keys)


def test_recoverers_of_many_workers_share_one_repair_turn(redis_client, connection, registry) -> None:
    q = connection.keys.queue(Q)
    workers = [Worker(connection=connection, registry=registry, **{**FAST, "repair_interval": 3600})
               for _ in range(3)]
    seed_task(redis_client, q, "lost", "retry", index=False)
    try:
        results = [w.recoverer.repair() for w in workers]
    finally:
        for w in workers:
            w.redis.close()
    assert results == [(1, 0), (0, 0), (0, 0)]  # the first took the turn; the others waited for the next
    assert int(redis_client.hget(q.repair, "next_at")) > to_ms(time.time()) + 3_000_000


def test_one_repair_turn_goes_on_past_a_step_that_stopped_early_at_the_passs_start(
        redis_client, connection, registry) -> None:
    """A step stops after 4 MB of messages and gives back the cursor it began at; when that was "0" (all
    of this keyspace fits one SCAN step), the turn took it for a finished pass and left the other
    orphans for the next turn, a repair interval later (9 of 12 repaired here)."""
    q = connection.keys.queue(Q)
    for n in range(12):
        seed_task(redis_client, q, f"big{n:02d}", "pending", index=False, payload={"pad": "x" * 500_000})
    worker = Worker(connection=connection, registry=registry, **{**FAST, "repair_interval": 3600})
    try:
        assert worker.recoverer.repair() == (12, 0)
    finally:
        worker.redis.close()
    assert sorted(read_pending(redis_client, q)) == [f"big{n:02d}" for n in range(12)]
