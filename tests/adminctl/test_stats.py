"""``adminctl stats`` and ``stats --watch``: in a pseudo-terminal, piped (JSON lines), and on rich's
recording console."""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from dataclasses import replace

import pytest
from rich.console import Console

from queuecore import BrokerError, Client, Inspector
from queuecore.core.alerts import Alert, PendingAlert
from queuecore.core.inspector import RedisInfo
from queuecore_adminctl.app import App, GlobalOptions
from queuecore_adminctl.commands.stats import take_snapshot
from queuecore_adminctl.models import StatsSnapshot
from queuecore_adminctl.render import render_stats
from queuecore_adminctl.terminal import Terminal
from queuecore_adminctl.watch import watch
from tests.adminctl.conftest import ADMINCTL_SCRIPT, ROOT, clean_env, widest_line
from tests.adminctl.test_alerts import fire, pend
from tests.conftest import wait_until

STATS_KEYS = {"taken_at", "redis_url", "prefix", "totals", "queues", "servers", "redis", "alerts"}
TOTALS_KEYS = {"pending", "active", "scheduled", "retry", "archived", "completed", "size", "processed_today",
               "failed_today", "error_rate"}
QUEUE_KEYS = {"name", "paused", "pending", "active", "scheduled", "retry", "archived", "completed", "latency",
              "memory_bytes", "processed_today", "failed_today", "processed_total", "failed_total", "size",
              "error_rate"}
QUEUE_KEYS |= {"paused_until", "paused_by"}  # a timed pause's end, and who paused it
QUEUE_KEYS |= {"problem"}  # why its figures could not be read (a key of the wrong type), else None


def seed(client: Client, inspector: Inspector) -> None:
    for i in range(3):
        client.enqueue("report.build", {"n": i}, queue="reports")
    client.enqueue("mail.send", {"to": "a@example.com"}, queue="mail", process_in=600)
    inspector.pause_queue("mail")


def test_stats_shows_every_part_at_80_columns(adminctl, client: Client, inspector: Inspector) -> None:
    seed(client, inspector)
    run = adminctl("stats")
    assert run.code == 0, run.stderr
    out = run.stdout
    assert widest_line(out) <= 80
    assert "Tasks" in out and "pending" in out and "scheduled" in out
    bar_line = next(line for line in out.splitlines() if line.startswith("Tasks "))
    assert bar_line.rstrip().endswith(" 4")  # 3 pending + 1 scheduled
    assert "#" in bar_line and "=" in bar_line  # plain output: states told apart by glyph
    (mail,) = [line for line in out.splitlines() if line.startswith("mail ")]
    assert "paused" in mail
    (reports,) = [line for line in out.splitlines() if line.startswith("reports ")]
    assert " run " in reports and " 3 " in reports
    for heading in ("Today (UTC)", "Alerts", "Workers", "Redis"):
        assert heading in out
    assert "0 servers up" in out and "0/0 busy" in out
    assert re.search(r"^Alerts +none$", out, re.M)


def test_stats_names_the_active_alerts_and_counts_the_pending_ones(adminctl, scripts) -> None:
    """The alerts the dashboard's overview shows are on the stats screen too, above the queue table:
    the active ones by id and severity (the first five; the rest counted), then how many are pending."""
    now = scripts.redis.time()[0]
    alerts = [Alert(id=f"big/q{n}", rule="big", kind="backlog", subject=f"q{n}", severity="warning" if n else
                    "critical", message=f"queue q{n}: 9 pending tasks (above 1)", value=9.0, threshold=1.0,
                    since=now - 100 + n) for n in range(7)]
    fire(scripts, *alerts)
    pend(scripts, PendingAlert(replace(alerts[0], id="slow/q0", rule="slow", since=now - 5), hold_for=60.0))
    out = adminctl("stats").stdout
    line = out[out.index("\nAlerts"):out.index("\nWorkers")]  # wrapped at 80 columns
    assert " ".join(line.split()) == ("Alerts 7 active: big/q0 (critical), big/q1 (warning), big/q2 (warning), "
                                      "big/q3 (warning), big/q4 (warning), 2 more · 1 pending")
    data = adminctl("stats", "--json").json()["alerts"]
    assert [a["id"] for a in data["active"]] == [a.id for a in alerts]
    assert [(p["id"], p["for"]) for p in data["pending"]] == [("slow/q0", 60.0)]


