"""A whole-state bulk job acts on exactly the tasks that were in the state when it was made: tasks that
enter the state during the job (a task the job ran that failed again, a priority or scheduled enqueue)
are passed and left where they are, and an id whose task hash is gone counts as skipped, not done.

Each test runs the job chunk by chunk: between two chunks it moves tasks with the real scripts and
client, as a worker or a producer would."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from queuecore.core.inspector import InspectorBulkOperations
from queuecore.core.keys import QueueKeys
from queuecore.core.scripts import Scripts
from tests.core.test_bulk_jobs import NOW_MS, q, seed  # noqa: F401 - the queue fixture
from tests.helpers.state import seed_task

DAY, MINUTE = "2030-01-01", "2030-01-01T00:00"


def between_chunks(monkeypatch: pytest.MonkeyPatch, after: Callable[[int], None]) -> list[Any]:
    """Run ``after(n)`` once the job's chunk ``n`` (1, 2, ...) has been acted on; returns the chunks."""
    chunk = InspectorBulkOperations.state_chunk
    seen: list[Any] = []

    def wrapped(self: InspectorBulkOperations, *args: Any) -> Any:
        result = chunk(self, *args)
        seen.append(result)
        after(len(seen))
        return result

    monkeypatch.setattr(InspectorBulkOperations, "state_chunk", wrapped)
    return seen


def now_ms() -> int:
    return int(time.time() * 1000)


def test_run_all_retry_runs_each_task_once_when_the_ones_it_ran_fail_again(
        inspector, redis_client: redis.Redis, q: QueueKeys, scripts: Scripts, monkeypatch) -> None:  # noqa: F811
    """D1: the tasks the job ran that a worker failed again come back to retry due sooner than the
    tasks not run yet; the job must not take them again (an attempt without its retry delay) and must
    still run every other task."""
    originals = seed(redis_client, q, "retry", 1_200, error="boom")
    ran: list[str] = []

    def worker_fails_them_again(_n: int) -> None:
        for task in scripts.dequeue(q, now_ms=now_ms(), lease_until_ms=now_ms() + 30_000, count=1_000):
            ran.append(task.id)
            assert scripts.retry(q, task.id, task.lease, now_ms=now_ms(), retry_at_ms=1_000 + len(ran),
                                 error="boom again", day=DAY, minute=MINUTE)

    between_chunks(monkeypatch, worker_fails_them_again)
    job = inspector.start_bulk_job("run", queue="bulkq", state="retry")
    job = inspector.run_bulk_job(job.id)
    assert (job.status, job.done, job.skipped, job.total) == ("done", 1_200, 0, 1_200)
    assert sorted(ran) == sorted(originals)  # every task run, none twice
    assert redis_client.zcard(q.retry) == 1_200  # each failed once more, waiting for its delay


def test_delete_all_pending_leaves_the_tasks_enqueued_meanwhile(
        inspector, client, redis_client: redis.Redis, q: QueueKeys, monkeypatch) -> None:  # noqa: F811
    """D2: priority tasks join pending at the end the job takes from, ordinary ones at the other end;
    the job deletes the tasks that were there and only those."""
    originals = seed(redis_client, q, "pending", 1_200)
    added: list[str] = []

    def producer(_n: int) -> None:
        for n in range(150):
            added.append(client.enqueue("t.new", {"n": n}, queue="bulkq", priority=5 if n % 2 else 0).id)

    between_chunks(monkeypatch, producer)
    job = inspector.start_bulk_job("delete", queue="bulkq", state="pending")
    job = inspector.run_bulk_job(job.id)
    assert (job.status, job.done, job.skipped) == ("done", 1_200, 0)
    left = redis_client.lrange(q.pending, 0, -1)
    assert sorted(left) == sorted(added)
    assert not any(redis_client.exists(q.task(i)) for i in originals[:50])


def test_archive_all_pending_with_tasks_handed_back_meanwhile(
        inspector, client, redis_client: redis.Redis, q: QueueKeys, scripts: Scripts, monkeypatch) -> None:  # noqa: F811
    """Tasks handed back to the front of pending (a worker's shutdown: requeue) during the job entered
    pending after it was made: left there, while the job archives every task that was there."""
    originals = seed(redis_client, q, "pending", 1_100)
    handed: list[str] = []

    def worker_takes_and_hands_back(n: int) -> None:
        if n == 1:
            taken = scripts.dequeue(q, now_ms=now_ms(), lease_until_ms=now_ms() + 30_000, count=30)
            for task in taken:
                assert scripts.requeue(q, task.id, task.lease, now_ms=now_ms())
                handed.append(task.id)

    between_chunks(monkeypatch, worker_takes_and_hands_back)
    job = inspector.start_bulk_job("archive", queue="bulkq", state="pending")
    job = inspector.run_bulk_job(job.id)
    assert sorted(redis_client.lrange(q.pending, 0, -1)) == sorted(handed)
    assert redis_client.zcard(q.archived) == 1_100 - 30 == job.done
    assert set(redis_client.zrange(q.archived, 0, -1)) == set(originals) - set(handed)


