"""OpenTelemetry tracing: a "send" span per enqueue and a "process" span per attempt, captured with
the SDK's in-memory exporter; the trace context travels through Redis in the task message, so the
worker's span is the child of the enqueue's, itself the child of a request's span."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from queuecore import Snooze, task
from queuecore.core import tracing
from queuecore.core.message import TaskMessage
from tests.conftest import wait_until

_EXPORTER = InMemorySpanExporter()
_PROVIDER = TracerProvider()
_PROVIDER.add_span_processor(SimpleSpanProcessor(_EXPORTER))


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """queuecore's spans (and the test's own) go to an SDK provider with an in-memory exporter. It is
    not made the global provider (the API allows one per process, and later tests would trace)."""
    tracing.use(_PROVIDER)
    _EXPORTER.clear()
    yield _EXPORTER
    tracing.use(None)
    _EXPORTER.clear()


def tracer(name: str) -> trace.Tracer:
    return _PROVIDER.get_tracer(name)


def finished(exporter: InMemorySpanExporter, name: str) -> list:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def test_request_enqueue_and_worker_attempt_form_one_trace(spans, make_worker, client, registry, redis_client,
                                                            key_prefix):
    @task(name="t.traced", registry=registry)
    def traced(n: int) -> int:
        with tracer("app").start_as_current_span("inside handler"):
            return n * 2

    with tracer("web").start_as_current_span("GET /orders", kind=SpanKind.SERVER) as request_span:
        info = client.enqueue(traced, {"n": 21}, queue="tq")
    # The context is in the stored message, not in process memory: read it back from Redis.
    stored = redis_client.hget(f"{key_prefix}:{{tq}}:t:{info.id}", "msg")
    carried = json.loads(stored)["trace"]
    request_ctx = request_span.get_span_context()
    (send,) = finished(spans, "send tq")
    flags = send.context.trace_flags
    assert carried["traceparent"] == f"00-{request_ctx.trace_id:032x}-{send.context.span_id:016x}-{flags:02x}"
    assert send.kind == SpanKind.PRODUCER and send.parent.span_id == request_ctx.span_id
    assert dict(send.attributes) == {
        "messaging.system": "queuecore", "messaging.destination.name": "tq", "messaging.message.id": info.id,
        "messaging.operation.type": "send", "messaging.operation.name": "send", "queuecore.task.type": "t.traced"}

    make_worker(queues={"tq": 1})
    process = wait_until(lambda: finished(spans, "process tq"), timeout=10)[0]
    assert process.kind == SpanKind.CONSUMER
    assert process.context.trace_id == request_ctx.trace_id  # the request's trace continues in the worker
    assert process.parent.span_id == send.context.span_id and process.parent.is_remote
    assert dict(process.attributes) == {
        "messaging.system": "queuecore", "messaging.destination.name": "tq", "messaging.message.id": info.id,
        "messaging.operation.type": "process", "messaging.operation.name": "process",
        "queuecore.task.type": "t.traced", "queuecore.task.attempt": 1}
    assert process.status.status_code == StatusCode.UNSET
    (inner,) = finished(spans, "inside handler")  # the handler's own spans are children of the attempt's
    assert inner.parent.span_id == process.context.span_id


def test_failed_attempts_record_the_error_and_their_number(spans, make_worker, client, registry):
    @task(name="t.flaky", registry=registry, max_retry=1, retry_delay=lambda n, e: 0.01)
    def flaky() -> None:
        raise ValueError("boom")

    client.enqueue(flaky, {}, queue="tf")
    make_worker(queues={"tf": 1})
    attempts = wait_until(lambda: len(s := finished(spans, "process tf")) == 2 and s, timeout=10)
    assert sorted(s.attributes["queuecore.task.attempt"] for s in attempts) == [1, 2]
    (send,) = finished(spans, "send tf")
    for span in attempts:
        assert span.parent.span_id == send.context.span_id
        assert span.status.status_code == StatusCode.ERROR and span.status.description == "ValueError: boom"
        (event,) = span.events
        assert event.name == "exception" and event.attributes["exception.type"] == "ValueError"


def test_a_payload_that_does_not_fit_the_handler_is_an_error_on_its_span(spans, make_worker, client, registry,
                                                                          connection):
    @task(name="t.fits", registry=registry)
    def fits(a: int) -> None:
        pass

    from queuecore import Client

    with Client(connection=connection) as other:  # a client that does not know the handler
        other.enqueue("t.fits", {"b": 1}, queue="tx")
    make_worker(queues={"tx": 1})
    (span,) = wait_until(lambda: finished(spans, "process tx"), timeout=10)
    assert span.status.status_code == StatusCode.ERROR and span.status.description.startswith("PayloadMismatch")


def test_async_handler_span_covers_its_run_and_a_snooze_is_no_error(spans, make_worker, client, registry):
    import asyncio

    calls = []

    @task(name="t.async", registry=registry)
    async def snoozy() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise Snooze(0.01)
        with tracer("app").start_as_current_span("awaited work"):
            await asyncio.sleep(0)
        return "done"

    client.enqueue(snoozy, {}, queue="ta")
    make_worker(queues={"ta": 1})
    attempts = wait_until(lambda: len(s := finished(spans, "process ta")) == 2 and s, timeout=10)
    snoozed, ran = sorted(attempts, key=lambda s: s.start_time)
    assert snoozed.status.status_code == StatusCode.UNSET and snoozed.attributes["queuecore.task.snoozed"] is True
    assert ran.status.status_code == StatusCode.UNSET
    (inner,) = finished(spans, "awaited work")
    assert inner.parent.span_id == ran.context.span_id


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_returned_snooze_is_marked_and_a_task_handed_back_at_shutdown_is_no_error(spans, make_worker, client,
                                                                                    registry, kind):
    """A review: a handler that returned Snooze(...) (as the README allows) got no snoozed attribute, and
    an attempt handed back to pending at shutdown (no failure: not counted) had an ERROR span."""
    import asyncio
    import threading

    started, calls = threading.Event(), []
    if kind == "sync":
        @task(name="t.returns", registry=registry)
        def returns() -> Snooze | None:
            calls.append(1)
            return Snooze(60) if len(calls) == 1 else None

        @task(name="t.blocks", registry=registry)
        def blocks() -> None:
            started.set()
            while True:  # interrupted by the shutdown, between two sleeps
                time.sleep(0.01)
    else:
        @task(name="t.returns", registry=registry)
        async def returns() -> Snooze | None:
            calls.append(1)
            return Snooze(60) if len(calls) == 1 else None

        @task(name="t.blocks", registry=registry)
        async def blocks() -> None:
            started.set()
            await asyncio.sleep(30)

    client.enqueue("t.returns", {}, queue="ts")
    worker = make_worker(queues={"ts": 1})
    (snoozed,) = wait_until(lambda: finished(spans, "process ts"), timeout=10)
    assert snoozed.status.status_code == StatusCode.UNSET and snoozed.attributes["queuecore.task.snoozed"] is True
    client.enqueue("t.blocks", {}, queue="ts")
    assert started.wait(10)
    worker.shutdown(timeout=0.2)
    assert worker.handed_back == 1
    handed = wait_until(lambda: [s for s in finished(spans, "process ts") if s is not snoozed], timeout=10)
    assert len(handed) == 1 and handed[0].status.status_code == StatusCode.UNSET
    assert handed[0].attributes["queuecore.task.handed_back"] is True and not handed[0].events


def test_enqueue_many_gives_each_task_its_span_and_check_none(spans, client):
    handles = client.enqueue_many([("t.a", {}), ("t.b", {})], queue="tm")
    client.check("t.c", {}, queue="tm")
    sends = finished(spans, "send tm")
    assert sorted(s.attributes["messaging.message.id"] for s in sends) == sorted(h.id for h in handles)
    assert {s.attributes["queuecore.task.type"] for s in sends} == {"t.a", "t.b"}


def test_the_trace_field_is_optional_and_bounded():
    plain = TaskMessage(id="x", type="t", payload={}, queue="q")
    assert '"trace"' not in plain.encode()  # nothing stored without tracing
    ok = TaskMessage.decode("x", "q", '{"type":"t","trace":{"traceparent":"00-ab-cd-01","other":"dropped"}}')
    assert ok.trace == {"traceparent": "00-ab-cd-01"}
    for junk in ('"nonsense"', '{"traceparent": 5}', '{"traceparent":"' + "a" * 513 + '"}'):
        assert TaskMessage.decode("x", "q", '{"type":"t","trace":' + junk + "}").trace is None


def test_without_opentelemetry_nothing_is_traced_and_nothing_imported(redis_url, key_prefix):
    """opentelemetry blocked: the client and worker run, tracing.get() is None, and no task pays."""
    code = f"""
