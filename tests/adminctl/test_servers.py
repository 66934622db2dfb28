"""``adminctl server ls`` and ``worker ls`` against a running worker with a blocked task; ``task cancel``."""

from __future__ import annotations

import json
import os
import socket
import threading
import time

from queuecore import Client, ConnectionConfig, Inspector, current_task, task
from queuecore.core.clock import to_ms
from tests.adminctl.conftest import widest_line
from tests.conftest import wait_until

SERVER_KEYS = {"id", "host", "pid", "concurrency", "queues", "strict_priority", "started_at", "status",
               "heartbeat_at", "workers", "waiting", "task_types", "rss_bytes", "max_archive_size"}
WORKER_KEYS = {"server_id", "task_id", "queue", "type", "started_at", "deadline", "progress"}


def test_server_and_worker_ls_with_a_blocked_task(adminctl, client: Client, inspector: Inspector, registry,
                                                  make_worker) -> None:
    started, release = threading.Event(), threading.Event()

    @task(name="slow.blocking_report_generation", registry=registry)
    def slow(n: int) -> None:
        started.set()
        while not release.is_set():
            current_task().raise_if_cancelled()
            current_task().wait_cancelled(0.01)

    worker = make_worker(queues={"work": 3, "default": 1}, concurrency=4)
    try:
        blocked = slow.using(client=client, queue="work").enqueue(1)
        wait_until(started.is_set, message="the handler to start")
        wait_until(inspector.workers, message="the heartbeat to list the task")

        servers = adminctl("server", "ls")
        assert servers.code == 0
        assert widest_line(servers.stdout) <= 80
        host_row = next(line for line in servers.stdout.splitlines() if line.startswith(socket.gethostname()[:8]))
        assert str(os.getpid()) in host_row and "active" in host_row and "1/4" in host_row
        assert "work=3" in servers.stdout and "default=1" in servers.stdout
        assert "Running tasks" in servers.stdout and blocked.id in servers.stdout

        data = adminctl("server", "ls", "--json").json()
        (server,) = data
        assert set(server) == SERVER_KEYS
        assert (server["id"], server["pid"], server["concurrency"], server["queues"], server["status"]) == (
            worker.server_id, os.getpid(), 4, {"work": 3, "default": 1}, "active")
        assert server["task_types"] == {"slow.blocking_report_generation": {"params": ["n"], "required": ["n"],
                                                                            "var_keyword": False}}
        (running,) = server["workers"]
        assert set(running) == WORKER_KEYS and running["task_id"] == blocked.id

        workers = adminctl("worker", "ls")
        assert workers.code == 0 and widest_line(workers.stdout) <= 80
        header, _, row = workers.stdout.splitlines()
        assert header.split() == ["server", "queue", "type", "task", "id", "running"]
        assert blocked.id in row and "work" in row and "slow.blocking" in row
        assert f"{socket.gethostname()}:{os.getpid()}"[:10] in row
        (w,) = adminctl("worker", "ls", "--json").json()
        assert set(w) == WORKER_KEYS
        assert (w["task_id"], w["queue"], w["type"], w["server_id"]) == (
            blocked.id, "work", "slow.blocking_report_generation", worker.server_id)

        stats = adminctl("stats")
        assert "1 server up · 1/4 busy" in stats.stdout
        assert adminctl("stats", "--json").json()["servers"] == {"up": 1, "busy_workers": 1, "concurrency": 4,
                                                                  "waiting": 0}
        busy = adminctl("queue", "remove", "work", "--force", "--yes")
        assert busy.code == 1 and "active task" in busy.stderr and "work" in inspector.queues()

        cancelled = adminctl("task", "cancel", "work", blocked.id)
        assert cancelled.code == 0 and "cancel requested" in cancelled.stderr
        wait_until(lambda: inspector.get_task("work", blocked.id).state == "archived", message="the cancel")
        assert "cancel" in (inspector.get_task("work", blocked.id).last_error or "")
        wait_until(lambda: not inspector.workers(), message="the slot to be free")
        idle = adminctl("worker", "ls")
        assert idle.code == 0 and idle.stdout == "" and "no task is being processed" in idle.stderr
        assert adminctl("worker", "ls", "--json").json() == []
    finally:
        release.set()


def test_no_servers_and_stale_heartbeats_are_not_shown(adminctl, redis_client, connection: ConnectionConfig) -> None:
    empty = adminctl("server", "ls")
    assert empty.code == 0 and empty.stdout == "" and "no worker process is running" in empty.stderr
    now = time.time()
    keys = connection.keys
    for server_id, expires in (("h:1:live", now + 60), ("h:2:stale", now - 60)):
        redis_client.zadd(keys.servers, {server_id: to_ms(expires)})
        redis_client.set(keys.server(server_id), json.dumps({
            "id": server_id, "host": "h", "pid": int(server_id.split(":")[1]), "concurrency": 2,
            "queues": {"default": 1}, "strict_priority": True, "started_at": now - 7200, "status": "quiet",
            "heartbeat_at": now - 1, "workers": []}))
    run = adminctl("server", "ls")
    rows = run.stdout.splitlines()[2:]
    assert len(rows) == 1 and rows[0].split()[:4] == ["h", "1", "quiet", "0/2"]
    assert "(strict)" in rows[0] and "2h ago" in rows[0]
    assert [s["id"] for s in adminctl("server", "ls", "--json").json()] == ["h:1:live"]
