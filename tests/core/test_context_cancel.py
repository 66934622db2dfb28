"""A task's cancel request, as its handler sees it (``TaskContext``): a flag to poll, an exception to
raise, and a wait that wakes when the request comes, whichever thread asks first."""

from __future__ import annotations

import threading

import pytest

from queuecore.core.context import TaskContext
from queuecore.core.errors import TaskCancelled


def context() -> TaskContext:
    return TaskContext(id="t1", queue="default", type="t.x", retried=0, max_retry=3, payload={})


def test_a_fresh_context_is_not_cancelled_and_its_wait_times_out() -> None:
    ctx = context()
    assert not ctx.cancelled
    ctx.raise_if_cancelled()
    assert ctx.wait_cancelled(0.01) is False


def test_the_first_reason_is_kept_and_every_check_sees_the_request() -> None:
    ctx = context()
    ctx.request_cancel("cancelled by an operator")
    ctx.request_cancel("worker shutting down")
    assert ctx.cancelled
    assert ctx.cancel_reason == "cancelled by an operator"
    assert ctx.wait_cancelled(0) is True
    with pytest.raises(TaskCancelled, match="cancelled by an operator"):
        ctx.raise_if_cancelled()


def test_a_handler_waiting_for_a_cancel_wakes_when_another_thread_asks() -> None:
    ctx = context()
    waiting, woke = threading.Event(), []

    def handler() -> None:
        waiting.set()
        woke.append(ctx.wait_cancelled(30))

    thread = threading.Thread(target=handler)
    thread.start()
    assert waiting.wait(10)
    ctx.request_cancel("timed out after 5s")
    thread.join(10)  # 30 s if the wait missed the request
    assert not thread.is_alive() and woke == [True]


def test_many_waiters_and_cancellers_at_once_all_see_one_request() -> None:
    ctx = context()
    barrier = threading.Barrier(16)
    seen: list[bool] = []
    lock = threading.Lock()

    def waiter() -> None:
        barrier.wait()
        got = ctx.wait_cancelled(30)
        with lock:
            seen.append(got)

    def canceller(n: int) -> None:
        barrier.wait()
        ctx.request_cancel(f"reason {n}")

    threads = [threading.Thread(target=waiter) for _ in range(12)]
    threads += [threading.Thread(target=canceller, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(35)
    assert seen == [True] * 12
    assert ctx.cancel_reason in {f"reason {n}" for n in range(4)}
