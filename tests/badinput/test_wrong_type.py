"""Keys of the wrong Redis type: every script refuses with ``WrongKeyType`` before writing anything.

A Lua error midway through a script is not rolled back, so each script checks the TYPE of its
KEYS (and of the task hashes and unique locks it derives) first. Each case seeds a full queue
state, replaces one key with a value of another type, runs the wrapper, and compares a DUMP of
every key of the namespace before and after: byte for byte unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import redis

from queuecore import Client, Inspector, WrongKeyType
from queuecore.core.errors import BrokerError
from queuecore.core.keys import Keys, QueueKeys
from queuecore.core.scripts import DoneItem, EnqueueItem, Scripts
from tests.helpers.state import EVERY, make_msg, seed_task

NOW = 1_800_000_000_000
LEASE_UNTIL = NOW + 30_000
DAY, MINUTE = "2027-01-15", "2027-01-15T08:00"


def seed_everything(r: redis.Redis, q: QueueKeys) -> None:
    """Tasks in every state, so each script has work to do (and would write) if it were not refused."""
    for task_id in ("a1", "a2"):
        seed_task(r, q, task_id, "active", score=NOW - 1, lease=3, started_at=NOW - 5000)
    for task_id in ("p1", "p2"):
        seed_task(r, q, task_id, "pending", pending_since=NOW - 10)
    seed_task(r, q, "s1", "scheduled", score=NOW - 5)
    seed_task(r, q, "r1", "retry", score=NOW - 5, retried=1)
    seed_task(r, q, "x1", "archived", score=1)
    seed_task(r, q, "c1", "completed", score=NOW - 1)
    r.set(q.unique("test.task", "d1"), "u1")
    seed_task(r, q, "u1", "scheduled", score=NOW + 10**9, unique=q.unique("test.task", "d1"))
    r.hset(q.stats, mapping={"processed": 5, "failed": 1})


def snapshot(raw: redis.Redis, prefix: str) -> dict[bytes, tuple[bytes | None, int]]:
    """Every key under ``prefix`` with its DUMP and whether it has a TTL."""
    out = {}
    for key in raw.scan_iter(match=f"{prefix}:*", count=1000):
        out[key] = (raw.dump(key), raw.pttl(key) > 0)
    return out


def make_wrong(r: redis.Redis, key: str) -> None:
    """Replace ``key`` with a value of another type: a STRING, or a LIST where a STRING belongs."""
    kind = r.type(key)
    r.delete(key)
    if kind == "string" or ":unique:" in key:
        r.rpush(key, "not-a-lock")
    else:
        r.set(key, "garbage")


@dataclass(frozen=True)
class Case:
    name: str
    wrong: Callable[[QueueKeys], str]  # which key gets the wrong type
    call: Callable[[Scripts, QueueKeys], Any]


def _enqueue(s: Scripts, q: QueueKeys) -> Any:
    items = [EnqueueItem("n1", make_msg("n1", q.queue), check_id=False),
             EnqueueItem("n2", make_msg("n2", q.queue), process_at_ms=NOW + 5, check_id=False),
             EnqueueItem("n3", make_msg("n3", q.queue), unique_key=q.unique("test.task", "d3"), unique_ttl_ms=9000)]
    return s.enqueue_many(q, items, now_ms=NOW)


def _enqueue_existing(s: Scripts, q: QueueKeys) -> Any:
    items = [EnqueueItem("n1", make_msg("n1", q.queue)), EnqueueItem("p1", make_msg("p1", q.queue))]
    return s.enqueue_many(q, items, now_ms=NOW)


def _done(s: Scripts, q: QueueKeys) -> Any:
    items = [DoneItem("a1", 3, 60_000, "1"), DoneItem("a2", 3, 0, "2", unique_key=q.unique("test.task", "d1"))]
    return s.done_many(q, items, now_ms=NOW, day=DAY, minute=MINUTE)


CASES = [
    Case("enqueue/pending", lambda q: q.pending, _enqueue),
    Case("enqueue/scheduled", lambda q: q.scheduled, _enqueue),
    Case("enqueue/task-hash", lambda q: q.task("n2"), _enqueue),
    Case("enqueue/existing-id", lambda q: q.task("p1"), _enqueue_existing),
    Case("enqueue/unique-lock", lambda q: q.unique("test.task", "d3"), _enqueue),
    Case("dequeue/pending", lambda q: q.pending, lambda s, q: s.dequeue(q, now_ms=NOW, lease_until_ms=LEASE_UNTIL,
                                                                         count=5)),
    Case("dequeue/active", lambda q: q.active, lambda s, q: s.dequeue(q, now_ms=NOW, lease_until_ms=LEASE_UNTIL,
                                                                       count=5)),
    Case("dequeue/task-hash", lambda q: q.task("p2"),
         lambda s, q: s.dequeue(q, now_ms=NOW, lease_until_ms=LEASE_UNTIL, count=5)),
    Case("done/active", lambda q: q.active, _done),
    Case("done/completed", lambda q: q.completed, _done),
    Case("done/stats", lambda q: q.stats, _done),
    Case("done/second-task-hash", lambda q: q.task("a2"), _done),
    Case("done/unique-lock", lambda q: q.unique("test.task", "d1"), _done),
    Case("retry/task-hash", lambda q: q.task("a1"),
         lambda s, q: s.retry(q, "a1", 3, now_ms=NOW, retry_at_ms=NOW + 1, error="e", day=DAY, minute=MINUTE)),
    Case("retry/retry", lambda q: q.retry,
         lambda s, q: s.retry(q, "a1", 3, now_ms=NOW, retry_at_ms=NOW + 1, error="e", day=DAY, minute=MINUTE)),
    Case("retry/stats", lambda q: q.stats,
         lambda s, q: s.retry(q, "a1", 3, now_ms=NOW, retry_at_ms=NOW + 1, error="e", day=DAY, minute=MINUTE)),
    Case("archive/archived", lambda q: q.archived,
         lambda s, q: s.archive(q, "a1", 3, now_ms=NOW, error="e", day=DAY, minute=MINUTE, max_archive_size=1,
                                archive_cutoff_ms=NOW)),
    Case("archive/stats", lambda q: q.stats,
         lambda s, q: s.archive(q, "a1", 3, now_ms=NOW, error="e", day=DAY, minute=MINUTE, max_archive_size=1,
                                archive_cutoff_ms=NOW)),
    Case("requeue/pending", lambda q: q.pending, lambda s, q: s.requeue(q, "a1", 3, now_ms=NOW)),
    Case("requeue/active", lambda q: q.active, lambda s, q: s.requeue(q, "a1", 3, now_ms=NOW)),
    Case("extend_lease/second-task-hash", lambda q: q.task("a2"),
         lambda s, q: s.extend_lease(q, [("a1", 3), ("a2", 3)], lease_until_ms=LEASE_UNTIL)),
    Case("extend_lease/active", lambda q: q.active,
         lambda s, q: s.extend_lease(q, [("a1", 3)], lease_until_ms=LEASE_UNTIL)),
    Case("forward/pending", lambda q: q.pending, lambda s, q: s.forward(q, "retry", now_ms=NOW, limit=10)),
    Case("recover/archived", lambda q: q.archived,
         lambda s, q: s.recover(q, now_ms=NOW, limit=10, day=DAY, minute=MINUTE)),
    Case("queue_metrics/pending", lambda q: q.pending, lambda s, q: s.queue_metrics(q)),
    Case("queue_metrics/type-stats", lambda q: q.type_stats, lambda s, q: s.queue_metrics(q)),
    Case("janitor/archived", lambda q: q.archived,
         lambda s, q: s.janitor(q, now_ms=NOW, archive_cutoff_ms=NOW, max_archive_size=10_000, limit=10)),
    Case("janitor/completed", lambda q: q.completed,
         lambda s, q: s.janitor(q, now_ms=NOW, archive_cutoff_ms=NOW, max_archive_size=10_000, limit=10)),
    Case("admin_run_task/pending", lambda q: q.pending, lambda s, q: s.admin_run_task(q, "r1", now_ms=NOW)),
    Case("admin_run_task/task-hash", lambda q: q.task("r1"), lambda s, q: s.admin_run_task(q, "r1", now_ms=NOW)),
    Case("admin_archive_task/archived", lambda q: q.archived,
         lambda s, q: s.admin_archive_task(q, "p1", now_ms=NOW)),
    Case("bulk_snapshot/pending", lambda q: q.pending,
         lambda s, q: s.bulk_snapshot(q, "pending", "job-1", ttl_ms=60_000)),
    Case("bulk_snapshot/scheduled", lambda q: q.scheduled,
         lambda s, q: s.bulk_snapshot(q, "scheduled", "job-1", ttl_ms=60_000)),
    Case("admin_pending_many/pending", lambda q: q.pending,
         lambda s, q: s.admin_pending_many(q, "archive", [("p1", 0)], now_ms=NOW, slack=10)),
    Case("admin_pending_many/archived", lambda q: q.archived,
         lambda s, q: s.admin_pending_many(q, "archive", [("p1", 0)], now_ms=NOW, slack=10)),
    Case("admin_pending_many/task-hash", lambda q: q.task("p1"),
         lambda s, q: s.admin_pending_many(q, "delete", [("p1", 0)], now_ms=NOW, slack=10)),
    Case("admin_pending_many/unique-lock", lambda q: q.unique("test.task", "d1"),
         lambda s, q: s.admin_pending_many(q, "delete", [("u1", 0)], now_ms=NOW, slack=10)),
    Case("admin_delete_task/completed", lambda q: q.completed, lambda s, q: s.admin_delete_task(q, "p1")),
    Case("admin_delete_task/unique-lock", lambda q: q.unique("test.task", "d1"),
         lambda s, q: s.admin_delete_task(q, "u1")),
    Case("admin_cancel_task/task-hash", lambda q: q.task("a1"), lambda s, q: s.admin_cancel_task(q, "a1")),
    Case("admin_run_all/pending", lambda q: q.pending,
         lambda s, q: s.admin_run_all(q, "archived", now_ms=NOW, limit=10, bound=EVERY)),
    Case("admin_run_all/task-hash", lambda q: q.task("x1"),
         lambda s, q: s.admin_run_all(q, "archived", now_ms=NOW, limit=10, bound=EVERY)),
    Case("admin_archive_all/archived", lambda q: q.archived,
         lambda s, q: s.admin_archive_all(q, "pending", now_ms=NOW, limit=10, bound=EVERY)),
    Case("admin_archive_all/task-hash", lambda q: q.task("p2"),
         lambda s, q: s.admin_archive_all(q, "pending", now_ms=NOW, limit=10, bound=EVERY)),
    Case("admin_delete_all/task-hash", lambda q: q.task("p2"),
         lambda s, q: s.admin_delete_all(q, "pending", limit=10, bound=EVERY)),
    Case("admin_delete_all/unique-lock", lambda q: q.unique("test.task", "d1"),
         lambda s, q: s.admin_delete_all(q, "scheduled", limit=10, bound=EVERY)),
    Case("heartbeat_index/servers", lambda q: Keys(q.prefix).servers,
         lambda s, q: s.heartbeat_index("h:1:x", expires_ms=NOW + 1, now_ms=NOW, queues=["a"])),
    Case("heartbeat_index/queues", lambda q: Keys(q.prefix).queues,
         lambda s, q: s.heartbeat_index("h:1:x", expires_ms=NOW + 1, now_ms=NOW, queues=["a"])),
    Case("audit/audit", lambda q: Keys(q.prefix).audit, lambda s, q: s.audit('{"action": "x"}', keep=10)),
    Case("periodic_sync/entry", lambda q: q.periodic("e"),
         lambda s, q: s.periodic_sync(q, "e", now_ms=NOW, definition="{}", next_ms=NOW)),
    *[Case(f"periodic_fire/{what}", key, lambda s, q: s.periodic_fire(
        q, "e", now_ms=NOW, fire_ms=NOW, mark_ms=NOW, kind="schedule", task_id="p1", msg="{}", next_ms=NOW))
      for what, key in (("entry", lambda q: q.periodic("e")), ("fires", lambda q: q.periodic_fires("e")),
                        ("pending", lambda q: q.pending), ("task-hash", lambda q: q.task("p1")))],
    Case("periodic_forget/entry", lambda q: q.periodic("e"),
         lambda s, q: s.periodic_forget(q, "e", declared_before_ms=NOW)),
    Case("periodic_forget/fires", lambda q: q.periodic_fires("e"),
         lambda s, q: s.periodic_forget(q, "e", declared_before_ms=NOW)),
    Case("admin_periodic_pause/entry", lambda q: q.periodic("e"),
         lambda s, q: s.admin_periodic_pause(q, "e", pause=True, actor="ops", now_ms=NOW)),
    Case("periodic_register/index", lambda q: Keys(q.prefix).periodic,
         lambda s, q: s.periodic_register(["e/default"], lapsed_before_ms=NOW, until_ms=NOW + 1)),
    Case("alerts_apply/alerts", lambda q: Keys(q.prefix).alerts,
         lambda s, q: s.alerts_apply("w", now_ms=NOW, lease_until_ms=NOW + 1, fire=[("r/q", "{}")])),
    *[Case(f"bulk_job_create/{name}", key, lambda s, q: s.bulk_job_create(
        "j1", now_ms=NOW, max_open=5, keep=10, fields={"action": "delete", "status": "queued"}))
      for name, key in (("job", lambda q: Keys(q.prefix).bulk_job("j1")),
                        ("open", lambda q: Keys(q.prefix).open_bulk_jobs),
                        ("index", lambda q: Keys(q.prefix).bulk_jobs))],
    *[Case(f"bulk_job_step/{name}", key, lambda s, q: s.bulk_job_step(
        "j1", "me", now_ms=NOW, lease_until_ms=NOW + 1, finish_ttl_ms=0, reset_targets=True, fields={"done": 1},
        targets=["default p1"]))
      for name, key in (("job", lambda q: Keys(q.prefix).bulk_job("j1")),
                        ("open", lambda q: Keys(q.prefix).open_bulk_jobs),
                        ("targets", lambda q: Keys(q.prefix).bulk_job_targets("j1")))],
    Case("result/task-hash", lambda q: q.task("p1"), lambda s, q: s.result(q, "p1", watch=True)),
    # (a wake list of another type is left as it is, and costs a waiter one chunk: tests/core/test_results.py)
]

# Flow control (flow.py): parking, waking, the limit scripts (keys tagged {lim:<type>}).
LIMIT = "test.task"


def _lim(q: QueueKeys) -> Any:
    return Keys(q.prefix).limit(LIMIT)


CASES += [
    Case("park/task-hash", lambda q: q.task("a1"),
         lambda s, q: s.park(q, "a1", 3, now_ms=NOW, due_ms=NOW + 5, snooze=True)),
    Case("park/active", lambda q: q.active, lambda s, q: s.park(q, "a1", 3, now_ms=NOW, due_ms=NOW + 5, snooze=True)),
    Case("park/scheduled", lambda q: q.scheduled,
         lambda s, q: s.park(q, "a1", 3, now_ms=NOW, due_ms=NOW + 5, snooze=False, waiting="limit")),
    Case("limit_wake/scheduled", lambda q: q.scheduled, lambda s, q: s.limit_wake(q, ["s1"], now_ms=NOW)),
    Case("limit_wake/pending", lambda q: q.pending, lambda s, q: s.limit_wake(q, ["s1"], now_ms=NOW)),
    Case("limit_acquire/running", lambda q: _lim(q).running(),
         lambda s, q: s.limit_acquire(_lim(q), "default a1", key="", now_ms=NOW, expires_ms=NOW + 1000,
                                      concurrency=1, rate=1, window_ms=1000)),
    Case("limit_acquire/cursor", lambda q: _lim(q).cursor,
         lambda s, q: s.limit_acquire(_lim(q), "default a1", key="", now_ms=NOW, expires_ms=NOW + 1000,
                                      concurrency=1, rate=1, window_ms=1000)),
    Case("limit_wait/waiting", lambda q: _lim(q).waiting(),
         lambda s, q: s.limit_wait(_lim(q), "default a1", key="", now_ms=NOW, concurrency=1)),
    Case("limit_release/running", lambda q: _lim(q).running(),
         lambda s, q: s.limit_release(_lim(q), ["default a1"], key="", now_ms=NOW, concurrency=1)),
    Case("limit_extend/running", lambda q: _lim(q).running(),
         lambda s, q: s.limit_extend(_lim(q), ["default a1"], key="", expires_ms=NOW + 1000)),
]


@pytest.fixture
def raw(redis_url: str) -> redis.Redis:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_script_refuses_wrong_type_and_writes_nothing(case: Case, redis_client, raw, scripts: Scripts,
                                                      connection) -> None:
    q = connection.keys.queue("default")
    seed_everything(redis_client, q)
    key = case.wrong(q)
    make_wrong(redis_client, key)
    before = snapshot(raw, connection.key_prefix)
    with pytest.raises(WrongKeyType) as caught:
        case.call(scripts, q)
    assert key in str(caught.value)
    assert "nothing was written" in str(caught.value)
    assert isinstance(caught.value, BrokerError)
    assert snapshot(raw, connection.key_prefix) == before


def test_every_script_has_a_wrong_type_case() -> None:
    covered = {c.name.split("/")[0] for c in CASES}
    from queuecore.core.scripts import SCRIPT_NAMES

    # repair.lua belongs to the recovery work; heartbeat.lua replaces the process's own key whatever
    # it holds (its first write is a DEL), so it has nothing to refuse.
    # admin_pause.lua's refusal (a paused key that is no STRING) is in tests/core/test_timed_pause.py:
    # make_wrong turns a missing key into a STRING, the very type it wants.
    assert set(SCRIPT_NAMES) - covered <= {"repair", "heartbeat", "admin_pause"}


@pytest.mark.parametrize("registered", [False, True], ids=["pipeline", "single-call"])
def test_client_enqueue_maps_wrong_type(registered: bool, client: Client, redis_client, connection) -> None:
    """The first enqueue to a queue registers it in the same pipeline; later ones are one script call."""
    q = connection.keys.queue("default")
    if registered:
        client.enqueue("t.x", {}, process_in=60)
    before = {k: redis_client.type(k) for k in redis_client.scan_iter(match=f"{connection.key_prefix}:*")}
    redis_client.set(q.pending, "garbage")
    with pytest.raises(WrongKeyType, match="pending holds a string, expected a list"):
        client.enqueue("t.x", {})
    assert redis_client.get(q.pending) == "garbage"
    after = {k: redis_client.type(k) for k in redis_client.scan_iter(match=f"{connection.key_prefix}:*")}
    assert after == {**before, q.pending: "string"} | ({connection.keys.queues: "set"} if not registered else {})


def test_inspector_actions_map_wrong_type(client: Client, inspector: Inspector, redis_client, connection) -> None:
    info = client.enqueue("t.x", {}, process_in=60)
    q = connection.keys.queue("default")
    redis_client.set(q.pending, "garbage")
    with pytest.raises(WrongKeyType):
        inspector.run_task("default", info.id)
    assert inspector.get_task("default", info.id).state == "scheduled"


def test_recover_skips_a_task_key_of_another_type_and_recovers_the_rest(redis_client, scripts: Scripts,
                                                                          key_prefix) -> None:
    """One foreign key must not block recovery of a whole queue: its id leaves active as an orphan,
    the key itself is never written, and the other expired tasks are recovered."""
    q = scripts.keys.queue("default")
    seed_task(redis_client, q, "good", "active", score=NOW - 1, lease=3, started_at=NOW - 5000)
    redis_client.zadd(q.active, {"bad": NOW - 2})
    redis_client.set(q.task("bad"), "not a hash")
    before = redis_client.dump(q.task("bad"))
    assert scripts.recover(q, now_ms=NOW, limit=10, day=DAY, minute=MINUTE).counts == (1, 0, 1)
    assert redis_client.dump(q.task("bad")) == before
    assert redis_client.zcard(q.active) == 0
    assert redis_client.lrange(q.pending, 0, -1) == ["good"]


def test_forward_skips_a_task_key_of_another_type_and_moves_the_rest(redis_client, scripts: Scripts) -> None:
    """One foreign key among due tasks must not hold back the others: its id leaves the zset, the key
    itself is never written, and the other due tasks go to pending."""
    q = scripts.keys.queue("default")
    seed_task(redis_client, q, "early", "scheduled", score=NOW - 3)
    redis_client.zadd(q.scheduled, {"bad": NOW - 2})
    redis_client.set(q.task("bad"), "not a hash")
    seed_task(redis_client, q, "late", "scheduled", score=NOW - 1)
    before = redis_client.dump(q.task("bad"))
    assert scripts.forward(q, "scheduled", now_ms=NOW, limit=10) == (3, None)
    assert redis_client.dump(q.task("bad")) == before
    assert redis_client.zcard(q.scheduled) == 0
    assert sorted(redis_client.lrange(q.pending, 0, -1)) == ["early", "late"]
    assert redis_client.hget(q.task("late"), "state") == "pending"
