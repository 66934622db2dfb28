"""The ``Supervisor`` (``queuecore/core/supervisor.py``): its restart policy with a fake clock and fake
processes, then real child processes that crash in a loop or exit with a configuration error.

``tests/django/test_runworker_processes.py`` runs it for real as ``runworker --processes``.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import sys
from collections.abc import Mapping, Sequence

import pytest

from queuecore.core.errors import ConfigurationError
from queuecore.core.supervisor import (
    ENV_PARENT_PID,
    ENV_READY_FD,
    ENV_SLOT,
    EX_CONFIG,
    RestartPolicy,
    SlotHistory,
    Supervisor,
    SupervisorLink,
    decide,
    describe_exit,
)

TERM, INT, TSTP = signal.SIGTERM, signal.SIGINT, signal.SIGTSTP


# -- the policy, a pure function --------------------------------------------------------------------------


def test_backoff_doubles_from_one_second_up_to_the_cap_and_resets_after_a_stable_run() -> None:
    policy = RestartPolicy(initial_delay=1, max_delay=30, stable_after=30, max_crashes=100, crash_window=60)
    history, now, delays = SlotHistory(), 0.0, []
    for _ in range(7):  # each child dies 2 s after its start
        decision = decide(policy, history, now, now + 2, 1)
        assert decision.restart
        delays.append(decision.delay)
        now += 2 + decision.delay
    assert delays == [1, 2, 4, 8, 16, 30, 30]
    # A child that stayed up 30 s and then died starts again after the first delay.
    assert decide(policy, history, now, now + 30, 1).delay == 1
    assert decide(policy, history, now + 31, now + 32, 1).delay == 2


def test_five_exits_within_sixty_seconds_give_up_but_the_same_exits_spread_out_do_not() -> None:
    policy = RestartPolicy()
    history = SlotHistory()
    outcomes = [decide(policy, history, t, t + 0.5, 1) for t in (0, 2, 5, 10, 19)]
    assert [d.restart for d in outcomes] == [True, True, True, True, False]
    assert outcomes[-1].reason == "crash loop: 5 exits within 60 s"

    spread = SlotHistory()
    for t in range(0, 600, 20):  # one exit every 20 s: at most 3 in any 60 s
        assert decide(policy, spread, t, t + 10, -signal.SIGKILL).restart


def test_exits_after_the_child_was_ready_never_give_the_slot_up() -> None:
    """A review: one task that kills its process (every attempt) ended every slot in 25 s, and with them
    the workers, the task still active; such exits are restarted with the back-off, said at ERROR."""
    policy = RestartPolicy()
    history = SlotHistory()
    outcomes = [decide(policy, history, t, t + 0.5, -signal.SIGKILL, was_ready=True) for t in range(0, 40, 2)]
    assert all(d.restart for d in outcomes)
    assert [bool(d.reason) for d in outcomes[:6]] == [False, False, False, False, True, True]
    assert outcomes[4].reason.startswith("crash loop: 5 exits within 60 s after it was ready")
    assert outcomes[-1].delay == policy.max_delay


def test_a_configuration_error_gives_up_at_once() -> None:
    decision = decide(RestartPolicy(), SlotHistory(), 0, 0.1, EX_CONFIG)
    assert not decision.restart and decision.reason == "configuration error (exit code 78)"


def test_bad_policies_and_process_counts_are_refused() -> None:
    with pytest.raises(ConfigurationError):
        RestartPolicy(initial_delay=5, max_delay=1)
    with pytest.raises(ConfigurationError):
        RestartPolicy(max_crashes=0)
    for bad in (0, 65, 1.5, True, "2"):
        with pytest.raises(ConfigurationError, match="processes"):
            Supervisor(["true"], bad)  # type: ignore[arg-type]


def test_describe_exit() -> None:
    assert describe_exit(0) == "exit code 0"
    assert describe_exit(3) == "exit code 3"
    assert describe_exit(-signal.SIGKILL) == "killed by SIGKILL"


# -- the supervisor with fake processes and a fake clock ----------------------------------------------------


class FakeProcess:
    """A child that exits when the test says, and records the signals it got."""

    def __init__(self, pid: int, argv: Sequence[str], env: Mapping[str, str], ready_fd: int) -> None:
        self.pid, self.argv, self.env = pid, list(argv), dict(env)
        self.ready_fd = ready_fd  # our own copy of the write end: the supervisor closes its copy
        self.code: int | None = None
        self.signals: list[int] = []

    def poll(self) -> int | None:
        return self.code

    def send_signal(self, sig: int) -> None:
        self.signals.append(sig)

    def say_ready(self, server_id: str) -> None:
        fd, self.ready_fd = self.ready_fd, None  # type: ignore[assignment]
        SupervisorLink(fd, None, None).ready(server_id)  # writes, then closes its end

    def exit(self, code: int) -> None:
        if self.ready_fd is not None:
            os.close(self.ready_fd)
            self.ready_fd = None  # type: ignore[assignment]
        self.code = code


class FakeTimer:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def wait(self, timeout: float) -> None:  # the tests drive step() themselves
        raise AssertionError("not used")


class Spawner:
    def __init__(self) -> None:
        self.procs: list[FakeProcess] = []

    def __call__(self, argv: Sequence[str], env: Mapping[str, str], pass_fds: Sequence[int]) -> FakeProcess:
        proc = FakeProcess(100 + len(self.procs), argv, env, os.dup(pass_fds[0]))
        self.procs.append(proc)
        return proc


@pytest.fixture
def fake() -> tuple[Supervisor, Spawner, FakeTimer]:
    spawner, timer = Spawner(), FakeTimer()
    sup = Supervisor(lambda slot: ["worker", f"--slot={slot}"], 2, env={"A": "1"}, spawn=spawner, timer=timer)
    yield sup, spawner, timer
    for proc in spawner.procs:
        if proc.code is None:
            proc.exit(0)
    for child in sup.children:
        sup._close_fd(child)


def test_children_get_their_command_environment_and_are_restarted_after_the_backoff(fake, caplog) -> None:
    sup, spawner, timer = fake
    caplog.set_level(logging.INFO, "queuecore.supervisor")
    sup.start()
    a, b = spawner.procs
    assert a.argv == ["worker", "--slot=1"] and b.argv == ["worker", "--slot=2"]
    assert a.env["A"] == "1" and a.env[ENV_SLOT] == "1" and a.env[ENV_PARENT_PID] == str(os.getpid())
    assert ENV_READY_FD in a.env
    a.say_ready("host:100:aa")
    assert sup.step()
    assert sup.children[0].ready and sup.children[0].server_id == "host:100:aa"

    timer.now += 5
    a.exit(-signal.SIGKILL)
    assert sup.step()
    assert len(spawner.procs) == 2  # not yet: 1 s back-off
    timer.now += 0.999
    sup.step()
    assert len(spawner.procs) == 2
    timer.now += 0.001
    sup.step()
    assert len(spawner.procs) == 3 and spawner.procs[2].argv == ["worker", "--slot=1"]
    messages = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert ("WARNING", "worker process 1 (pid 100, server host:100:aa) exited unexpectedly: killed by SIGKILL; "
                       "restarting in 1.0 s") in messages
    assert ("INFO", "restarting worker process 1") in messages
    assert ("INFO", "started worker process 1 (pid 102)") in messages


def test_a_spawn_that_fails_for_a_passing_shortage_is_tried_again(fake, caplog) -> None:
    """A review: any error spawning a child (EAGAIN after an OOM kill, say) gave its slot up for good as a
    "configuration error (exit code 78)", and the last slot so given up ended runworker."""
    import errno

    sup, spawner, timer = fake
    caplog.set_level(logging.INFO, "queuecore.supervisor")
    failures = [OSError(errno.EAGAIN, "Resource temporarily unavailable")]

    def spawn(argv: Sequence[str], env: Mapping[str, str], pass_fds: Sequence[int]) -> FakeProcess:
        if failures:
            raise failures.pop()
        return spawner(argv, env, pass_fds)

    sup.spawn = spawn
    sup.start()
    assert len(spawner.procs) == 1 and sup.children[0].proc is None  # slot 1 failed, slot 2 started
    assert not sup.children[0].gave_up
    timer.now += 1.0
    sup.step()
    assert len(spawner.procs) == 2 and spawner.procs[1].argv == ["worker", "--slot=1"]
    text = caplog.text
    assert "worker process 1 could not be started: [Errno 11] Resource temporarily unavailable (a passing " \
           "shortage: it is tried again)" in text
    assert "configuration error" not in text

    sup.spawn = lambda argv, env, pass_fds: (_ for _ in ()).throw(FileNotFoundError(errno.ENOENT, "no such file"))
    spawner.procs[1].exit(1)
    sup.step()
    timer.now += 10
    sup.step()  # the restart finds no command: that never works, and the slot is given up
    assert sup.children[0].gave_up


def test_term_is_forwarded_to_every_child_nothing_restarts_and_a_clean_drain_exits_0(fake) -> None:
    sup, spawner, timer = fake
    sup.start()
    a, b = spawner.procs
    a.say_ready("a")
    sup.step()
    sup.request(INT)
    sup.step()
    assert a.signals == [INT]
    assert b.signals == [TERM]  # still starting: TERM, whose default action ends it (INT would raise there)
    b.exit(-TERM)
    assert sup.step()
    sup.request(INT)  # a second one: the ready children are told to hand their tasks back now (SIGUSR1: a
    sup.step()        # repeated INT or TERM is no force for them, systemd may send it too)
    assert a.signals == [INT, signal.SIGUSR1] and b.signals == [TERM]
    timer.now += 100
    a.exit(0)
    assert not sup.step()
    assert len(spawner.procs) == 2  # nothing was restarted
    assert sup.exit_code == 0


def test_a_child_that_does_not_drain_cleanly_makes_the_exit_code_1(fake) -> None:
    sup, spawner, _ = fake
    sup.start()
    for i, proc in enumerate(spawner.procs):
        proc.say_ready(str(i))
    sup.step()
    sup.request(TERM)
    sup.step()
    spawner.procs[0].exit(0)
    spawner.procs[1].exit(-signal.SIGKILL)
    assert not sup.step()
    assert sup.exit_code == 1


def test_tstp_reaches_ready_children_now_and_others_once_they_are_ready(fake) -> None:
    sup, spawner, timer = fake
    sup.start()
    a, b = spawner.procs
    a.say_ready("a")
    sup.step()
    sup.request(TSTP)
    sup.step()
    assert a.signals == [TSTP] and b.signals == []  # a TSTP before its handler is installed would suspend b
    b.say_ready("b")
    sup.step()
    assert b.signals == [TSTP]
    sup.request(TSTP)
    sup.step()
    assert a.signals == [TSTP] and b.signals == [TSTP]  # once is enough
    # A child restarted while quiet goes quiet as soon as it is ready.
    a.exit(1)
    sup.step()
    timer.now += 1
    sup.step()
    c = spawner.procs[2]
    assert c.signals == []
    c.say_ready("c")
    sup.step()
    assert c.signals == [TSTP]


def test_a_crash_loop_gives_up_that_slot_and_when_every_slot_gave_up_the_supervisor_exits_1(fake, caplog) -> None:
    sup, spawner, timer = fake
    caplog.set_level(logging.INFO, "queuecore.supervisor")
    sup.start()
    spawner.procs[1].exit(EX_CONFIG)  # slot 2: a configuration error, given up at once
    assert sup.step()
    assert sup.children[1].gave_up and len(spawner.procs) == 2
    # Slot 1 exits as soon as it starts: restarted after 1, 2, 4 and 8 s; the fifth exit, 15 s after the
    # first, makes five within 60 s.
    for _ in range(10):
        if sup.children[0].gave_up:
            break
        sup.children[0].proc.exit(1)  # type: ignore[union-attr]
        sup.step()
        if sup.children[0].restart_at is not None:
            timer.now = sup.children[0].restart_at
            assert sup.step()
    assert [p.argv[1] for p in spawner.procs].count("--slot=1") == 5
    assert timer.now == 1000 + 1 + 2 + 4 + 8
    assert not sup.step()
    assert sup.exit_code == 1
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert any("worker process 2" in m and "not restarted: configuration error (exit code 78)" in m for m in errors)
    assert any("worker process 1" in m and "not restarted: crash loop" in m for m in errors)
    assert "supervisor: every worker process has given up; exiting" in errors


def test_a_child_killed_by_its_task_again_and_again_is_restarted_for_good(fake, caplog) -> None:
    sup, spawner, timer = fake
    caplog.set_level(logging.INFO, "queuecore.supervisor")
    sup.start()
    for _ in range(7):  # each new child of slot 1 says it is ready, then a task kills it
        proc = sup.children[0].proc
        proc.say_ready("a")  # type: ignore[union-attr]
        sup.step()
        timer.now += 1
        proc.exit(-signal.SIGKILL)  # type: ignore[union-attr]
        sup.step()
        assert not sup.children[0].gave_up and sup.children[0].restart_at is not None
        timer.now = sup.children[0].restart_at
        assert sup.step()
    assert [p.argv[1] for p in spawner.procs].count("--slot=1") == 8
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 2 and all("crash loop: " in m and "after it was ready" in m for m in errors)


def test_a_child_stopped_on_request_is_not_restarted_and_when_all_are_the_supervisor_exits_0(fake, caplog) -> None:
    """Probe: ``adminctl server stop`` on a child of ``runworker --processes 2`` stopped it cleanly, and the
    supervisor started a new one a second later ("exited unexpectedly: exit code 0"). A worker exits 0
    only when asked to stop: its slot stays empty; a crash is still restarted."""
    sup, spawner, timer = fake
    caplog.set_level(logging.INFO, "queuecore.supervisor")
    sup.start()
    a, b = spawner.procs
    a.say_ready("host:100:aa")
    b.say_ready("host:101:bb")
    sup.step()
    timer.now += 60
    a.exit(0)
    assert sup.step()
    timer.now += 60
    assert sup.step() and len(spawner.procs) == 2  # not restarted
    logged = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert ("WARNING", "worker process 1 (pid 100, server host:100:aa) stopped on request (exit code 0): not "
                       "restarted; 1 of 2 worker processes left") in logged
    b.exit(-signal.SIGKILL)  # a crash: restarted
    sup.step()
    timer.now += 1
    assert sup.step() and len(spawner.procs) == 3
    spawner.procs[2].exit(0)
    assert not sup.step()
    assert sup.exit_code == 0 and len(spawner.procs) == 3
    assert "supervisor: every worker process was stopped on request; exiting" in caplog.messages


def test_the_link_tells_the_supervisor_and_watches_it(monkeypatch) -> None:
    assert SupervisorLink.from_environ({}) is None
    link = SupervisorLink.from_environ({ENV_READY_FD: "7", ENV_PARENT_PID: "42", ENV_SLOT: "3"})
    assert link is not None and (link.ready_fd, link.parent_pid, link.slot) == (7, 42, 3)
    read, write = os.pipe()
    SupervisorLink(write, None, None).ready("h:1:x")
    assert os.read(read, 100) == b"ready h:1:x\n" and os.read(read, 100) == b""  # closed after saying it
    os.close(read)
    # A parent that is not (or no longer) this process's parent: the child is told to stop at once.
    import threading

    lost = threading.Event()
    thread = SupervisorLink(None, os.getppid() + 10_000_000, None).watch_parent(lost.set, interval=0.01)
    assert thread is not None
    thread.join(10)
    assert lost.is_set()


# -- real processes ----------------------------------------------------------------------------------------


def test_real_children_that_exit_at_once_are_given_up_after_a_crash_loop(caplog) -> None:
    caplog.set_level(logging.INFO, "queuecore.supervisor")
    policy = RestartPolicy(initial_delay=0.01, max_delay=0.05, max_crashes=4, crash_window=60)
    sup = Supervisor([sys.executable, "-c", "import sys; sys.exit(3)"], 2, policy=policy, poll_interval=0.01)
    assert sup.run(install_signals=False) == 1
    starts = [r for r in caplog.records if r.getMessage().startswith("started worker process")]
    assert len(starts) == 2 * 4  # each slot: started 4 times, then given up
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert sum("exited: exit code 3; not restarted: crash loop: 4 exits within 60 s" in m for m in errors) == 2
    assert errors[-1] == "supervisor: every worker process has given up; exiting"


def test_a_real_child_with_a_configuration_error_is_not_restarted(caplog) -> None:
    caplog.set_level(logging.INFO, "queuecore.supervisor")
    sup = Supervisor([sys.executable, "-c", f"import sys; sys.exit({EX_CONFIG})"], 1, poll_interval=0.01)
    assert sup.run(install_signals=False) == 1
    assert len([r for r in caplog.records if r.getMessage().startswith("started worker process")]) == 1


def test_each_real_child_runs_in_a_session_of_its_own(tmp_path) -> None:
    # A session per child: terminal signals reach it only through the supervisor, and where the kernel
    # shares the CPU between sessions (autogroup) each child gets a separately started worker's share.
    script = (f"import os, sys; open(sys.argv[1] + '/' + os.environ[{ENV_SLOT!r}], 'w')"
              ".write(f'{os.getpid()} {os.getsid(0)} {os.getpgid(0)}'); sys.exit(3)")
    policy = RestartPolicy(initial_delay=0.01, max_delay=0.05, max_crashes=1, crash_window=60)
    sup = Supervisor([sys.executable, "-c", script, str(tmp_path)], 2, policy=policy, poll_interval=0.01)
    assert sup.run(install_signals=False) == 1  # each child exits at once and its slot is given up
    sessions = set()
    for slot in ("1", "2"):
        pid, sid, pgid = (int(x) for x in (tmp_path / slot).read_text().split())
        assert sid == pid and pgid == pid  # the leader of its own session and process group
        sessions.add(sid)
    assert len(sessions) == 2 and os.getsid(0) not in sessions


def test_the_system_timer_is_woken_by_a_signal_handler() -> None:
    from queuecore.core.supervisor import SystemTimer

    timer = SystemTimer()
    previous = signal.signal(signal.SIGUSR1, lambda *_: timer.wake())
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
        timer.wait(600)  # returns at once: the handler's byte is waiting (a hang fails through pytest-timeout)
        timer.wake()
        timer.wake()
        timer.wait(600)  # both bytes read at once
        assert not select.select([timer._read], [], [], 0)[0]
    finally:
        signal.signal(signal.SIGUSR1, previous)
        timer.close()
