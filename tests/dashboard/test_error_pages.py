"""The dashboard says what went wrong with Redis, not "unreachable" for everything: Redis full
(503, what to do), a key of the wrong type (500, the key and the task named), no such page (404),
and unreachable (503) only when Redis does not answer."""

from __future__ import annotations

from typing import Any

import redis
from django.test import Client as DjangoClient

from queuecore import Client, ConnectionConfig
from tests.badinput.test_maxmemory import stay_full
from tests.conftest import PrivateRedis
from tests.dashboard.conftest import HX


def html(response: Any) -> str:
    return response.content.decode()


def test_redis_full_is_a_503_saying_redis_is_full_and_what_to_do(operator: DjangoClient, settings: Any,
                                                                   private_redis: PrivateRedis) -> None:
    conn = ConnectionConfig(redis_url=private_redis.url, key_prefix="qct-full")
    client = Client(connection=conn)
    r = redis.Redis.from_url(private_redis.url)
    try:
        client.enqueue("t.x", {"n": 1})
        settings.QUEUECORE = {"REDIS_URL": private_redis.url, "KEY_PREFIX": "qct-full"}
        assert operator.get("/queues/default/pending/").status_code == 200
        r.config_set("maxmemory-policy", "noeviction")
        stay_full(r)
        refused = operator.post("/queues/default/pause/")
        body = html(refused)
        assert refused.status_code == 503
        assert "Redis is full" in body and "maxmemory" in body and "delete archived or completed tasks" in body
        assert "unreachable" not in body
        assert not r.exists(conn.keys.queue("default").paused)  # nothing was written
        # An htmx action gets the same status, and the line dashboard.js shows in its banner
        banner = operator.post("/queues/default/pause/", headers=HX)
        assert banner.status_code == 503 and banner["X-Qc-Error"].startswith("Redis is full (maxmemory)")
        assert operator.get("/queues/default/pending/").status_code == 200  # reads still work
    finally:
        r.config_set("maxmemory", "0")
        client.close()
        r.close()


def test_a_task_hash_of_the_wrong_type_is_a_500_naming_the_key_and_the_task(viewer: DjangoClient, client: Client,
                                                                            redis_client: Any,
                                                                            key_prefix: str) -> None:
    good = client.enqueue("t.x", {"n": 1}).id
    bad = client.enqueue("t.x", {"n": 2}).id
    key = f"{key_prefix}:{{default}}:t:{bad}"
    redis_client.delete(key)
    redis_client.set(key, "garbage")
    for url in ("/queues/default/pending/", f"/queues/default/tasks/{bad}/"):
        r = viewer.get(url)
        body = html(r)
        assert r.status_code == 500, url
        assert "Corrupt data in Redis" in body and key in body and f"task {bad}" in body, url
        assert "holds a string, expected a hash" in body and "unreachable" not in body
        assert r["X-Qc-Error"].startswith("Corrupt data in Redis: ") and key in r["X-Qc-Error"]
    assert viewer.get(f"/queues/default/tasks/{good}/").status_code == 200


def test_a_state_key_of_the_wrong_type_is_named_on_the_list_and_the_overview(viewer: DjangoClient, client: Client,
                                                                            redis_client: Any,
                                                                            key_prefix: str) -> None:
    client.enqueue("t.x", {"n": 1})
    client.enqueue("t.x", {"n": 2}, queue="other")
    key = f"{key_prefix}:{{default}}:retry"
    redis_client.set(key, "not a zset")
    r = viewer.get("/queues/default/retry/")
    assert r.status_code == 500
    assert key in html(r) and "holds a string, expected a zset" in html(r)
    # The overview lists the other queues with their figures, and this one as corrupt, naming the key
    # (it was a 500 for every queue, as were adminctl queue ls and stats)
    overview = viewer.get("/queues/")
    assert overview.status_code == 200
    body = html(overview)
    assert key in body and "holds a string, expected a zset" in body and ">corrupt<" in body
    assert 'data-qc-queue="other"' in body


