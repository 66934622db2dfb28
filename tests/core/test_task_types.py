"""Tasks no worker can run (issue 11, item 9): workers publish the task types they handle and their
parameter names with their heartbeat; the Inspector checks a task against the live workers; a
worker archives at once a task whose payload does not fit its handler."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from queuecore import Client, ConnectionConfig, InvalidPayload, TaskRegistry, Worker, task
from queuecore.core.errors import NoWorkerForTask, PayloadMismatch
from queuecore.core.inspector import Inspector
from queuecore.core.message import TaskSignature
from tests.conftest import FAST, wait_until
from tests.core.worker_support import SOON


def settled(inspector: Inspector, task_id: str) -> Any:
    """The task once its first attempt is written (retry or archived)."""
    return wait_until(lambda: (t := inspector.get_task("default", task_id)).state in ("retry", "archived") and t,
                      SOON, message="the first attempt to be written")


def test_a_payload_that_does_not_fit_the_handler_is_archived_at_once(make_worker, connection: ConnectionConfig,
                                                                     inspector: Inspector, registry,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="queuecore.worker")
    ran: list[str] = []

    @task(name="t.send", registry=registry)
    def send(user_id: int, template: str = "welcome") -> None:
        ran.append("send")

    @task(name="t.inner_type_error", registry=registry)
    def inner() -> None:
        raise TypeError("raised inside the handler: an ordinary failure")

    # A client that knows no handlers (like adminctl, or another service) stores what it is given.
    blind = Client(connection=connection, registry=TaskRegistry())
    try:
        wrong = blind.enqueue("t.send", {"uid": 7}, max_retry=25)
        inner_failure = blind.enqueue("t.inner_type_error", max_retry=25)
    finally:
        blind.close()
    make_worker()
    archived = settled(inspector, wrong.id)
    assert archived.state == "archived" and archived.retried == 0, "a payload that cannot fit is not retried"
    assert archived.last_error is not None and archived.last_error.startswith(
        "PayloadMismatch: payload does not fit task t.send: missing a required argument: 'user_id'")
    assert [(a.number, a.result) for a in archived.attempts] == [(1, "archived")]
    assert ran == []
    assert settled(inspector, inner_failure.id).state == "retry"  # TypeError inside the handler: retried
    lines = [r.getMessage() for r in caplog.records if wrong.id in r.getMessage()]
    assert len(lines) == 1 and lines[0].endswith(
        "attempt 1 of 26: PayloadMismatch: payload does not fit task t.send: missing a required argument: "
        "'user_id'; archived (at once: the payload does not fit the handler, a retry would fail the same way)")


def test_workers_publish_their_task_types_and_the_inspector_checks_tasks(connection: ConnectionConfig,
                                                                         inspector: Inspector) -> None:
    """Two workers of different versions: the new one's ``t.send`` takes ``template``, the old one's
    does not; only the old one serves ``low`` and handles ``t.legacy``."""
    new, old = TaskRegistry(), TaskRegistry()

    @task(name="t.send", registry=new)
    def send_new(user_id: int, template: str = "welcome") -> None: ...

    @task(name="t.send", registry=old)
    def send_old(user_id: int) -> None: ...

    @task(name="t.legacy", registry=old)
    def legacy(**anything: Any) -> None: ...

    workers = [Worker(connection=connection, registry=new, **{**FAST, "queues": {"default": 1}}),
               Worker(connection=connection, registry=old, **{**FAST, "queues": {"default": 1, "low": 1}})]
    try:
        for w in workers:
            w.start()
        servers = wait_until(lambda: len(s := inspector.servers(task_types=True)) == 2 and s, SOON,
                             message="both heartbeats")
        published = {s.id: s.task_types for s in servers}  # type: ignore[union-attr]
        assert published[workers[0].server_id] == {"t.send": TaskSignature(("template", "user_id"), ("user_id",))}
        assert published[workers[1].server_id] == {"t.legacy": TaskSignature((), (), True),
                                                   "t.send": TaskSignature(("user_id",), ("user_id",))}
        assert inspector.servers()[0].task_types is None  # only read when asked for

        fits_both = inspector.check_task("t.send", {"user_id": 1})
        assert (fits_both.runnable, fits_both.warnings, fits_both.serving, fits_both.handling,
                fits_both.fitting) == (True, [], 2, 2, 2)
        fits_one = inspector.check_task("t.send", {"user_id": 1, "template": "promo"})
        assert fits_one.runnable and fits_one.fitting == 1
        assert fits_one.warnings == ["the payload does not fit task 't.send' on 1 of 2 live worker(s) handling it "
                                     "(unexpected argument(s) 'template'): one of those would archive it at once"]
        legacy_default = inspector.check_task("t.legacy", {"x": 1})
        assert legacy_default.runnable and legacy_default.warnings == [
            "1 of 2 live worker(s) serving queue 'default' do not handle 't.legacy': one of those would fail it "
            "(it is then retried)"]
        assert inspector.check_task("t.legacy", {"x": 1}, queue="low").warnings == []

        fits_none = inspector.check_task("t.send", {"uid": 1})
        assert not fits_none.runnable and fits_none.payload_problem
        assert fits_none.problem == ("the payload does not fit task 't.send' on any live worker serving queue "
                                     "'default': missing required argument(s) 'user_id'; unexpected argument(s) 'uid'")
        with pytest.raises(InvalidPayload, match=r"does not fit task 't\.send'"):
            inspector.require_runnable("t.send", {"uid": 1})
        typo = inspector.check_task("t.sned")
        assert typo.problem == ("no live worker serving queue 'default' handles task type 't.sned' (the closest "
                                "they handle: 't.send')")
        unknown = inspector.check_task("no.such.type")
        assert unknown.problem == ("no live worker serving queue 'default' handles task type 'no.such.type' (they "
                                   "handle 2 other type(s))")
        with pytest.raises(NoWorkerForTask, match=r"handles task type 'no\.such\.type'"):
            inspector.require_runnable("no.such.type")
        assert inspector.check_task("t.send", {"user_id": 1}, queue="other").problem == (
            "no live worker serves queue 'other' (the live workers serve default, low)")
        assert not isinstance(NoWorkerForTask("x"), InvalidPayload) and issubclass(PayloadMismatch, InvalidPayload)
    finally:
        for w in workers:
            w.shutdown(timeout=2)
    # A clean exit removes what a worker published at once.
    none = inspector.check_task("t.send", {"user_id": 1})
    assert none.problem == ("no worker is running (no live heartbeat), so no worker can be seen to handle task type "
                            "'t.send'")
    assert inspector.redis.keys(f"{connection.key_prefix}:servers:*") == []
