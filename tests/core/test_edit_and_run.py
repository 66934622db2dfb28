"""An operator fixes a failed task's payload and runs it (``Inspector.edit_and_run``): checked as at
enqueue, done in one step, and kept in the task's edits and the audit log."""

from __future__ import annotations

import threading

import pytest

from queuecore import task
from queuecore.core.errors import InvalidPayload, InvalidTaskState, TaskNotFound
from tests.conftest import wait_until
from tests.helpers.state import seed_task


def test_a_fixed_payload_runs_and_the_edit_is_kept(make_worker, registry, client, inspector) -> None:
    ran: list[int] = []
    seen = threading.Event()

    @task(name="t.charge", registry=registry, max_retry=0)
    def charge(user_id: int, amount: int) -> None:
        if amount < 0:
            raise ValueError("negative amount")
        ran.append(amount)
        seen.set()

    make_worker(queues="default")
    info = client.enqueue("t.charge", {"user_id": 7, "amount": -5}, retention=60)
    wait_until(lambda: inspector.get_task("default", info.id).state == "archived", 10, message="the failure")
    with pytest.raises(InvalidPayload, match="does not fit"):
        inspector.edit_and_run("default", info.id, {"user_id": 7, "amonut": 5})  # a typo no handler takes
    with pytest.raises(InvalidPayload, match="JSON object"):
        inspector.edit_and_run("default", info.id, [5])  # type: ignore[arg-type]
    with pytest.raises(InvalidPayload, match="bytes"):
        inspector.edit_and_run("default", info.id, {"user_id": 7, "amount": 5, "pad": "x" * 600_000})
    assert inspector.get_task("default", info.id).state == "archived"  # refused edits changed nothing

    edited = inspector.as_actor("ops:ann").edit_and_run("default", info.id, {"user_id": 7, "amount": 5})
    assert edited.payload == {"user_id": 7, "amount": 5}
    assert [(e["actor"], e["before"], e["cut"]) for e in edited.edits] == [
        ("ops:ann", '{"user_id":7,"amount":-5}', False)]
    assert seen.wait(10) and ran == [5]
    done = wait_until(lambda: (t := inspector.get_task("default", info.id)).state == "completed" and t, 10,
                      message="the run")
    assert done.edits == edited.edits and done.max_retry == 0  # the rest of the message is kept
    entry = inspector.audit_log()[0]
    assert (entry.action, entry.actor, entry.task_ids) == ("task.edit_run", "ops:ann", [info.id])
    with pytest.raises(InvalidTaskState, match="completed"):
        inspector.edit_and_run("default", info.id, {"user_id": 7, "amount": 6})
    with pytest.raises(TaskNotFound):
        inspector.edit_and_run("default", "nope", {})


def test_force_skips_the_check_against_live_handlers(client, inspector) -> None:
    info = client.enqueue("t.offline", {"a": 1}, process_in=3600)  # scheduled; no worker handles the type
    edited = inspector.edit_and_run("default", info.id, {"a": 2}, force=True)
    assert (edited.state, edited.payload, len(edited.edits)) == ("pending", {"a": 2}, 1)


def test_an_edit_to_null_or_of_an_undecodable_task_is_refused_and_changes_nothing(client, inspector, redis_client,
                                                                                 connection) -> None:
    """``null`` was taken for an empty payload (the dashboard's form sent it), and a task whose stored message
    cannot be decoded raised TaskDecodeError past the dashboard: a 500 page."""
    info = client.enqueue("t.offline", {"a": 1}, process_in=3600)
    with pytest.raises(InvalidPayload, match="JSON object, not NoneType"):
        inspector.edit_and_run("default", info.id, None, force=True)  # type: ignore[arg-type]
    assert inspector.get_task("default", info.id).payload == {"a": 1}
    q = connection.keys.queue("default")
    seed_task(redis_client, q, "garbled", "archived", score=1_800_000_000_000, msg="{not json", error="boom")
    with pytest.raises(InvalidTaskState, match="cannot be decoded"):
        inspector.edit_and_run("default", "garbled", {"a": 2}, force=True)
    assert redis_client.hget(q.task("garbled"), "msg") == "{not json"
