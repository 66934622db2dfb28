"""Text that Redis cannot store (a lone surrogate such as ``"\\ud800"`` has no UTF-8 encoding) coming
out of a handler: its result, its error's message, its progress note. Each must end the attempt as
documented (completed, retried, archived) with the text made storable, never leave the task unable
to be recorded (a lease that expires, a run again, forever)."""

from __future__ import annotations

import threading

import pytest

from queuecore import Client, Inspector, SkipRetry, current_task, task
from queuecore.core import recorder
from tests.conftest import wait_until
from tests.core.worker_support import SOON, wait_state

SURROGATE = "\ud800"


@pytest.fixture
def worker(make_worker):
    return make_worker(queues={"default": 1})


def test_a_result_holding_a_lone_surrogate_completes_the_task(registry, client: Client, inspector: Inspector,
                                                              worker) -> None:
    @task(name="text.result", registry=registry)
    def returns_text() -> dict[str, str]:
        return {"text": "caf\u00e9 " + SURROGATE}

    handle = client.enqueue("text.result", {}, retention=60)
    info = wait_state(inspector, "default", handle.id, "completed")
    assert info.retried == 0  # acknowledged on its first run, not after a lease expired
    assert "caf\u00e9" in str(info.result) and "\\ud800" in str(info.result)  # kept, the surrogate escaped


def test_an_error_message_holding_a_lone_surrogate_is_recorded(registry, client: Client, inspector: Inspector,
                                                               worker) -> None:
    @task(name="text.error", registry=registry)
    def raises_text() -> None:
        raise SkipRetry("bad " + SURROGATE + " input")

    handle = client.enqueue("text.error", {})
    info = wait_state(inspector, "default", handle.id, "archived")
    assert "bad" in info.last_error and "input" in info.last_error
    assert info.retried == 0


def test_a_progress_note_holding_a_lone_surrogate_does_not_stop_the_task(registry, client: Client,
                                                                         inspector: Inspector, worker) -> None:
    """The note is published with the worker's heartbeat: it must not stop the heartbeats (every
    lease of the worker would expire)."""
    noted = threading.Event()

    @task(name="text.progress", registry=registry)
    def notes() -> str:
        current_task().set_progress(1, 2, note="half " + SURROGATE)
        noted.wait(SOON)
        return "done"

    handle = client.enqueue("text.progress", {}, retention=60)
    try:
        shown = wait_until(lambda: [w.progress for s in inspector.servers() for w in s.workers
                                    if w.task_id == handle.id and w.progress is not None], SOON,
                           message="the progress note in a heartbeat")
        assert shown[0].note == "half \\ud800"  # type: ignore[index]
    finally:
        noted.set()
    info = wait_state(inspector, "default", handle.id, "completed")
    assert info.retried == 0 and info.result == "done"


class UnreadableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no message")


def test_an_error_whose_message_cannot_be_read_is_recorded(registry, client: Client, inspector: Inspector,
                                                          worker) -> None:
    @task(name="text.unreadable", registry=registry)
    def raises_unreadable() -> None:
        raise UnreadableError()

    handle = client.enqueue("text.unreadable", {}, max_retry=0)
    info = wait_state(inspector, "default", handle.id, "archived")
    assert info.last_error.startswith("UnreadableError: <the error's message could not be read: RuntimeError>")
    assert info.retried == 0


def test_a_result_whose_repr_raises_completes_the_task(registry, client: Client, inspector: Inspector,
                                                       worker) -> None:
    class Opaque:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    @task(name="text.opaque", registry=registry)
    def returns_opaque() -> Opaque:
        return Opaque()

    handle = client.enqueue("text.opaque", {}, retention=60)
    info = wait_state(inspector, "default", handle.id, "completed")
    assert info.retried == 0 and "could not be made" in str(info.result)


def test_a_result_nested_past_the_recursion_limit_completes_and_frees_its_slot(registry, client: Client,
                                                                             inspector: Inspector,
                                                                             make_worker) -> None:
    """json.dumps raises RecursionError (not TypeError/ValueError): the task stayed active for good,
    its lease renewed, and the worker's one handler slot was never given back."""
    make_worker(queues={"deep": 1}, concurrency=1)

    @task(name="text.deep", registry=registry)
    def returns_deep() -> list[object]:
        value: list[object] = []
        for _ in range(100_000):
            value = [value]
        return value

    @task(name="text.after", registry=registry)
    def after() -> str:
        return "ran"

    deep = client.enqueue("text.deep", {}, queue="deep", retention=60)
    info = wait_state(inspector, "deep", deep.id, "completed")
    assert info.retried == 0 and "could not be made: RecursionError" in str(info.result)
    nxt = client.enqueue("text.after", {}, queue="deep", retention=60)
    assert wait_state(inspector, "deep", nxt.id, "completed").result == "ran"  # the slot came back


def test_a_result_over_the_size_limit_is_kept_as_a_note(registry, client: Client, inspector: Inspector, worker,
                                                        monkeypatch, caplog) -> None:
    monkeypatch.setattr(recorder, "MAX_RESULT_BYTES", 1000)

    @task(name="text.huge", registry=registry)
    def returns_huge() -> str:
        return "x" * 5000

    handle = client.enqueue("text.huge", {}, retention=60)
    info = wait_state(inspector, "default", handle.id, "completed")
    assert info.result == "<a result of 5,002 bytes, not kept: over the 1,000-byte limit>"
    assert any("over the 1000-byte limit" in r.getMessage() and r.levelname == "WARNING" for r in caplog.records)


def test_an_error_class_named_with_a_lone_surrogate_is_recorded(registry, client: Client, inspector: Inspector,
                                                                worker) -> None:
    class Odd(Exception):
        pass

    Odd.__qualname__ = "Odd" + SURROGATE  # (a __name__ cannot hold one) the class path of the error is the qualname

    @task(name="text.oddclass", registry=registry)
    def raises_odd() -> None:
        raise Odd("plain message")

    handle = client.enqueue("text.oddclass", {}, max_retry=0)
    info = wait_state(inspector, "default", handle.id, "archived")
    assert info.retried == 0 and info.last_error.startswith("Odd: plain message")
