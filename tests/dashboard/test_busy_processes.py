"""Busy and fetched-ahead figures across several worker processes, as the operator sees them: the
Inspector, the dashboard's overview and servers pages, and ``adminctl stats``/``server ls``
(issue 11, item 8: a prefetched task is not a running one, and busy never exceeds concurrency)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from queuecore import Client, Inspector
from tests.adminctl.conftest import adminctl, runner  # noqa: F401 - fixtures
from tests.conftest import wait_until
from tests.core.test_processes import spawn, task_events, wait_registered  # noqa: F401 - spawn is a fixture

pytestmark = pytest.mark.slow


def html(response: Any) -> str:
    return response.content.decode()


def test_two_workers_report_running_and_fetched_tasks_apart(spawn, client: Client,  # noqa: F811
                                                            inspector: Inspector, viewer: Any, adminctl,  # noqa: F811
                                                            tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    gates = [tmp_path / f"gate-{n}" for n in range(10)]
    ids = [client.enqueue("proc.gate", {"path": str(gate), "tag": str(n)}).id for n, gate in enumerate(gates)]
    workers = [spawn(concurrency=2, prefetch=2, heartbeat=0.2) for _ in range(2)]
    for w in workers:
        wait_registered(inspector, w)

    def settled() -> list[Any] | None:
        servers = inspector.servers()
        started = task_events(log, "start")
        if len(servers) == 2 and len(started) == 4 and all(
                s.active_count == 2 and s.waiting_count == 2 for s in servers):
            return servers
        return None

    servers = wait_until(settled, 20, interval=0.05, message="each worker running 2 tasks with 2 fetched ahead")
    assert isinstance(servers, list)
    started = {e["id"]: e for e in task_events(log, "start")}
    for s in servers:
        assert s.active_count <= s.concurrency == 2
        assert {w.task_id for w in s.workers} <= set(started)  # only tasks whose handler started
        assert not {w.task_id for w in s.waiting} & set(started)
        for w in s.workers:  # running time from the handler's start, in the handler's own clock
            assert abs(w.started_at.timestamp() - started[w.task_id]["t"]) < 0.1
    assert inspector.count("default", "pending") == 2 and inspector.count("default", "active") == 8

    overview = html(viewer.get("/queues/"))
    assert 'data-qc-stat="busy">4<' in overview and "of 4 slots (100%)" in overview
    assert '<span data-qc-stat="waiting">4</span> fetched ahead' in overview
    page = html(viewer.get("/queues/servers/"))
    assert page.count("<dd data-qc-server-busy>2 / 2</dd>") == 2
    assert page.count("<dd data-qc-server-waiting>2</dd>") == 2
    assert len(re.findall(r'data-qc-worker-task="', page)) == 4
    assert len(re.findall(r'data-qc-waiting-task="', page)) == 4

    assert adminctl("stats", "--json").json()["servers"] == {"up": 2, "busy_workers": 4, "concurrency": 4,
                                                             "waiting": 4}
    listing = adminctl("server", "ls")
    rows = [line.split() for line in listing.stdout.splitlines() if line.split()[1:2] in ([str(w.pid)]
                                                                                           for w in workers)]
    assert [row[2:5] for row in rows] == [["active", "2/2", "2"]] * 2, listing.stdout
    assert "Fetched ahead, waiting for a free slot" in listing.stdout
    data = adminctl("server", "ls", "--json").json()
    assert sorted((len(s["workers"]), len(s["waiting"])) for s in data) == [(2, 2), (2, 2)]

    for gate in gates:
        gate.touch()
    wait_until(lambda: len(task_events(log, "end")) == 10, 20, message="every task to finish")
    assert sorted(e["id"] for e in task_events(log, "end")) == sorted(ids)
