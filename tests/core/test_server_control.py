"""Operators quiet or stop one worker process through Redis (``Inspector.quiet_server``,
``stop_server``): the process takes the command with its next heartbeat; each request is audited.
Heartbeats also carry the process's memory."""

from __future__ import annotations

import logging
import threading

import pytest

from queuecore import Worker
from queuecore.core.errors import ServerNotFound
from tests.conftest import FAST, wait_until


def test_quiet_then_stop_one_worker(connection, registry, inspector, caplog: pytest.LogCaptureFixture) -> None:
    worker = Worker(connection=connection, registry=registry, **FAST)  # type: ignore[arg-type]
    exit_codes: list[int] = []
    runner = threading.Thread(target=lambda: exit_codes.append(worker.run()), daemon=True)
    with caplog.at_level(logging.WARNING, logger="queuecore.worker"):
        runner.start()
        server = wait_until(lambda: next(iter(inspector.servers()), None), 10, message="the heartbeat")
        assert server.id == worker.server_id and server.status == "active"  # type: ignore[union-attr]
        assert server.rss_bytes and server.rss_bytes > 10 * 2**20  # type: ignore[union-attr]  # a Python process
        ops = inspector.as_actor("ops:ann")
        ops.quiet_server(worker.server_id)
        wait_until(lambda: inspector.servers()[0].status == "quiet", 10, message="the worker to go quiet")
        assert runner.is_alive()
        ops.stop_server(worker.server_id)
        runner.join(15)
    assert not runner.is_alive() and exit_codes == [0]
    assert inspector.servers() == []  # a clean stop removes its heartbeat
    said = [r.getMessage() for r in caplog.records]
    assert any("ops:ann asked this worker to go quiet (through Redis)" in m for m in said)
    assert any("ops:ann asked this worker to stop (through Redis)" in m for m in said)
    assert [(e.action, e.actor, e.task_ids) for e in inspector.audit_log()[:2]] == [
        ("server.stop", "ops:ann", [worker.server_id]), ("server.quiet", "ops:ann", [worker.server_id])]
    with pytest.raises(ServerNotFound):
        inspector.stop_server(worker.server_id)  # gone


def test_a_control_key_of_another_type_is_dropped_not_fatal(scripts, redis_client, connection) -> None:
    control = connection.keys.server_control("host:1:abc")
    redis_client.hset(control, "x", "1")  # not what an Inspector writes
    assert scripts.heartbeat("host:1:abc", "{}", ttl_ms=60_000) == ""
    assert not redis_client.exists(control) and redis_client.get(connection.keys.server("host:1:abc")) == "{}"
    redis_client.set(control, "quiet ops:ann")
    assert scripts.heartbeat("host:1:abc", "{}", ttl_ms=60_000) == "quiet ops:ann"
    assert scripts.heartbeat("host:1:abc", "{}", ttl_ms=60_000) == ""  # taken once