def test_stats_json_shape(adminctl, client: Client, inspector: Inspector, key_prefix: str) -> None:
    seed(client, inspector)
    data = adminctl("stats", "--json").json()
    assert set(data) == STATS_KEYS
    assert set(data["totals"]) == TOTALS_KEYS
    assert data["totals"]["pending"] == 3 and data["totals"]["scheduled"] == 1 and data["totals"]["size"] == 4
    assert [q["name"] for q in data["queues"]] == ["mail", "reports"]
    assert all(set(q) == QUEUE_KEYS for q in data["queues"])
    assert data["queues"][0]["paused"] is True
    assert data["servers"] == {"up": 0, "busy_workers": 0, "concurrency": 0, "waiting": 0}
    assert data["prefix"] == key_prefix
    assert set(data["redis"]) >= {"version", "used_memory", "connected_clients", "key_count", "queues"}
    assert data["redis"]["queues"] == 2
    # the global flag works the same as the command's own
    assert adminctl("--json", "stats").json()["totals"] == data["totals"]


def test_stats_on_an_empty_namespace(adminctl) -> None:
    run = adminctl("stats")
    assert run.code == 0 and "no queues yet" in run.stdout
    assert adminctl("stats", "--json").json()["queues"] == []


# -- watch in a pseudo-terminal -------------------------------------------------------------------


def sigint_as_from_a_terminal() -> None:
    """A child's SIGINT as a terminal's Ctrl-C finds it: a shell that runs the suite in the background
    (``cmd &``) starts it with SIGINT ignored, which Python and every child would inherit."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class PtyProcess:
    """A process on a pseudo-terminal (80x40), with its output collected as it arrives."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 80, 0, 0))
        env = {k: v for k, v in env.items() if k not in ("COLUMNS", "LINES")}
        self.proc = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=ROOT,
                                     close_fds=True, preexec_fn=sigint_as_from_a_terminal)
        os.close(slave)
        self.master = master
        self.output = b""

    def pump(self, timeout: float = 0.05) -> None:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if ready:
            try:
                self.output += os.read(self.master, 65536)
            except OSError:  # EIO: the child closed the terminal
                pass

    def wait_for(self, predicate: Callable[[bytes], bool], timeout: float = 15, message: str = "output") -> None:
        def check() -> bool:
            self.pump()
            return predicate(self.output)

        wait_until(check, timeout=timeout, interval=0, message=message)

    def finish(self, timeout: float = 10) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            self.pump()
        for _ in range(20):  # whatever is still buffered
            before = len(self.output)
            self.pump(0.02)
            if len(self.output) == before:
                break
        return self.proc.wait(max(0.1, deadline - time.monotonic()))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        os.close(self.master)


