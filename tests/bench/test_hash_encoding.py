"""bench/hash_encoding.py: one run per hash-max-listpack-value setting on a private server."""

from __future__ import annotations

import redis

from bench.common import PrivateRedis
from bench.hash_encoding import one_run


def test_a_longer_listpack_value_stores_each_pending_task_in_fewer_bytes() -> None:
    server = PrivateRedis("hash-test").start()
    try:
        default = one_run(server, "64", 500)
        longer = one_run(server, "512", 500)
        encoding = redis.Redis(port=server.port).config_get("hash-max-ziplist-value")
    finally:
        server.stop()
    assert encoding == {"hash-max-ziplist-value": "512"}
    assert 0 < longer[0] < default[0] * 0.9  # a listpack hash instead of a hashtable
    assert min(*default[1:], *longer[1:]) > 0  # every task enqueued and drained (the run waits for both)
