"""``manage.py runworker --processes N``: real supervisor and worker processes, real signals, real Redis.

Two oracles: Redis (through the ``Inspector``: heartbeats, task states) and the handlers' own JSON
event log (``tests/helpers/proc_tasks.py``, one line per start/end/abort with the worker's pid).
The site is ``tests.supervisor_settings`` (short leases, so a killed child's tasks come back within
seconds). Every wait polls an observable condition with a deadline; nothing sleeps to synchronise.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from queuecore import Client, Inspector, TaskState
from tests.conftest import free_port, wait_until
from tests.core.test_processes import read_events, wait_heartbeats

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
Q = "default"


def events(path: Path, event: str | None = None, pid: int | None = None) -> list[dict[str, Any]]:
    return [e for e in read_events(path) if (event is None or e["event"] == event) and (pid is None or e["pid"] == pid)]


def parent_of(pid: int) -> int | None:
    """The parent pid of ``pid`` (from /proc), or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # gone, or going while its stat was read
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class Supervised:
    """One ``runworker --processes`` process; its output goes to a file."""

    def __init__(self, proc: subprocess.Popen[bytes], output: Path) -> None:
        self.proc, self.output = proc, output

    @property
    def pid(self) -> int:
        return self.proc.pid

    def text(self) -> str:
        return self.output.read_text(encoding="utf-8", errors="replace") if self.output.exists() else ""

    def wait_exit(self, timeout: float = 30.0) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"runworker {self.pid} still running {timeout}s after the signal\n{self.text()[-4000:]}")


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "events.jsonl"


