"""Several worker processes on one machine: a ``Supervisor`` starts N children and keeps them running.

Each child is a complete worker process (``manage.py runworker`` without ``--processes``, or any
program that runs a ``Worker``), started with ``subprocess`` — never ``fork`` — so Django, threads
and event loops start fresh in every child. Each child registers its own heartbeat and shows as a
server of its own in the dashboard and ``adminctl server ls``; the supervisor itself touches no
Redis and holds no task.

The rules, in one place:

- **Restart.** A child that exits while the supervisor is not stopping is started again after a
  back-off: ``initial_delay`` (1 s), doubled on each exit that follows a short run, at most
  ``max_delay`` (30 s); a child that ran ``stable_after`` seconds (30 s) or more starts again after
  ``initial_delay``. Every failed exit is counted, whatever its code.
- **Stopped on request.** A child that exits 0 while the supervisor is not stopping was asked to stop
  (``adminctl server stop``, the dashboard's Stop, a SIGTERM sent to it alone): its slot stays empty,
  with a WARNING saying how many are left. When every slot is empty so, the supervisor exits 0.
- **Give up.** A slot is given up, with an ERROR line, when its child fails to start ``max_crashes``
  times (5) within ``crash_window`` seconds (60 s: it exits before it says it is ready), or exits with
  ``EX_CONFIG`` (78: a configuration error that a restart cannot fix). The other children keep
  running; when every slot has given up the supervisor exits with 1. A child that exits after it was
  ready (a task that kills its process, say) is always started again, with the back-off; as many exits
  within the window are an ERROR line, not the end of the slot: the task uses up its attempts (each
  lost lease counts as one) and is archived, while the other children go on.
- **Signals.** SIGTERM/SIGINT (and SIGHUP, as SIGTERM) are forwarded to every child (a graceful drain; a second one is
  forwarded too and makes the children hand their running tasks back at once); nothing is restarted
  from then on, and the supervisor waits for every child and exits 0 when they all exited 0. SIGTSTP
  is forwarded (quiet: no new tasks); a child that starts later starts quiet (``$QUEUECORE_START_QUIET``:
  it fetches nothing, even before it says it is ready) and gets the TSTP too. A child receives a signal
  only once it said it is ready (its handlers are installed), so a TSTP cannot suspend a child still
  starting up; a TERM reaches a starting child at once (it holds no task yet).
- **Sessions.** Each child runs in a session (and so a process group) of its own, with no controlling
  terminal: a Ctrl-C or Ctrl-Z in a terminal reaches it once, through the supervisor, not twice (which
  would force the hand-back). On Linux with autogroup scheduling (``kernel.sched_autogroup_enabled``)
  the CPU is shared fairly between sessions, so each child gets the share a separately started worker
  would, not half of one shared with its siblings. A child whose supervisor disappears (``kill -9``)
  drains and stops by itself (``SupervisorLink.watch_parent``).

Children say they are ready through a pipe whose descriptor is in ``$QUEUECORE_SUPERVISOR_FD``
(``run_worker`` does it for a ``Worker``); a child that never does is still supervised, but receives
SIGTSTP only when it says so.
"""

from __future__ import annotations

import errno
import logging
import os
import select
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from queuecore.core.errors import ConfigurationError

logger = logging.getLogger("queuecore.supervisor")

EX_CONFIG = 78  # sysexits.h: a configuration error; such a child is not restarted
EX_TEMPFAIL = 75  # sysexits.h: a temporary failure; a child that could not be spawned for one is tried again
# Why a spawn fails for good (the command or its interpreter is missing or not executable); any other
# error (EAGAIN, ENOMEM: a passing shortage, as after an OOM kill) is a failed start, retried with backoff.
_SPAWN_NEVER_WORKS = frozenset({errno.ENOENT, errno.EACCES, errno.ENOEXEC, errno.ENOTDIR, errno.EISDIR, errno.EPERM})
ENV_READY_FD = "QUEUECORE_SUPERVISOR_FD"  # the child writes "ready <server id>\n" to this descriptor
ENV_PARENT_PID = "QUEUECORE_SUPERVISOR_PID"  # the supervisor's pid, watched by the child
ENV_SLOT = "QUEUECORE_WORKER_SLOT"  # the child's slot number, 1..N (a restarted child keeps its slot)
ENV_START_QUIET = "QUEUECORE_START_QUIET"  # "1": the supervisor is quiet (SIGTSTP); the child starts quiet