@pytest.mark.parametrize("script", [False, True], ids=["python-m", "console-script"])
def test_watch_redraws_in_place_in_a_terminal_and_exits_0_on_sigint(redis_url: str, key_prefix: str,
                                                                    client: Client, script: bool) -> None:
    client.enqueue("t", queue="first")
    command = [str(ADMINCTL_SCRIPT)] if script else [sys.executable, "-m", "queuecore_adminctl"]
    term = PtyProcess([*command, "--redis-url", redis_url, "--prefix", key_prefix, "stats", "--watch",
                       "--interval", "0.2"], clean_env())
    try:
        term.wait_for(lambda out: out.count(b"Ctrl-C to quit") >= 2, message="two frames")
        first_frames = term.output
        assert b"first" in first_frames and b"watched" not in first_frames
        client.enqueue("t", queue="watched")
        term.wait_for(lambda out: b"watched" in out[len(first_frames):], message="a frame showing the new queue")
        os.kill(term.proc.pid, signal.SIGINT)
        code = term.finish()
    finally:
        term.close()
    assert code == 0
    text = term.output.decode("utf-8", "replace")
    assert "Traceback" not in text and "KeyboardInterrupt" not in text
    assert "\x1b[1A" in text and "\x1b[2K" in text  # redrawn in place: cursor up, erase line
    assert "\x1b[3" in text  # colours on a terminal
    assert text.rstrip().endswith("\x1b[?25h") or "\x1b[?25h" in text[-200:]  # cursor shown again at exit


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_watch_piped_emits_one_json_object_per_interval(redis_url: str, key_prefix: str, client: Client,
                                                        sig: signal.Signals) -> None:
    client.enqueue("t", queue="lines")
    proc = subprocess.Popen([sys.executable, "-m", "queuecore_adminctl", "--redis-url", redis_url,
                             "--prefix", key_prefix, "stats", "--watch", "--interval", "0.1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env(), cwd=ROOT,
                            preexec_fn=sigint_as_from_a_terminal)
    lines: list[dict] = []
    buffer = b""

    def read_lines() -> None:
        nonlocal buffer
        ready, _, _ = select.select([proc.stdout], [], [], 0.05)
        if ready:
            buffer += os.read(proc.stdout.fileno(), 65536)
            *complete, buffer = buffer.split(b"\n")
            lines.extend(json.loads(line) for line in complete)

    try:
        wait_until(lambda: read_lines() or len(lines) >= 2, timeout=15, interval=0, message="two JSON lines")
        assert lines[0]["totals"]["pending"] == 1
        client.enqueue("t", queue="lines")
        wait_until(lambda: read_lines() or lines[-1]["totals"]["pending"] == 2, timeout=15, interval=0,
                   message="a line with the new task")
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    assert proc.returncode == 0, err
    assert b"Traceback" not in err
    assert all(set(line) == STATS_KEYS for line in lines)


def test_watch_count_json_lines_in_process(adminctl, client: Client) -> None:
    client.enqueue("t")
    run = adminctl("stats", "--watch", "--interval", "0.1", "--count", "3")
    assert run.code == 0
    lines = [json.loads(line) for line in run.stdout.splitlines()]
    assert len(lines) == 3 and all(line["totals"]["pending"] == 1 for line in lines)


def test_watch_on_a_recording_console_renders_each_update(redis_url: str, key_prefix: str, client: Client) -> None:
    """The Live loop itself: each fetch becomes exactly one redraw, and the redraws follow the data."""
    out = Console(record=True, force_terminal=True, width=80, height=40, file=io.StringIO(), markup=False,
                  emoji=False, highlight=False)
    terminal = Terminal(out=out, err=Console(file=io.StringIO()))
    app = App(GlobalOptions(redis_url=redis_url, prefix=key_prefix), terminal)
    fetched: list[StatsSnapshot] = []
    drawn: list[tuple[StatsSnapshot, str | None]] = []

    def fetch() -> StatsSnapshot:
        snapshot = take_snapshot(app)
        fetched.append(snapshot)
        client.enqueue("t", queue=f"q{len(fetched)}")  # the next fetch sees one more queue
        return snapshot

    def draw(snapshot, problem):
        drawn.append((snapshot, problem))
        return render_stats(snapshot, color=True, problem=problem)

    try:
        shown = watch(fetch, draw, StatsSnapshot.to_dict, terminal=terminal, interval=0.01, json_lines=False,
                      count=3, sleep=lambda s: None)
    finally:
        app.close()
    assert shown == 3 and len(fetched) == 3
    assert [len(s.queues) for s, _ in drawn] == [0, 1, 2]
    text = out.export_text()
    assert "no queues yet" in text and "q1" in text and "q2" in text
    assert out.file.getvalue().count("\x1b[2K") >= 2  # the later frames erased the earlier ones


def test_watch_keeps_going_when_redis_fails_and_shows_it() -> None:
    snap = StatsSnapshot(taken_at=time.time(), redis_url="redis://x/0", prefix="qc", queues=[], servers=[],
                         redis=RedisInfo(None, None, None, None, None, None, None, None, 0, 0))
    calls = iter([snap, BrokerError("Redis is unreachable: boom"), snap])

    def fetch() -> StatsSnapshot:
        value = next(calls)
        if isinstance(value, Exception):
            raise value
        return value

    problems: list[str | None] = []
    out = Console(record=True, force_terminal=True, width=80, file=io.StringIO())
    terminal = Terminal(out=out, err=Console(file=io.StringIO()))
    shown = watch(fetch, lambda s, p: problems.append(p) or render_stats(s, problem=p), StatsSnapshot.to_dict,
                  terminal=terminal, interval=0.01, json_lines=False, count=3, sleep=lambda s: None)
    assert shown == 3
    assert problems[0] is None and "boom" in problems[1] and problems[2] is None
    assert "boom" in out.export_text()
    # JSON lines: the failure is a warning on stderr, and no stale line is repeated.
    calls = iter([snap, BrokerError("Redis is unreachable: boom"), snap])
    json_out, err = io.StringIO(), io.StringIO()
    terminal = Terminal(out=Console(file=json_out), err=Console(file=err))
    shown = watch(fetch, render_stats, StatsSnapshot.to_dict, terminal=terminal, interval=0.01, json_lines=True,
                  count=2, sleep=lambda s: None)
    assert shown == 2 and len(json_out.getvalue().splitlines()) == 2
    assert "boom" in err.getvalue()


def test_first_fetch_failure_is_an_ordinary_error() -> None:
    def fetch():
        raise BrokerError("Redis is unreachable: first")

    with pytest.raises(BrokerError):
        watch(fetch, render_stats, StatsSnapshot.to_dict, terminal=Terminal(out=Console(file=io.StringIO())),
              interval=0.01, json_lines=False, count=1, sleep=lambda s: None)


def test_watch_interval_is_bounded(adminctl) -> None:
    for interval in ("99999999999", "1e300", "2d"):
        run = adminctl("stats", "--watch", "--interval", interval, "--count", "2")
        assert run.code == 2 and "must be at most 86,400 seconds" in run.stderr and run.stdout == "", run


def test_a_watch_shorter_than_its_queue_table_still_shows_the_error_and_the_footer(
        redis_url: str, key_prefix: str, client: Client) -> None:
    """Dashboard probe: with 82 queues in a 40-row terminal, frames drawn while Redis was away showed
    neither the error nor the "updated" line: they came after the table, and a watch's screen is
    cropped at the terminal's height (rich's Live: the rows that fit, then "..."). They come first now."""
    for n in range(30):
        client.enqueue("t", queue=f"many{n:02d}")
    height = 20
    out = Console(force_terminal=True, width=100, height=height, file=io.StringIO())
    app = App(GlobalOptions(redis_url=redis_url, prefix=key_prefix), Terminal(out=out))
    try:
        snapshot = take_snapshot(app)
    finally:
        app.close()
    frame = render_stats(snapshot, problem="12:00:05 Redis is unreachable: boom (showing the last good data)",
                         footer="updated 12:00:00 · every 1s · Ctrl-C to quit")
    lines = ["".join(segment.text for segment in line) for line in out.render_lines(frame, out.options, pad=False)]
    assert len(lines) > height and any("many29" in line for line in lines)  # taller than the terminal
    visible = "\n".join(lines[:height - 1])  # what a watch shows
    assert "boom" in visible and "updated 12:00:00" in visible and "Today (UTC)" in visible