def test_pages_that_do_not_exist_are_404_no_such_page(viewer: DjangoClient, client: Client, settings: Any) -> None:
    settings.QUEUECORE = {**settings.QUEUECORE, "DASHBOARD": {"POLL_INTERVAL": 2, "PAGE_SIZE": 2}}
    for n in range(5):
        client.enqueue("x", {"n": n})
    assert viewer.get("/queues/default/pending/?page=3").status_code == 200
    for page in ("9", "1" + "0" * 29, "0", "-1", "nonsense"):
        r = viewer.get(f"/queues/default/pending/?page={page}")
        assert r.status_code == 404, page
        assert "No such page" in html(r) and "unreachable" not in html(r), page
    filtered = viewer.get("/queues/default/pending/?search=%22n%22&page=" + "9" * 30)
    assert filtered.status_code == 404
    # A polling table whose page emptied under it keeps its notice (not an error page)
    poll = viewer.get("/queues/default/pending/?page=9", headers=HX)
    assert poll.status_code == 200 and "Page 9 is past the end" in html(poll)
    assert viewer.get("/queues/audit/?page=" + "1" * 30).status_code == 404


def test_a_server_that_does_not_speak_redis_is_503_unreachable(viewer: DjangoClient, settings: Any, key_prefix: str,
                                                                not_redis: Any) -> None:
    """A URL whose port belongs to something else: the friendly 503 of a Redis that is down, saying what
    answered (not a 500 with redis-py's protocol error)."""
    settings.QUEUECORE = {"REDIS_URL": not_redis.url, "KEY_PREFIX": key_prefix}
    for path in ("/queues/", "/queues/default/pending/", "/queues/workers/"):
        r = viewer.get(path)
        assert r.status_code == 503, path
        assert "Redis is unreachable" in html(r) and "does not answer in Redis&#x27;s protocol" in html(r), path
    assert viewer.get("/queues/_/stats/", headers=HX)["X-Qc-Error"].startswith("Redis is unreachable.")


def test_unreachable_stays_503_unreachable(viewer: DjangoClient, settings: Any, key_prefix: str) -> None:
    settings.QUEUECORE = {"REDIS_URL": "redis://127.0.0.1:1/0", "KEY_PREFIX": key_prefix}
    r = viewer.get("/queues/default/pending/")
    assert r.status_code == 503 and "Redis is unreachable" in html(r) and "Redis is full" not in html(r)
    assert viewer.get("/queues/_/stats/", headers=HX)["X-Qc-Error"].startswith("Redis is unreachable.")


def test_a_page_that_finds_redis_silent_waits_out_one_timeout_not_two(viewer: DjangoClient, settings: Any,
                                                                      key_prefix: str, silent_redis: Any) -> None:
    """A Redis that takes connections but never answers (a hung host, CLIENT PAUSE): each page and each
    refresh gives its 503 after one socket timeout. The error page's strip of open bulk jobs used to
    read Redis again, on a new connection, and wait out a second timeout (10 s with the default 5 s)."""
    settings.QUEUECORE = {"REDIS_URL": f"{silent_redis.url}?socket_timeout=0.3&socket_connect_timeout=0.3",
                          "KEY_PREFIX": key_prefix}
    for path, headers in (("/queues/", {}), ("/queues/_/stats/", HX), ("/queues/_/alerts/", HX),
                          ("/queues/workers/", {}), ("/queues/default/pending/", {})):
        before = len(silent_redis.connections)
        r = viewer.get(path, headers=headers)
        assert r.status_code == 503 and "Redis is unreachable" in html(r), path
        assert len(silent_redis.connections) - before == 1, f"{path}: one connection, one timeout"


def test_an_htmx_request_refused_as_bad_gets_the_reason_in_its_banner(viewer: DjangoClient, client: Client) -> None:
    """htmx does not swap an error response in: the banner line is all the operator sees, and a typo in
    the filter box said only "Bad request", not what was wrong with it."""
    client.enqueue("t.x", {"n": 1})
    broken = viewer.get("/queues/default/pending/", {"search": 'error:"never closed'}, headers=HX)
    assert broken.status_code == 400
    assert broken["X-Qc-Error"].startswith("Bad request: ") and "quote is not closed" in broken["X-Qc-Error"]