_HUP: int | None = getattr(signal, "SIGHUP", None)  # a closed terminal: a graceful stop, forwarded as TERM
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, *([_HUP] if _HUP is not None else []))
_FORCE: int | None = getattr(signal, "SIGUSR1", None)  # to a child: hand running tasks back now
_TSTP: int | None = getattr(signal, "SIGTSTP", None)


class Process(Protocol):
    """What the supervisor uses of a child process (``subprocess.Popen`` has it)."""

    pid: int

    def poll(self) -> int | None: ...

    def send_signal(self, sig: int) -> None: ...


class Spawner(Protocol):
    """Starts one child: ``argv`` with ``env``, inheriting the descriptors ``pass_fds``."""

    def __call__(self, argv: Sequence[str], env: Mapping[str, str], pass_fds: Sequence[int]) -> Process: ...


class Timer(Protocol):
    """A monotonic clock, and a wait that a signal can cut short (tests pass a fake one)."""

    def monotonic(self) -> float: ...

    def wait(self, timeout: float) -> None: ...


class SystemTimer:
    """``time.monotonic``, and a wait that ``wake()`` ends early. ``wake`` is called from signal handlers,
    so it only writes a byte to a pipe (no lock, unlike ``threading.Event.set``, which could deadlock
    against a wait the handler interrupted)."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)

    def monotonic(self) -> float:
        return time.monotonic()

    def wait(self, timeout: float) -> None:
        if select.select([self._read], [], [], timeout)[0]:
            try:
                while os.read(self._read, 512):
                    pass
            except BlockingIOError:
                pass

    def wake(self) -> None:
        try:
            os.write(self._write, b"\0")
        except (BlockingIOError, OSError):  # full (a wake-up is pending anyway) or closed
            pass

    def close(self) -> None:
        for fd in (self._read, self._write):
            try:
                os.close(fd)
            except OSError:
                pass


def popen_spawner(argv: Sequence[str], env: Mapping[str, str], pass_fds: Sequence[int]) -> Process:
    """Start a child with ``subprocess.Popen`` in a session of its own (module docstring); stdout and
    stderr are the supervisor's (one log stream)."""
    return subprocess.Popen(list(argv), env=dict(env), pass_fds=tuple(pass_fds), stdin=subprocess.DEVNULL,
                            start_new_session=True)


# -- the restart policy --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RestartPolicy:
    """When a child that exited is started again, and when its slot is given up (module docstring)."""

    initial_delay: float = 1.0
    max_delay: float = 30.0
    stable_after: float = 30.0
    max_crashes: int = 5
    crash_window: float = 60.0

    def __post_init__(self) -> None:
        if not 0 <= self.initial_delay <= self.max_delay:
            raise ConfigurationError("RestartPolicy: need 0 <= initial_delay <= max_delay", field="initial_delay")
        if self.max_crashes < 1 or self.crash_window <= 0 or self.stable_after < 0:
            raise ConfigurationError("RestartPolicy: max_crashes >= 1, crash_window > 0, stable_after >= 0",
                                     field="max_crashes")


@dataclass
class SlotHistory:
    """What the policy remembers of one slot: recent exit times and exits since the last stable run."""

    exits: deque[float] = field(default_factory=deque)
    quick_exits: int = 0


@dataclass(frozen=True)
class Decision:
    """``restart`` after ``delay`` seconds, or give up (``restart`` False) for ``reason``."""

    restart: bool
    delay: float = 0.0
    reason: str = ""


def decide(policy: RestartPolicy, history: SlotHistory, started_at: float, exited_at: float,
           returncode: int, *, was_ready: bool = False) -> Decision:
    """The one decision about a child that exited unexpectedly; updates ``history``. ``was_ready``: it
    had said it is ready (then a crash loop is reported in ``reason`` and the child restarted anyway)."""
    if returncode == EX_CONFIG:
        return Decision(False, reason=f"configuration error (exit code {EX_CONFIG})")
    history.exits.append(exited_at)
    while history.exits and history.exits[0] <= exited_at - policy.crash_window:
        history.exits.popleft()
    looping = len(history.exits) >= policy.max_crashes
    if looping and not was_ready:
        return Decision(False, reason=f"crash loop: {len(history.exits)} exits within {policy.crash_window:g} s")
    if exited_at - started_at >= policy.stable_after:
        history.quick_exits = 0
    history.quick_exits += 1
    delay = min(policy.initial_delay * 2 ** (history.quick_exits - 1), policy.max_delay)
    return Decision(True, delay=delay, reason=f"crash loop: {len(history.exits)} exits within "
                    f"{policy.crash_window:g} s after it was ready (a task that kills its process?)" if looping else "")


