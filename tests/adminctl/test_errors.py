"""adminctl says what went wrong with Redis: "unreachable" (exit 2, with where it looked) only when
Redis does not answer; Redis full, a key of the wrong type and a page that does not exist are
operational errors (exit 1) with their own one-line message, never a traceback."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from queuecore import Client, ConnectionConfig
from tests.badinput.test_maxmemory import stay_full
from tests.conftest import PrivateRedis


def test_an_absurd_page_is_no_such_page_exit_1(adminctl, client: Client) -> None:
    client.enqueue("t.x", {"n": 1})
    for args in (("--page", str(10**30)), ("--page", str(10**30), "--json"), ("--page", "5", "--search", "n")):
        run = adminctl("task", "ls", "default", "pending", *args)
        assert run.code == 1, run
        assert run.stderr.startswith("error: no such page") and "Traceback" not in run.stderr, run
        assert "unreachable" not in run.stderr


def test_a_task_hash_of_the_wrong_type_names_the_key_and_the_task(adminctl, client: Client, redis_client: Any,
                                                                  key_prefix: str) -> None:
    bad = client.enqueue("t.x", {"n": 2}).id
    key = f"{key_prefix}:{{default}}:t:{bad}"
    redis_client.delete(key)
    redis_client.set(key, "garbage")
    for args in (("task", "ls", "default", "pending"), ("task", "inspect", "default", bad)):
        run = adminctl(*args)
        assert run.code == 1, run
        assert key in run.stderr and f"task {bad}" in run.stderr and "holds a string, expected a hash" in run.stderr
        assert "unreachable" not in run.stderr and "--redis-url" not in run.stderr


def test_one_corrupt_queue_does_not_hide_the_others_and_can_be_removed(adminctl, client: Client, redis_client: Any,
                                                                        key_prefix: str) -> None:
    """A state key of the wrong type in one queue made queue ls and stats fail (exit 1) for every queue,
    and queue remove --force refused the broken queue too: an operator could clear it only by hand."""
    client.enqueue("t.x", {"n": 1}, queue="good")
    client.enqueue("t.x", {"n": 2}, queue="broken")
    key = f"{key_prefix}:{{broken}}:pending"
    redis_client.delete(key)
    redis_client.set(key, "not a list")
    listed = adminctl("queue", "ls")
    assert listed.code == 0 and "good" in listed.stdout and "corrupt" in listed.stdout, listed
    assert f"queue broken: corrupt data in Redis: key {key} holds a string, expected a list" in listed.stderr
    as_json = {q["name"]: q for q in adminctl("queue", "ls", "--json").json()}
    assert as_json["good"]["pending"] == 1 and as_json["good"]["problem"] is None
    assert key in as_json["broken"]["problem"] and as_json["broken"]["size"] == 0
    stats = adminctl("stats")
    assert stats.code == 0 and "corrupt" in stats.stdout and key in stats.stdout.replace("\n", ""), stats
    assert adminctl("queue", "remove", "broken").code == 1  # without --force: the error, nothing removed
    assert redis_client.exists(key)
    removed = adminctl("queue", "remove", "broken", "--force", "--yes", "--json")
    assert removed.code == 0 and removed.json()["tasks_deleted"] == 1, removed  # it said 0: it could not count
    assert not redis_client.exists(key)
    assert [q["name"] for q in adminctl("queue", "ls", "--json").json()] == ["good"]


def test_redis_full_is_exit_1_saying_so_and_what_to_do(adminctl, private_redis: PrivateRedis) -> None:
    conn = ConnectionConfig(redis_url=private_redis.url, key_prefix="qct-fullcli")
    client = Client(connection=conn)
    r = redis.Redis.from_url(private_redis.url)
    try:
        client.enqueue("t.x", {"n": 1})
        r.config_set("maxmemory-policy", "noeviction")
        stay_full(r)
        run = adminctl("--redis-url", private_redis.url, "--prefix", "qct-fullcli", "queue", "pause", "default",
                       connect=False)
        assert run.code == 1, run
        assert run.stderr.startswith("error: Redis is full") and "make room" in run.stderr
        assert "unreachable" not in run.stderr
    finally:
        r.config_set("maxmemory", "0")
        client.close()
        r.close()


def test_unreachable_is_still_exit_2(adminctl) -> None:
    run = adminctl("--redis-url", "redis://127.0.0.1:1/0", "task", "ls", "default", "pending", connect=False)
    assert run.code == 2 and run.stderr.startswith("error: Redis is unreachable") and "--redis-url" in run.stderr


def test_a_cluster_url_with_no_cluster_behind_it_is_a_clear_error(adminctl, redis_url: str) -> None:
    """redis-py's cluster client reads the slot map when it is built, outside queuecore's error mapping:
    a cluster URL on a port where nothing listens, or on a server without cluster mode, raised a raw
    RedisClusterException (adminctl: "unexpected RedisClusterException", exit 1)."""
    from queuecore import BrokerError, RedisUnavailable
    from tests.conftest import free_port

    nobody = f"redis+cluster://127.0.0.1:{free_port()}"
    plain = "redis+cluster://" + redis_url.split("://", 1)[1].split("/", 1)[0]
    down = adminctl("--redis-url", nobody, "queue", "ls", connect=False)
    assert down.code == 2 and down.stderr.startswith("error: Redis is unreachable: "), down
    wrong = adminctl("--redis-url", plain, "--json", "stats", connect=False)
    assert wrong.code == 2 and "is not a Redis Cluster node (cluster mode is not enabled there)" in wrong.stderr
    assert "unexpected" not in down.stderr + wrong.stderr and "Traceback" not in down.stderr + wrong.stderr
    with pytest.raises(RedisUnavailable):
        Client(redis_url=nobody)
    with pytest.raises(BrokerError, match="not a Redis Cluster node"):
        Client(redis_url=plain)


def test_a_url_naming_the_wrong_kind_of_server_is_a_setting_error_in_one_line(adminctl, redis_url: str) -> None:
    """A sentinel URL on a plain Redis, or a database number that Redis does not have, exited 1 with
    Redis's own words ("unknown command 'SENTINEL'"); a sentinel URL where no sentinel answers printed
    redis-py's client repr, a line of about 1,400 characters. Each is a setting to correct: exit 2."""
    from queuecore import WrongServer
    from tests.conftest import free_port

    address = redis_url.split("://", 1)[1].split("/", 1)[0]
    not_sentinel = adminctl("--redis-url", f"redis+sentinel://{address}/mymaster", "queue", "ls", connect=False)
    assert not_sentinel.code == 2, not_sentinel
    assert "names a server that is not a sentinel" in not_sentinel.stderr, not_sentinel
    no_db = adminctl("--redis-url", f"redis://{address}/99", "queue", "ls", connect=False)
    assert no_db.code == 2 and "database number is beyond those this Redis has" in no_db.stderr, no_db
    nobody = adminctl("--redis-url", f"redis+sentinel://127.0.0.1:{free_port()}/mymaster", "queue", "ls",
                      connect=False)
    assert nobody.code == 2 and nobody.stderr.startswith("error: Redis is unreachable: No master found"), nobody
    assert len(nobody.stderr) < 300 and "ConnectionPool" not in nobody.stderr, nobody.stderr
    for run in (not_sentinel, no_db, nobody):
        assert len(run.stderr.strip().splitlines()) == 1 and "Traceback" not in run.stderr, run
    with pytest.raises(WrongServer, match="not a sentinel"):
        Client(redis_url=f"redis+sentinel://{address}/mymaster").enqueue("t.x", {})


