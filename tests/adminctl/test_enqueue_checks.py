"""``adminctl enqueue`` refuses a task no live worker can run (issue 11, item 9), checked against
real worker processes and what they publish with their heartbeats; ``--force`` enqueues anyway,
and a worker archives at once a task whose payload does not fit its handler."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from queuecore import Inspector
from tests.adminctl.conftest import Run
from tests.conftest import wait_until
from tests.core.test_processes import spawn, task_events, wait_registered  # noqa: F401 - spawn is a fixture

pytestmark = pytest.mark.slow


def refused(run: Run, *fragments: str) -> None:
    assert (run.code, run.stdout) == (1, ""), run
    assert len(run.stderr.splitlines()) == 1, run.stderr
    assert run.stderr.startswith("error: ") and run.stderr.rstrip().endswith(
        "nothing was enqueued (--force enqueues it anyway)"), run.stderr
    for fragment in fragments:
        assert fragment in run.stderr, (fragment, run.stderr)


def test_enqueue_is_checked_against_the_live_workers(adminctl, spawn, inspector: Inspector,  # noqa: F811
                                                     tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    refused(adminctl("enqueue", "proc.noop"), "no worker is running (no live heartbeat)")
    assert inspector.queues() == []  # nothing was stored
    forced = adminctl("enqueue", "proc.noop", "--payload", '{"tag": "early"}', "--force")
    assert forced.code == 0 and "warning: enqueued anyway (--force): no worker is running" in forced.stderr
    early = forced.stdout.strip()

    a = spawn(queues="default")
    b = spawn(queues="low")
    for w in (a, b):
        wait_registered(inspector, w)
    wait_until(lambda: task_events(log, "end", early), 15, message="the task enqueued early to run")

    refused(adminctl("enqueue", "no.such.type"), "no live worker serving queue 'default' handles task type "
                                                 "'no.such.type'")
    refused(adminctl("enqueue", "proc.nop"), "(the closest they handle: 'proc.noop'")
    refused(adminctl("enqueue", "proc.noop", "--queue", "other"),
            "no live worker serves queue 'other' (the live workers serve default, low)")
    refused(adminctl("enqueue", "proc.sleep", "--payload", '{"secs": 1}'),
            "the payload does not fit task 'proc.sleep' on any live worker serving queue 'default': missing "
            "required argument(s) 'seconds'; unexpected argument(s) 'secs'")
    assert inspector.count("default", "pending") == 0

    good = adminctl("enqueue", "proc.noop", "--payload", '{"tag": "fine"}', "--queue", "low")
    assert good.code == 0 and good.stderr.startswith("enqueued proc.noop in queue low"), good.stderr
    wait_until(lambda: task_events(log, "end", good.stdout.strip(), pid=b.pid), 15, message="B to run it")

    # Forced through, a payload that fits no handler is archived at once by the worker that takes it.
    misfit = adminctl("enqueue", "proc.sleep", "--payload", '{"secs": 1}', "--force")
    assert misfit.code == 0 and "warning: enqueued anyway (--force): the payload does not fit" in misfit.stderr
    task_id = misfit.stdout.strip()
    archived = wait_until(lambda: (t := inspector.get_task("default", task_id)).state == "archived" and t, 15,
                          message="the misfit to be archived")
    assert archived.retried == 0 and archived.last_error.startswith(  # type: ignore[union-attr]
        "PayloadMismatch: payload does not fit task proc.sleep")
    # The worker logs the outcome once Redis has taken it: the line may come a moment after the state.
    warning = (rf"WARNING queuecore\.worker: task {task_id} \(proc\.sleep\) in queue default failed after [\d.]+s, "
               r"attempt 1 of 26: PayloadMismatch: .*; archived \(at once: the payload does not fit the handler")
    wait_until(lambda: re.search(warning, a.stderr()), 10, message=f"the worker to log the archive: {a.stderr()}")
    assert not task_events(log, "start", task_id)  # the handler never ran

    servers = {s["pid"]: s for s in adminctl("server", "ls", "--json").json()}
    assert servers[a.pid]["task_types"]["proc.sleep"] == {"params": ["seconds", "tag"], "required": ["seconds"],
                                                          "var_keyword": False}

    # A worker that exits cleanly takes what it published with it: its queue is served by no one now.
    b.signal(signal.SIGTERM)
    assert b.wait_exit() == 0
    refused(adminctl("enqueue", "proc.noop", "--queue", "low"), "no live worker serves queue 'low'")
