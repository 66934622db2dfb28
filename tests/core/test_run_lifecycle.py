"""``Worker.run()``'s life: the signal handlers it installs are put back when it returns, a worker
that fails to start is shut down, ``shutdown()`` from another thread ends ``run()``, and a request
made from a signal handler takes no lock."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from queuecore import Worker
from tests.conftest import FAST, wait_until


def acting_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "queuecore-signals"]


def test_run_puts_back_the_signal_handlers_it_replaced(connection, registry) -> None:
    """They stayed: after ``run()`` returned, Ctrl-C and SIGTERM were only noted, and nothing acted on them."""
    assert threading.current_thread() is threading.main_thread()  # run() installs handlers only here
    mine = lambda _signum, _frame: None  # noqa: E731
    before = {signal.SIGINT: signal.getsignal(signal.SIGINT), signal.SIGTERM: signal.signal(signal.SIGTERM, mine)}
    try:
        worker = Worker(connection=connection, registry=registry, **FAST)  # type: ignore[arg-type]

        def stop_once_running() -> None:
            wait_until(lambda: worker.status == "active", 10, message="the worker to start")
            assert signal.getsignal(signal.SIGTERM) is not mine  # run() had installed its own
            worker.request_shutdown()

        stopper = threading.Thread(target=stop_once_running)
        stopper.start()
        assert worker.run() == 0
        stopper.join(10)
        assert worker.stopped.is_set()
        assert signal.getsignal(signal.SIGINT) is before[signal.SIGINT]
        assert signal.getsignal(signal.SIGTERM) is mine
        assert not acting_threads()
    finally:
        signal.signal(signal.SIGTERM, before[signal.SIGTERM])


def test_a_run_whose_start_fails_shuts_the_worker_down_and_gives_the_handlers_back(connection, registry) -> None:
    """A failing ``on_ready`` left the worker's components running, its handlers installed, and the
    thread that acts on signals polling for good."""
    before = signal.getsignal(signal.SIGINT)
    worker = Worker(connection=connection, registry=registry, **FAST)  # type: ignore[arg-type]
    threads_before = set(threading.enumerate())

    def fail() -> None:
        raise RuntimeError("on_ready failed")

    with pytest.raises(RuntimeError, match="on_ready failed"):
        worker.run(on_ready=fail)
    assert worker.stopped.is_set() and worker.status == "stopped"
    assert signal.getsignal(signal.SIGINT) is before
    assert not acting_threads()
    assert [t.name for t in threading.enumerate() if t not in threads_before] == []  # every component stopped


def test_shutdown_from_another_thread_ends_run(connection, registry) -> None:
    """``shutdown()`` stopped the worker, but ``run()`` watched only for a request, and looped for good."""
    worker = Worker(connection=connection, registry=registry, **FAST)  # type: ignore[arg-type]
    codes: list[int] = []
    runner = threading.Thread(target=lambda: codes.append(worker.run()))
    runner.start()
    try:
        wait_until(lambda: worker.status == "active", 10, message="the worker to start")
        worker.shutdown()
        runner.join(10)
        assert not runner.is_alive() and codes == [0]
    finally:
        worker.request_shutdown()
        runner.join(10)


def test_a_request_from_a_signal_handler_takes_no_lock(connection, registry) -> None:
    """``request_shutdown`` and ``force_now`` called ``Event.set()``: a handler that ran them while its
    thread held that Event's lock (the main thread inside ``run()``'s wait) hung for good. Here another
    thread plays the handler while the lock is held."""
    worker = Worker(connection=connection, registry=registry, **FAST)  # type: ignore[arg-type]
    for request in (worker.request_shutdown, worker.force_now):
        with worker._shutdown_requested._cond:  # type: ignore[attr-defined]  # as Event.wait holds it
            handler = threading.Thread(target=request)
            handler.start()
            handler.join(5)
            assert not handler.is_alive()
    assert worker._requests == ["stop", "force"]  # noted for run()'s thread, in order
    worker.shutdown()


def test_a_handler_installed_during_run_stays_after_it(connection, registry) -> None:
    """A review: run() put back the handler it had replaced even when code run meanwhile (an ``on_ready``,
    a task's library) had installed its own, which was thrown away."""
    assert threading.current_thread() is threading.main_thread()
    before, before_term = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    theirs = lambda _signum, _frame: None  # noqa: E731
    worker = Worker(connection=connection, registry=registry, **FAST)  # type: ignore[arg-type]

    def install_theirs_and_stop() -> None:
        signal.signal(signal.SIGINT, theirs)
        worker.request_shutdown()

    try:
        assert worker.run(on_ready=install_theirs_and_stop) == 0
        assert signal.getsignal(signal.SIGINT) is theirs
        assert signal.getsignal(signal.SIGTERM) is before_term  # the worker's own handlers went back
    finally:
        signal.signal(signal.SIGINT, before)


def test_an_interrupt_while_the_handlers_go_in_puts_back_those_already_in(connection, registry,
                                                                           monkeypatch) -> None:
    """A review: a Ctrl-C that came after run() had installed its SIGTERM handler and before its SIGINT one
    raised out of run() before its ``finally``, and left SIGTERM only noted by a worker that no longer ran:
    the process could not be stopped with SIGTERM. (The interrupt comes from signal.signal here, at that
    instant, as the real one would.)"""
    assert threading.current_thread() is threading.main_thread()
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    real = signal.signal

    def interrupted_at_sigint(signum: int, handler: object) -> object:
        if signum == signal.SIGINT and callable(handler) and getattr(handler, "__name__", "") == "note":
            raise KeyboardInterrupt
        return real(signum, handler)  # type: ignore[arg-type]

    monkeypatch.setattr(signal, "signal", interrupted_at_sigint)
    worker = Worker(connection=connection, registry=registry, **FAST)  # type: ignore[arg-type]
    with pytest.raises(KeyboardInterrupt):
        worker.run()
    monkeypatch.undo()
    assert {signum: signal.getsignal(signum) for signum in before} == before
    assert not acting_threads()


def test_a_worker_runs_once(connection, registry, inspector) -> None:
    """A review: run() again on a stopped Worker wrote a heartbeat for it (a server in Redis for good, that
    nothing would remove) and set it 'active', then failed on a thread started twice."""
    worker = Worker(connection=connection, registry=registry, **FAST)  # type: ignore[arg-type]
    worker.start()
    worker.shutdown()
    assert worker.status == "stopped" and inspector.servers() == []
    with pytest.raises(RuntimeError, match=r"has already run .*make a new Worker"):
        worker.run()
    with pytest.raises(RuntimeError, match=r"has already started .*make a new Worker"):
        worker.start()
    assert worker.status == "stopped" and inspector.servers() == []


def test_a_ctrl_c_while_the_handlers_go_back_leaves_none_of_the_worker_s(connection, registry, monkeypatch) -> None:
    """A review: a Ctrl-C right after SIGINT's own handler went back raised out of the loop that puts the
    handlers back, leaving SIGHUP, SIGTSTP and SIGUSR1 only noted by a worker that had stopped, and its
    acting thread polling for good. (The real SIGINT is sent at that instant.)"""
    assert threading.current_thread() is threading.main_thread()
    names = [name for name in ("SIGTERM", "SIGINT", "SIGHUP", "SIGTSTP", "SIGUSR1") if hasattr(signal, name)]
    before = {name: signal.getsignal(getattr(signal, name)) for name in names}
    real = signal.signal

    def ctrl_c_once_sigint_is_back(signum: int, handler: object) -> object:
        replaced = real(signum, handler)  # type: ignore[arg-type]
        if signum == signal.SIGINT and handler is before["SIGINT"]:
            os.kill(os.getpid(), signal.SIGINT)
        return replaced

    monkeypatch.setattr(signal, "signal", ctrl_c_once_sigint_is_back)
    worker = Worker(connection=connection, registry=registry, **FAST)  # type: ignore[arg-type]
    with pytest.raises(KeyboardInterrupt):
        worker.run(on_ready=worker.request_shutdown)
    monkeypatch.undo()
    assert {name: signal.getsignal(getattr(signal, name)) for name in names} == before
    assert worker.status == "stopped" and not acting_threads()