@pytest.fixture
def runworker(request: pytest.FixtureRequest, redis_url: str, key_prefix: str, tmp_path: Path,
              log: Path) -> Iterator[Callable[..., Supervised]]:
    """Start ``manage.py runworker ARGS`` in a session of its own (as a terminal's foreground job would
    be); teardown kills what is left of it and its children, and prints its output if the test failed."""
    failed_before = request.session.testsfailed
    started: list[Supervised] = []
    env = dict(os.environ)
    env.update(DJANGO_SETTINGS_MODULE="tests.supervisor_settings", QUEUECORE_REDIS_URL=redis_url,
               QUEUECORE_KEY_PREFIX=key_prefix, QUEUECORE_VAR_DIR=str(tmp_path), QC_PROC_LOG=str(log),
               PYTHONUNBUFFERED="1")

    def start(*args: str, **extra_env: str) -> Supervised:
        output = tmp_path / f"runworker-{len(started)}.log"
        with open(output, "wb") as out:
            proc = subprocess.Popen([sys.executable, "manage.py", "runworker", *args], cwd=ROOT,
                                    env={**env, **extra_env},
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        started.append(Supervised(proc, output))
        return started[-1]

    yield start
    for sup in started:
        children = [p for p in _pids() if parent_of(p) == sup.pid]
        for pid in [sup.pid, *children]:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        sup.proc.wait(10)
    if request.session.testsfailed > failed_before:
        for sup in started:
            print(f"--- runworker {sup.pid} (exit {sup.proc.returncode})\n{sup.text()[-6000:]}")


def _pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def wait_servers(inspector: Inspector, sup: Supervised, count: int, timeout: float = 30.0) -> list[Any]:
    """Wait until ``count`` live servers are the supervisor's children; returns them."""
    def check() -> list[Any] | None:
        if sup.proc.poll() is not None:
            pytest.fail(f"runworker exited early ({sup.proc.returncode})\n{sup.text()[-4000:]}")
        servers = [s for s in inspector.servers() if parent_of(s.pid) == sup.pid]
        return servers if len(servers) == count else None

    return wait_until(check, timeout, interval=0.05, message=f"{count} worker processes' heartbeats")  # type: ignore[return-value]


def test_two_children_are_two_servers_a_killed_one_is_restarted_and_no_task_is_lost(
        runworker, client: Client, inspector: Inspector, log: Path) -> None:
    sup = runworker("--processes", "2", "--concurrency", "2")
    first = wait_servers(inspector, sup, 2)
    # Two distinct servers, each a child of the supervisor (which has no heartbeat of its own).
    assert len({s.id for s in first}) == 2 and len({s.pid for s in first}) == 2
    assert sup.pid not in {s.pid for s in first}
    assert all(s.concurrency == 2 and s.queues == {Q: 1} for s in first)

    ids = [client.enqueue("proc.sleep", {"seconds": 0.1 + 0.05 * (i % 4), "tag": f"t{i}"}, retention=60).id
           for i in range(30)]
    victim = first[0].pid

    def victim_midway() -> bool:
        mine = events(log, pid=victim)
        ended = {e["id"] for e in mine if e["event"] == "end"}
        return len(ended) >= 2 and any(e["event"] == "start" and e["id"] not in ended for e in mine)

    wait_until(victim_midway, 20, interval=0.005, message="the victim to be running a task after finishing two")
    os.kill(victim, signal.SIGKILL)
    started_by_victim = {e["id"] for e in events(log, "start", victim)}
    unfinished = started_by_victim - {e["id"] for e in events(log, "end", victim)}
    assert unfinished, "the victim was killed between tasks"

    # The supervisor starts a new child in its place: a third server id appears, again its child.
    replaced = wait_until(lambda: [s for s in inspector.servers()
                                   if parent_of(s.pid) == sup.pid and s.id not in {f.id for f in first}],
                          20, interval=0.05, message="a restarted worker process")
    assert replaced[0].pid not in {f.pid for f in first}  # type: ignore[index]

    # No task is lost: each ran to its end at least once, and is completed in Redis.
    wait_until(lambda: {e["id"] for e in events(log, "end")} >= set(ids), 40, message="every task to end")
    wait_until(lambda: all(inspector.get_task(Q, i).state is TaskState.COMPLETED for i in ids), 20,
               message="every task to be completed")
    # What the victim was running came back through lease recovery and ran again elsewhere.
    for task_id in unfinished:
        reruns = [e for e in events(log, "start") if e["id"] == task_id and e["pid"] != victim]
        assert reruns and reruns[0]["attempt"] == 1, (task_id, reruns)
        assert inspector.get_task(Q, task_id).last_error == "worker lost (lease expired)"

    sup.proc.send_signal(signal.SIGTERM)
    assert sup.wait_exit() == 0
    wait_until(lambda: inspector.servers() == [], 10, message="every heartbeat to be gone")
    output = sup.text()
    assert f"(pid {victim}, server {first[0].id}) exited unexpectedly: killed by SIGKILL; restarting in" in output
    assert "restarting worker process" in output
    assert "every worker process has stopped (cleanly)" in output


def test_tstp_reaches_every_child_and_ctrl_c_drains_running_tasks(runworker, client: Client, inspector: Inspector,
                                                                  log: Path, tmp_path: Path) -> None:
    sup = runworker("--processes", "2", "--concurrency", "2")
    servers = wait_servers(inspector, sup, 2)
    gate = tmp_path / "gate"
    held = [client.enqueue("proc.gate", {"path": str(gate), "tag": f"g{i}"}, retention=60).id for i in range(2)]
    wait_until(lambda: {e["id"] for e in events(log, "start")} >= set(held), 20, message="both gate tasks to start")

    # SIGTSTP (Ctrl-Z) to the supervisor: every child goes quiet and fetches nothing more.
    sup.proc.send_signal(signal.SIGTSTP)
    wait_until(lambda: sorted(s.status for s in inspector.servers()) == ["quiet", "quiet"], 10,
               message="both children to be quiet")
    waiting = client.enqueue("proc.noop", {"tag": "after-quiet"}, retention=60).id

    # Ctrl-C: SIGINT to the terminal's whole process group. The children run in groups of their own, so
    # they get it once, from the supervisor: a graceful drain, not the forced hand-back of a second one.
    os.killpg(sup.pid, signal.SIGINT)
    wait_until(lambda: sorted(s.status for s in inspector.servers()) == ["stopping", "stopping"], 10,
               message="both children to be stopping")
    gate.touch()  # the running tasks may finish now
    assert sup.wait_exit() == 0
    assert not events(log, "abort")
    assert sorted(e["id"] for e in events(log, "end")) == sorted(held)
    assert all(inspector.get_task(Q, i).state is TaskState.COMPLETED for i in held)
    # The task enqueued after SIGTSTP was never fetched by anyone.
    assert inspector.get_task(Q, waiting).state is TaskState.PENDING
    assert not [e for e in events(log) if e["id"] == waiting]
    assert inspector.servers() == []
    assert all(not alive(s.pid) for s in servers)
    assert "second" not in sup.text()


def test_the_setting_starts_children_that_stop_by_themselves_when_the_supervisor_is_killed(
        runworker, inspector: Inspector) -> None:
    sup = runworker(QC_TEST_PROCESSES="2")  # QUEUECORE["PROCESSES"] = 2; the children are one process each
    children = [s.pid for s in wait_servers(inspector, sup, 2)]
    assert "started worker process 2" in sup.text() and "started worker process 3" not in sup.text()
    os.kill(sup.pid, signal.SIGKILL)
    sup.wait_exit()
    wait_until(lambda: not any(alive(pid) for pid in children), 20, message="the orphaned children to stop")
    wait_until(lambda: inspector.servers() == [], 10, message="their heartbeats to be gone")


def test_children_waiting_for_redis_stop_by_themselves_when_the_supervisor_is_killed(runworker) -> None:
    """A review: a child waits for Redis to answer before its worker exists (a cluster client reads the
    slot map when made), and its watch on the supervisor began only with the worker: children of a
    killed supervisor went on waiting, orphaned, and ran beside the next runworker once Redis came."""
    nowhere = f"redis+cluster://127.0.0.1:{free_port()}/"  # no node answers
    sup = runworker("--processes", "2", QUEUECORE_REDIS_URL=nowhere)
    wait_until(lambda: sup.text().count("the worker starts once it answers") == 2, 60,
               message="both children to wait for Redis")
    children = [pid for pid in _pids() if parent_of(pid) == sup.pid]
    assert len(children) == 2
    os.kill(sup.pid, signal.SIGKILL)
    sup.wait_exit()
    try:
        wait_until(lambda: not any(alive(pid) for pid in children), 10, message="the orphaned children to stop")
    finally:  # no longer the supervisor's: the fixture would not find them
        for pid in children:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_child_that_cannot_load_its_task_modules_is_given_up_at_once(runworker) -> None:
    """A configuration error in a child exits EX_CONFIG (78), which the supervisor does not restart;
    Django's system checks, run again in the child, exited 1 first: restarted until a crash loop."""
    sup = runworker("--processes", "2", QC_TEST_BROKEN_IN_CHILDREN="1")
    assert sup.wait_exit() != 0
    text = sup.text()
    assert "not restarted: configuration error (exit code 78)" in text
    assert "cannot be imported in a worker process" in text and "crash loop" not in text
    assert "SystemCheckError" not in text


def test_a_slot_given_up_makes_the_health_check_unhealthy(runworker, inspector: Inspector, tmp_path: Path,
                                                          redis_url: str, key_prefix: str) -> None:
    """A review: a slot given up (a crash loop, a configuration error) never writes its health file, and
    the check took a missing file for a child stopped cleanly: "ok" at half capacity."""
    from queuecore.core.config import ConnectionConfig
    from queuecore.core.liveness import check_health

    health = tmp_path / "qc.json"
    sup = runworker("--processes", "2", "--health-file", str(health), QC_TEST_BROKEN_IN_CHILDREN="1",
                    QC_TEST_BROKEN_IN_SLOT="2")
    wait_servers(inspector, sup, 1)
    wait_until(lambda: "worker process 2" in sup.text() and "not restarted" in sup.text(), 30,
               message="slot 2 to be given up")
    wait_until(lambda: Path(f"{health}.1").exists(), 10, message="slot 1's health file")
    client = ConnectionConfig(redis_url=redis_url, key_prefix=key_prefix).connect()
    try:
        report = check_health(health, client)
    finally:
        client.close()
    assert not report.ok
    assert "1 of 2 worker processes unhealthy: worker process 2 was given up by its supervisor: configuration " \
           "error (exit code 78)" in report.reason, report.reason


def test_a_health_file_in_no_directory_is_refused_before_any_child_starts(runworker) -> None:
    """A review: each of the N children was started (a whole Django process each) to refuse it, with a
    traceback-free error apiece and four supervisor ERROR lines; one process refuses it in one line."""
    sup = runworker("--processes", "2", "--health-file", "/nonexistent/qc/h.json")
    assert sup.wait_exit() == 1
    text = sup.text()
    assert "health_file '/nonexistent/qc/h.json': the directory '/nonexistent/qc' does not exist" in text
    assert "started worker process" not in text and "Traceback" not in text


@pytest.mark.parametrize("value", ["0", "65"])
def test_processes_out_of_range_is_refused(runworker, value: str) -> None:
    sup = runworker("--processes", value)
    assert sup.wait_exit() == 1
    assert ("--processes is out of range: got " + value + "; allowed: a whole number from 1 to 64 processes"
            in sup.text())


def test_the_health_file_setting_gives_each_child_a_file_of_its_own(runworker, inspector: Inspector,
                                                                     tmp_path: Path) -> None:
    import socket

    from queuecore.core.liveness import check_health

    health = tmp_path / "health.json"  # QUEUECORE["HEALTH_FILE"], as --health-file would be
    # Left by earlier runs killed -9 (a single worker's, a third child's): a review found the check
    # unhealthy for good, the bare file hiding the children's files, the third slot stale.
    dead = {"server_id": "gone", "pid": 2**22 + 7, "host": socket.gethostname(), "key_prefix": "x",
            "heartbeat_interval": 0.3, "status": "active", "heartbeat_at": 1.0}
    for left in (health, tmp_path / "health.json.3"):
        left.write_text(json.dumps(dead))
    sup = runworker("--processes", "2", QC_TEST_HEALTH_FILE=str(health))
    servers = wait_servers(inspector, sup, 2)
    files = [tmp_path / "health.json.1", tmp_path / "health.json.2"]
    wait_until(lambda: all(f.exists() for f in files), 20, message="a health file per worker process")
    written = {json.loads(f.read_text())["server_id"] for f in files}
    assert written == {s.id for s in servers}  # one file each, not one file both rewrite
    assert not health.exists() and not (tmp_path / "health.json.3").exists()
    report = check_health(health, inspector.redis, max_age=30)
    assert report.ok and report.reason.startswith("2 worker processes"), report
    sup.proc.send_signal(signal.SIGTERM)
    assert sup.wait_exit() == 0
    assert not any(f.exists() for f in files)  # each removed by its own worker on a clean stop


def test_a_child_started_while_the_supervisor_is_quiet_fetches_nothing(runworker, client: Client,
                                                                     inspector: Inspector, log: Path) -> None:
    """A child restarted after SIGTSTP was told to go quiet once it said it was ready; it had started
    fetching before that, and ran up to concurrency + fetched-ahead tasks (12 in a probe)."""
    sup = runworker("--processes", "2", "--concurrency", "2")
    first = wait_servers(inspector, sup, 2)
    sup.proc.send_signal(signal.SIGTSTP)
    wait_until(lambda: sorted(s.status for s in inspector.servers()) == ["quiet", "quiet"], 10,
               message="both children to be quiet")
    waiting = [client.enqueue("proc.noop", {"tag": f"q{i}"}, retention=60).id for i in range(8)]
    os.kill(first[0].pid, signal.SIGKILL)
    replaced = wait_until(lambda: [s for s in inspector.servers()
                                   if parent_of(s.pid) == sup.pid and s.id not in {f.id for f in first}],
                          20, interval=0.05, message="a restarted worker process")
    assert replaced[0].status == "quiet"  # type: ignore[index]
    pid = replaced[0].pid  # type: ignore[index]
    wait_until(lambda: any(f"pid {pid}" in line and line.endswith(" is ready") for line in sup.text().splitlines()),
               10, message="the restarted child to say it is ready")
    assert not events(log, "start")
    assert all(inspector.get_task(Q, i).state is TaskState.PENDING for i in waiting)
    sup.proc.send_signal(signal.SIGTERM)
    assert sup.wait_exit() == 0
    assert not events(log, "start")


@pytest.mark.parametrize("processes", ["1", "2"])
def test_sighup_stops_the_workers_gracefully(runworker, client: Client, inspector: Inspector, log: Path,
                                             tmp_path: Path, processes: str) -> None:
    """A closed terminal (SIGHUP) killed the supervisor at once (exit 129, no log line) and left its
    children draining without it; a single worker died with its task, which came back after its lease."""
    sup = runworker("--processes", processes, "--concurrency", "1")
    wait_until(lambda: len(inspector.servers()) == int(processes), 30, message="the workers' heartbeats")
    gate = tmp_path / "gate"
    held = client.enqueue("proc.gate", {"path": str(gate), "tag": "held"}, retention=60).id
    wait_until(lambda: events(log, "start"), 20, message="the gate task to start")
    sup.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: "stopping" in {s.status for s in inspector.servers()}, 10, message="a worker to be stopping")
    gate.touch()
    assert sup.wait_exit() == 0
    assert inspector.get_task(Q, held).state is TaskState.COMPLETED
    assert [e["id"] for e in events(log, "end")] == [held] and not events(log, "abort")
    assert inspector.servers() == []


