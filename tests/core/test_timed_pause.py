"""Pausing a queue for a duration: it resumes by itself; operators see until when and who paused it."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from queuecore import Inspector, WrongKeyType, task
from queuecore.core.errors import InvalidOption
from tests.conftest import wait_until
from tests.core.worker_support import let_worker_run, wait_state


def test_timed_pause_shows_until_when_and_who_then_resumes_by_itself(make_worker, client, registry, connection):
    ran = []

    @task(name="t.work", registry=registry)
    def work() -> None:
        ran.append(time.time())

    client.enqueue(work, {}, queue="q")  # makes the queue known
    ops = Inspector(connection=connection, actor="cli:alice@host")
    try:
        ops.pause_queue("q", for_=timedelta(seconds=1.5))
        paused_at = time.time()
        info = ops.queue_info("q")
        assert info.paused and info.paused_by == "cli:alice@host"
        assert info.paused_until is not None
        assert 1.0 < info.paused_until.timestamp() - paused_at <= 1.6
        assert info.to_dict()["paused_until"] == info.paused_until.isoformat()
        worker = make_worker(queues={"q": 1})
        let_worker_run(ops, worker, beats=2)
        if time.time() < info.paused_until.timestamp() - 0.05:
            assert ran == []  # nothing ran while paused
        wait_until(lambda: ran, 10, message="the queue to resume by itself")
        assert ran[0] >= info.paused_until.timestamp() - 0.05
        after = ops.queue_info("q")
        assert (after.paused, after.paused_until, after.paused_by) == (False, None, None)
        entry = ops.audit_log(limit=1)[0]
        assert (entry.action, entry.actor, entry.state) == ("queue.pause", "cli:alice@host", "for 1.5s")
    finally:
        ops.close()


def test_pause_without_duration_stays_and_a_timed_pause_replaces_it(client, inspector, registry, redis_client):
    @task(name="t.noop", registry=registry)
    def noop() -> None: ...

    info = client.enqueue(noop, {}, queue="q")
    inspector.pause_queue("q")
    paused = inspector.queue_info("q")
    assert paused.paused and paused.paused_until is None and paused.paused_by == "api"
    q = inspector.keys.queue("q")
    assert redis_client.pttl(q.paused) == -1
    inspector.pause_queue("q", for_=60)
    assert 0 < redis_client.pttl(q.paused) <= 60_100  # Redis and this process read the clock apart
    inspector.pause_queue("q")  # for good again: the end is dropped
    assert redis_client.pttl(q.paused) == -1
    inspector.unpause_queue("q")
    assert not inspector.queue_info("q").paused
    assert wait_state(inspector, "q", info.id, "pending").state == "pending"


@pytest.mark.parametrize("bad", [0, -5, float("nan"), "30m", 11 * 365 * 24 * 3600, True])
def test_pause_duration_is_checked(client, inspector, registry, bad):
    @task(name="t.noop", registry=registry)
    def noop() -> None: ...

    client.enqueue(noop, {}, queue="q")
    with pytest.raises(InvalidOption):
        inspector.pause_queue("q", for_=bad)
    assert not inspector.queue_info("q").paused


def test_a_paused_key_of_another_type_is_refused_and_still_reads_as_paused(client, inspector, registry,
                                                                           redis_client):
    @task(name="t.noop", registry=registry)
    def noop() -> None: ...

    client.enqueue(noop, {}, queue="q")
    q = inspector.keys.queue("q")
    redis_client.rpush(q.paused, "garbage")  # corrupt: a LIST where a STRING belongs
    with pytest.raises(WrongKeyType):
        inspector.pause_queue("q", for_=60)
    assert redis_client.lrange(q.paused, 0, -1) == ["garbage"]  # nothing written
    info = inspector.queue_info("q")
    assert (info.paused, info.paused_until) == (True, None)
