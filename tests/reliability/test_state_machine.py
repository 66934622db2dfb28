"""A Hypothesis rule-based state machine over the real Lua scripts (through ``Scripts``) against real
Redis, with a controlled clock: enqueue, schedule, dequeue, ack, fail (retry), archive, crash
(time jumps past the lease), recover, forward, pause, unpause, operator run/archive/delete, janitor,
repair, and stale writes. After every step the structural invariants hold, and no task is lost: every
id enqueued either still has its hash or was removed by a step that is allowed to remove it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from queuecore.core.errors import InvalidTaskState, TaskNotFound
from queuecore.core.keys import Keys, stats_day, stats_minute
from queuecore.core.scripts import Scripts
from tests.helpers.state import make_msg
from tests.reliability.oracle import check_structure

LEASE_MS = 30_000


class QueueMachine(RuleBasedStateMachine):
    redis_url = ""  # a Redis of this module's own (see the fixture below)

    def __init__(self) -> None:
        super().__init__()
        self.r = redis.Redis.from_url(self.redis_url, decode_responses=True)
        self.keys = Keys(f"qct-sm-{uuid.uuid4().hex[:8]}")
        self.q = self.keys.queue("default")
        self.s = Scripts(self.r, self.keys)
        self.now = 1_800_000_000_000
        self.n = 0
        self.ids: set[str] = set()
        self.gone: set[str] = set()  # removed by a step allowed to remove it
        self.held: dict[str, int] = {}  # id -> lease number this "worker" believes it holds
        self.stale: dict[str, int] = {}  # leases known to be superseded

    def teardown(self) -> None:
        keys = list(self.r.scan_iter(match=self.keys.all_pattern, count=1000))
        if keys:
            self.r.unlink(*keys)
        self.r.close()

    @property
    def day(self) -> dict[str, str]:
        return {"day": stats_day(self.now / 1000), "minute": stats_minute(self.now / 1000)}

    def _new_id(self) -> str:
        self.n += 1
        task_id = f"t{self.n}"
        self.ids.add(task_id)
        return task_id

    def _state(self, task_id: str) -> str | None:
        return self.r.hget(self.q.task(task_id), "state")

    # -- producers --------------------------------------------------------------------------------

    @rule(max_retry=st.integers(0, 2), retention=st.sampled_from([0, 5_000]))
    def enqueue(self, max_retry: int, retention: int) -> None:
        task_id = self._new_id()
        msg = make_msg(task_id, "default", max_retry=max_retry, retention=retention / 1000 or 0.0)
        assert self.s.enqueue(self.q, task_id, msg, now_ms=self.now) == 1

    @rule(delay=st.integers(1, 5_000))
    def schedule(self, delay: int) -> None:
        task_id = self._new_id()
        assert self.s.enqueue(self.q, task_id, make_msg(task_id, "default", max_retry=1), now_ms=self.now,
                              process_at_ms=self.now + delay) == 1

    # -- worker -----------------------------------------------------------------------------------

    @rule(count=st.integers(1, 3))
    def dequeue(self, count: int) -> None:
        for item in self.s.dequeue(self.q, now_ms=self.now, lease_until_ms=self.now + LEASE_MS, count=count):
            assert item.msg is not None
            if item.id in self.held:
                self.stale[item.id] = self.held[item.id]
            self.held[item.id] = item.lease

    def _pick_held(self, data: st.DataObject) -> tuple[str, int]:
        task_id = data.draw(st.sampled_from(sorted(self.held)))
        return task_id, self.held.pop(task_id)

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        task_id, lease = self._pick_held(data)
        retention = data.draw(st.sampled_from([0, 5_000]))
        owned = self._state(task_id) == "active" and self.r.hget(self.q.task(task_id), "lease") == str(lease)
        ok = self.s.done(self.q, task_id, lease, now_ms=self.now, retention_ms=retention, result="1", **self.day)
        assert ok == owned  # fencing: only the current lease may acknowledge
        if ok and not retention:
            self.gone.add(task_id)

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def fail(self, data: st.DataObject) -> None:
        task_id, lease = self._pick_held(data)
        owned = self._state(task_id) == "active" and self.r.hget(self.q.task(task_id), "lease") == str(lease)
        assert self.s.retry(self.q, task_id, lease, now_ms=self.now, retry_at_ms=self.now + 1_000, error="boom",
                            **self.day) == owned

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def archive(self, data: st.DataObject) -> None:
        task_id, lease = self._pick_held(data)
        owned = self._state(task_id) == "active" and self.r.hget(self.q.task(task_id), "lease") == str(lease)
        assert self.s.archive(self.q, task_id, lease, now_ms=self.now, error="dead", max_archive_size=10_000,
                              archive_cutoff_ms=0, **self.day) == owned

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def requeue(self, data: st.DataObject) -> None:
        task_id, lease = self._pick_held(data)
        owned = self._state(task_id) == "active" and self.r.hget(self.q.task(task_id), "lease") == str(lease)
        assert self.s.requeue(self.q, task_id, lease, now_ms=self.now) == owned

    @rule()
    def crash(self) -> None:
        """The worker dies: nothing it holds will be written, and time passes beyond every lease."""
        self.held.clear()
        self.now += LEASE_MS + 1

    @rule(ms=st.integers(1, 3_000))
    def advance(self, ms: int) -> None:
        self.now += ms

    @rule()
    def renew(self) -> None:
        if self.held:
            held = sorted(self.held.items())
            codes = self.s.extend_lease(self.q, held, lease_until_ms=self.now + LEASE_MS)
            for (task_id, _), code in zip(held, codes, strict=True):
                if code == 0:
                    del self.held[task_id]  # lost: the worker stops it and writes nothing

    @rule()
    def recover(self) -> None:
        _requeued, _archived, orphans = self.s.recover(self.q, now_ms=self.now, limit=100, **self.day).counts
        assert orphans == 0

    @rule()
    def forward(self) -> None:
        for source in ("scheduled", "retry"):
            self.s.forward(self.q, source, now_ms=self.now, limit=100)

    @rule()
    def janitor(self) -> None:
        expiring = {i for i, score in self.r.zrange(self.q.completed, 0, -1, withscores=True) if score <= self.now}
        self.s.janitor(self.q, now_ms=self.now, archive_cutoff_ms=0, max_archive_size=10_000, limit=1000)
        self.gone |= expiring

    @rule()
    def repair(self) -> None:
        cursor = "0"
        while True:
            step = self.s.repair(self.q, now_ms=self.now, cursor=cursor, count=1000)
            assert (step.repaired, step.archived) == (0, 0)  # nothing the scripts do leaves a hash unindexed
            cursor = step.cursor
            if step.complete:
                break

    # -- operator ---------------------------------------------------------------------------------

    @rule()
    def pause(self) -> None:
        self.r.set(self.q.paused, "1")

    @rule()
    def unpause(self) -> None:
        self.r.delete(self.q.paused)

    @precondition(lambda self: self.ids)
    @rule(data=st.data(), action=st.sampled_from(["run", "archive", "delete"]))
    def operator(self, data: st.DataObject, action: str) -> None:
        task_id = data.draw(st.sampled_from(sorted(self.ids)))
        state = self._state(task_id)
        try:
            if action == "run":
                self.s.admin_run_task(self.q, task_id, now_ms=self.now)
                assert state in ("scheduled", "retry", "archived")
            elif action == "archive":
                self.s.admin_archive_task(self.q, task_id, now_ms=self.now)
                assert state in ("pending", "scheduled", "retry")
            else:
                self.s.admin_delete_task(self.q, task_id)
                assert state not in (None, "active")
                self.gone.add(task_id)
        except TaskNotFound:
            assert state is None
        except InvalidTaskState:
            assert state is not None

    # -- invariants -------------------------------------------------------------------------------

    @invariant()
    def structure_holds_and_nothing_is_lost(self) -> None:
        snap = check_structure(self.r, self.q)
        present = set(snap["tasks"])
        lost = self.ids - present - self.gone
        assert not lost, f"lost without a step that may remove them: {sorted(lost)}"
        assert not (present & self.gone), f"came back after removal: {sorted(present & self.gone)}"


@pytest.fixture(scope="module", autouse=True)
def machine_redis(keyspace_of_its_own: str) -> Iterator[None]:
    """The machine's repair rule scans the whole keyspace and its teardown deletes by pattern: on a
    Redis of its own, what others keep in the shared one cannot slow every step (with 200,000 other
    keys there, the run went past its time)."""
    QueueMachine.redis_url = keyspace_of_its_own
    yield
    QueueMachine.redis_url = ""


TestQueueMachine = QueueMachine.TestCase
TestQueueMachine.settings = settings(max_examples=150, stateful_step_count=50, deadline=None,
                                     suppress_health_check=[HealthCheck.too_slow])
