"""A randomized fault soak that runs in CI: several worker processes under a mixed load while faults
land one after another — kill -9 (and a replacement worker), SIGSTOP past the lease, a Redis restart
with AOF ``always``, CLIENT PAUSE, and dropped connections (CLIENT KILL).

Then the oracle: nothing lost or stuck, the structure intact (no orphan hashes, every lock with a
TTL), and no task ran more than once except where the delivery contract allows it: a run cut short
in a process that was killed, or a run by a process stopped past its lease. Every other duplicate
fails the test. It prints counts per fault and duplicates per cause.

``QUEUECORE_SOAK_SECONDS`` (default 40) sets how long faults are injected; ``QUEUECORE_SOAK_SEED``
replays a run (the seed is printed).
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis

from queuecore import BrokerError, Client, ConnectionConfig, DuplicateTask, Inspector
from tests.conftest import wait_until
from tests.reliability.oracle import check_invariants, read_log, runs_by_id

pytestmark = pytest.mark.slow

Q = "default"
LEASE = 1.5
WORKER = dict(concurrency=4, lease=LEASE, heartbeat=0.3, recover=0.5, socket_timeout=5.0)
FAIL_MAX_RETRY = 2
SECONDS = float(os.environ.get("QUEUECORE_SOAK_SECONDS", "40"))


class Producer:
    """Enqueues a mixed load from a thread of its own until stopped; remembers what it asked for."""

    def __init__(self, client: Client, rng: random.Random) -> None:
        self.client = client
        self.rng = rng
        self.acked: dict[str, str] = {}  # id -> kind, enqueue confirmed
        self.unsure: dict[str, str] = {}  # id -> kind, enqueue failed (BrokerError): may be stored anyway
        self.duplicates_refused = 0
        self.unexpected: list[str] = []  # errors an enqueue must never raise, even during faults
        self.stop = threading.Event()
        self._ids = itertools.count()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _one(self) -> tuple[str, str, dict[str, Any], dict[str, Any]]:
        n = next(self._ids)
        roll = self.rng.random()
        task_id = f"soak-{n}"
        if roll < 0.55:
            return task_id, "immediate", {"seconds": self.rng.random() * 0.15, "tag": task_id}, {}
        if roll < 0.70:
            return task_id, "scheduled", {"tag": task_id}, {"process_in": 0.2 + self.rng.random() * 2}
        if roll < 0.82:
            return task_id, "unique", {"tag": f"u{n}"}, {"unique_for": 120}
        if roll < 0.94:
            return task_id, "failing", {"tag": task_id}, {"max_retry": FAIL_MAX_RETRY}
        return task_id, "skip", {"tag": task_id}, {}

    TYPES = {"immediate": "proc.sleep", "scheduled": "proc.noop", "unique": "proc.noop", "failing": "proc.fail",
             "skip": "proc.skip"}

    def _run(self) -> None:
        while not self.stop.is_set():
            task_id, kind, payload, options = self._one()
            try:
                self.client.enqueue(self.TYPES[kind], payload, task_id=task_id, **options)
                self.acked[task_id] = kind
                if kind == "unique" and self.rng.random() < 0.3:  # the same unique task again: refused
                    try:
                        self.client.enqueue("proc.noop", payload, task_id=task_id + "-again", **options)
                        self.acked[task_id + "-again"] = "unique"  # the lock expired or was freed: fine
                    except DuplicateTask:
                        self.duplicates_refused += 1
            except BrokerError:
                self.unsure[task_id] = kind
                self.stop.wait(0.05)  # the pace of retries while Redis is away
                continue
            except Exception as exc:  # any other error fails the test, with the id
                self.unexpected.append(f"{task_id} ({kind}): {type(exc).__name__}: {exc}")
                self.unsure[task_id] = kind
                continue
            self.stop.wait(0.01)

    def start(self) -> None:
        self.thread.start()

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(30)


def test_randomized_fault_soak(spawn, private_redis_factory, key_prefix: str, log: Path) -> None:
    seed = int(os.environ.get("QUEUECORE_SOAK_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    print(f"\nsoak seed {seed} ({SECONDS:.0f} s of faults)")
    server = private_redis_factory("--appendonly", "yes", "--appendfsync", "always")
    connection = ConnectionConfig(redis_url=server.url, key_prefix=key_prefix, socket_timeout=5.0)
    client = Client(connection=connection)
    inspector = Inspector(connection=connection)
    admin = redis.Redis.from_url(server.url, socket_timeout=10)
    workers = [spawn(redis_url=server.url, **WORKER) for _ in range(3)]
    killed: set[int] = set()
    stopped: set[int] = set()
    faults: Counter[str] = Counter()
    producer = Producer(client, rng)
    producer.start()

    def live() -> list[Any]:
        return [w for w in workers if w.alive]

    def kill9() -> None:
        victim = rng.choice(live())
        victim.kill9()
        killed.add(victim.pid)
        workers.append(spawn(redis_url=server.url, **WORKER))

    def sigstop_past_the_lease() -> None:
        victim = rng.choice(live())
        victim.signal(signal.SIGSTOP)
        stopped.add(victim.pid)
        time.sleep(LEASE + 0.5 + rng.random())  # the fault itself: stopped for longer than its lease
        victim.signal(signal.SIGCONT)

    def redis_restart() -> None:
        if rng.random() < 0.5:
            server.kill()  # SIGKILL: only the fsynced AOF survives
        else:
            server.stop()
        time.sleep(0.5 + rng.random() * 2.5)  # the fault itself: Redis away, sometimes past the lease
        server.start()

    def client_pause() -> None:
        admin.execute_command("CLIENT", "PAUSE", int(500 + rng.random() * 2000))

    def drop_connections() -> None:
        admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")

    actions = {"kill -9": kill9, "SIGSTOP past the lease": sigstop_past_the_lease, "Redis restart": redis_restart,
               "CLIENT PAUSE": client_pause, "dropped connections": drop_connections}
    try:
        wait_until(lambda: len(producer.acked) >= 50, 20, message="the load to start")
        deadline = time.monotonic() + SECONDS
        while time.monotonic() < deadline:
            time.sleep(0.5 + rng.random() * 1.5)  # the pace of the faults, not a synchronisation
            name = rng.choice(list(actions))
            actions[name]()
            faults[name] += 1
        producer.finish()
        for w in live():
            w.signal(signal.SIGCONT)  # nothing stays stopped
        wait_until(lambda: (i := inspector.queue_info(Q)).pending + i.active + i.scheduled + i.retry == 0, 90,
                   interval=0.2, message="the queue to drain after the faults")

        assert producer.unexpected == []
        runs = runs_by_id(read_log(log))
        maybe = [i for i in producer.unsure if i in runs or client.redis.exists(connection.keys.queue(Q).task(i))]
        ids = list(producer.acked) + maybe
        kinds = {**producer.unsure, **producer.acked}
        causes: Counter[str] = Counter()

        def allowed(task_id: str, task_runs: list[dict[str, Any]]) -> bool:
            """More runs than the task's own attempts only where a run was cut short by a kill or
            fenced by a stop; each extra run is counted by its cause."""
            expected = FAIL_MAX_RETRY + 1 if kinds.get(task_id) == "failing" else 1
            extra = len(task_runs) - expected
            if extra <= 0:
                return True
            faulted = [r for r in task_runs if r["pid"] in killed or r["pid"] in stopped]
            for run in faulted[:extra]:
                causes["kill -9" if run["pid"] in killed else "SIGSTOP past the lease"] += 1
            if extra > len(faulted):
                causes["unexplained"] += extra - len(faulted)
                return False
            return True

        summary = check_invariants(client.redis, connection.keys, ids, log, allow_reruns_for=allowed,
                                   allow_concurrent=True)
        # Two runs of one task at once only when one of them was fenced (a stopped process).
        for task_id, task_runs in summary["runs"].items():
            for a, b in itertools.combinations(task_runs, 2):
                a_end = a["end"] if a["end"] is not None else a["start"]
                b_end = b["end"] if b["end"] is not None else b["start"]
                if a["start"] < b_end and b["start"] < a_end:
                    assert {a["pid"], b["pid"]} & stopped, f"{task_id}: two runs at once, none fenced: {a}, {b}"
        final = Counter(summary["final"].values())
        by_kind = Counter(kinds[i] for i in ids)
        archived_kinds = Counter(kinds[i] for i, s in summary["final"].items() if s == "archived")
        print(f"faults: {dict(faults)}")
        print(f"tasks: {len(ids)} enqueued ({dict(by_kind)}); {len(producer.unsure)} enqueues failed during "
              f"faults ({len(maybe)} of them stored anyway); {producer.duplicates_refused} duplicate unique "
              f"enqueues refused")
        print(f"final states: {dict(final)}; archived by kind: {dict(archived_kinds)}")
        print(f"duplicate runs by cause: {dict(causes) or 'none'}")
        assert causes["unexplained"] == 0
        # Failing and SkipRetry tasks end archived; everything else completes.
        for task_id in ids:
            expected = "archived" if kinds[task_id] in ("failing", "skip") else "completed"
            assert summary["final"][task_id] == expected, (task_id, kinds[task_id], summary["runs"].get(task_id))
        assert sum(faults.values()) >= 5 and len(faults) >= 3
        assert all(w.alive for w in workers if w.pid not in killed)
    finally:
        producer.finish()
        for w in workers:
            if w.alive:
                w.signal(signal.SIGCONT)
        admin.close()
        client.close()
        inspector.close()
        server.stop()