def test_the_metrics_port_setting_is_served_once_by_the_supervisor(runworker, inspector: Inspector) -> None:
    """Each child read QUEUECORE['METRICS']['PORT'] too, failed to bind the supervisor's port, and was
    restarted until every slot gave up (about 20 s after the start)."""
    port = free_port()
    sup = runworker("--processes", "2", QC_TEST_METRICS_PORT=str(port))
    servers = wait_servers(inspector, sup, 2)

    def scrape() -> str | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
                return str(reply.read().decode())
        except OSError:
            return None

    assert "queuecore_workers_up 2.0" in wait_until(scrape, 20, message="the metrics page")  # type: ignore[operator]
    sup.proc.send_signal(signal.SIGTERM)
    assert sup.wait_exit() == 0
    assert "exited unexpectedly" not in sup.text() and "Address already in use" not in sup.text()
    assert sup.text().count(f"metrics on http://127.0.0.1:{port}/metrics") == 1
    assert {s.pid for s in servers} and all(not alive(s.pid) for s in servers)


def test_a_child_an_operator_stops_stays_stopped_and_the_last_one_ends_runworker(
        runworker, inspector: Inspector) -> None:
    """Probe: ``adminctl server stop`` on a child of ``runworker --processes 2`` stopped it, and the
    supervisor started a new one a second later. The slot now stays empty; stopping the other child
    too ends ``runworker`` with exit code 0."""
    sup = runworker("--processes", "2")
    first, second = wait_servers(inspector, sup, 2)
    inspector.stop_server(first.id)
    wait_until(lambda: "stopped on request (exit code 0): not restarted; 1 of 2 worker processes left"
               in sup.text(), 30, message="the supervisor to see the child stop")
    assert not alive(first.pid) and [s.id for s in inspector.servers()] == [second.id]
    assert "restarting worker process" not in sup.text() and sup.proc.poll() is None
    inspector.stop_server(second.id)
    assert sup.wait_exit() == 0
    assert "every worker process was stopped on request; exiting" in sup.text()
    assert inspector.servers() == []


