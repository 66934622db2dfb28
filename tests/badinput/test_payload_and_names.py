"""Payload size at the limit, and odd queue and type names."""

from __future__ import annotations

import pytest

from queuecore import Client, ConfigurationError, ConnectionConfig, InvalidPayload, task
from queuecore.core.keys import Keys
from queuecore.core.message import DEFAULT_MAX_PAYLOAD_BYTES
from tests.conftest import wait_until

OVERHEAD = len('{"s":""}')  # the JSON around the string


def payload_of(size: int) -> dict[str, str]:
    return {"s": "x" * (size - OVERHEAD)}


def test_payload_one_byte_under_and_at_the_limit_run_end_to_end(client: Client, inspector, make_worker,
                                                                registry) -> None:
    assert DEFAULT_MAX_PAYLOAD_BYTES == 512 * 1024

    @task(name="t.size", registry=registry)
    def size(s: str) -> int:
        return len(s)

    under = client.enqueue("t.size", payload_of(DEFAULT_MAX_PAYLOAD_BYTES - 1), retention=60)
    at = client.enqueue("t.size", payload_of(DEFAULT_MAX_PAYLOAD_BYTES), retention=60)
    make_worker()
    limit = DEFAULT_MAX_PAYLOAD_BYTES
    for info, expected in ((under, limit - 1 - OVERHEAD), (at, limit - OVERHEAD)):
        wait_until(lambda info=info: inspector.get_task("default", info.id).state == "completed", timeout=15,
                   message="the large task to complete")
        assert inspector.get_task("default", info.id).result == expected


def test_payload_one_byte_over_is_refused_with_nothing_written(client: Client, redis_client, connection) -> None:
    with pytest.raises(InvalidPayload, match=f"over the limit of {DEFAULT_MAX_PAYLOAD_BYTES} bytes"):
        client.enqueue("t.size", payload_of(DEFAULT_MAX_PAYLOAD_BYTES + 1))
    with pytest.raises(InvalidPayload):
        client.enqueue_many([("t.size", {}), ("t.size", payload_of(DEFAULT_MAX_PAYLOAD_BYTES + 1))])
    assert list(redis_client.scan_iter(match=f"{connection.key_prefix}:*")) == []


def test_configured_limit_counts_utf8_bytes(redis_url, key_prefix) -> None:
    conn = ConnectionConfig(redis_url=redis_url, key_prefix=key_prefix, max_payload_bytes=20)
    with Client(connection=conn) as c:
        c.enqueue("t.x", {"s": "é" * 6})  # 8 + 12 bytes = 20
        with pytest.raises(InvalidPayload):
            c.enqueue("t.x", {"s": "é" * 6 + "x"})


ODD_QUEUES = ["a", "a:b", "a:b:c", "b:a", "ünï", "日本", "x" * 200, "a.b-c_d", "t:a", "a:t:b"]


def test_odd_queue_names_keep_their_tasks_apart(client: Client, inspector, redis_client, connection) -> None:
    ids = {q: client.enqueue("t.odd", {"q": q}, queue=q).id for q in ODD_QUEUES}
    for q in ODD_QUEUES:
        page = inspector.list_tasks(q, "pending", page=1, size=50)
        assert [t.id for t in page.tasks] == [ids[q]], q
        assert inspector.get_task(q, ids[q]).payload == {"q": q}
    # Every key has exactly one hash tag, and it is its own queue's.
    for key in redis_client.scan_iter(match=f"{connection.key_prefix}:{{*"):
        assert key.count("{") == 1 and key.count("}") == 1, key
    # A queue's SCAN pattern does not reach into another queue's keys.
    for q in ODD_QUEUES:
        keys = list(redis_client.scan_iter(match=connection.keys.queue(q).all_pattern))
        assert keys and all(k.startswith(connection.keys.queue(q).base) for k in keys), q
    inspector.delete_all("a", "pending")
    assert inspector.queue_info("a:b").pending == 1


@pytest.mark.parametrize("name", ["a{b", "a}b", "{a}", "a b", "a\tb", "a\n", "x" * 201, "x" * 10_240, ""])
def test_bad_queue_names_are_refused(client: Client, name: str) -> None:
    with pytest.raises(ConfigurationError):
        client.enqueue("t.x", {}, queue=name)
    with pytest.raises(ConfigurationError):
        Keys("qc").queue(name)


@pytest.mark.parametrize("name", ["t{x}", "t x", "x" * 10_240, ""])
def test_bad_type_names_are_refused(client: Client, name: str) -> None:
    with pytest.raises(ConfigurationError):
        client.enqueue(name, {})


@pytest.mark.parametrize("name", ["t:x", "ünï.task", "x" * 200])
def test_odd_type_names_round_trip(client: Client, inspector, name: str) -> None:
    info = client.enqueue(name, {}, unique_for=60)
    assert inspector.get_task("default", info.id).type == name


HUGE = 10**5000  # past Python's 4,300-digit limit: its repr raises ValueError


@pytest.mark.parametrize("options", [{"max_retry": HUGE}, {"priority": -HUGE}, {"timeout": HUGE},
                                     {"process_at": HUGE}, {"retention": HUGE}, {"queue": HUGE},
                                     {"queue": "q" * 1_000_000}])
def test_a_huge_value_is_refused_with_a_short_message(client: Client, options: dict) -> None:
    """A review: a rejected value went into its error as repr(), which raises a bare ValueError for an
    integer over 4,300 digits (a traceback, not InvalidOption) and copied a megabyte name whole."""
    with pytest.raises(ConfigurationError) as refused:
        client.enqueue("t.x", {}, **options)
    assert len(str(refused.value)) < 500 and refused.value.field in (None, *options)
    with pytest.raises(ConfigurationError):
        client.enqueue(HUGE, {})


def test_huge_values_in_task_and_periodic_definitions_are_refused_with_short_messages(registry) -> None:
    """A review of the bounded errors: @task's and the periodic entries' own checks still used repr()."""
    from queuecore.core.periodic import parse_entries
    from queuecore.core.topology import parse_redis_url

    refusals = [lambda: task(name="t.huge", registry=registry, concurrency_limit=HUGE)(lambda: None),
                lambda: task(name="t.huge", registry=registry, retry_delay=HUGE)(lambda: None),
                lambda: parse_entries({"e": {"task": "t", "cron": HUGE}}),
                lambda: parse_entries({"e": {"task": "t", "every": 60, "missed": HUGE}}),
                lambda: parse_redis_url(HUGE)]
    for refused in refusals:
        with pytest.raises(ConfigurationError) as caught:
            refused()
        assert len(str(caught.value)) < 500
