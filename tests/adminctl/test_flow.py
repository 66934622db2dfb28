"""adminctl and flow control: ``queue pause --for``, the pause's end and author in ``queue inspect``,
``queue limits``, and a task's snoozes and hold-back reason in ``task inspect``."""

from __future__ import annotations

import threading
import time

from queuecore import Client, Inspector, task
from tests.conftest import wait_until


def test_pause_for_a_while_shows_until_when_and_who(adminctl, client: Client, inspector: Inspector) -> None:
    client.enqueue("t", queue="p")
    run = adminctl("queue", "pause", "p", "--for", "30m")
    assert run.code == 0 and "paused queue p until " in run.stderr
    info = inspector.queue_info("p")
    assert info.paused and info.paused_until is not None
    assert 1790 < info.paused_until.timestamp() - time.time() <= 1800
    assert info.paused_by is not None and info.paused_by.startswith("cli:")
    shown = adminctl("queue", "inspect", "p")
    assert "until " + info.paused_until.isoformat(timespec="seconds") in shown.stdout
    assert "by cli:" in shown.stdout
    as_json = adminctl("queue", "pause", "p", "--for", "90", "--json").json()
    assert as_json["paused"] is True and as_json["paused_until"]
    assert adminctl("queue", "pause", "p", "--for", "soon").code == 2  # not a duration: a usage error
    assert adminctl("queue", "unpause", "p").code == 0
    assert inspector.queue_info("p").paused_until is None


def test_a_pause_over_before_the_reply_still_says_when_it_ends(adminctl, client: Client) -> None:
    """A pause of 0.1 ms (or 1.5) had ended when adminctl read the queue back to print it, so it said "paused"
    with no end, as for a pause until unpaused (and --json had no paused_until)."""
    client.enqueue("t", queue="p2")
    before = time.time()
    run = adminctl("queue", "pause", "p2", "--for", "0.0001", "--json").json()
    assert run["paused"] is True and run["paused_until"], run
    from datetime import datetime

    assert abs(datetime.fromisoformat(run["paused_until"]).timestamp() - before) < 5
    shown = adminctl("queue", "pause", "p2", "--for", "0.0015")
    assert "paused queue p2 until " in shown.stderr, shown.stderr


def test_queue_limits_lists_running_of_limit_waiting_and_rate_use(adminctl, make_worker, client, registry):
    release = threading.Event()
    started = threading.Event()

    @task(name="mail.send", registry=registry, concurrency_limit=1, rate_limit="100/m")
    def send() -> None:
        started.set()
        release.wait(10)

    try:
        client.enqueue(send, {}, queue="q")
        client.enqueue(send, {}, queue="q")
        make_worker(queues={"q": 1}, concurrency=2)
        wait_until(started.is_set, 10)
        wait_until(lambda: adminctl("queue", "limits", "--json").json()[0]["usage"][0]["waiting"] == 1, 10)
        (limit,) = adminctl("queue", "limits", "--json").json()
        assert (limit["type"], limit["concurrency_limit"], limit["rate_limit"], limit["rate_window"]) == (
            "mail.send", 1, 100, 60.0)
        assert limit["usage"] == [{"key": "", "running": 1, "waiting": 1, "rate_used": 1}]
        table = adminctl("queue", "limits")
        assert table.code == 0
        assert "mail.send" in table.stdout and "1/1" in table.stdout and "1/100 per 60s" in table.stdout
        held = [t for t in adminctl("task", "ls", "q", "scheduled", "--json").json()["tasks"]]
        assert len(held) == 1
        detail = adminctl("task", "inspect", "q", held[0]["id"])
        assert "Held back" in detail.stdout and "concurrency limit of mail.send" in detail.stdout
    finally:
        release.set()


def test_queue_limits_without_limited_types(adminctl) -> None:
    run = adminctl("queue", "limits")
    assert run.code == 0 and "no live worker publishes a task type with limits" in run.stderr
    assert adminctl("queue", "limits", "--json").json() == []
