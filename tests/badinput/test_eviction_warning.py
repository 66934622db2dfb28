"""The worker itself (not only Django's deploy check) warns at start when Redis may evict task data."""

from __future__ import annotations

import logging

import pytest

from queuecore import ConnectionConfig, TaskRegistry, Worker
from tests.conftest import FAST


def start_and_stop(url: str, prefix: str = "qct-evict") -> str | None:
    worker = Worker(connection=ConnectionConfig(redis_url=url, key_prefix=prefix), registry=TaskRegistry(), **FAST)
    try:
        worker.start()
        return worker.warn_on_eviction_policy()
    finally:
        worker.force_stop()
        worker.shutdown(timeout=2)


def eviction_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "queuecore.worker" and r.levelno == logging.WARNING and "maxmemory-policy" in r.getMessage()]


def test_worker_warns_on_allkeys_lru(private_redis_factory, caplog) -> None:
    server = private_redis_factory("--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru")
    try:
        with caplog.at_level(logging.WARNING, logger="queuecore.worker"):
            assert start_and_stop(server.url) == "allkeys-lru"
        warnings = eviction_warnings(caplog)
        assert len(warnings) == 2  # at start, and our explicit second call
        assert "'allkeys-lru'" in warnings[0] and "noeviction" in warnings[0]
    finally:
        server.stop()


def test_worker_is_quiet_on_noeviction(private_redis_factory, caplog) -> None:
    server = private_redis_factory("--maxmemory-policy", "noeviction")
    try:
        with caplog.at_level(logging.WARNING, logger="queuecore.worker"):
            assert start_and_stop(server.url) == "noeviction"
        assert eviction_warnings(caplog) == []
    finally:
        server.stop()


def test_worker_tolerates_config_denied_by_acl(private_redis_factory, caplog) -> None:
    server = private_redis_factory("--maxmemory-policy", "allkeys-lru")
    try:
        import redis

        admin = redis.Redis(port=server.port)
        admin.acl_setuser("noconfig", enabled=True, passwords=["+pw"], keys=["qct-*"], channels=["*"],
                          commands=["+@all", "-config"])
        admin.close()
        url = f"redis://noconfig:pw@127.0.0.1:{server.port}/0"
        with caplog.at_level(logging.DEBUG, logger="queuecore.worker"):
            assert start_and_stop(url) is None
        assert eviction_warnings(caplog) == []
        assert any("eviction check skipped" in r.getMessage() for r in caplog.records)
        assert all("pw@" not in r.getMessage() for r in caplog.records)
    finally:
        server.stop()
