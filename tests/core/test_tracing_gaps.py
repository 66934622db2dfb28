"""Tracing gaps a probe found: an enqueue refused by Redis (a held unique lock, a taken id) must say so
on its "send" span; a timeout's "process" span must say what happened; an attempt that fails before
its handler runs (no handler, a deadline passed) is counted as processed and failed, so it gets its
"process" span too."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from queuecore import Client, task
from queuecore.core import tracing
from queuecore.core.errors import BatchEnqueueError, DuplicateTask, InvalidPayload, TaskIdConflict
from tests.conftest import wait_until
from tests.core.test_tracing import _EXPORTER, _PROVIDER, finished


@pytest.fixture
def otel() -> Iterator[InMemorySpanExporter]:
    """As test_tracing's ``spans``: queuecore's spans go to an SDK provider with an in-memory exporter."""
    tracing.use(_PROVIDER)
    _EXPORTER.clear()
    yield _EXPORTER
    tracing.use(None)
    _EXPORTER.clear()


def _refused(span, error_type: str) -> None:
    assert span.status.status_code == StatusCode.ERROR
    assert span.status.description.startswith(f"{error_type}: ")
    (event,) = span.events
    assert event.name == "exception" and event.attributes["exception.type"].endswith(error_type)


def test_an_enqueue_refused_as_a_duplicate_or_a_taken_id_is_an_error_on_its_send_span(otel, client):
    client.enqueue("t.u", {"n": 1}, queue="gd", unique_for=60)
    with pytest.raises(DuplicateTask):
        client.enqueue("t.u", {"n": 1}, queue="gd", unique_for=60)
    stored, refused = sorted(finished(otel, "send gd"), key=lambda s: s.start_time)
    assert stored.status.status_code == StatusCode.UNSET and not stored.events
    _refused(refused, "DuplicateTask")

    client.enqueue("t.i", {}, queue="gi", task_id="taken")
    with pytest.raises(TaskIdConflict):
        client.enqueue("t.i", {}, queue="gi", task_id="taken")
    stored, refused = sorted(finished(otel, "send gi"), key=lambda s: s.start_time)
    assert stored.status.status_code == StatusCode.UNSET
    _refused(refused, "TaskIdConflict")


def test_enqueue_many_refusals_are_per_task_spans(otel, client):
    from queuecore.core.registry import TaskRequest

    client.enqueue("t.i", {}, queue="gn", task_id="taken")
    otel.clear()
    requests = [TaskRequest("t.a", {}), TaskRequest("t.i", {}, options={"task_id": "taken"}),
                TaskRequest("t.u", {"n": 2}, options={"unique_for": 60}),
                TaskRequest("t.u", {"n": 2}, options={"unique_for": 60})]
    with pytest.raises(BatchEnqueueError) as caught:
        client.enqueue_many(requests, queue="gn")
    assert sorted(caught.value.errors) == [1, 3]
    sends = {s.attributes["queuecore.task.type"] + str(i): s
             for i, s in enumerate(sorted(finished(otel, "send gn"), key=lambda s: s.start_time))}
    assert len(sends) == 4
    assert sends["t.a0"].status.status_code == StatusCode.UNSET
    _refused(sends["t.i1"], "TaskIdConflict")
    assert sends["t.u2"].status.status_code == StatusCode.UNSET
    _refused(sends["t.u3"], "DuplicateTask")


def test_a_batch_refused_for_an_invalid_request_ends_the_spans_already_started(otel, client):
    with pytest.raises(InvalidPayload):
        client.enqueue_many([("t.a", {}), ("t.b", {"x": object()})], queue="gv")
    (span,) = finished(otel, "send gv")  # the first task's span was started, and must not stay open
    assert span.attributes["queuecore.task.type"] == "t.a"
    _refused(span, "InvalidPayload")


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_timeout_says_what_happened_on_its_span(otel, make_worker, client, registry, inspector, kind):
    if kind == "sync":
        @task(name="t.slow", registry=registry)
        def slow() -> None:
            for _ in range(500):
                time.sleep(0.01)
    else:
        @task(name="t.slow", registry=registry)
        async def slow() -> None:
            await asyncio.sleep(5)

    handle = client.enqueue("t.slow", {}, queue="gt", timeout=1, max_retry=0)
    make_worker(queues={"gt": 1})
    (span,) = wait_until(lambda: finished(otel, "process gt"), timeout=10)
    info = wait_until(lambda: (i := inspector.get_task("gt", handle.id)).state == "archived" and i, timeout=10)
    assert info.last_error.startswith("TaskTimeout: timed out after 1s")
    assert span.status.status_code == StatusCode.ERROR
    assert span.status.description == "TaskTimeout: timed out after 1s"
    (event,) = span.events
    assert event.attributes["exception.type"] == "queuecore.core.errors.TaskTimeout"
    assert event.attributes["exception.message"] == "timed out after 1s"


def test_an_attempt_without_a_handler_gets_its_process_span(otel, make_worker, connection, registry, inspector):
    with Client(connection=connection) as other:  # the worker below knows no handler of this type
        handle = other.enqueue("t.nobody", {}, queue="gh", max_retry=1, retention=60)
    (send,) = finished(otel, "send gh")
    make_worker(queues={"gh": 1}, retry_delay=lambda n, e: 0.01)
    attempts = wait_until(lambda: len(s := finished(otel, "process gh")) == 2 and s, timeout=10)
    wait_until(lambda: inspector.get_task("gh", handle.id).state == "archived", timeout=10)
    assert sorted(s.attributes["queuecore.task.attempt"] for s in attempts) == [1, 2]
    for span in attempts:
        assert span.parent.span_id == send.context.span_id and span.context.trace_id == send.context.trace_id
        assert span.attributes["messaging.message.id"] == handle.id
        assert span.attributes["queuecore.task.type"] == "t.nobody"
        assert span.status.status_code == StatusCode.ERROR
        assert span.status.description == ("LookupError: no handler is registered for task type 't.nobody' "
                                           "in this worker")
    time.sleep(0.3)
    assert len(finished(otel, "process gh")) == 2  # one per attempt, no more


def test_an_attempt_after_its_deadline_gets_its_process_span(otel, make_worker, client, registry, inspector):
    ran = []

    @task(name="t.late", registry=registry)
    def late() -> None:
        ran.append(1)

    handle = client.enqueue(late, {}, queue="gl", deadline=time.time() - 1)
    make_worker(queues={"gl": 1})
    (span,) = wait_until(lambda: finished(otel, "process gl"), timeout=10)
    wait_until(lambda: inspector.get_task("gl", handle.id).state == "archived", timeout=10)
    (send,) = finished(otel, "send gl")
    assert span.parent.span_id == send.context.span_id
    assert span.status.status_code == StatusCode.ERROR
    assert span.status.description.startswith("DeadlinePassed: the task's deadline passed")
    assert not ran


def test_an_attempt_whose_deadline_passes_while_it_waits_gets_its_process_span(otel, make_worker, client, registry):
    """One run slot, held by a slow task: the next one, fetched ahead, waits; its deadline passes meanwhile."""
    @task(name="t.hold", registry=registry)
    def hold() -> None:
        time.sleep(1.0)

    @task(name="t.waits", registry=registry)
    def waits() -> None:
        pass

    client.enqueue(hold, {}, queue="gw")
    make_worker(queues={"gw": 1}, concurrency=1, prefetch=2)
    wait_until(lambda: finished(otel, "send gw"), timeout=5)
    time.sleep(0.2)  # the slow task runs
    client.enqueue(waits, {}, queue="gw", deadline=time.time() + 0.3)
    spans = wait_until(lambda: len(s := finished(otel, "process gw")) == 2 and s, timeout=10)
    waited = next(s for s in spans if s.attributes["queuecore.task.type"] == "t.waits")
    assert waited.status.status_code == StatusCode.ERROR
    assert waited.status.description.startswith("DeadlinePassed: ")