def test_delete_all_scheduled_leaves_tasks_scheduled_meanwhile_due_sooner(
        inspector, client, redis_client: redis.Redis, q: QueueKeys, monkeypatch) -> None:  # noqa: F811
    originals = seed(redis_client, q, "scheduled", 1_200)
    redis_client.zadd(q.scheduled, {task_id: now_ms() + 7_200_000 + n for n, task_id in enumerate(originals)})
    added: list[str] = []

    def producer(_n: int) -> None:
        added.extend(client.enqueue("t.new", {"n": n}, queue="bulkq", process_in=60).id for n in range(200))

    between_chunks(monkeypatch, producer)
    job = inspector.start_bulk_job("delete", queue="bulkq", state="scheduled")
    job = inspector.run_bulk_job(job.id)
    assert (job.status, job.done, job.skipped) == ("done", 1_200, 0)
    assert sorted(redis_client.zrange(q.scheduled, 0, -1)) == sorted(added)


@pytest.mark.parametrize(("action", "state", "into"), [("archive", "pending", "archived"),
                                                       ("run", "archived", "pending"),
                                                       ("delete", "retry", None)])
def test_ids_whose_task_hash_is_gone_count_as_skipped_not_done(
        inspector, redis_client: redis.Redis, q: QueueKeys, action: str, state: str, into: str | None) -> None:  # noqa: F811
    """D3: 10 tasks, 3 hashes deleted by hand: 7 done, 3 skipped."""
    ids = seed(redis_client, q, state, 10, error="boom")
    redis_client.delete(*(q.task(i) for i in ids[:3]))
    job = inspector.run_bulk_job(inspector.start_bulk_job(action, queue="bulkq", state=state).id)
    assert (job.status, job.done, job.skipped) == ("done", 7, 3)
    assert inspector.count("bulkq", state) == 0
    if into:
        assert inspector.count("bulkq", into) == 7


BIG = {"pad": "x" * 1_000_000}  # a 1 MB message: a chunk reads at most 4 MB of messages, then one more


@pytest.mark.parametrize(("state", "scheduled_at", "per_chunk"),
                         [("scheduled", None, [5, 5, 2]), ("scheduled", NOW_MS, [12]), ("retry", None, [12])])
def test_a_chunk_reads_a_bounded_number_of_message_bytes(
        inspector, redis_client: redis.Redis, q: QueueKeys, monkeypatch,  # noqa: F811
        state: str, scheduled_at: int | None, per_chunk: list[int]) -> None:
    """A scheduled task's entry time may be in its message only: a chunk stops reading messages past
    4 MB (500 messages of 500 KB in one call held Redis 0.44 s). Retry tasks carry their entry time in
    a field, so their messages are not read at all and one chunk takes them all; so do scheduled tasks
    that have the field (their messages were read beside it all the same, and cut the chunks short)."""
    for n in range(12):
        seed_task(redis_client, q, f"big-{n}", state, score=NOW_MS + n, payload=BIG, error="boom",
                  failed_at=NOW_MS, scheduled_at=scheduled_at)
    chunks = between_chunks(monkeypatch, lambda _n: None)
    job = inspector.run_bulk_job(inspector.start_bulk_job("delete", queue="bulkq", state=state).id)
    assert (job.status, job.done, job.skipped) == ("done", 12, 0)
    assert [c.acted for c in chunks if c.acted] == per_chunk
    assert redis_client.zcard(q.state_key(state)) == 0


def test_a_confirmed_count_bounds_the_job_to_what_the_operator_saw(inspector, client) -> None:
    """``start_bulk_job(confirmed=state_count(...))``: the tasks that entered the state after the count
    are left alone, however long the operator took; the count is checked where it enters."""
    from queuecore.core.bulkjobs import StateCount
    from queuecore.core.errors import ConfigurationError

    seen = [h.id for h in client.enqueue_many([("t", {"n": n}) for n in range(4)], queue="confirm")]
    counted = inspector.state_count("confirm", "pending")
    assert (counted.size, counted.queue, counted.state) == (4, "confirm", "pending")
    later = [h.id for h in client.enqueue_many([("t", {"n": n}) for n in range(4, 10)], queue="confirm")]
    job = inspector.run_bulk_job(inspector.start_bulk_job("delete", queue="confirm", state="pending",
                                                          confirmed=counted).id)
    assert (job.status, job.done, job.total) == ("done", 4, 4)
    assert [t.id for t in inspector.list_tasks("confirm", "pending", 1, 20).tasks] == later
    assert not set(seen) & {t.id for t in inspector.list_tasks("confirm", "pending", 1, 20).tasks}
    for wrong in (StateCount("other", "pending", 4, counted.at), StateCount("confirm", "archived", 4, counted.at),
                  StateCount("confirm", "pending", -1, counted.at), StateCount("confirm", "pending", 4, float("nan")),
                  StateCount("confirm", "pending", True, counted.at)):
        with pytest.raises(ConfigurationError):
            inspector.start_bulk_job("delete", queue="confirm", state="pending", confirmed=wrong)
    assert inspector.count("confirm", "pending") == 6 and all(j.finished for j in inspector.bulk_jobs())
