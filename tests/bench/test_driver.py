"""The benchmark driver's own calls to its private servers."""

from __future__ import annotations

import time

import pytest
import redis

from bench.common import PrivateRedis
from bench.driver import Driver

# Longer than redis-py 8's default wait for a reply (5 s): what a FLUSHDB of a 1,000,000-task
# backlog took on a slow machine (the full run of 2026-11-27 20:38 lost rq-simple's backlog to it).
SLOW_REPLY_MS = 6_000


@pytest.fixture
def servers():
    broker, counter = PrivateRedis("broker").start(), PrivateRedis("counter").start()
    try:
        yield broker, counter
    finally:
        broker.stop()
        counter.stop()


@pytest.mark.slow
def test_a_flush_waits_for_a_server_slower_than_redis_pys_default(servers, tmp_path):
    broker, counter = servers
    driver = Driver({"lib": "queuecore", "broker_url": broker.url, "counter_url": counter.url, "concurrency": 2,
                     "log_dir": str(tmp_path)})
    other = redis.Redis(port=broker.port)
    other.set("left-over", 1)
    other.client_pause(SLOW_REPLY_MS)  # every client's next command waits this long, the driver's FLUSHDB too
    started = time.monotonic()

    driver.flush()

    assert time.monotonic() - started >= SLOW_REPLY_MS / 1000 - 0.5  # it waited the pause out
    assert other.dbsize() == 0
    other.close()