import sys
sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
from queuecore import Client, Worker, TaskRegistry, task
from queuecore.core import tracing
reg = TaskRegistry()
@task(name="t.x", registry=reg)
def x():
    return 1
c = Client(redis_url={redis_url!r}, key_prefix={key_prefix!r}, registry=reg)
h = c.enqueue("t.x", {{}}, queue="tn", retention=60)
w = Worker(redis_url={redis_url!r}, key_prefix={key_prefix!r}, registry=reg, queues={{"tn": 1}})
w.start()
assert h.get(timeout=10) == 1
w.shutdown()
assert tracing.get() is None and c._tracing is None and w.processor._tracing is None
assert not [m for m in sys.modules if m.startswith("opentelemetry.")]
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_disable_turns_tracing_off_for_clients_built_afterwards(spans, connection, registry):
    from queuecore import Client

    tracing.disable()
    try:
        with Client(connection=connection, registry=registry) as quiet:
            quiet.enqueue("t.q", {}, queue="td")
    finally:
        tracing.enable()
    assert finished(spans, "send td") == []


def test_installed_without_a_provider_costs_no_span_and_stores_nothing(client, redis_client, key_prefix):
    """opentelemetry installed, but the application set no tracer provider (the API's proxy): no span
    is started and no trace field stored (one type check per task)."""
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)  # no test sets a global one
    assert client._tracing is not None and not client._tracing.active()
    info = client.enqueue("t.n", {}, queue="tp")
    assert "trace" not in json.loads(redis_client.hget(f"{key_prefix}:{{tp}}:t:{info.id}", "msg"))


class UnreadableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no message")


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_an_error_whose_message_cannot_be_read_is_recorded_as_itself_and_its_span_ends(
        spans, make_worker, client, registry, inspector, kind):
    """Recording the error on its span reads its message (the status text, the SDK's exception
    event): one that cannot be read must neither replace the handler's error nor leave the span open."""
    if kind == "sync":
        @task(name="t.unreadable", registry=registry)
        def unreadable() -> None:
            raise UnreadableError()
    else:
        @task(name="t.unreadable", registry=registry)
        async def unreadable() -> None:
            raise UnreadableError()

    handle = client.enqueue("t.unreadable", {}, queue="tu", max_retry=0)
    make_worker(queues={"tu": 1})
    (span,) = wait_until(lambda: finished(spans, "process tu"), timeout=10)
    info = wait_until(lambda: (i := inspector.get_task("tu", handle.id)).state == "archived" and i, timeout=10)
    assert info.last_error.startswith("UnreadableError: <the error's message could not be read")
    assert span.status.status_code == StatusCode.ERROR
    assert span.status.description.startswith("UnreadableError: <the error's message could not be read")
    (event,) = span.events
    assert event.attributes["exception.type"] == "UnreadableError"
