"""An operator fixes a failed task's payload and runs it (``Inspector.edit_and_run``): checked as at
enqueue, done in one step, and kept in the task's edits and the audit log."""

from __future__ import annotations

import threading

import pytest

from queuecore import task
from queuecore.core.errors import InvalidPayload, InvalidTaskState, TaskNotFound
from tests.conftest import wait_until


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