def describe_exit(returncode: int) -> str:
    """``exit code 3`` or ``killed by SIGKILL``."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


# -- the supervisor ------------------------------------------------------------------------------------


@dataclass
class Child:
    """One slot and the process that runs in it now (``proc`` is None while it waits for a restart)."""

    slot: int
    proc: Process | None = None
    started_at: float = 0.0
    ready: bool = False
    server_id: str = ""
    ready_fd: int | None = None
    buffer: bytes = b""
    restart_at: float | None = None
    gave_up: bool = False
    stopped_on_request: bool = False  # it exited 0 while the supervisor was not stopping: not restarted
    stopped_clean: bool | None = None  # after a stop: whether this child exited cleanly
    history: SlotHistory = field(default_factory=SlotHistory)
    quiet_sent: bool = False

    @property
    def ended(self) -> bool:
        """Left empty for good: given up, or stopped on request."""
        return self.gave_up or self.stopped_on_request

    def label(self) -> str:
        pid = self.proc.pid if self.proc is not None else "-"
        server = f", server {self.server_id}" if self.server_id else ""
        return f"worker process {self.slot} (pid {pid}{server})"


class Supervisor:
    """Starts ``processes`` children running ``command`` and keeps them running (module docstring).

    ``command`` is an argv list, or a function of the slot number (1..N) returning one. ``env`` is the
    children's environment (default: this process's). ``spawn``, ``timer`` and ``policy`` are for tests.
    ``run()`` blocks until every child has stopped and returns the exit code.
    """

    def __init__(self, command: Sequence[str] | Callable[[int], Sequence[str]], processes: int, *,
                 env: Mapping[str, str] | None = None, policy: RestartPolicy | None = None,
                 spawn: Spawner | None = None, timer: Timer | None = None, poll_interval: float = 0.1,
                 on_given_up: Callable[[int, str], None] | None = None) -> None:
        """``on_given_up(slot, reason)`` is called when a slot is given up (its health file says so)."""
        from queuecore.core.limits import PROCESSES

        self.processes = int(PROCESSES.check(processes, "processes"))
        self.command = command
        self.env = dict(os.environ if env is None else env)
        self.policy = policy or RestartPolicy()
        self.spawn = spawn or popen_spawner
        self.timer = timer or SystemTimer()
        self.poll_interval = poll_interval
        self.on_given_up = on_given_up
        self.children = [Child(slot) for slot in range(1, self.processes + 1)]
        self.stopping = False
        self.quiet = False
        self.stop_signals = 0
        self._pending: deque[int] = deque()
        self.exit_code: int | None = None

    # -- control, safe to call from a signal handler -------------------------------------------------

    def request(self, signum: int) -> None:
        """Queue a signal for the children (handled by the next ``step``)."""
        self._pending.append(signum)
        wake = getattr(self.timer, "wake", None)
        if wake is not None:
            wake()

    # -- the loop ------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start every child."""
        logger.info("supervisor (pid %d) starting %d worker processes", os.getpid(), self.processes)
        for child in self.children:
            self._start(child)

    def run(self, install_signals: bool = True) -> int:
        """Start the children, supervise them until they have all stopped; returns the exit code."""
        previous: dict[int, Any] = {}
        if install_signals and threading.current_thread() is threading.main_thread():
            for signum in (*_STOP_SIGNALS, *([_TSTP] if _TSTP is not None else [])):
                previous[signum] = signal.signal(signum, lambda s, _f: self.request(s))
        try:
            self.start()
            while self.step():
                self.timer.wait(self._next_wait())
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            for child in self.children:
                self._close_fd(child)
            close = getattr(self.timer, "close", None)
            if close is not None:
                close()
        assert self.exit_code is not None
        return self.exit_code

    def step(self) -> bool:
        """One round: pending signals, readiness, exits, due restarts. False once the supervisor is done."""
        while self._pending:
            self._handle_signal(self._pending.popleft())
        for child in self.children:
            self._read_ready(child)
        now = self.timer.monotonic()
        for child in self.children:
            if child.proc is not None:
                code = child.proc.poll()
                if code is not None:
                    self._exited(child, code, now)
        for child in self.children:
            if child.proc is None and child.restart_at is not None and not self.stopping \
                    and now >= child.restart_at:
                logger.info("restarting worker process %d", child.slot)
                self._start(child)
        if any(c.proc is not None for c in self.children):
            return True
        if self.stopping:
            clean = all(c.stopped_clean for c in self.children if c.stopped_clean is not None)
            failed = any(c.gave_up for c in self.children)
            self.exit_code = 0 if clean and not failed else 1
            logger.info("supervisor: every worker process has stopped (%s)",
                        "cleanly" if self.exit_code == 0 else "not all cleanly")
            return False
        if all(c.ended for c in self.children):
            if any(c.gave_up for c in self.children):
                logger.error("supervisor: every worker process has given up%s; exiting",
                             " or was stopped on request" if any(c.stopped_on_request for c in self.children) else "")
                self.exit_code = 1
            else:
                logger.info("supervisor: every worker process was stopped on request; exiting")
                self.exit_code = 0
            return False
        return True

    # -- internals -----------------------------------------------------------------------------------

    def _next_wait(self) -> float:
        now = self.timer.monotonic()
        due = [c.restart_at - now for c in self.children if c.proc is None and c.restart_at is not None]
        return max(0.0, min([self.poll_interval, *due]))

    def _argv(self, slot: int) -> list[str]:
        return list(self.command(slot) if callable(self.command) else self.command)

    def _start(self, child: Child) -> None:
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        env = {**self.env, ENV_READY_FD: str(write_fd), ENV_PARENT_PID: str(os.getpid()), ENV_SLOT: str(child.slot),
               **({ENV_START_QUIET: "1"} if self.quiet else {})}
        try:
            child.proc = self.spawn(self._argv(child.slot), env, [write_fd])
        except OSError as exc:
            os.close(read_fd)
            os.close(write_fd)
            never = exc.errno in _SPAWN_NEVER_WORKS
            logger.error("worker process %d could not be started: %s%s", child.slot, exc,
                         "" if never else " (a passing shortage: it is tried again)")
            self._exited(child, EX_CONFIG if never else EX_TEMPFAIL, self.timer.monotonic(), started=False)
            return
        os.close(write_fd)
        child.ready_fd, child.buffer = read_fd, b""
        child.started_at = self.timer.monotonic()
        child.ready, child.server_id, child.restart_at, child.quiet_sent = False, "", None, False
        logger.info("started %s", child.label())

    def _close_fd(self, child: Child) -> None:
        if child.ready_fd is not None:
            os.close(child.ready_fd)
            child.ready_fd = None

    def _read_ready(self, child: Child) -> None:
        if child.ready_fd is None:
            return
        try:
            data = os.read(child.ready_fd, 4096)
        except BlockingIOError:
            return
        if not data:  # the child closed its end (said ready, or exited)
            self._close_fd(child)
            return
        child.buffer += data
        while b"\n" in child.buffer:
            line, child.buffer = child.buffer.split(b"\n", 1)
            word, _, rest = line.decode("utf-8", "replace").partition(" ")
            if word == "ready" and not child.ready:
                child.ready, child.server_id = True, rest.strip()
                logger.info("%s is ready", child.label())
                if self.quiet and not self.stopping:
                    self._send_tstp(child)

    def _exited(self, child: Child, code: int, now: float, started: bool = True) -> None:
        if started:
            self._read_ready(child)
        self._close_fd(child)
        label = child.label()
        child.proc = None
        if self.stopping:
            child.stopped_clean = code == 0 or (not child.ready and code == -signal.SIGTERM)
            log = logger.info if child.stopped_clean else logger.warning
            log("%s stopped: %s", label, describe_exit(code))
            return
        if code == 0 and started:  # a worker exits 0 only when asked to stop: by an operator, not a crash
            child.stopped_on_request, child.restart_at = True, None
            left = sum(not c.ended for c in self.children)
            logger.warning("%s stopped on request (exit code 0): not restarted; %d of %d worker processes left",
                           label, left, self.processes)
            return
        decision = decide(self.policy, child.history, child.started_at if started else now, now, code,
                          was_ready=child.ready)
        if decision.restart:
            child.restart_at = now + decision.delay
            log = logger.error if decision.reason else logger.warning
            log("%s exited unexpectedly: %s; restarting in %.1f s%s", label, describe_exit(code), decision.delay,
                f" ({decision.reason})" if decision.reason else "")
        else:
            child.gave_up, child.restart_at = True, None
            logger.error("%s exited: %s; not restarted: %s", label, describe_exit(code), decision.reason)
            if self.on_given_up is not None:
                self.on_given_up(child.slot, decision.reason)
            if not all(c.ended for c in self.children):
                left = sum(not c.ended for c in self.children)
                logger.error("supervisor: %d of %d worker processes left", left, self.processes)

    def _handle_signal(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if signum in _STOP_SIGNALS:
            self.stop_signals += 1
            if not self.stopping:
                self.stopping = True
                for child in self.children:
                    child.restart_at = None
                live = sum(c.proc is not None for c in self.children)
                logger.info("supervisor got %s: stopping %d worker process(es) gracefully", name, live)
                for child in self.children:
                    # A child still starting has no handler for INT yet (Python would raise KeyboardInterrupt
                    # there): it gets TERM, whose default action ends it; it holds no task.
                    self._send(child, signum if child.ready and signum != _HUP else signal.SIGTERM)
            else:
                logger.warning("supervisor got a second %s: the workers hand their running tasks back now", name)
                for child in self.children:
                    # A repeated TERM is no force for a supervised child (systemd signals every process
                    # of the service, and the supervisor forwards its own copy): SIGUSR1 is.
                    self._send(child, _FORCE if child.ready and _FORCE is not None else signal.SIGTERM)
        elif signum == _TSTP:
            if not self.quiet:
                logger.info("supervisor got %s: workers go quiet (no new tasks)", name)
            self.quiet = True
            for child in self.children:
                if child.ready:
                    self._send_tstp(child)

    def _send_tstp(self, child: Child) -> None:
        if _TSTP is not None and not child.quiet_sent:
            child.quiet_sent = True
            self._send(child, _TSTP)

    @staticmethod
    def _send(child: Child, signum: int) -> None:
        if child.proc is None:
            return
        try:
            child.proc.send_signal(signum)
        except (ProcessLookupError, OSError):  # it has just exited; the next poll sees it
            pass


# -- the child's side ----------------------------------------------------------------------------------


class SupervisorLink:
    """A supervised child's link to its supervisor: say ready, and stop if the supervisor disappears."""

    def __init__(self, ready_fd: int | None, parent_pid: int | None, slot: int | None,
                 start_quiet: bool = False) -> None:
        self.ready_fd = ready_fd
        self.parent_pid = parent_pid
        self.slot = slot
        self.start_quiet = start_quiet

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> SupervisorLink | None:
        """The link described by the environment a ``Supervisor`` set, or None when not supervised."""
        environ = os.environ if environ is None else environ

        def number(name: str) -> int | None:
            value = environ.get(name, "")
            return int(value) if value.isdigit() else None

        parent, fd = number(ENV_PARENT_PID), number(ENV_READY_FD)
        if parent is None and fd is None:
            return None
        return cls(fd, parent, number(ENV_SLOT), environ.get(ENV_START_QUIET) == "1")

    def ready(self, server_id: str) -> None:
        """Tell the supervisor this child's signal handlers are installed, and its server id."""
        if self.ready_fd is None:
            return
        fd, self.ready_fd = self.ready_fd, None
        try:
            os.write(fd, f"ready {server_id}\n".encode())
        except OSError:  # the supervisor is gone; watch_parent stops this child
            pass
        finally:
            os.close(fd)

    def orphaned(self) -> bool:
        """True when the supervisor is no longer this process's parent (it died)."""
        return self.parent_pid is not None and os.getppid() != self.parent_pid

    def watch_parent(self, on_lost: Callable[[], None], interval: float = 1.0) -> threading.Thread | None:
        """Call ``on_lost`` once (on a daemon thread) when the supervisor is no longer this process's parent."""
        parent = self.parent_pid
        if parent is None:
            return None

        def watch() -> None:
            while os.getppid() == parent:
                threading.Event().wait(interval)
            logger.warning("the supervisor (pid %d) is gone: stopping", parent)
            on_lost()

        thread = threading.Thread(target=watch, name="qc-supervisor-watch", daemon=True)
        thread.start()
        return thread


def run_worker(worker: Any, link: SupervisorLink | None = None) -> int:
    """``worker.run()``, which, under a ``Supervisor``, also says when it is ready and stops
    gracefully if the supervisor dies. ``worker`` is a ``queuecore.core.worker.Worker``."""
    if link is None:
        link = SupervisorLink.from_environ()
        for name in (ENV_READY_FD, ENV_PARENT_PID, ENV_SLOT, ENV_START_QUIET):  # not for processes the tasks start
            os.environ.pop(name, None)
    if link is None:
        return int(worker.run())
    link.watch_parent(worker.request_shutdown)
    return int(worker.run(on_ready=lambda: link.ready(worker.server_id), quiet=link.start_quiet, supervised=True))
