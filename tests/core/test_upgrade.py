"""Keys of no queue written by an earlier version (``<prefix>:queues`` ...) are moved under the
shared hash tag when a worker starts, merged with anything already written under the new names."""

from __future__ import annotations

import logging

import pytest

from queuecore.core.upgrade import move_legacy_global_keys


def test_a_starting_worker_moves_every_legacy_key_and_merges(make_worker, redis_client, connection,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    k, p = connection.keys, connection.keys.prefix
    redis_client.sadd(f"{p}:queues", "old-a", "old-b")
    redis_client.sadd(k.queues, "new-c")
    redis_client.zadd(f"{p}:servers", {"gone:1:x": 4_000_000_000_000})  # lapses in 2096
    # live-list lapse times far ahead: a starting worker's scheduler forgets entries whose time lapsed
    far = 4_000_000_000_000
    redis_client.zadd(f"{p}:periodic", {"nightly/default": far + 10, "both/default": far + 1})
    redis_client.zadd(k.periodic, {"both/default": far + 99})
    redis_client.hset(f"{p}:alerts", mapping={"lease": "w1", "a:x": "{}"})
    redis_client.hset(k.alerts, "lease", "w2")
    redis_client.rpush(f"{p}:audit", "older-1", "older-2")
    redis_client.rpush(k.audit, "newer")
    with caplog.at_level(logging.INFO, logger="queuecore.worker"):
        make_worker(queues="default")
    assert redis_client.smembers(k.queues) == {"old-a", "old-b", "new-c", "default"}
    assert redis_client.zscore(k.servers, "gone:1:x") == 4_000_000_000_000
    assert redis_client.zrange(k.periodic, 0, -1, withscores=True) == [("nightly/default", far + 10),
                                                                         ("both/default", far + 99)]
    assert redis_client.hgetall(k.alerts) == {"lease": "w2", "a:x": "{}"}  # what the new version wrote wins
    assert redis_client.lrange(k.audit, 0, -1) == ["newer", "older-1", "older-2"]  # newest first, still
    assert not any(redis_client.exists(old) for old, _ in k.legacy_globals())
    assert sum("upgrade: moved" in r.getMessage() for r in caplog.records) == 5


def test_moving_twice_changes_nothing_and_a_foreign_type_is_left_alone(redis_client, connection,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    k, p = connection.keys, connection.keys.prefix
    redis_client.sadd(f"{p}:queues", "a")
    redis_client.set(f"{p}:audit", "not ours")
    with caplog.at_level(logging.WARNING, logger="queuecore.worker"):
        assert move_legacy_global_keys(redis_client, k) == [f"{p}:queues"]
    assert move_legacy_global_keys(redis_client, k) == []
    assert redis_client.smembers(k.queues) == {"a"}
    assert redis_client.get(f"{p}:audit") == "not ours"
    assert any("left alone" in r.getMessage() for r in caplog.records)
