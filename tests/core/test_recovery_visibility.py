"""Lease recoveries are visible (issue 11, item 10): the worker whose recoverer takes a task back
logs a line per task (bounded per round), and the task's attempt history records the lost attempt."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import pytest
import redis

from queuecore import Client, FakeClock, Inspector
from queuecore.core.clock import to_ms
from queuecore.core.health import RedisHealth
from queuecore.core.leases import LeaseRenewer
from queuecore.core.recoverer import RECOVERY_LOG_LINES, Recoverer
from queuecore.core.running import HeldTasks
from queuecore.core.scripts import Recovery, Scripts
from tests.core.test_processes import KILL_SETTINGS, spawn, wait_event  # noqa: F401 - spawn is a fixture
from tests.helpers.state import seed_task


@pytest.mark.slow
def test_a_killed_workers_tasks_are_logged_one_by_one_where_they_are_taken_back(
        spawn, client: Client, inspector: Inspector, tmp_path: Path) -> None:  # noqa: F811
    log = tmp_path / "events.jsonl"
    ids = [client.enqueue("proc.sleep", {"seconds": 30, "tag": str(n)}).id for n in range(2)]
    a = spawn(concurrency=2, **KILL_SETTINGS)
    for task_id in ids:
        wait_event(log, "start", task_id, a.pid)
    a.kill9()
    b = spawn(concurrency=2, **KILL_SETTINGS)
    for task_id in ids:
        wait_event(log, "start", task_id, b.pid, timeout=20)
    lines = b.stderr()
    for task_id in ids:
        assert re.search(rf"WARNING queuecore\.worker: task {task_id} \(proc\.sleep\) in queue default lost its "
                         r"worker \(lease expired\), attempt 1 of 26; requeued", lines), lines
        (lost,) = inspector.get_task("default", task_id).attempts
        assert (lost.number, lost.worker, lost.result, lost.error) == (1, None, "retry",
                                                                        "worker lost (lease expired)")
        assert lost.fetched_at is not None and lost.ended_at is not None and lost.fetched_at < lost.ended_at
        assert lost.started_at is None and lost.duration is None  # when its handler started is not known


def test_recovery_lines_are_bounded_per_round(redis_client: redis.Redis, scripts: Scripts, connection,
                                              fake_clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="queuecore.worker")
    q = connection.keys.queue("default")
    extra = 5
    for n in range(RECOVERY_LOG_LINES + extra):
        seed_task(redis_client, q, f"t{n:02d}", "active", score=to_ms(fake_clock.now() - 5), lease=1,
                  started_at=to_ms(fake_clock.now() - 60))
    held = HeldTasks()
    renewer = LeaseRenewer(scripts, fake_clock, 30.0, held, {q.queue: q}, on_lost=lambda *a: None,
                           on_cancel=lambda *a: None)
    recoverer = Recoverer(scripts, fake_clock, [q], 10.0, 0.0, renewer, RedisHealth())
    assert recoverer.run_once() == (RECOVERY_LOG_LINES + extra, 0, 0)
    messages = [r.getMessage() for r in caplog.records if r.name == "queuecore.worker"]
    per_task = [m for m in messages if "lost its worker" in m]
    assert len(per_task) == RECOVERY_LOG_LINES
    assert f"... and {extra} more task(s) taken back in this round (not listed)" in messages
    assert per_task[0].endswith("(test.task) in queue default lost its worker (lease expired), attempt 1 of 26; "
                                "requeued")


def test_the_rounds_summary_says_why_tasks_were_archived(redis_client: redis.Redis, scripts: Scripts, connection,
                                                         fake_clock: FakeClock,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    """Tasks an operator had asked to cancel are archived as cancelled when their worker is lost; the
    round's summary said "archived (retries spent)" for every archived task."""
    caplog.set_level(logging.WARNING, logger="queuecore.worker")
    q = connection.keys.queue("default")
    expired = dict(score=to_ms(fake_clock.now() - 5), lease=1, started_at=to_ms(fake_clock.now() - 60))
    seed_task(redis_client, q, "cancelled-1", "active", cancel="1", **expired)
    seed_task(redis_client, q, "cancelled-2", "active", cancel="1", **expired)
    seed_task(redis_client, q, "spent", "active", max_retry=0, **expired)
    seed_task(redis_client, q, "again", "active", **expired)
    renewer = LeaseRenewer(scripts, fake_clock, 30.0, HeldTasks(), {q.queue: q}, on_lost=lambda *a: None,
                           on_cancel=lambda *a: None)
    assert Recoverer(scripts, fake_clock, [q], 10.0, 0.0, renewer, RedisHealth()).run_once() == (1, 3, 0)
    messages = [r.getMessage() for r in caplog.records if r.name == "queuecore.worker"]
    assert ("recovered tasks with expired leases: 1 requeued, 3 archived (2 cancelled by operator, 1 retries "
            "spent), 0 orphan ids dropped") in messages


def test_a_silence_is_not_blamed_on_redis_alone(redis_client: redis.Redis, scripts: Scripts, connection,
                                                fake_clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    """After every worker had stopped (a deploy), the first worker to start said Redis had been away."""
    caplog.set_level(logging.WARNING, logger="queuecore.worker")
    q = connection.keys.queue("default")
    renewer = LeaseRenewer(scripts, fake_clock, 30.0, HeldTasks(), {q.queue: q}, on_lost=lambda *a: None,
                           on_cancel=lambda *a: None)

    def recoverer() -> Recoverer:
        return Recoverer(scripts, fake_clock, [q], 10.0, 0.0, renewer, RedisHealth(), outage_after=25.0, grace=30.0)

    recoverer().run_once()
    seconds, micros = redis_client.time()
    redis_client.hset(q.recovery, "seen", seconds * 1000 + micros // 1000 - 40_000)  # no round for 40 s (Redis's clock)
    recoverer().run_once()
    (line,) = [r.getMessage() for r in caplog.records if "no recovery round ran" in r.getMessage()]
    assert line.startswith("queue 'default': no recovery round ran for 40.")
    assert "(no worker ran, or Redis or every worker's connection to it was away)" in line


def test_large_messages_are_taken_back_in_bounded_calls_within_one_round(
        redis_client: redis.Redis, scripts: Scripts, connection, fake_clock: FakeClock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """recover decodes each message: 100 lost tasks of 500 KB held Redis 0.29 s in one call. A call
    stops once it has read 4 MB of messages (here after five of 1 MB) and says so, and the round goes
    on calling until every expired task is taken back."""
    q = connection.keys.queue("default")
    for n in range(12):
        seed_task(redis_client, q, f"big{n:02d}", "active", score=to_ms(fake_clock.now() - 5), lease=1,
                  payload={"pad": "x" * 1_000_000})
    calls: list[Recovery] = []
    recover = Scripts.recover

    def counted(self: Scripts, *args: Any, **kwargs: Any) -> Recovery:
        calls.append(recover(self, *args, **kwargs))
        return calls[-1]

    monkeypatch.setattr(Scripts, "recover", counted)
    renewer = LeaseRenewer(scripts, fake_clock, 30.0, HeldTasks(), {q.queue: q}, on_lost=lambda *a: None,
                           on_cancel=lambda *a: None)
    assert Recoverer(scripts, fake_clock, [q], 10.0, 0.0, renewer, RedisHealth()).run_once() == (12, 0, 0)
    assert [(c.requeued, c.more) for c in calls] == [(5, True), (5, True), (2, False)]
    assert redis_client.zcard(q.active) == 0 and redis_client.llen(q.pending) == 12
