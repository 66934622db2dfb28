"""``adminctl server quiet|stop``: one worker process told through Redis."""

from __future__ import annotations

import threading

from queuecore import Worker
from tests.conftest import FAST, wait_until


def test_quiet_and_stop_a_worker_by_id(adminctl, connection, registry, inspector) -> None:
    worker = Worker(connection=connection, registry=registry, **FAST)  # type: ignore[arg-type]
    runner = threading.Thread(target=worker.run, daemon=True)
    runner.start()
    try:
        wait_until(lambda: inspector.servers(), 10, message="the heartbeat")
        listed = adminctl("server", "ls", "--json").json()
        assert listed[0]["rss_bytes"] > 0
        quiet = adminctl("server", "quiet", worker.server_id)
        assert quiet.code == 0 and "it acts at its next heartbeat" in quiet.stderr
        wait_until(lambda: inspector.servers()[0].status == "quiet", 10, message="quiet")
        stop = adminctl("server", "stop", worker.server_id, "--json")
        assert stop.json() == {"server": worker.server_id, "command": "stop", "requested": True}
        runner.join(15)
        assert not runner.is_alive()
        unknown = adminctl("server", "stop", "nobody:1:x")
        assert unknown.code == 1 and "no live worker process 'nobody:1:x'" in unknown.stderr
    finally:
        worker.request_shutdown()
        runner.join(15)
