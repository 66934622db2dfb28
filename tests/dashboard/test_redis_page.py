"""The Redis page does not SCAN the keyspace on a visit: it counts our keys only when asked ("Count
keys") and shows that count, with its age, on later visits. Checked with the SCAN calls a private
Redis reports in INFO commandstats."""

from __future__ import annotations

import re
from typing import Any

import redis
from django.test import Client as DjangoClient

from queuecore import Client, ConnectionConfig
from tests.conftest import PrivateRedis
from tests.dashboard.conftest import HX


def scans(r: redis.Redis) -> int:
    return int(r.info("commandstats").get("cmdstat_scan", {}).get("calls", 0))


def test_a_visit_does_not_scan_and_the_count_is_made_on_demand(viewer: DjangoClient, settings: Any,
                                                               private_redis: PrivateRedis) -> None:
    conn = ConnectionConfig(redis_url=private_redis.url, key_prefix="qct-rp")
    client = Client(connection=conn)
    r = redis.Redis.from_url(private_redis.url)
    try:
        for n in range(3):
            client.enqueue("t.x", {"n": n})
        r.set("someone-else:key", "1")  # not ours: not counted
        ours = len(list(r.scan_iter(match="qct-rp:*")))
        settings.QUEUECORE = {"REDIS_URL": private_redis.url, "KEY_PREFIX": "qct-rp"}
        before = scans(r)
        page = viewer.get("/queues/redis/").content.decode()
        fragment = viewer.get("/queues/redis/", headers=HX).content.decode()
        assert scans(r) == before  # neither the page nor its refresh scanned
        for body in (page, fragment):
            assert 'data-qc-stat="keys">—<' in body and "not counted yet" in body and ">Count keys</button>" in body
        counted = viewer.get("/queues/redis/?count=1", headers=HX).content.decode()
        assert scans(r) > before
        assert f'data-qc-stat="keys">{ours}<' in counted and "counted <time" in counted
        after = scans(r)
        later = viewer.get("/queues/redis/").content.decode()
        assert scans(r) == after  # later visits show the count made, with its age, and do not scan
        assert f'data-qc-stat="keys">{ours}<' in later and ">Count again</button>" in later
        assert re.search(r'counted <time datetime="[^"]+" title="[^"]+">(now|\d+s ago)</time>', later)
    finally:
        client.close()
        r.close()


def test_counting_again_within_ten_seconds_shows_the_last_count_without_a_scan(
        viewer: DjangoClient, settings: Any, private_redis: PrivateRedis, monkeypatch: Any) -> None:
    """A review: every press of "Count keys" (any viewer, any number of times) SCANned the whole database."""
    import queuecore_dashboard.inspector

    r = redis.Redis.from_url(private_redis.url)
    try:
        settings.QUEUECORE = {"REDIS_URL": private_redis.url, "KEY_PREFIX": "qct-rc"}
        viewer.get("/queues/redis/?count=1", headers=HX)
        after_first = scans(r)
        r.set("qct-rc:new", "1")
        again = viewer.get("/queues/redis/?count=1", headers=HX).content.decode()
        assert scans(r) == after_first  # the count just made is shown again
        assert 'data-qc-stat="keys">0<' in again
        monkeypatch.setattr(queuecore_dashboard.inspector, "RECOUNT_AFTER", 0.0)  # as 10 s later
        later = viewer.get("/queues/redis/?count=1", headers=HX).content.decode()
        assert scans(r) > after_first and 'data-qc-stat="keys">1<' in later
    finally:
        r.close()
