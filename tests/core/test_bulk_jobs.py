"""Bulk jobs (bulkjobs.py): an action on a whole state, a filter or a failure group, carried out in
chunks by one driver at a time, with its progress in Redis, cancellable, resumable and audited."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from unittest.mock import ANY

import pytest
import redis

from queuecore.core import bulkjobs
from queuecore.core.bulkjobs import BulkJob
from queuecore.core.clock import FakeClock
from queuecore.core.config import ConnectionConfig
from queuecore.core.errors import (
    BulkJobNotFound,
    ConfigurationError,
    FailureGroupNotFound,
    QueueNotFound,
    TooManyBulkJobs,
    WrongKeyType,
)
from queuecore.core.inspector import Inspector
from queuecore.core.keys import QueueKeys
from tests.conftest import wait_until
from tests.core.test_processes import spawn  # noqa: F401 - the worker-process fixture
from tests.helpers.state import seed_task

NOW_MS = 1_700_000_000_000


def seed(r: redis.Redis, q: QueueKeys, state: str, count: int, *, type: str = "t.a", start: int = 0,
         error: str | None = None) -> list[str]:
    pipe = r.pipeline(transaction=False)
    ids = [f"{type}-{state}-{n}" for n in range(start, start + count)]
    for n, task_id in enumerate(ids):
        score = None if state == "pending" else NOW_MS + n
        seed_task(pipe, q, task_id, state, score=score, type=type, payload={"n": n}, error=error,  # type: ignore[arg-type]
                  failed_at=NOW_MS if error else None)
    pipe.execute()
    return ids


@pytest.fixture
def q(redis_client: redis.Redis, connection: ConnectionConfig, client) -> QueueKeys:
    q = connection.keys.queue("bulkq")
    info = client.enqueue("t.register", queue="bulkq")  # makes the queue known
    redis_client.delete(q.pending, q.task(info.id))
    return q


def test_a_whole_state_is_acted_on_in_chunks_and_audited_once(inspector, redis_client, q) -> None:
    seed(redis_client, q, "archived", 1_234)
    seen: list[BulkJob] = []
    job = inspector.as_actor("ops").start_bulk_job("run", queue="bulkq", state="archived")
    assert (job.status, job.phase, job.total, job.exact_total, job.done) == ("queued", "act", 1_234, False, 0)
    assert job.fraction == 0.0
    job = inspector.run_bulk_job(job.id, on_progress=seen.append)
    assert (job.status, job.done, job.skipped, job.actor) == ("done", 1_234, 0, "ops")
    assert [j.done for j in seen] == [500, 1_000, 1_234]  # one record per chunk of 500
    assert 0 < seen[0].fraction < seen[1].fraction < seen[2].fraction == 1.0
    assert inspector.count("bulkq", "pending") == 1_234 and inspector.count("bulkq", "archived") == 0
    entries = [e for e in inspector.audit_log() if job.id in e.outcome]
    assert [(e.action, e.actor, e.count, e.state) for e in entries] == [("tasks.run_all", "ops", 1_234, "archived")]
    assert job.id not in inspector.open_bulk_job_ids() and inspector.bulk_jobs()[0].id == job.id
    assert redis_client.ttl(inspector.keys.bulk_job(job.id)) > 6 * 86400  # kept a week


def test_a_whole_state_job_acts_on_no_more_tasks_than_the_state_held_when_it_was_made(
        inspector, redis_client, q) -> None:
    """Dashboard probe: "run all" of 19,997 retry tasks, with a worker failing them again, moved 20,630:
    the tasks it had run and that came back to retry were taken again (an attempt spent without its
    delay). Tasks that enter the state after the job was made are left to the next one."""
    seed(redis_client, q, "retry", 1_234)
    job = inspector.start_bulk_job("run", queue="bulkq", state="retry")
    seed(redis_client, q, "retry", 300, start=5_000)  # came (back) to retry while the job runs
    job = inspector.run_bulk_job(job.id)
    assert (job.status, job.done, job.total) == ("done", 1_234, 1_234)
    assert inspector.count("bulkq", "retry") == 300 and inspector.count("bulkq", "pending") == 1_234


def test_a_filter_acts_on_exactly_the_tasks_it_found(inspector, redis_client, q) -> None:
    wanted = seed(redis_client, q, "archived", 700, type="t.a")
    seed(redis_client, q, "archived", 600, type="t.b")
    job = inspector.run_bulk_job(inspector.start_bulk_job("delete", queue="bulkq", state="archived",
                                                          filter="type:t.a").id)
    assert (job.status, job.done, job.skipped, job.total, job.exact_total, job.scanned) == (
        "done", 700, 0, 700, True, 1_300)
    assert inspector.count("bulkq", "archived") == 600
    assert {t.type for t in inspector.list_tasks("bulkq", "archived", 1, 1000).tasks} == {"t.b"}
    entry = next(e for e in inspector.audit_log() if job.id in e.outcome)
    assert entry.action == "tasks.delete_all" and entry.count == 700 and set(entry.task_ids) <= set(wanted)
    assert len(entry.task_ids) == 100 and "matching type:t.a" in entry.outcome
    assert redis_client.exists(inspector.keys.bulk_job_targets(job.id)) == 0  # the found list goes with the job


def test_tasks_that_left_the_state_after_the_find_are_skipped_not_touched(inspector, redis_client, q) -> None:
    ids = seed(redis_client, q, "retry", 900, type="t.a")
    moved: list[str] = []

    def meanwhile(job: BulkJob) -> None:  # between the find and the first chunk acted on
        if job.phase == "act" and job.done == 0 and not moved:
            moved.extend(ids[:50])
            inspector.act_on_tasks("bulkq", "run", moved)

    job = inspector.start_bulk_job("archive", queue="bulkq", state="retry", search="t.a")
    job = inspector.run_bulk_job(job.id, on_progress=meanwhile)
    assert (job.status, job.total, job.done, job.skipped) == ("done", 900, 850, 50)
    assert inspector.count("bulkq", "pending") == 50 and inspector.count("bulkq", "archived") == 850


def test_cancel_stops_the_job_after_the_chunk_it_is_on(inspector, redis_client, q) -> None:
    seed(redis_client, q, "pending", 2_000)
    job = inspector.start_bulk_job("delete", queue="bulkq", state="pending")

    def cancel_after_first_chunk(progress: BulkJob) -> None:
        if progress.done == 500:
            inspector.as_actor("ops").cancel_bulk_job(job.id)

    job = inspector.run_bulk_job(job.id, on_progress=cancel_after_first_chunk)
    assert (job.status, job.done, job.cancel_requested) == ("cancelled", 500, True)
    assert inspector.count("bulkq", "pending") == 1_500
    actions = [(e.action, e.actor) for e in inspector.audit_log()[:2]]
    assert actions == [("tasks.delete_all", "api"), ("bulk.cancel", "ops")]
    assert "cancelled after 500" in inspector.audit_log()[0].outcome
    assert inspector.cancel_bulk_job(job.id).status == "cancelled"  # a finished job stays as it is


def test_a_found_task_that_moves_on_right_before_its_chunk_is_left_alone(inspector, redis_client, q,
                                                                         monkeypatch) -> None:
    """The state check is the acting script's own: a review reproduced "run all archived matching
    type:t.x" running a task that had just moved to retry (its retry delay skipped), between a separate
    check and the script. Here each found task goes from archived to retry (a worker ran it, it failed
    again) right before the script acts on it."""
    from queuecore.core.scripts import Scripts

    seed(redis_client, q, "archived", 5, type="t.x")
    act = Scripts.admin_tasks
    moved: list[str] = []

    def failed_again_meanwhile(self: Scripts, action: str, qk: QueueKeys, task_ids: list[str], **kw) -> list:
        moved.extend(task_ids[:2])
        for task_id in task_ids[:2]:
            redis_client.zrem(q.archived, task_id)
            redis_client.zadd(q.retry, {task_id: NOW_MS + 600_000})
            redis_client.hset(q.task(task_id), "state", "retry")
        return act(self, action, qk, task_ids, **kw)

    monkeypatch.setattr(Scripts, "admin_tasks", failed_again_meanwhile)
    job = inspector.run_bulk_job(inspector.start_bulk_job("run", queue="bulkq", state="archived", type="t.x").id)
    assert (job.status, job.done, job.skipped) == ("done", 3, 2)
    assert len(moved) == 2 and sorted(redis_client.zrange(q.retry, 0, -1)) == sorted(moved)  # waiting out the delay
    assert {redis_client.hget(q.task(i), "state") for i in moved} == {"retry"}
    assert inspector.count("bulkq", "pending") == 3


def test_a_job_made_for_a_driver_is_not_taken_up_by_a_worker_before_it_runs(inspector, redis_client, q) -> None:
    """A review: ``adminctl`` made the job, a worker polling in that moment took it, and the command
    could then only follow it, without a progress bar or a way to cancel it with Ctrl-C."""
    from queuecore.core.bulkrunner import BulkJobRunner
    from queuecore.core.health import RedisHealth

    seed(redis_client, q, "scheduled", 10)
    job = inspector.start_bulk_job("delete", queue="bulkq", state="scheduled", holder="adminctl-1")
    assert (job.status, job.holder) == ("queued", "adminctl-1")
    assert BulkJobRunner(inspector, RedisHealth()).run_once() == 0  # a worker's round: its driver is coming
    assert inspector.bulk_job(job.id).done == 0 and inspector.count("bulkq", "scheduled") == 10
    job = inspector.run_bulk_job(job.id, holder="adminctl-1")
    assert (job.status, job.done) == ("done", 10)


def test_a_queued_job_no_driver_holds_ends_at_once_when_cancelled(inspector, redis_client, q) -> None:
    seed(redis_client, q, "scheduled", 10)
    job = inspector.cancel_bulk_job(inspector.start_bulk_job("delete", queue="bulkq", state="scheduled").id)
    assert (job.status, job.done) == ("cancelled", 0) and job.id not in inspector.open_bulk_job_ids()
    assert inspector.run_bulk_job(job.id).status == "cancelled" and inspector.count("bulkq", "scheduled") == 10
    entries = [(e.action, e.outcome.split(";")[0]) for e in inspector.audit_log() if job.id in e.outcome]
    assert entries == [(  # the job's own entry too, as every finished job has (a review found none)
        "tasks.delete_all", f"bulk job {job.id}: cancelled before it acted on any task"), ("bulk.cancel", ANY)]


def test_a_stopped_driver_leaves_the_job_to_the_next_which_goes_on_where_it_was(inspector, redis_client, q) -> None:
    seed(redis_client, q, "archived", 1_800, type="t.a")
    seed(redis_client, q, "archived", 200, type="t.b")
    stop = threading.Event()
    job = inspector.start_bulk_job("delete", queue="bulkq", state="archived", type="t.a")

    def stop_after_the_first_chunk_acted_on(progress: BulkJob) -> None:
        if progress.phase == "act" and progress.done == 500:
            stop.set()

    first = inspector.run_bulk_job(job.id, stop=stop, on_progress=stop_after_the_first_chunk_acted_on)
    assert (first.status, first.done, first.holder) == ("running", 500, None)  # lease given up
    assert job.id in inspector.open_bulk_job_ids()
    done = inspector.run_bulk_job(job.id)
    assert (done.status, done.total, done.done, done.skipped) == ("done", 1_800, 1_800, 0)
    assert inspector.count("bulkq", "archived") == 200


def test_one_driver_at_a_time_and_another_takes_over_when_its_lease_lapses(connection, redis_client, q) -> None:
    seed(redis_client, q, "completed", 30)
    clock = FakeClock(NOW_MS / 1000)
    inspector = Inspector(connection=connection, clock=clock)
    try:
        job = inspector.start_bulk_job("delete", queue="bulkq", state="completed")
        store = inspector._bulk_store
        assert store.step(job.id, "other-driver", {"status": "running"}) == (True, False)
        untouched = inspector.run_bulk_job(job.id)
        assert (untouched.status, untouched.done, untouched.holder) == ("running", 0, "other-driver")
        assert inspector.count("bulkq", "completed") == 30
        clock.advance(bulkjobs.LEASE_SECONDS + 1)  # the other driver died: its lease lapses
        taken = inspector.run_bulk_job(job.id)
        assert (taken.status, taken.done) == ("done", 30)
        assert store.step(job.id, "other-driver", {"done": 0}) == (False, False)  # a late driver writes nothing
        assert inspector.bulk_job(job.id).done == 30
    finally:
        inspector.close()


def test_a_failure_group_job_and_cancelling_every_running_task(inspector, redis_client, q) -> None:
    seed(redis_client, q, "archived", 30, type="t.a", error="ValueError: bad row 7")
    seed(redis_client, q, "archived", 5, type="t.b", error="KeyError: 'x'")
    group = max(inspector.failure_groups("bulkq").groups, key=lambda g: g.count)
    job = inspector.act_on_failure_group(group.key, "delete", "bulkq")
    assert (job.status, job.total, job.done, job.scope.group) == ("done", 30, 30, group.key)
    assert inspector.count("bulkq", "archived") == 5
    with pytest.raises(FailureGroupNotFound):
        inspector.start_bulk_job("delete", group=group.key)
    for n in range(3):
        seed_task(redis_client, q, f"run-{n}", "active", score=NOW_MS + 30_000, lease=1)
    result = inspector.cancel_all("bulkq")
    assert (result.state, result.count) == ("active", 3)
    assert inspector.audit_log()[0].action == "tasks.cancel_all"


def test_input_is_checked_before_anything_is_queued(inspector, redis_client, q) -> None:
    with pytest.raises(ConfigurationError, match="cannot run all pending"):
        inspector.start_bulk_job("run", queue="bulkq", state="pending")
    with pytest.raises(ConfigurationError, match="unknown filter field"):
        inspector.start_bulk_job("delete", queue="bulkq", state="archived", filter="colour:red")
    with pytest.raises(ConfigurationError, match="at most 2,000"):
        inspector.start_bulk_job("delete", queue="bulkq", state="archived", search="x" * 2001)
    with pytest.raises(ConfigurationError, match="invalid action"):
        inspector.start_bulk_job("explode", queue="bulkq", state="archived")
    with pytest.raises(ConfigurationError, match="needs a queue and a state"):
        inspector.start_bulk_job("delete", queue="bulkq")
    with pytest.raises(QueueNotFound):
        inspector.start_bulk_job("delete", queue="nope", state="archived")
    assert inspector.bulk_jobs() == []
    for bad in ("", "../x", "a" * 65, "abc"):
        with pytest.raises(BulkJobNotFound):
            inspector.bulk_job(bad)
        with pytest.raises(BulkJobNotFound):
            inspector.cancel_bulk_job(bad)


def test_at_most_twenty_jobs_open_at_once(inspector, redis_client, q) -> None:
    jobs = [inspector.start_bulk_job("delete", queue="bulkq", state="archived") for _ in range(bulkjobs.MAX_OPEN)]
    with pytest.raises(TooManyBulkJobs, match="20 bulk jobs"):
        inspector.start_bulk_job("delete", queue="bulkq", state="archived")
    inspector.cancel_bulk_job(jobs[0].id)
    assert inspector.start_bulk_job("delete", queue="bulkq", state="archived").status == "queued"
    assert len(inspector.bulk_jobs()) == bulkjobs.MAX_OPEN + 1


def test_open_ids_whose_record_is_gone_hold_no_place(inspector, redis_client, q) -> None:
    """A review: records deleted by hand (or evicted) left their ids open for good; at twenty, every new
    job was refused, and neither ``bulk ls`` nor ``bulk cancel`` could see them."""
    jobs = [inspector.start_bulk_job("delete", queue="bulkq", state="archived") for _ in range(bulkjobs.MAX_OPEN)]
    for job in jobs[:2]:
        redis_client.delete(inspector.keys.bulk_job(job.id))
    redis_client.delete(inspector.keys.bulk_job(jobs[2].id))
    redis_client.hset(inspector.keys.bulk_job(jobs[2].id), "cancel", "1")  # a stray hash: no job
    redis_client.delete(inspector.keys.bulk_job(jobs[3].id))
    redis_client.set(inspector.keys.bulk_job(jobs[3].id), "garbage")
    for _ in range(4):
        assert inspector.start_bulk_job("delete", queue="bulkq", state="archived").status == "queued"
    assert len(inspector.open_bulk_job_ids()) == bulkjobs.MAX_OPEN
    assert not {j.id for j in jobs[:4]} & set(inspector.open_bulk_job_ids())
    with pytest.raises(TooManyBulkJobs):  # twenty real ones: the limit holds
        inspector.start_bulk_job("delete", queue="bulkq", state="archived")


def test_a_corrupt_job_record_is_listed_as_far_as_it_can_be_read(inspector, redis_client, q) -> None:
    """A review: a scope that is JSON but not an object, or a time past what a datetime holds, broke
    ``bulk ls``, the Bulk jobs page and the open-job strip of every dashboard page."""
    good = inspector.start_bulk_job("delete", queue="bulkq", state="archived")
    bad = inspector.start_bulk_job("run", queue="bulkq", state="archived")
    redis_client.hset(inspector.keys.bulk_job(bad.id), mapping={"scope": "[]", "created_at": str(10**18),
                                                                "started_at": "soon"})
    listed = {j.id: j for j in inspector.bulk_jobs()}
    assert listed[good.id].scope.queue == "bulkq" and listed[bad.id].scope.queue is None
    job = inspector.bulk_job(bad.id)
    assert (job.action, job.started_at, job.created_at.year) == ("run", None, 1970)
    redis_client.hset(inspector.keys.bulk_job(bad.id), "scope", '{"queue": 7, "state": "archived"}')
    assert inspector.bulk_job(bad.id).scope == bulkjobs.BulkScope(None, "archived")
    redis_client.delete(inspector.keys.bulk_job(bad.id))
    redis_client.set(inspector.keys.bulk_job(bad.id), "garbage")
    named = re.escape(f"key {inspector.keys.bulk_job(bad.id)} holds a string, expected a hash")
    for read in (inspector.bulk_job, inspector.cancel_bulk_job):  # the error names the key
        with pytest.raises(WrongKeyType, match=named):
            read(bad.id)


def test_a_corrupt_state_key_fails_the_job_saying_which_key(inspector, redis_client, q) -> None:
    seed(redis_client, q, "archived", 3)
    job = inspector.start_bulk_job("delete", queue="bulkq", state="archived", type="t.a")
    redis_client.delete(q.archived)
    redis_client.set(q.archived, "garbage")
    job = inspector.run_bulk_job(job.id)
    assert job.status == "failed" and q.archived in (job.error or "")
    assert "failed" in inspector.audit_log()[0].outcome
    redis_client.delete(inspector.keys.bulk_jobs)
    redis_client.set(inspector.keys.bulk_jobs, "garbage")
    with pytest.raises(WrongKeyType):
        inspector.start_bulk_job("delete", queue="bulkq", state="pending")


def test_two_worker_processes_carry_out_a_queued_job_once(spawn, inspector, redis_client, q,  # noqa: F811
                                                           tmp_path: Path) -> None:
    """A job queued with no driver (``adminctl --background``) is taken up by one of two worker
    processes, done once, and logged by the one that ran it."""
    seed(redis_client, q, "archived", 2_500, type="t.a")
    seed(redis_client, q, "archived", 700, type="t.b")
    job = inspector.start_bulk_job("delete", queue="bulkq", state="archived", filter="type:t.a")
    procs = [spawn() for _ in range(2)]
    wait_until(lambda: inspector.bulk_job(job.id).finished, timeout=30, message="a worker to carry out the job")
    # Audited before it was marked finished: the entry is there as soon as the job shows finished.
    done = inspector.bulk_job(job.id)
    assert (done.status, done.done, done.skipped, done.total) == ("done", 2_500, 0, 2_500)
    assert inspector.count("bulkq", "archived") == 700
    assert len([e for e in inspector.audit_log() if job.id in e.outcome]) == 1
    logs = "".join(p.stderr() for p in procs)
    assert logs.count(f"bulk job {job.id} (delete archived tasks of queue bulkq matching type:t.a by api) started") == 1
    assert logs.count(f"bulk job {job.id} (") == 2  # started, then done


def lrem_calls(r: redis.Redis, q: QueueKeys) -> int:
    """LREMs run so far by the Redis server holding the queue (on a cluster: the master of its slot)."""
    if hasattr(r, "get_node_from_key"):
        info = r.info("commandstats", target_nodes=r.get_node_from_key(q.pending))
    else:
        info = r.info("commandstats")
    return int(info.get("cmdstat_lrem", {}).get("calls", 0))


def test_found_pending_tasks_leave_a_long_list_in_one_pass_even_when_it_moved(inspector, client, redis_client,
                                                                              scripts, q) -> None:
    """A filtered archive or delete of pending tasks takes them off the list near where they were found
    (admin_pending_many), and still finds them when workers took tasks off the right end and priority
    tasks joined it in between; only the found tasks leave, in the order the others keep."""
    client.enqueue_many([("t.a" if n % 3 == 0 else "t.b", {"n": n}) for n in range(6_000)], queue="bulkq")
    wanted = {t.id for t in inspector.iter_tasks("bulkq", "pending", type="t.a")}
    order_before = [t.id for t in inspector.iter_tasks("bulkq", "pending") if t.id not in wanted]
    taken_by_workers: list[str] = []
    commands: list[str] = []

    def meanwhile(job: BulkJob) -> None:  # after the find: workers take 2,500 off the right, 3 urgent join it
        if job.phase == "act" and job.done == 0 and not taken_by_workers:
            now_ms = int(time.time() * 1000)
            taken_by_workers.extend(t.id for t in scripts.dequeue(q, now_ms=now_ms, lease_until_ms=now_ms + 60_000,
                                                                  count=2_500))
            for n in range(3):
                client.enqueue("t.b", {"urgent": n}, queue="bulkq", priority=5)
            commands.append(str(lrem_calls(redis_client, q)))

    job = inspector.start_bulk_job("archive", queue="bulkq", state="pending", type="t.a")
    job = inspector.run_bulk_job(job.id, on_progress=meanwhile)
    gone = set(taken_by_workers) & wanted  # taken by a "worker" before the job reached them: skipped
    assert (job.status, job.total, job.done, job.skipped) == ("done", 2_000, 2_000 - len(gone), len(gone))
    assert {t.id for t in inspector.iter_tasks("bulkq", "archived")} == wanted - gone
    left = [t.id for t in inspector.iter_tasks("bulkq", "pending")]
    assert not set(left) & wanted
    assert [i for i in left if i in set(order_before)] == [i for i in order_before if i not in taken_by_workers]
    assert len(left) == 6_000 - 2_000 - len(set(taken_by_workers) - wanted) + 3
    assert {scripts.redis.hget(q.task(i), "archived_by") for i in list(wanted - gone)[:50]} == {"operator"}
    lrems = lrem_calls(redis_client, q) - int(commands[0])
    assert lrems < 100  # a handful per call of the script, not one per task (1,1xx found tasks moved)


@pytest.mark.parametrize("state", ["pending", "scheduled"])
def test_a_filter_finds_every_task_while_workers_take_from_the_front_of_the_state(
        inspector, client, redis_client, scripts, q, state) -> None:
    """Workers take pending tasks from the front of the list, the forwarder takes due tasks from the
    front of the scheduled set: the find must still see every task that stays in the state (it reads
    a copy of the state, not places that move under it), and leave no copy behind."""
    now = time.time()
    items = [("t.a" if n % 2 == 0 else "t.b", {"n": n}) for n in range(3_000)]
    if state == "pending":
        client.enqueue_many(items, queue="bulkq")
    else:
        for n, (type_name, payload) in enumerate(items):  # due one after another, a second from now on
            client.enqueue(type_name, payload, queue="bulkq", process_at=now + 3600 + n)
    wanted = {t.id for t in inspector.iter_tasks("bulkq", state, type="t.a")}
    taken: list[str] = []

    def meanwhile(job: BulkJob) -> None:  # after each chunk found: 150 more leave the front of the state
        if job.phase == "find" and job.scanned:
            front = [t.id for t in inspector.list_tasks("bulkq", state, 1, 150, order="oldest").tasks]
            taken.extend(front)
            inspector.act_on_tasks("bulkq", "delete", front)

    job = inspector.run_bulk_job(inspector.start_bulk_job("archive", queue="bulkq", state=state, type="t.a").id,
                                 on_progress=meanwhile)
    assert taken  # the state moved while the job was finding
    gone = wanted & set(taken)
    assert (job.status, job.total, job.done, job.skipped) == ("done", 1_500, 1_500 - len(gone), len(gone))
    assert not {t.id for t in inspector.iter_tasks("bulkq", state)} & wanted  # none passed over
    assert {t.id for t in inspector.iter_tasks("bulkq", "archived")} == wanted - gone
    assert redis_client.exists(q.bulk_snapshot(job.id)) == 0


def test_the_same_driver_going_on_after_an_interrupt_is_no_recovery(inspector, redis_client, q, caplog) -> None:
    """adminctl's Ctrl-C interrupts its own driving, asks to cancel and drives on with the same holder:
    the worker log said the job was "taken up by" that holder because "its driver" (itself) stopped."""
    seed(redis_client, q, "pending", 1_200)
    job = inspector.start_bulk_job("delete", queue="bulkq", state="pending")

    def interrupt_after_first_chunk(progress: BulkJob) -> None:
        if progress.done == 500:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        inspector.run_bulk_job(job.id, holder="cli:me", on_progress=interrupt_after_first_chunk)
    caplog.clear()
    with caplog.at_level("INFO", logger="queuecore"):
        job = inspector.run_bulk_job(job.id, holder="cli:me")
    assert job.status == "done" and job.done == 1_200
    assert not [r for r in caplog.records if "taken up by" in r.getMessage()]
    assert [r for r in caplog.records if "goes on, driven by cli:me" in r.getMessage() and r.levelname == "INFO"]


def test_a_driver_that_stalls_past_its_lease_acts_no_more_once_another_took_over(inspector, redis_client, q,
                                                                                monkeypatch, caplog) -> None:
    """A review: a driver stopped (Ctrl-Z, a frozen VM) right before acting on a chunk went on acting
    once resumed, after another driver had taken the job up and finished it: a "run" of retry tasks
    ran every task again (each failing task twice in one operator action). Redis now refuses the acts
    of a driver whose lease ran out, by its own clock, and the driver stops."""
    from queuecore.core.inspector import InspectorBulkOperations

    monkeypatch.setattr(bulkjobs, "LEASE_SECONDS", 1.0)  # a lease that lapses within the test
    seed(redis_client, q, "retry", 40, type="t.a")
    seed(redis_client, q, "retry", 10, type="t.b")
    job = inspector.start_bulk_job("run", queue="bulkq", state="retry", filter="type:t.a")
    stalled, resume = threading.Event(), threading.Event()

    class StoppedBeforeItsAct(InspectorBulkOperations):
        def act(self, *args, **kwargs):
            stalled.set()
            resume.wait(30)  # the process stopped between deciding to act and its act reaching Redis
            return super().act(*args, **kwargs)

    ended: list[BulkJob] = []
    driver = threading.Thread(target=lambda: ended.append(bulkjobs.run_job(
        inspector._bulk_store, StoppedBeforeItsAct(inspector), job.id, holder="driver-a")))
    driver.start()
    try:
        assert stalled.wait(10)
        taken = wait_until(lambda: (j := inspector.run_bulk_job(job.id, holder="driver-b")).finished and j, 10,
                           message="another driver to take the job up once the lease lapsed")
        assert (taken.status, taken.done) == ("done", 40)
        redis_client.delete(q.pending)  # the 40 tasks it ran failed again: back in retry
        seed(redis_client, q, "retry", 40, type="t.a")
    finally:
        resume.set()
        driver.join(10)
    assert inspector.count("bulkq", "retry") == 50 and inspector.count("bulkq", "pending") == 0  # none ran again
    assert ended and ended[0].done == 40
    assert "stalled past its lease" in caplog.text
