"""Every Lua script, through its typed wrapper in scripts.py, asynq-style: seed a state, run the
wrapper, assert the complete resulting state (lists, zsets, hashes, stats, unique locks)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import redis

from queuecore.core import reasons
from queuecore.core.errors import DuplicateTask, InvalidTaskState, TaskIdConflict, TaskNotFound
from queuecore.core.keys import QueueKeys, stats_day, stats_minute
from queuecore.core.message import DEFAULT_MAX_RETRY
from queuecore.core.scripts import Dequeued, DoneItem, EnqueueItem, Scripts
from tests.helpers.state import (
    EVERY,
    Subscription,
    add_id,
    empty_state,
    make_msg,
    read_queue_state,
    seed_task,
)

NOW = 1_800_000_000_000  # unix ms
DAY = stats_day(NOW / 1000)
MINUTE = stats_minute(NOW / 1000)
LEASE_UNTIL = NOW + 30_000
STARTED = NOW - 5_000

STATS_PROCESSED = {"processed": "1", f"processed:{DAY}": "1", f"processed:{MINUTE}": "1"}
STATS_FAILED = {**STATS_PROCESSED, "failed": "1", f"failed:{DAY}": "1", f"failed:{MINUTE}": "1"}


def stats(processed: int, failed: int = 0) -> dict[str, str]:
    out = {f"processed{s}": str(processed) for s in ("", f":{DAY}", f":{MINUTE}")}
    if failed:
        out.update({f"failed{s}": str(failed) for s in ("", f":{DAY}", f":{MINUTE}")})
    return out


@pytest.fixture
def r(redis_client: redis.Redis) -> redis.Redis:
    return redis_client


@pytest.fixture
def q(connection) -> QueueKeys:
    return connection.keys.queue("default")


def seed_active(r: redis.Redis, q: QueueKeys, task_id: str = "a", lease: int = 3, **fields: Any) -> dict[str, str]:
    return seed_task(r, q, task_id, "active", score=LEASE_UNTIL, lease=lease, started_at=STARTED, **fields)


def without(d: dict[str, str], *names: str) -> dict[str, str]:
    return {k: v for k, v in d.items() if k not in names}


# == enqueue ====================================================================================


def test_enqueue_pending(r, q, scripts: Scripts) -> None:
    m1, m2 = make_msg("t1", q.queue), make_msg("t2", q.queue, payload={"x": 1})
    assert scripts.enqueue(q, "t1", m1, now_ms=NOW) == 1
    assert scripts.enqueue(q, "t2", m2, now_ms=NOW + 1) == 1
    Scripts.check_enqueue(1, "t1", q.queue)  # OK raises nothing
    assert read_queue_state(r, q) == empty_state(
        pending=["t1", "t2"],
        tasks={"t1": {"msg": m1, "state": "pending"},
               "t2": {"msg": m2, "state": "pending"}})


def test_enqueue_publishes_wake_only_when_pending_turns_non_empty(r, q, scripts: Scripts) -> None:
    with Subscription(r, q.wake_channel) as sub:
        scripts.enqueue(q, "t1", make_msg("t1", q.queue), now_ms=NOW)
        assert sub.messages() == ["1"]
        scripts.enqueue(q, "t2", make_msg("t2", q.queue), now_ms=NOW)
        assert sub.messages() == []


def test_enqueue_tells_of_a_scheduled_task_that_falls_due_before_every_other(r, q, scripts: Scripts) -> None:
    """"due <ms>" on the wake channel: the forwarders wake for it rather than at their next round."""
    with Subscription(r, q.wake_channel) as sub:
        scripts.enqueue(q, "s1", make_msg("s1", q.queue), now_ms=NOW, process_at_ms=NOW + 5000)
        assert sub.messages() == [f"due {NOW + 5000}"]  # the first scheduled task
        scripts.enqueue(q, "s2", make_msg("s2", q.queue), now_ms=NOW, process_at_ms=NOW + 6000)
        scripts.enqueue(q, "s3", make_msg("s3", q.queue), now_ms=NOW, process_at_ms=NOW + 5000)
        assert sub.messages() == []  # due after (or with) one already waiting: its forwarder wakes for that
        batch = [EnqueueItem(i, make_msg(i, q.queue), process_at_ms=NOW + due)
                 for i, due in (("b1", 4000), ("b2", 3000), ("b3", 4500))]
        assert scripts.enqueue_many(q, batch, now_ms=NOW) == [1, 1, 1]
        assert sub.messages() == [f"due {NOW + 3000}"]  # once for the batch: its soonest
        scripts.enqueue(q, "p1", make_msg("p1", q.queue), now_ms=NOW)
        assert sub.messages() == ["1"]  # pending work is a plain wake-up
    assert read_queue_state(r, q)["scheduled"] == {"s1": NOW + 5000, "s2": NOW + 6000, "s3": NOW + 5000,
                                                    "b1": NOW + 4000, "b2": NOW + 3000, "b3": NOW + 4500}


def test_enqueue_many_stores_a_mixed_batch_and_wakes_once(r, q, scripts: Scripts) -> None:
    ukey = q.unique("test.task", "e" * 32)
    r.set(ukey, "holder", px=60_000)
    old = seed_task(r, q, "dup", "archived", score=NOW - 1)
    m = {i: make_msg(i, q.queue) for i in ("a", "b", "s", "u")}
    m["dup"] = make_msg("dup", q.queue, payload={"another": "call"})  # not the stored task's message
    items = [EnqueueItem("a", m["a"]), EnqueueItem("s", m["s"], process_at_ms=NOW + 500), EnqueueItem("dup", m["dup"]),
             EnqueueItem("u", m["u"], unique_key=ukey, unique_ttl_ms=60_000), EnqueueItem("b", m["b"])]
    with Subscription(r, q.wake_channel) as sub:
        assert scripts.enqueue_many(q, items, now_ms=NOW) == [1, 1, 0, [-1, "holder"], 1]
        assert sub.messages() == ["1", f"due {NOW + 500}"]
    assert read_queue_state(r, q) == empty_state(
        pending=["a", "b"], scheduled={"s": NOW + 500}, archived={"dup": NOW - 1}, unique={ukey: "holder"},
        tasks={"a": {"msg": m["a"], "state": "pending"},
               "b": {"msg": m["b"], "state": "pending"},
               "s": {"msg": m["s"], "state": "scheduled"}, "dup": old})


def test_a_resent_enqueue_stores_nothing_twice(r, q, scripts: Scripts) -> None:
    """A call may be sent again after a lost reply (the connection dropped after Redis ran it): a
    generated id found stored is that earlier send, and so is a caller-chosen id whose task holds the
    very same message; both are reported enqueued and not pushed again. A caller-chosen id holding
    another message (another call's) is a conflict."""
    items = [EnqueueItem("g1", make_msg("g1", q.queue), check_id=False),
             EnqueueItem("g2", make_msg("g2", q.queue), process_at_ms=NOW + 500, check_id=False),
             EnqueueItem("c1", make_msg("c1", q.queue))]
    assert scripts.enqueue_many(q, items, now_ms=NOW) == [1, 1, 1]
    first = read_queue_state(r, q)
    assert scripts.enqueue_many(q, items, now_ms=NOW + 7) == [1, 1, 1]
    assert read_queue_state(r, q) == first
    assert first["pending"] == ["g1", "c1"]  # oldest first
    other_call = EnqueueItem("c1", make_msg("c1", q.queue, payload={"another": "call"}))
    assert scripts.enqueue_many(q, [other_call], now_ms=NOW + 9) == [0]
    assert read_queue_state(r, q) == first


def test_enqueue_scheduled(r, q, scripts: Scripts) -> None:
    msg = make_msg("s1", q.queue)
    assert scripts.enqueue(q, "s1", msg, now_ms=NOW, process_at_ms=NOW + 60_000) == 1
    assert read_queue_state(r, q) == empty_state(
        scheduled={"s1": NOW + 60_000}, tasks={"s1": {"msg": msg, "state": "scheduled"}})


def test_enqueue_unique_takes_the_lock_with_a_ttl(r, q, scripts: Scripts) -> None:
    ukey = q.unique("test.task", "d" * 32)
    msg = make_msg("u1", q.queue)
    assert scripts.enqueue(q, "u1", msg, now_ms=NOW, unique_key=ukey, unique_ttl_ms=60_000) == 1
    assert read_queue_state(r, q) == empty_state(
        pending=["u1"], unique={ukey: "u1"},
        tasks={"u1": {"msg": msg, "state": "pending", "unique": ukey}})
    assert 0 < r.pttl(ukey) <= 60_000


def test_enqueue_unique_scheduled(r, q, scripts: Scripts) -> None:
    ukey = q.unique("test.task", "e" * 32)
    msg = make_msg("u1", q.queue)
    assert scripts.enqueue(q, "u1", msg, now_ms=NOW, process_at_ms=NOW + 10, unique_key=ukey,
                           unique_ttl_ms=5000) == 1
    assert read_queue_state(r, q) == empty_state(
        scheduled={"u1": NOW + 10}, unique={ukey: "u1"},
        tasks={"u1": {"msg": msg, "state": "scheduled", "unique": ukey}})
    assert 0 < r.pttl(ukey) <= 5000


def test_enqueue_unique_key_without_ttl_is_not_unique(r, q, scripts: Scripts) -> None:
    ukey = q.unique("test.task", "f" * 32)
    msg = make_msg("u1", q.queue)
    assert scripts.enqueue(q, "u1", msg, now_ms=NOW, unique_key=ukey, unique_ttl_ms=0) == 1
    assert read_queue_state(r, q) == empty_state(
        pending=["u1"], tasks={"u1": {"msg": msg, "state": "pending"}})


def test_enqueue_id_conflict_changes_nothing(r, q, scripts: Scripts) -> None:
    existing = seed_task(r, q, "t1", "retry", score=NOW + 1, retried=2, error="boom")
    before = read_queue_state(r, q)
    ukey = q.unique("test.task", "a" * 32)
    reply = scripts.enqueue(q, "t1", make_msg("t1", q.queue, payload={"new": True}), now_ms=NOW,
                            unique_key=ukey, unique_ttl_ms=60_000)
    assert reply == 0
    with pytest.raises(TaskIdConflict, match="t1"):
        Scripts.check_enqueue(reply, "t1", q.queue)
    assert read_queue_state(r, q) == before  # no lock taken, nothing pushed
    assert before["tasks"]["t1"] == existing


def test_enqueue_refused_while_unique_lock_is_held(r, q, scripts: Scripts) -> None:
    ukey = q.unique("test.task", "b" * 32)
    r.set(ukey, "holder", px=60_000)
    reply = scripts.enqueue(q, "t2", make_msg("t2", q.queue), now_ms=NOW, unique_key=ukey, unique_ttl_ms=60_000)
    assert reply == [-1, "holder"]
    with pytest.raises(DuplicateTask, match="holder"):
        Scripts.check_enqueue(reply, "t2", q.queue)
    assert read_queue_state(r, q) == empty_state(unique={ukey: "holder"})


# == dequeue ====================================================================================


def test_dequeue_moves_oldest_pending_to_active_under_new_leases(r, q, scripts: Scripts) -> None:
    ha = seed_task(r, q, "a", "pending", pending_since=NOW - 3)
    hb = seed_task(r, q, "b", "pending", pending_since=NOW - 2, retried=3, lease=NOW + 4, error="old")
    hc = seed_task(r, q, "c", "pending", pending_since=NOW - 1)
    got = scripts.dequeue(q, now_ms=NOW, lease_until_ms=LEASE_UNTIL, count=2)
    # The lease's number: the dequeue's time (ms), or one more than the last when that is later.
    assert got == [Dequeued("a", ha["msg"], NOW, 0), Dequeued("b", hb["msg"], NOW + 5, 3)]
    assert read_queue_state(r, q) == empty_state(
        pending=["c"], active={"a": LEASE_UNTIL, "b": LEASE_UNTIL},
        tasks={"a": {**ha, "state": "active", "started_at": str(NOW), "lease": str(NOW)},
               "b": {**hb, "state": "active", "started_at": str(NOW), "lease": str(NOW + 5)},
               "c": hc})


def test_a_task_id_enqueued_again_never_gets_a_lease_number_an_earlier_holder_had(r, q, scripts: Scripts) -> None:
    """A review: the numbers lived in the task's hash, so they started again at 1 when a task id was
    reused; a worker paused past its lease then acknowledged the new task as its own (marked done while
    it ran). The number is now the dequeue's time, which no earlier holder of the id can have had."""
    scripts.enqueue(q, "order-1", '{"type":"t","payload":{}}', now_ms=NOW)
    (stale,) = scripts.dequeue(q, now_ms=NOW, lease_until_ms=NOW + 1_500, count=1)  # worker A, then paused
    assert scripts.recover(q, now_ms=NOW + 2_000, limit=10, day=DAY, minute=MINUTE).counts == (1, 0, 0)
    (taken_back,) = scripts.dequeue(q, now_ms=NOW + 2_001, lease_until_ms=NOW + 30_000, count=1)  # worker B
    assert scripts.done(q, "order-1", taken_back.lease, now_ms=NOW + 2_002, retention_ms=0, result="",
                        day=DAY, minute=MINUTE) is True  # completed, and deleted: the id is free
    scripts.enqueue(q, "order-1", '{"type":"t","payload":{"n":2}}', now_ms=NOW + 2_003)
    (new,) = scripts.dequeue(q, now_ms=NOW + 2_004, lease_until_ms=NOW + 30_000, count=1)  # worker C
    assert len({stale.lease, taken_back.lease, new.lease}) == 3
    assert scripts.done(q, "order-1", stale.lease, now_ms=NOW + 2_005, retention_ms=0, result="",
                        day=DAY, minute=MINUTE) is False  # A, resumed: refused
    assert r.hget(q.task("order-1"), "state") == "active"  # C's task runs on, still its own


def test_dequeue_stops_after_4_mb_of_messages_and_says_so(r, q, scripts: Scripts) -> None:
    """A message may be as long as the clients' max_payload_bytes: 180 of 500 KB in one call held Redis
    0.29 s. A call takes no task after the one that brings what it read to 4 MB (the ninth here)."""
    for n in range(20):
        seed_task(r, q, f"big{n:02d}", "pending", payload={"pad": "x" * 500_000})
    calls = [scripts.dequeue(q, now_ms=NOW, lease_until_ms=LEASE_UNTIL, count=20) for _ in range(3)]
    assert [(len(c), c.cut) for c in calls] == [(9, True), (9, True), (2, False)]
    assert [d.id for c in calls for d in c] == [f"big{n:02d}" for n in range(20)]  # oldest first, each once
    assert r.llen(q.pending) == 0 and r.zcard(q.active) == 20
    small = scripts.dequeue(q, now_ms=NOW, lease_until_ms=LEASE_UNTIL, count=20)
    assert (small, small.cut) == ([], False)


def test_dequeue_count_larger_than_pending(r, q, scripts: Scripts) -> None:
    ha = seed_task(r, q, "a", "pending")
    got = scripts.dequeue(q, now_ms=NOW, lease_until_ms=LEASE_UNTIL, count=10)
    assert got == [Dequeued("a", ha["msg"], NOW, 0)]
    assert read_queue_state(r, q) == empty_state(
        active={"a": LEASE_UNTIL}, tasks={"a": {**ha, "state": "active", "started_at": str(NOW), "lease": str(NOW)}})


def test_dequeue_empty_queue(r, q, scripts: Scripts) -> None:
    assert scripts.dequeue(q, now_ms=NOW, lease_until_ms=LEASE_UNTIL, count=5) == []
    assert read_queue_state(r, q) == empty_state()


def test_dequeue_from_paused_queue_returns_nothing(r, q, scripts: Scripts) -> None:
    seed_task(r, q, "a", "pending", pending_since=NOW)
    r.set(q.paused, "1")
    before = read_queue_state(r, q)
    assert scripts.dequeue(q, now_ms=NOW, lease_until_ms=LEASE_UNTIL, count=5) == []
    assert read_queue_state(r, q) == before
    assert before["paused"] is True


def test_dequeue_of_an_id_whose_hash_is_gone(r, q, scripts: Scripts) -> None:
    add_id(r, q, "pending", "ghost")
    hb = seed_task(r, q, "b", "pending")
    got = scripts.dequeue(q, now_ms=NOW, lease_until_ms=LEASE_UNTIL, count=2)
    assert got == [Dequeued("ghost", None, 0, 0), Dequeued("b", hb["msg"], NOW, 0)]
    assert read_queue_state(r, q) == empty_state(  # the ghost is dropped, and no hash is invented for it
        active={"b": LEASE_UNTIL}, tasks={"b": {**hb, "state": "active", "started_at": str(NOW), "lease": str(NOW)}})


# == done / retry / archive / requeue ===========================================================


def test_done_without_retention_deletes_the_task(r, q, scripts: Scripts) -> None:
    seed_active(r, q, "a", lease=3)
    hb = seed_active(r, q, "b", lease=1)
    assert scripts.done(q, "a", 3, now_ms=NOW, retention_ms=0, result="", day=DAY, minute=MINUTE) is True
    assert read_queue_state(r, q) == empty_state(active={"b": LEASE_UNTIL}, stats=STATS_PROCESSED,
                                                 tasks={"b": hb})


def test_done_with_retention_keeps_a_completed_task(r, q, scripts: Scripts) -> None:
    ha = seed_active(r, q, "a", lease=3, cancel=1, retried=2)
    r.hset(q.stats, mapping={"processed": 7, f"processed:{DAY}": 2})
    assert scripts.done(q, "a", 3, now_ms=NOW, retention_ms=60_000, result='{"ok":1}', day=DAY,
                        minute=MINUTE) is True
    assert read_queue_state(r, q) == empty_state(
        completed={"a": NOW + 60_000},
        stats={"processed": "8", f"processed:{DAY}": "3", f"processed:{MINUTE}": "1"},
        tasks={"a": {**without(ha, "cancel"), "state": "completed", "completed_at": str(NOW),
                     "result": '{"ok":1}'}})


def test_done_releases_its_own_unique_lock(r, q, scripts: Scripts) -> None:
    ukey = q.unique("test.task", "1" * 32)
    seed_active(r, q, "a", lease=1, unique=ukey)
    r.set(ukey, "a", px=60_000)
    assert scripts.done(q, "a", 1, now_ms=NOW, retention_ms=0, result="", day=DAY, minute=MINUTE,
                        unique_key=ukey) is True
    assert read_queue_state(r, q) == empty_state(stats=STATS_PROCESSED)


def test_done_keeps_a_unique_lock_held_by_another_task(r, q, scripts: Scripts) -> None:
    ukey = q.unique("test.task", "2" * 32)
    seed_active(r, q, "a", lease=1, unique=ukey)
    r.set(ukey, "newer", px=60_000)  # the lock expired and another task took it
    assert scripts.done(q, "a", 1, now_ms=NOW, retention_ms=0, result="", day=DAY, minute=MINUTE,
                        unique_key=ukey) is True
    assert read_queue_state(r, q) == empty_state(stats=STATS_PROCESSED, unique={ukey: "newer"})


def test_done_many_acknowledges_a_mixed_batch_in_one_call(r, q, scripts: Scripts) -> None:
    ukey = q.unique("test.task", "3" * 32)
    seed_active(r, q, "plain", lease=1)
    hk = seed_active(r, q, "kept", lease=2)
    hs = seed_active(r, q, "stale", lease=5)  # the worker holds lease 4: lost
    seed_active(r, q, "uniq", lease=1, unique=ukey)
    r.set(ukey, "uniq", px=60_000)
    items = [DoneItem("plain", 1, 0, ""), DoneItem("kept", 2, 30_000, '"r"'), DoneItem("stale", 4, 0, ""),
             DoneItem("uniq", 1, 0, "", ukey)]
    assert scripts.done_many(q, items, now_ms=NOW, day=DAY, minute=MINUTE) == [True, True, False, True]
    assert read_queue_state(r, q) == empty_state(
        active={"stale": LEASE_UNTIL}, completed={"kept": NOW + 30_000},
        stats={"processed": "3", f"processed:{DAY}": "3", f"processed:{MINUTE}": "3"},
        tasks={"stale": hs, "kept": {**hk, "state": "completed", "completed_at": str(NOW), "result": '"r"'}})


def test_retry_schedules_the_next_attempt(r, q, scripts: Scripts) -> None:
    ha = seed_active(r, q, "a", lease=2, retried=1, cancel=1, error="first")
    assert scripts.retry(q, "a", 2, now_ms=NOW, retry_at_ms=NOW + 15_000, error="ValueError: second", day=DAY,
                         minute=MINUTE) is True
    assert read_queue_state(r, q) == empty_state(
        retry={"a": NOW + 15_000}, stats=STATS_FAILED,
        tasks={"a": {**without(ha, "started_at", "cancel"), "state": "retry", "retried": "2",
                     "error": "ValueError: second", "failed_at": str(NOW)}})


def test_retry_of_a_first_failure_sets_retried_to_one(r, q, scripts: Scripts) -> None:
    ha = seed_active(r, q, "a", lease=1)
    assert scripts.retry(q, "a", 1, now_ms=NOW, retry_at_ms=NOW + 1, error="e", day=DAY, minute=MINUTE) is True
    assert read_queue_state(r, q)["tasks"]["a"] == {**without(ha, "started_at"), "state": "retry", "retried": "1",
                                                    "error": "e", "failed_at": str(NOW)}


@pytest.mark.parametrize("count_failure", [True, False])
def test_archive_a_failed_task(r, q, scripts: Scripts, count_failure: bool) -> None:
    ha = seed_active(r, q, "a", lease=4, retried=25, cancel=1)
    assert scripts.archive(q, "a", 4, now_ms=NOW, error="boom", day=DAY, minute=MINUTE, max_archive_size=100,
                           archive_cutoff_ms=NOW - 86_400_000, count_failure=count_failure) is True
    assert read_queue_state(r, q) == empty_state(
        archived={"a": NOW}, stats=STATS_FAILED if count_failure else {},
        tasks={"a": {**without(ha, "started_at", "cancel"), "state": "archived", "error": "boom",
                     "failed_at": str(NOW)}})


def seed_archived(r, q, count: int, first_score: int, prefix: str = "o") -> dict[str, dict[str, str]]:
    return {f"{prefix}{i:02d}": seed_task(r, q, f"{prefix}{i:02d}", "archived", score=first_score + i, error="old")
            for i in range(count)}


def test_archive_trims_the_oldest_over_the_size_limit_and_deletes_their_hashes(r, q, scripts: Scripts) -> None:
    old = seed_archived(r, q, 12, NOW - 1000)
    ha = seed_active(r, q, "a", lease=1)
    assert scripts.archive(q, "a", 1, now_ms=NOW, error="e", day=DAY, minute=MINUTE, max_archive_size=5,
                           archive_cutoff_ms=0) is True
    kept = [f"o{i:02d}" for i in range(8, 12)]
    assert read_queue_state(r, q) == empty_state(
        archived={**{k: NOW - 1000 + int(k[1:]) for k in kept}, "a": NOW}, stats=STATS_FAILED,
        tasks={**{k: old[k] for k in kept},
               "a": {**without(ha, "started_at"), "state": "archived", "error": "e", "failed_at": str(NOW)}})


def test_a_task_trimmed_from_the_archive_or_expired_by_the_janitor_releases_its_unique_lock(
        r, q, scripts: Scripts) -> None:
    """A review: a unique task deleted by the archive's trim or by the janitor kept its lock (up to its
    unique_for), so an identical task was refused as a duplicate of one that no longer existed, and no
    operator action could clear it. A lock another task took since stays."""
    locks = {name: q.unique("test.task", name * 32) for name in "abcd"}
    for n, (task_id, lock) in enumerate(locks.items()):
        seed_task(r, q, task_id, "archived", score=NOW - 1000 + n, unique=lock)
        r.set(lock, task_id if task_id != "b" else "newer", px=3_600_000)
    seed_active(r, q, "x", lease=1)
    assert scripts.archive(q, "x", 1, now_ms=NOW, error="e", day=DAY, minute=MINUTE, max_archive_size=3,
                           archive_cutoff_ms=0) is True  # trims "a" and "b"
    assert [r.get(locks[k]) for k in "abcd"] == [None, "newer", "c", "d"]
    assert scripts.janitor(q, now_ms=NOW, archive_cutoff_ms=NOW - 995, max_archive_size=10, limit=10) == (0, 2, 0)
    assert [r.get(locks[k]) for k in "abcd"] == [None, "newer", None, None]  # "c" and "d" were too old


def test_archive_trims_at_most_ten_per_call(r, q, scripts: Scripts) -> None:
    old = seed_archived(r, q, 15, NOW - 1000)
    seed_active(r, q, "a", lease=1)
    assert scripts.archive(q, "a", 1, now_ms=NOW, error="e", day=DAY, minute=MINUTE, max_archive_size=1,
                           archive_cutoff_ms=0) is True
    state = read_queue_state(r, q)
    kept = [f"o{i:02d}" for i in range(10, 15)]
    assert state["archived"] == {**{k: NOW - 1000 + int(k[1:]) for k in kept}, "a": NOW}
    assert set(state["tasks"]) == {*kept, "a"}
    assert all(state["tasks"][k] == old[k] for k in kept)


def test_archive_trims_by_age_and_deletes_the_hashes(r, q, scripts: Scripts) -> None:
    cutoff = NOW - 86_400_000
    seed_task(r, q, "too-old", "archived", score=cutoff - 1)
    at_cutoff = seed_task(r, q, "at-cutoff", "archived", score=cutoff)
    recent = seed_task(r, q, "recent", "archived", score=cutoff + 1)
    ha = seed_active(r, q, "a", lease=1)
    assert scripts.archive(q, "a", 1, now_ms=NOW, error="e", day=DAY, minute=MINUTE, max_archive_size=100,
                           archive_cutoff_ms=cutoff) is True
    assert read_queue_state(r, q) == empty_state(
        archived={"at-cutoff": cutoff, "recent": cutoff + 1, "a": NOW}, stats=STATS_FAILED,
        tasks={"at-cutoff": at_cutoff, "recent": recent,
               "a": {**without(ha, "started_at"), "state": "archived", "error": "e", "failed_at": str(NOW)}})


def test_requeue_puts_the_task_back_at_the_front_of_pending(r, q, scripts: Scripts) -> None:
    hp = seed_task(r, q, "p", "pending", pending_since=NOW - 10)
    ha = seed_active(r, q, "a", lease=2, retried=1)
    with Subscription(r, q.wake_channel) as sub:
        assert scripts.requeue(q, "a", 2, now_ms=NOW) is True
        assert sub.messages() == []  # pending was not empty
    assert read_queue_state(r, q) == empty_state(
        pending=["a", "p"],  # "a" is popped next: a graceful shutdown is not a reason to wait in line again
        tasks={"p": hp, "a": {**without(ha, "started_at"), "state": "pending", "pending_since": str(NOW)}})


def test_requeue_into_an_empty_pending_list_wakes_workers(r, q, scripts: Scripts) -> None:
    seed_active(r, q, "a", lease=2)
    with Subscription(r, q.wake_channel) as sub:
        assert scripts.requeue(q, "a", 2, now_ms=NOW) is True
        assert sub.messages() == ["1"]


FINISHERS: dict[str, Callable[[Scripts, QueueKeys, int], bool]] = {
    "done": lambda s, q, lease: s.done(q, "a", lease, now_ms=NOW, retention_ms=60_000, result="1", day=DAY,
                                       minute=MINUTE),
    "retry": lambda s, q, lease: s.retry(q, "a", lease, now_ms=NOW, retry_at_ms=NOW + 1000, error="e", day=DAY,
                                         minute=MINUTE),
    "archive": lambda s, q, lease: s.archive(q, "a", lease, now_ms=NOW, error="e", day=DAY, minute=MINUTE,
                                             max_archive_size=100, archive_cutoff_ms=0),
    "requeue": lambda s, q, lease: s.requeue(q, "a", lease, now_ms=NOW),
}


@pytest.mark.parametrize("finisher", FINISHERS)
@pytest.mark.parametrize("held", [3, 5, 0])
def test_finishers_refuse_a_stale_lease(r, q, scripts: Scripts, finisher: str, held: int) -> None:
    seed_active(r, q, "a", lease=4)  # someone else took the task over after our lease 3 expired
    before = read_queue_state(r, q)
    assert FINISHERS[finisher](scripts, q, held) is False
    assert read_queue_state(r, q) == before


@pytest.mark.parametrize("finisher", FINISHERS)
@pytest.mark.parametrize("state", ["pending", "retry", "archived", "completed", "scheduled"])
def test_finishers_refuse_a_task_that_left_active(r, q, scripts: Scripts, finisher: str, state: str) -> None:
    seed_task(r, q, "a", state, score=NOW, lease=4)  # same lease number, but recovered/cancelled meanwhile
    before = read_queue_state(r, q)
    assert FINISHERS[finisher](scripts, q, 4) is False
    assert read_queue_state(r, q) == before


@pytest.mark.parametrize("finisher", FINISHERS)
def test_finishers_refuse_a_deleted_task_and_create_nothing(r, q, scripts: Scripts, finisher: str) -> None:
    add_id(r, q, "active", "a", LEASE_UNTIL)  # in active, but its hash was deleted
    assert FINISHERS[finisher](scripts, q, 1) is False
    assert read_queue_state(r, q) == empty_state(active={"a": LEASE_UNTIL})


# == extend_lease ===============================================================================


def test_extend_lease_codes(r, q, scripts: Scripts) -> None:
    seed_active(r, q, "ok", lease=1)
    seed_active(r, q, "cancel", lease=2, cancel=1)
    seed_active(r, q, "stolen", lease=3)
    add_id(r, q, "active", "gone", LEASE_UNTIL)
    seed_task(r, q, "left", "retry", score=NOW, lease=5)
    before = read_queue_state(r, q)
    new_until = LEASE_UNTIL + 60_000
    codes = scripts.extend_lease(q, [("ok", 1), ("cancel", 2), ("stolen", 2), ("gone", 1), ("left", 5)],
                                 lease_until_ms=new_until)
    assert codes == [1, 2, 0, 0, 0]
    assert read_queue_state(r, q) == {
        **before, "active": {"ok": new_until, "cancel": new_until, "stolen": LEASE_UNTIL, "gone": LEASE_UNTIL}}


def test_extend_lease_with_nothing_held(r, q, scripts: Scripts) -> None:
    assert scripts.extend_lease(q, [], lease_until_ms=LEASE_UNTIL) == []
    assert read_queue_state(r, q) == empty_state()


# == forward ====================================================================================


@pytest.mark.parametrize("source", ["scheduled", "retry"])
def test_forward_moves_due_tasks_only(r, q, scripts: Scripts, source: str) -> None:
    hp = seed_task(r, q, "p0", "pending", pending_since=NOW - 100)
    h1 = seed_task(r, q, "due-early", source, score=NOW - 1000, retried=1, error="e")
    h2 = seed_task(r, q, "due-now", source, score=NOW)
    h3 = seed_task(r, q, "not-due", source, score=NOW + 1)
    assert scripts.forward(q, source, now_ms=NOW, limit=100) == (2, NOW + 1)  # and when the next falls due
    assert read_queue_state(r, q) == empty_state(**{
        "pending": ["p0", "due-early", "due-now"],
        source: {"not-due": NOW + 1},
        "tasks": {"p0": hp, "not-due": h3,
                  "due-early": {**h1, "state": "pending", "pending_since": str(NOW)},
                  "due-now": {**h2, "state": "pending", "pending_since": str(NOW)}}})


def test_forward_nothing_due(r, q, scripts: Scripts) -> None:
    seed_task(r, q, "later", "scheduled", score=NOW + 5000)
    before = read_queue_state(r, q)
    with Subscription(r, q.wake_channel) as sub:
        assert scripts.forward(q, "scheduled", now_ms=NOW, limit=100) == (0, NOW + 5000)
        assert sub.messages() == []
    assert read_queue_state(r, q) == before


def test_forward_respects_the_limit_and_wakes_workers(r, q, scripts: Scripts) -> None:
    for i in range(5):
        seed_task(r, q, f"s{i}", "scheduled", score=NOW - 100 + i)
    with Subscription(r, q.wake_channel) as sub:
        assert scripts.forward(q, "scheduled", now_ms=NOW, limit=2) == (2, NOW - 98)  # s2: due, left for the next call
        assert scripts.forward(q, "retry", now_ms=NOW, limit=2) == (0, None)  # an empty ZSET: nothing falls due
        assert sub.messages() == ["1"]
    state = read_queue_state(r, q)
    assert state["pending"] == ["s0", "s1"]
    assert state["scheduled"] == {"s2": NOW - 98, "s3": NOW - 97, "s4": NOW - 96}


# == recover ====================================================================================


def test_recover_expired_leases(r, q, scripts: Scripts) -> None:
    seed = dict(lease=2, started_at=STARTED)
    garbled = seed_task(r, q, "garbled", "active", score=NOW - 5, msg="not json{", **seed)
    add_id(r, q, "active", "orphan", NOW - 4)
    cancelled = seed_task(r, q, "cancelled", "active", score=NOW - 3, max_retry=5, cancel=1, **seed)
    spent = seed_task(r, q, "spent", "active", score=NOW - 2, max_retry=2, retried=2, **seed)
    forever = seed_task(r, q, "forever", "active", score=NOW - 1, max_retry=-1, retried=100, **seed)
    requeue = seed_task(r, q, "requeue-me", "active", score=NOW, max_retry=3, retried=1, **seed)
    healthy = seed_task(r, q, "healthy", "active", score=NOW + 1, **seed)

    got = scripts.recover(q, now_ms=NOW, limit=100, day=DAY, minute=MINUTE)
    assert got.counts == (2, 3, 1)
    # Which tasks, how, and the attempt that was lost (for the per-task log lines).
    assert [tuple(t) for t in got.tasks] == [("garbled", 3, 1, DEFAULT_MAX_RETRY, "?"),
                                             ("cancelled", 4, 1, 5, "test.task"), ("spent", 2, 3, 2, "test.task"),
                                             ("forever", 1, 101, -1, "test.task"),
                                             ("requeue-me", 1, 2, 3, "test.task")]

    lost = "worker lost (lease expired)"

    def archived(h: dict[str, str], error: str) -> dict[str, str]:
        return {**without(h, "started_at", "cancel"), "state": "archived", "error": error, "failed_at": str(NOW)}

    def requeued(h: dict[str, str], retried: int) -> dict[str, str]:
        return {**without(h, "started_at", "cancel"), "state": "pending", "retried": str(retried), "error": lost,
                "failed_at": str(NOW), "pending_since": str(NOW)}

    state = read_queue_state(r, q)
    # Each task taken back gets a line in its attempt history: no worker (lost), when it was fetched.
    history = {task_id: json.loads(h.pop("attempts")) for task_id, h in state["tasks"].items() if "attempts" in h}

    def line(attempt: int, result: str, error: str) -> dict[str, Any]:
        return {"attempt": attempt, "result": result, "fetched_at": STARTED, "ended_at": NOW, "error": error}

    assert history == {"garbled": line(1, "archived", f"{lost}; message undecodable"),
                       "cancelled": line(1, "archived", "cancelled by operator"), "spent": line(3, "archived", lost),
                       "forever": line(101, "retry", lost), "requeue-me": line(2, "retry", lost)}
    assert state == empty_state(
        pending=["requeue-me", "forever"],  # back at the front, in the order they were recovered (last first)
        active={"healthy": NOW + 1},
        archived={"garbled": NOW, "cancelled": NOW, "spent": NOW},
        stats=stats(processed=4, failed=4),  # the cancelled one is not a failure
        tasks={"healthy": healthy,
               "garbled": archived(garbled, f"{lost}; message undecodable"),
               "cancelled": archived(cancelled, "cancelled by operator"),
               "spent": archived(spent, lost),
               "forever": requeued(forever, 101),
               "requeue-me": requeued(requeue, 2)})


def test_recover_respects_the_limit(r, q, scripts: Scripts) -> None:
    for i in range(3):
        seed_task(r, q, f"x{i}", "active", score=NOW - 10 + i, lease=1)
    assert scripts.recover(q, now_ms=NOW, limit=2, day=DAY, minute=MINUTE).counts == (2, 0, 0)
    state = read_queue_state(r, q)
    assert state["active"] == {"x2": NOW - 8}
    assert sorted(state["pending"]) == ["x0", "x1"]


def redis_ms(r: redis.Redis) -> int:
    seconds, micros = r.time()
    return seconds * 1000 + micros // 1000


def test_recover_after_a_silence_longer_than_the_outage_threshold_gives_one_grace(r, q, scripts: Scripts) -> None:
    seed_task(r, q, "expired", "active", score=NOW - 10, lease=1)
    grace = dict(now_ms=NOW, limit=100, day=DAY, minute=MINUTE, outage_ms=5_000, grace_ms=60_000)
    # No round has run yet: nothing to compare with, so recovery goes ahead and the round is recorded.
    first = scripts.recover(q, **grace)
    assert first.counts == (1, 0, 0) and (first.grace_left_ms, first.silence_ms) == (0, 0)
    seen = int(r.hget(q.recovery, "seen"))
    assert abs(seen - redis_ms(r)) < 5_000  # Redis's clock, not the caller's now_ms
    # A round right after: no silence, no grace.
    seed_task(r, q, "expired2", "active", score=NOW - 10, lease=1)
    r.hset(q.recovery, "seen", redis_ms(r) - 4_000)  # 4 s ago: under the threshold
    assert scripts.recover(q, **grace).counts == (1, 0, 0)
    # The last round ran 6 s ago (past the 5 s threshold): take nothing back, begin a grace.
    seed_task(r, q, "expired3", "active", score=NOW - 10, lease=1)
    r.hset(q.recovery, "seen", redis_ms(r) - 6_000)
    begun = scripts.recover(q, **grace)
    assert begun.counts == (0, 0, 0)
    assert begun.silence_ms >= 6_000 and 55_000 < begun.grace_left_ms <= 60_000
    assert r.zscore(q.active, "expired3") == NOW - 10
    # During the grace no round takes anything back, whatever its own now_ms says.
    during = scripts.recover(q, **{**grace, "now_ms": NOW + 10**9})
    assert during.counts == (0, 0, 0) and during.silence_ms == 0 and during.grace_left_ms > 0
    # Once the grace is over (as if its minute had passed), recovery goes on.
    r.hset(q.recovery, "grace_until", redis_ms(r) - 1)
    assert scripts.recover(q, **grace).counts == (1, 0, 0)
    assert r.zscore(q.active, "expired3") is None


def test_recover_without_an_outage_threshold_leaves_the_recovery_hash_alone(r, q, scripts: Scripts) -> None:
    seed_task(r, q, "expired", "active", score=NOW - 10, lease=1)
    r.hset(q.recovery, mapping={"seen": 1, "grace_until": 2**40})
    assert scripts.recover(q, now_ms=NOW, limit=100, day=DAY, minute=MINUTE).counts == (1, 0, 0)
    assert r.hgetall(q.recovery) == {"seen": "1", "grace_until": str(2**40)}


def test_recover_with_nothing_expired(r, q, scripts: Scripts) -> None:
    seed_active(r, q, "a")
    before = read_queue_state(r, q)
    assert scripts.recover(q, now_ms=NOW, limit=100, day=DAY, minute=MINUTE).counts == (0, 0, 0)
    assert read_queue_state(r, q) == before


# == janitor ====================================================================================


def test_janitor_deletes_expired_completed_and_old_archived(r, q, scripts: Scripts) -> None:
    cutoff = NOW - 86_400_000
    seed_task(r, q, "c-expired", "completed", score=NOW - 1, result="1")
    seed_task(r, q, "c-now", "completed", score=NOW)
    c_kept = seed_task(r, q, "c-kept", "completed", score=NOW + 1)
    seed_task(r, q, "a-old", "archived", score=cutoff - 1)
    a_cut = seed_task(r, q, "a-cutoff", "archived", score=cutoff)
    a_new = seed_task(r, q, "a-new", "archived", score=NOW)
    hp = seed_task(r, q, "p", "pending")
    assert scripts.janitor(q, now_ms=NOW, archive_cutoff_ms=cutoff, max_archive_size=10_000, limit=100) == (2, 1, 0)
    assert read_queue_state(r, q) == empty_state(
        pending=["p"], completed={"c-kept": NOW + 1}, archived={"a-cutoff": cutoff, "a-new": NOW},
        tasks={"c-kept": c_kept, "a-cutoff": a_cut, "a-new": a_new, "p": hp})


def test_janitor_respects_the_limit_per_kind(r, q, scripts: Scripts) -> None:
    for i in range(3):
        seed_task(r, q, f"c{i}", "completed", score=NOW - 10 + i)
        seed_task(r, q, f"a{i}", "archived", score=100 + i)
    assert scripts.janitor(q, now_ms=NOW, archive_cutoff_ms=NOW, max_archive_size=10_000, limit=2) == (2, 2, 0)
    state = read_queue_state(r, q)
    assert state["completed"] == {"c2": NOW - 8}
    assert state["archived"] == {"a2": 102}
    assert set(state["tasks"]) == {"c2", "a2"}
    assert scripts.janitor(q, now_ms=NOW, archive_cutoff_ms=NOW, max_archive_size=10_000, limit=2) == (1, 1, 0)
    assert read_queue_state(r, q) == empty_state()


def test_janitor_trims_the_archive_to_its_size_the_oldest_first(r, q, scripts: Scripts) -> None:
    """An operator's archive (admin_archive_all) does not trim: the janitor keeps the bound."""
    tasks = {f"a{i}": seed_task(r, q, f"a{i}", "archived", score=NOW - 100 + i) for i in range(7)}
    assert scripts.janitor(q, now_ms=NOW, archive_cutoff_ms=0, max_archive_size=3, limit=2) == (0, 0, 2)
    assert scripts.janitor(q, now_ms=NOW, archive_cutoff_ms=0, max_archive_size=3, limit=100) == (0, 0, 2)
    assert scripts.janitor(q, now_ms=NOW, archive_cutoff_ms=0, max_archive_size=3, limit=100) == (0, 0, 0)
    kept = {f"a{i}": NOW - 100 + i for i in (4, 5, 6)}
    assert read_queue_state(r, q) == empty_state(archived=kept, tasks={k: tasks[k] for k in kept})


# == admin_run_task =============================================================================


@pytest.mark.parametrize("source", ["scheduled", "retry", "archived"])
def test_admin_run_task(r, q, scripts: Scripts, source: str) -> None:
    hp = seed_task(r, q, "p0", "pending", pending_since=NOW - 10)
    ht = seed_task(r, q, "t", source, score=NOW + 99_000, retried=3, error="boom", failed_at=NOW - 50)
    scripts.admin_run_task(q, "t", now_ms=NOW)
    assert read_queue_state(r, q) == empty_state(
        pending=["p0", "t"],
        tasks={"p0": hp, "t": {**ht, "state": "pending", "pending_since": str(NOW)}})


def test_admin_run_task_wakes_workers_when_pending_was_empty(r, q, scripts: Scripts) -> None:
    seed_task(r, q, "t", "archived", score=NOW)
    with Subscription(r, q.wake_channel) as sub:
        scripts.admin_run_task(q, "t", now_ms=NOW)
        assert sub.messages() == ["1"]


@pytest.mark.parametrize("state", ["pending", "active", "completed"])
def test_admin_run_task_refuses_other_states(r, q, scripts: Scripts, state: str) -> None:
    seed_task(r, q, "t", state, score=NOW, lease=1)
    before = read_queue_state(r, q)
    with pytest.raises(InvalidTaskState, match=state):
        scripts.admin_run_task(q, "t", now_ms=NOW)
    assert read_queue_state(r, q) == before


# == admin_archive_task =========================================================================


@pytest.mark.parametrize("source", ["pending", "scheduled", "retry"])
def test_admin_archive_task(r, q, scripts: Scripts, source: str) -> None:
    h1 = seed_task(r, q, "other1", "pending")
    ht = seed_task(r, q, "t", source, score=NOW + 5000, retried=1)
    h2 = seed_task(r, q, "other2", "pending")
    scripts.admin_archive_task(q, "t", now_ms=NOW)
    assert read_queue_state(r, q) == empty_state(
        pending=["other1", "other2"], archived={"t": NOW},
        tasks={"other1": h1, "other2": h2, "t": {**ht, "state": "archived", "archived_by": "operator"}})


@pytest.mark.parametrize("state", ["active", "archived", "completed"])
def test_admin_archive_task_refuses_other_states(r, q, scripts: Scripts, state: str) -> None:
    seed_task(r, q, "t", state, score=NOW, lease=1)
    before = read_queue_state(r, q)
    with pytest.raises(InvalidTaskState, match=state):
        scripts.admin_archive_task(q, "t", now_ms=NOW)
    assert read_queue_state(r, q) == before


# == admin_delete_task ==========================================================================


@pytest.mark.parametrize("state", ["pending", "scheduled", "retry", "archived", "completed"])
def test_admin_delete_task(r, q, scripts: Scripts, state: str) -> None:
    keep = seed_task(r, q, "keep", state, score=NOW)
    seed_task(r, q, "t", state, score=NOW + 1)
    scripts.admin_delete_task(q, "t")
    expected = empty_state(tasks={"keep": keep})
    if state == "pending":
        expected["pending"] = ["keep"]
    else:
        expected[state] = {"keep": NOW}
    assert read_queue_state(r, q) == expected


def test_admin_delete_task_releases_its_unique_lock(r, q, scripts: Scripts) -> None:
    ukey = q.unique("test.task", "3" * 32)
    seed_task(r, q, "t", "retry", score=NOW, unique=ukey)
    r.set(ukey, "t", px=60_000)
    scripts.admin_delete_task(q, "t")
    assert read_queue_state(r, q) == empty_state()


def test_admin_delete_task_keeps_a_lock_it_does_not_own(r, q, scripts: Scripts, connection) -> None:
    ukey = q.unique("test.task", "4" * 32)
    foreign = connection.keys.queue("other").unique("test.task", "4" * 32)  # another slot: never touched
    seed_task(r, q, "t", "scheduled", score=NOW, unique=ukey)
    seed_task(r, q, "u", "scheduled", score=NOW, unique=foreign)
    r.set(ukey, "someone-else", px=60_000)
    r.set(foreign, "u", px=60_000)
    scripts.admin_delete_task(q, "t")
    scripts.admin_delete_task(q, "u")
    assert read_queue_state(r, q) == empty_state(unique={ukey: "someone-else"})
    assert r.get(foreign) == "u"


def test_admin_delete_task_refuses_active(r, q, scripts: Scripts) -> None:
    seed_active(r, q, "t")
    before = read_queue_state(r, q)
    with pytest.raises(InvalidTaskState, match="active"):
        scripts.admin_delete_task(q, "t")
    assert read_queue_state(r, q) == before


# == admin_cancel_task ==========================================================================


def test_admin_cancel_task_flags_and_publishes(r, q, scripts: Scripts, connection) -> None:
    ha = seed_active(r, q, "t")
    with Subscription(r, q.cancel_channel) as sub:
        scripts.admin_cancel_task(q, "t")
        assert sub.messages() == [f"{q.queue} t"]
    assert read_queue_state(r, q) == empty_state(active={"t": LEASE_UNTIL}, tasks={"t": {**ha, "cancel": "1"}})


@pytest.mark.parametrize("state", ["pending", "scheduled", "retry", "archived", "completed"])
def test_admin_cancel_task_refuses_tasks_that_are_not_running(r, q, scripts: Scripts, connection,
                                                              state: str) -> None:
    seed_task(r, q, "t", state, score=NOW)
    before = read_queue_state(r, q)
    with Subscription(r, q.cancel_channel) as sub:
        with pytest.raises(InvalidTaskState, match=state):
            scripts.admin_cancel_task(q, "t")
        assert sub.messages() == []
    assert read_queue_state(r, q) == before


# == not found ==================================================================================

ADMIN_SINGLE: dict[str, Callable[[Scripts, QueueKeys], None]] = {
    "run": lambda s, q: s.admin_run_task(q, "missing", now_ms=NOW),
    "archive": lambda s, q: s.admin_archive_task(q, "missing", now_ms=NOW),
    "delete": lambda s, q: s.admin_delete_task(q, "missing"),
    "cancel": lambda s, q: s.admin_cancel_task(q, "missing"),
}


@pytest.mark.parametrize("action", ADMIN_SINGLE)
def test_admin_actions_on_a_missing_task(r, q, scripts: Scripts, action: str) -> None:
    add_id(r, q, "scheduled", "missing", NOW)  # even an orphan id does not make it "found"
    with pytest.raises(TaskNotFound, match="missing"):
        ADMIN_SINGLE[action](scripts, q)
    assert read_queue_state(r, q) == empty_state(scheduled={"missing": NOW})


# == bulk admin scripts =========================================================================


@pytest.mark.parametrize("source", ["scheduled", "retry", "archived"])
def test_admin_run_all_in_chunks(r, q, scripts: Scripts, source: str) -> None:
    seeded = {f"s{i}": seed_task(r, q, f"s{i}", source, score=NOW - 100 + i, error="e") for i in range(5)}
    with Subscription(r, q.wake_channel) as sub:
        assert scripts.admin_run_all(q, source, now_ms=NOW, limit=3, bound=EVERY).acted == 3
        assert sub.messages() == ["1"]
    state = read_queue_state(r, q)
    assert state["pending"] == ["s0", "s1", "s2"]
    assert state[source] == {"s3": NOW - 97, "s4": NOW - 96}
    assert scripts.admin_run_all(q, source, now_ms=NOW + 1, limit=3, bound=EVERY).acted == 2
    assert scripts.admin_run_all(q, source, now_ms=NOW + 2, limit=3, bound=EVERY).acted == 0
    since = {"s0": NOW, "s1": NOW, "s2": NOW, "s3": NOW + 1, "s4": NOW + 1}
    assert read_queue_state(r, q) == empty_state(
        pending=["s0", "s1", "s2", "s3", "s4"],
        tasks={k: {**h, "state": "pending", "pending_since": str(since[k])} for k, h in seeded.items()})


@pytest.mark.parametrize("source", ["pending", "scheduled", "retry"])
def test_admin_archive_all_in_chunks(r, q, scripts: Scripts, source: str) -> None:
    seeded = {f"s{i}": seed_task(r, q, f"s{i}", source, score=NOW - 100 + i) for i in range(5)}
    assert scripts.admin_archive_all(q, source, now_ms=NOW, limit=3, bound=EVERY).acted == 3
    state = read_queue_state(r, q)
    assert state["archived"] == {"s0": NOW, "s1": NOW, "s2": NOW}  # oldest first
    remaining = ["s3", "s4"]
    assert (state["pending"] if source == "pending" else list(state[source])) == remaining
    assert scripts.admin_archive_all(q, source, now_ms=NOW + 1, limit=3, bound=EVERY).acted == 2
    assert scripts.admin_archive_all(q, source, now_ms=NOW + 2, limit=3, bound=EVERY).acted == 0
    assert read_queue_state(r, q) == empty_state(
        archived={"s0": NOW, "s1": NOW, "s2": NOW, "s3": NOW + 1, "s4": NOW + 1},
        tasks={k: {**h, "state": "archived", "archived_by": "operator"} for k, h in seeded.items()})


@pytest.mark.parametrize("source", ["pending", "scheduled", "retry", "archived", "completed"])
def test_admin_delete_all_in_chunks_releasing_unique_locks(r, q, scripts: Scripts, source: str) -> None:
    owned, foreign = q.unique("test.task", "5" * 32), q.unique("test.task", "6" * 32)
    for i in range(5):
        seed_task(r, q, f"s{i}", source, score=NOW - 100 + i, unique=owned if i == 0 else foreign if i == 1 else None)
    r.set(owned, "s0", px=60_000)
    r.set(foreign, "not-s1", px=60_000)
    hp = seed_task(r, q, "other-state", "active" if source != "pending" else "retry", score=NOW, lease=1)
    assert scripts.admin_delete_all(q, source, limit=3, bound=EVERY).acted == 3
    state = read_queue_state(r, q)
    assert set(state["tasks"]) == {"s3", "s4", "other-state"}
    assert state["unique"] == {foreign: "not-s1"}
    assert scripts.admin_delete_all(q, source, limit=3, bound=EVERY).acted == 2
    assert scripts.admin_delete_all(q, source, limit=3, bound=EVERY).acted == 0
    other_state = "active" if source != "pending" else "retry"
    assert read_queue_state(r, q) == empty_state(**{other_state: {"other-state": NOW}},
                                                 tasks={"other-state": hp}, unique={foreign: "not-s1"})


# == ids whose task hash is gone (deleted or evicted) are dropped, never given a half hash ==========


@pytest.mark.parametrize("source", ["scheduled", "retry"])
def test_forward_drops_an_id_whose_hash_is_gone(r, q, scripts: Scripts, source: str) -> None:
    add_id(r, q, source, "ghost", NOW - 10)
    real = seed_task(r, q, "real", source, score=NOW - 5)
    assert scripts.forward(q, source, now_ms=NOW, limit=100).moved == 2  # both taken off the ZSET
    assert read_queue_state(r, q) == empty_state(
        pending=["real"], tasks={"real": {**real, "state": "pending", "pending_since": str(NOW)}})


def test_forward_of_only_orphans_does_not_wake_workers(r, q, scripts: Scripts) -> None:
    add_id(r, q, "scheduled", "ghost", NOW - 10)
    with Subscription(r, q.wake_channel) as sub:
        assert scripts.forward(q, "scheduled", now_ms=NOW, limit=100).moved == 1
        assert sub.messages() == []
    assert read_queue_state(r, q) == empty_state()


@pytest.mark.parametrize("source", ["scheduled", "retry", "archived"])
def test_admin_run_all_drops_an_id_whose_hash_is_gone(r, q, scripts: Scripts, source: str) -> None:
    add_id(r, q, source, "ghost", NOW - 10)
    real = seed_task(r, q, "real", source, score=NOW - 5)
    chunk = scripts.admin_run_all(q, source, now_ms=NOW, limit=100, bound=EVERY)
    assert (chunk.acted, chunk.dropped) == (1, 1)
    assert read_queue_state(r, q) == empty_state(
        pending=["real"], tasks={"real": {**real, "state": "pending", "pending_since": str(NOW)}})


@pytest.mark.parametrize("source", ["pending", "scheduled", "retry"])
def test_admin_archive_all_drops_an_id_whose_hash_is_gone(r, q, scripts: Scripts, source: str) -> None:
    add_id(r, q, source, "ghost", NOW - 10)
    real = seed_task(r, q, "real", source, score=NOW - 5)
    chunk = scripts.admin_archive_all(q, source, now_ms=NOW, limit=100, bound=EVERY)
    assert (chunk.acted, chunk.dropped) == (1, 1)
    archived = {**real, "state": "archived", "archived_by": "operator"}
    assert read_queue_state(r, q) == empty_state(archived={"real": NOW}, tasks={"real": archived})


# == repair =====================================================================================


def run_repair(scripts: Scripts, q: QueueKeys, count: int = 1000) -> tuple[int, int, int]:
    """A whole repair pass (the SCAN cursor followed until it wraps): (repaired, archived, seen)."""
    cursor, totals = "0", [0, 0, 0]
    while True:
        cursor, repaired, archived, seen, complete = scripts.repair(q, now_ms=NOW, cursor=cursor, count=count)
        totals = [totals[0] + repaired, totals[1] + archived, totals[2] + seen]
        if complete:
            return totals[0], totals[1], totals[2]


def test_repair_puts_unindexed_hashes_back_where_their_state_says(r, q, scripts: Scripts) -> None:
    # healthy tasks, indexed as they should be: left alone
    ok_pending = seed_task(r, q, "ok-p", "pending")
    ok_active = seed_active(r, q, "ok-a")
    # hashes without a list/zset entry, one per state
    lost = {state: seed_task(r, q, f"lost-{state}", state, index=False, **extra) for state, extra in (
        ("pending", {}), ("scheduled", {}), ("retry", {"retried": 1}), ("archived", {"failed_at": NOW - 50}),
        ("active", {"lease": 4}))}
    completed = seed_task(r, q, "lost-completed", "completed", index=False, completed_at=NOW - 1000,
                          msg=make_msg("lost-completed", q.queue, retention=60.0))
    odd = seed_task(r, q, "odd", "weird", index=False)
    r.hset(q.task("nomsg"), mapping={"state": "pending"})

    with Subscription(r, q.wake_channel) as sub:
        assert run_repair(scripts, q, count=3) == (6, 2, 10)
        assert sub.messages() == []  # pending was not empty: no wake-up needed

    reason = "repair: task hash had no list entry and "
    assert read_queue_state(r, q) == empty_state(
        pending=["lost-pending", "ok-p"],  # the repaired one at the front: it is old work
        active={"ok-a": LEASE_UNTIL, "lost-active": NOW},  # expired at once: the recoverer takes it back
        scheduled={"lost-scheduled": NOW}, retry={"lost-retry": NOW},
        archived={"lost-archived": NOW - 50, "odd": NOW, "nomsg": NOW},
        completed={"lost-completed": NOW - 1000 + 60_000},
        tasks={"ok-p": ok_pending, "ok-a": ok_active,
               "lost-pending": {**lost["pending"], "pending_since": str(NOW)},
               **{f"lost-{s}": lost[s] for s in ("scheduled", "retry", "archived", "active")},
               "lost-completed": completed,
               "odd": {**odd, "state": "archived", "error": reason + "an unknown state (weird)",
                       "failed_at": str(NOW)},
               "nomsg": {"state": "archived", "msg": "", "error": reason + "no message", "failed_at": str(NOW)}})
    # A second pass finds nothing left to do.
    before = read_queue_state(r, q)
    assert run_repair(scripts, q) == (0, 0, 10)
    assert read_queue_state(r, q) == before


def test_a_repair_step_stops_after_4_mb_of_messages_and_looks_again(r, q, scripts: Scripts) -> None:
    """Orphans' messages are read (a completed one's decoded): 180 orphans of 500 KB held Redis 0.69 s
    in one step. A step stops after the message that brings it to 4 MB (the ninth here) and gives back
    its starting cursor, "0" here, and says the pass is not complete; the next step skips the repaired
    ones (indexed now) and repairs the rest."""
    for n in range(12):
        seed_task(r, q, f"orphan{n:02d}", "pending", index=False, payload={"pad": "x" * 500_000})
    step = scripts.repair(q, now_ms=NOW, cursor="0", count=100_000)  # the whole keyspace
    assert (step.cursor, step.repaired, step.complete) == ("0", 9, False)
    assert run_repair(scripts, q, count=100_000)[0] == 3
    assert sorted(r.lrange(q.pending, 0, -1)) == [f"orphan{n:02d}" for n in range(12)]


def test_repair_turns_are_shared_by_all_workers(r, q, scripts: Scripts) -> None:
    """With ``cursor=""`` the pass's cursor lives in Redis, and ``turn_ms`` lets one caller per period
    take a step: so many workers together scan no more than one would."""
    for i in range(6):
        seed_task(r, q, f"lost-{i}", "pending", index=False)
    repaired, steps, cursor = 0, 0, None
    while cursor != "0":
        # every call here is a new turn: the clock moves on by the turn length each time
        cursor, fixed, _, seen, _ = scripts.repair(q, now_ms=NOW + steps * 1000, cursor="", count=2, turn_ms=1000)
        assert seen >= 0
        assert r.hget(q.repair, "cursor") == cursor  # saved for whoever takes the next turn
        repaired += fixed
        steps += 1
    assert repaired == 6
    assert sorted(read_queue_state(r, q)["pending"]) == sorted(f"lost-{i}" for i in range(6))
    # Within the turn just taken, another worker's call does nothing and touches nothing.
    last = NOW + (steps - 1) * 1000
    before = r.hgetall(q.repair)
    assert scripts.repair(q, now_ms=last + 999, cursor="", count=2, turn_ms=1000) == ("", 0, 0, -1, False)
    assert r.hgetall(q.repair) == before
    assert scripts.repair(q, now_ms=last + 1000, cursor="", count=2, turn_ms=1000)[3] >= 0
    assert r.hget(q.repair, "next_at") == str(last + 2000)


def test_repair_leaves_other_queues_and_globbing_names_alone(r, q, scripts: Scripts, connection) -> None:
    star = connection.keys.queue("a*b")
    other = connection.keys.queue("aXb")  # matched by an unescaped "a*b" pattern
    seed_task(r, other, "x", "pending", index=False)
    seed_task(r, star, "y", "retry", index=False)
    seed_task(r, star, "z", "pending", index=False)
    with Subscription(r, star.wake_channel) as sub:
        assert run_repair(scripts, star) == (2, 0, 2)
        assert sub.messages() == ["1"]  # pending turned non-empty
    assert read_queue_state(r, star)["pending"] == ["z"]
    assert read_queue_state(r, star)["retry"] == {"y": NOW}
    assert read_queue_state(r, other)["pending"] == []  # untouched: another queue
    assert run_repair(scripts, q) == (0, 0, 0)


def test_recover_applies_the_default_max_retry_when_the_message_omits_it(r, q, scripts: Scripts) -> None:
    """Messages store max_retry only when it is not DEFAULT_MAX_RETRY; recover gets that same constant
    from its wrapper (in ARGV), so a task without one is archived after DEFAULT_MAX_RETRY retries."""
    spent = seed_task(r, q, "spent", "active", score=NOW - 2, retried=DEFAULT_MAX_RETRY, lease=1,
                      max_retry=DEFAULT_MAX_RETRY)
    more = seed_task(r, q, "more", "active", score=NOW - 1, retried=DEFAULT_MAX_RETRY - 1, lease=1,
                     max_retry=DEFAULT_MAX_RETRY)
    assert '"max_retry"' not in spent["msg"] and '"max_retry"' not in more["msg"]
    assert scripts.recover(q, now_ms=NOW, limit=10, day=DAY, minute=MINUTE).counts == (1, 1, 0)
    lost = "worker lost (lease expired)"
    state = read_queue_state(r, q)
    assert [json.loads(state["tasks"][t].pop("attempts"))["result"] for t in ("spent", "more")] == ["archived",
                                                                                                    "retry"]
    assert state == empty_state(
        pending=["more"], archived={"spent": NOW}, stats=stats(processed=2, failed=2),
        tasks={"spent": {**spent, "state": "archived", "error": lost, "failed_at": str(NOW)},
               "more": {**more, "state": "pending", "retried": str(DEFAULT_MAX_RETRY), "error": lost,
                        "failed_at": str(NOW), "pending_since": str(NOW)}})


def test_recover_takes_the_default_max_retry_and_reasons_from_its_wrapper(r, q, scripts: Scripts) -> None:
    """Nothing of the retry policy or the reasons is written in recover.lua: the wrapper passes them."""
    seed_task(r, q, "spent", "active", score=NOW - 3, retried=3, lease=1)  # no max_retry in the message
    seed_task(r, q, "more", "active", score=NOW - 2, retried=2, lease=1)
    seed_task(r, q, "own", "active", score=NOW - 1, retried=3, lease=1, max_retry=5)  # its own wins
    assert scripts.recover(q, now_ms=NOW, limit=10, day=DAY, minute=MINUTE, default_max_retry=3).counts == (2, 1, 0)
    state = read_queue_state(r, q)
    assert state["archived"] == {"spent": NOW}
    assert sorted(state["pending"]) == ["more", "own"]
    assert {state["tasks"][i]["error"] for i in ("spent", "more", "own")} == {reasons.WORKER_LOST}


# == the call path ================================================================================


@pytest.mark.parametrize("dedicated", [False, True], ids=["pooled", "dedicated"])
def test_script_calls_survive_a_script_flush_and_a_dropped_connection(private_redis, dedicated: bool) -> None:
    """Scripts are sent with EVALSHA on a raw connection: NOSCRIPT loads the script again, and a
    connection the server dropped is replaced (pooled: on the same call; dedicated: on the next)."""
    from queuecore.core.keys import Keys

    client = redis.Redis.from_url(private_redis.url, decode_responses=True)
    admin = redis.Redis.from_url(private_redis.url, decode_responses=True)
    base = Scripts(client, Keys("qcx"))
    scripts = base.dedicated() if dedicated else base
    q = Keys("qcx").queue("default")
    try:
        assert base.enqueue(q, "a", make_msg("a", "default"), now_ms=NOW) == 1
        admin.script_flush()
        assert [d.id for d in scripts.dequeue(q, now_ms=NOW, lease_until_ms=LEASE_UNTIL, count=5)] == ["a"]
        assert admin.client_kill_filter(_type="normal", skipme=True) >= 1
        if dedicated:  # the first call after the drop fails (the worker retries), the next reconnects
            with pytest.raises(redis.ConnectionError):
                scripts.dequeue(q, now_ms=NOW, lease_until_ms=LEASE_UNTIL, count=5)
        assert base.enqueue(q, "b", make_msg("b", "default"), now_ms=NOW) == 1  # pooled: replaced at once
        assert [d.id for d in scripts.dequeue(q, now_ms=NOW, lease_until_ms=LEASE_UNTIL, count=5)] == ["b"]
    finally:
        scripts.close()
        client.close()
        admin.close()
