"""Reads of many large tasks (lists, filtered scans, exports, failure groups, the overdue alert rule) go
in pipelines whose replies Redis holds for one client at a time: each pipeline is bounded (about 2 MiB
of task data, a larger task alone), and only the fields a read needs are asked for. The results are
those of one whole-task read per task, in the same order."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis

from queuecore.core import export
from queuecore.core.alerts import RuleEvaluator, parse_rules
from queuecore.core.clock import FakeClock, to_ms
from queuecore.core.config import ConnectionConfig
from queuecore.core.failures import fingerprint
from queuecore.core.inspector import Inspector, task_info
from queuecore.core.keys import QueueKeys
from queuecore.core.limits import CALL_BYTES
from queuecore.core.message import TaskInfo, TaskMessage
from tests.helpers.state import seed_task

BOUND = CALL_BYTES  # bytes of task data one pipeline may carry (a task larger than this alone)
SLACK = 64 * 1024  # the small fields beside them (state, error, timestamps)
PAYLOAD = 20_000  # 500 tasks: 10 MB, more than twice the bound
# The fields a list read of a task before (one HMGET per task, all in one pipeline).
OLD_FIELDS = ("msg", "state", "retried", "error", "failed_at", "pending_since", "started_at", "completed_at",
              "result", "cancel", "archived_by")
T0 = 1_800_000_000.0
NOW_MS = to_ms(T0)


@dataclass
class Sent:
    """One executed pipeline: its commands and how many bytes of strings its replies carried."""

    commands: list[tuple[str, ...]]
    reply_bytes: int

    def hmgets(self) -> list[tuple[str, ...]]:
        return [c for c in self.commands if c[0].upper() == "HMGET"]


def _bytes(reply: Any) -> int:
    if isinstance(reply, (str, bytes)):
        return len(reply.encode() if isinstance(reply, str) else reply)
    if isinstance(reply, (list, tuple)):
        return sum(_bytes(r) for r in reply)
    return 0


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch, redis_client: Any) -> Iterator[list[Sent]]:
    """Every pipeline executed meanwhile (a plain Redis: a cluster's pipeline is another class)."""
    if not isinstance(redis_client, redis.Redis):
        pytest.skip("counts the pipelines of a plain Redis client")
    recorded: list[Sent] = []
    original = redis.client.Pipeline.execute

    def execute(self: redis.client.Pipeline, raise_on_error: bool = True) -> list[Any]:
        commands = [tuple(str(a) for a in args) for args, _ in self.command_stack]
        replies: list[Any] = original(self, raise_on_error)
        recorded.append(Sent(commands, _bytes(replies)))
        return replies

    monkeypatch.setattr(redis.client.Pipeline, "execute", execute)
    yield recorded


@pytest.fixture
def fi(connection: ConnectionConfig, fake_clock: FakeClock) -> Iterator[Inspector]:
    i = Inspector(connection=connection, clock=fake_clock)
    yield i
    i.close()


def queue(r: redis.Redis, connection: ConnectionConfig, name: str = "big") -> QueueKeys:
    r.sadd(connection.keys.queues, name)
    return connection.keys.queue(name)


def payload(n: int, size: int = PAYLOAD) -> dict[str, Any]:
    return {"n": n, "blob": f"{n:05d}-" + "x" * size}


def seed(r: redis.Redis, q: QueueKeys, state: str, n: int, prefix: str, **fields: Any) -> list[str]:
    """``n`` tasks of ``state`` (oldest first), of about PAYLOAD bytes each; returns their ids."""
    pipe = r.pipeline(transaction=False)
    ids = [f"{prefix}{i:04d}" for i in range(n)]
    for i, task_id in enumerate(ids):
        seed_task(pipe, q, task_id, state, score=None if state == "pending" else NOW_MS + i,
                  type=f"t.kind{i % 3}", payload=payload(i), **fields)
    pipe.execute()
    return ids


def expected(r: redis.Redis, q: QueueKeys, state: str, ids: list[str]) -> list[TaskInfo]:
    """What one HMGET of every listed field per task made of them (the behaviour before)."""
    out = []
    for task_id in ids:
        h = dict(zip(OLD_FIELDS, r.hmget(q.task(task_id), OLD_FIELDS), strict=True))
        score = None if state == "pending" else r.zscore(q.state_key(state), task_id)
        out.append(task_info(q, task_id, h, state, score))
    return out


def assert_bounded(sent: list[Sent]) -> None:
    for p in sent:
        if len(p.hmgets()) > 1:  # one task is read alone, whatever its size
            assert p.reply_bytes <= BOUND + SLACK, (len(p.hmgets()), p.reply_bytes)


def test_a_page_of_500_large_tasks_is_read_in_bounded_pipelines(fi, redis_client, connection, sent) -> None:
    q = queue(redis_client, connection)
    ids = seed(redis_client, q, "pending", 500, "p")
    big = "p0250"  # larger than a pipeline's bound: read alone
    redis_client.hset(q.task(big), "msg", TaskMessage(id=big, type="t.kind1", payload=payload(250, 3 * BOUND),
                                                      queue="big").encode())
    want = expected(redis_client, q, "pending", ids)
    sent.clear()
    page = fi.list_tasks("big", "pending", 1, 500)
    assert page.tasks == want  # the same tasks, fields and order
    assert_bounded(sent)
    reads = [p for p in sent if p.hmgets()]
    assert len(reads) > 1 and max(len(p.hmgets()) for p in reads) < 500
    assert [p.hmgets() for p in reads if any(c[1] == q.task(big) for c in p.hmgets())] == \
        [[("HMGET", q.task(big), *[f for f in OLD_FIELDS if f != "result"])]]


def test_a_page_of_completed_tasks_reads_their_results_in_the_same_pass(fi, redis_client, connection,
                                                                        sent) -> None:
    """A page's ids are the tasks it returns: their results are read with their other fields, in one
    pass (sizes, then fields), not in a second pass of their own (four round trips for one page)."""
    q = queue(redis_client, connection)
    ids = seed(redis_client, q, "completed", 20, "c", result='"r"', completed_at=NOW_MS)
    want = expected(redis_client, q, "completed", ids)
    sent.clear()
    page = fi.list_tasks("big", "completed", 1, 20, order="oldest")
    assert page.tasks == want and [t.result for t in page.tasks] == ["r"] * 20
    reads = [p for p in sent if any(c[0].upper() in ("HMGET", "HSTRLEN") for c in p.commands)]
    assert len(reads) == 2
    assert all("result" in command for command in reads[1].hmgets()) and len(reads[1].hmgets()) == 20


def test_a_filtered_scan_reads_no_results_and_stays_bounded(fi, redis_client, connection, sent) -> None:
    q = queue(redis_client, connection)
    ids = seed(redis_client, q, "completed", 400, "c", result=json.dumps({"out": "y" * PAYLOAD}))
    for task_id in ("c0007", "c0123", "c0399"):  # the ones the search finds
        redis_client.hset(q.task(task_id), "error", "needle in the last error")
    want = [info for info in expected(redis_client, q, "completed", ids[::-1]) if info.last_error]
    assert want[0].result == {"out": "y" * PAYLOAD}
    sent.clear()
    page = fi.list_tasks("big", "completed", 1, 20, search="needle")
    assert (page.tasks, page.matched, page.scanned) == (want, 3, 400)
    assert_bounded(sent)
    read_results = {c[1] for p in sent for c in p.hmgets() if "result" in c[2:]}
    assert read_results == {q.task(i) for i in ("c0007", "c0123", "c0399")}  # those returned, not all 400

    sent.clear()  # a filtered bulk job finds its tasks by the same scan
    job = fi.act_on_all("big", "delete", "completed", search="no such text")
    assert job.count == 0 and redis_client.zcard(q.completed) == 400
    assert_bounded(sent)
    assert not [c for p in sent for c in p.hmgets() if "result" in c[2:]]


def test_an_export_reads_in_bounded_pipelines(fi, redis_client, connection, sent) -> None:
    q = queue(redis_client, connection)
    ids = seed(redis_client, q, "pending", 600, "e")  # more than one chunk of ids (500)
    want = expected(redis_client, q, "pending", ids)
    sent.clear()
    assert list(fi.iter_tasks("big", "pending")) == want
    assert list(export.lines("jsonl", fi.iter_tasks("big", "pending"))) == list(export.lines("jsonl", want))
    assert list(fi.iter_tasks("big", "pending", search="00599-", limit=5)) == [want[599]]
    assert_bounded(sent)


def test_failure_groups_read_in_bounded_pipelines(fi, redis_client, connection, sent) -> None:
    q = queue(redis_client, connection)
    errors = ["ValueError: bad value 7", "KeyError: 'user-12'"]
    seed(redis_client, q, "retry", 300, "r", error=errors[0], failed_at=NOW_MS)
    seed(redis_client, q, "archived", 200, "x", error=errors[1], failed_at=NOW_MS)
    seed(redis_client, q, "archived", 5, "o", archived_by="operator")  # no error: in no group
    sent.clear()
    report = fi.failure_groups("big")
    assert_bounded(sent)
    assert (report.scanned, report.scanned_all) == (500, True)
    got = {g.key: (g.count, g.types, sorted(t.id for t in g.tasks)) for g in report.groups}
    assert got == {
        fingerprint(errors[0]).key: (300, ["t.kind0", "t.kind1", "t.kind2"], [f"r{i:04d}" for i in range(300)]),
        fingerprint(errors[1]).key: (200, ["t.kind0", "t.kind1", "t.kind2"], [f"x{i:04d}" for i in range(200)]),
    }
    types = {t.id: t.type for g in report.groups for t in g.tasks}
    assert types["r0004"] == "t.kind1" and types["x0005"] == "t.kind2"


def test_the_overdue_rule_reads_each_message_once_and_only_when_it_could_be_late(
        fi, redis_client, connection, fake_clock, sent) -> None:
    q = queue(redis_client, connection)
    pipe = redis_client.pipeline(transaction=False)
    started = {"late": NOW_MS - 600_000, "slow": NOW_MS - 600_000, "none": NOW_MS - 600_000, "new": NOW_MS - 5_000}
    timeouts = {"late": 60.0, "slow": 10_000.0, "none": None, "new": 1.0}
    for kind, n in (("late", 150), ("slow", 50), ("none", 20), ("new", 100)):
        for i in range(n):
            task_id = f"{kind}{i:03d}"
            msg = TaskMessage(id=task_id, type="t.kind0", payload=payload(i), queue="big",
                              timeout=timeouts[kind]).encode()
            seed_task(pipe, q, task_id, "active", score=NOW_MS + 60_000, msg=msg, started_at=started[kind], lease=1)
    pipe.execute()
    rules = RuleEvaluator(fi, parse_rules({"stuck": {"kind": "overdue", "grace": 10}}), fake_clock)

    def msg_reads() -> set[str]:
        return {c[1].rsplit(":", 1)[-1] for p in sent for c in p.hmgets() if "msg" in c[2:]}

    sent.clear()
    assert rules.holding()["stuck/big"].value == 150.0  # started 10 min ago with a 60 s timeout
    assert_bounded(sent)
    # "new" started 5 s ago: within the grace, whatever its timeout
    assert msg_reads() == {f"{kind}{i:03d}" for kind, n in (("late", 150), ("slow", 50), ("none", 20))
                           for i in range(n)}

    sent.clear()
    fake_clock.advance(30)  # "new" (timeout 1 s) is now past its timeout plus grace: read once
    assert rules.holding()["stuck/big"].value == 250.0
    assert msg_reads() == {f"new{i:03d}" for i in range(100)}

    sent.clear()
    redis_client.hset(q.task("late000"), "started_at", to_ms(fake_clock.now()))  # fetched again
    redis_client.hset(q.task("slow000"), mapping={  # fetched again long ago, as another message
        "started_at": NOW_MS - 700_000, "msg": TaskMessage(id="slow000", type="t.kind0", payload={}, queue="big",
                                                           timeout=1.0).encode()})
    assert rules.holding()["stuck/big"].value == 250.0  # late000 is no longer late, slow000 is now
    assert msg_reads() == {"slow000"}  # late000 started too recently to need its message