def test_a_type_name_no_task_can_have_and_a_zero_pause_are_usage_errors(adminctl, client: Client) -> None:
    """``task ls --type 'bad type'`` and ``export --type`` listed nothing (exit 0), where ``type show``
    and ``enqueue`` refuse the name (exit 2); ``queue pause --for 0`` said "for_ is out of range"
    (exit 1) where ``--for -5`` is a usage error."""
    client.enqueue("t.x", queue="qs1")
    for args in (("task", "ls", "qs1", "pending", "--type", "bad type"),
                 ("task", "export", "qs1", "pending", "--type", "{x}")):
        run = adminctl(*args)
        assert run.code == 2 and "task type" in run.stderr and "Traceback" not in run.stderr, run
    listed = adminctl("task", "ls", "qs1", "pending", "--type", "t.x", "--json")
    assert listed.code == 0 and [t["type"] for t in listed.json()["tasks"]] == ["t.x"]
    zero = adminctl("queue", "pause", "qs1", "--for", "0")
    assert zero.code == 2 and "must be more than 0 seconds" in zero.stderr and "for_" not in zero.stderr, zero
    eons = adminctl("queue", "pause", "qs1", "--for", "400000000")  # over 10 years: a usage error too
    assert eons.code == 2 and "Invalid value for '--for'" in eons.stderr and "for_" not in eons.stderr, eons


def test_a_queue_removal_cut_off_by_ctrl_c_says_how_to_finish(adminctl, client: Client, monkeypatch) -> None:
    """A review: Ctrl-C during ``queue remove --force`` printed only "Aborted!" (exit 1) over a queue half
    removed; it says what happened and that the same command finishes it (exit 130)."""
    from queuecore import Inspector

    for n in range(3):
        client.enqueue("t.x", {"n": n}, queue="doomed")

    def cut_off(self: Inspector, *args: object, **kwargs: object) -> object:
        raise KeyboardInterrupt

    monkeypatch.setattr(Inspector, "_tasks_to_delete", cut_off)
    cut = adminctl("queue", "remove", "doomed", "--force", "--yes")
    assert cut.code == 130 and "partly removed" in cut.stderr and "run the same command again" in cut.stderr, cut
    monkeypatch.undo()
    assert adminctl("queue", "remove", "doomed", "--force", "--yes").code == 0
    assert "doomed" not in adminctl("queue", "ls").stdout