def test_sigterm_to_every_process_of_the_service_drains_and_a_second_to_the_supervisor_forces(
        runworker, client: Client, inspector: Inspector, log: Path, tmp_path: Path) -> None:
    """A review: systemd's default stop (KillMode=control-group), or ``pkill -f runworker``, sends
    SIGTERM to every process of the service; each child got it twice (systemd's and the supervisor's
    copy) and took the second as "hand running tasks back now". A repeated stop signal is now no
    force for a supervised child: the supervisor forces with SIGUSR1, on its own second signal."""
    sup = runworker("--processes", "2", "--concurrency", "2")  # one child may take both (fetched ahead)
    servers = wait_servers(inspector, sup, 2)
    gate = tmp_path / "gate"
    held = [client.enqueue("proc.gate", {"path": str(gate), "tag": f"g{i}"}, retention=60).id for i in range(2)]
    wait_until(lambda: {e["id"] for e in events(log, "start")} >= set(held), 20, message="both gate tasks to start")
    # One child may run both (it fetches ahead); a child with nothing to run drains at once and exits.
    holders = {e["pid"] for e in events(log, "start") if e["id"] in held}
    busy = [s for s in servers if s.pid in holders]
    idle = [s for s in servers if s.pid not in holders]
    for pid in (sup.pid, *(s.pid for s in servers)):  # as systemd: every process of the control group
        os.kill(pid, signal.SIGTERM)
    wait_until(lambda: all(s.status == "stopping" for s in inspector.servers() if s.pid in holders)
               and sum(s.pid in holders for s in inspector.servers()) == len(busy), 10,
               message="the children running gate tasks to be stopping")
    for s in busy:  # a copy the supervisor forwarded may come after systemd's: still a drain
        os.kill(s.pid, signal.SIGTERM)
    for s in busy:  # each has beaten twice since: the signals were handled, and nothing was forced
        assert wait_heartbeats(inspector, s.pid, beats=2).status == "stopping"
    for s in idle:  # drained: nothing to wait for
        wait_until(lambda s=s: not alive(s.pid), 10, message=f"idle child {s.pid} to exit")
    assert sorted(w.task_id for x in inspector.servers() for w in x.workers) == sorted(held)
    assert not events(log, "abort")
    sup.proc.send_signal(signal.SIGTERM)  # the operator means it: the supervisor forces, with SIGUSR1
    assert sup.wait_exit() == 0
    assert sorted(e["id"] for e in events(log, "abort")) == sorted(held)
    assert all(inspector.get_task(Q, i).state is TaskState.PENDING for i in held)  # handed back, attempt kept
    assert "second stop signal" not in sup.text() and "SIGUSR1" in sup.text()
