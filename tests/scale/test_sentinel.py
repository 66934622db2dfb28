"""queuecore behind Redis Sentinel: a master, a replica and 3 sentinels (Debian's redis-server, the
sentinels in ``--sentinel`` mode), with a password on the data servers and another on the sentinels.

What Sentinel changes, tested end to end: the ``redis+sentinel://`` URL and its refusals (no server
needed), the Client, Worker, Inspector, results waits (sync and asyncio) and adminctl all finding the
master through the sentinels, and a failover mid-load: the master is killed with SIGKILL while a
client enqueues and two worker processes drain; the sentinels promote the replica; clients and
workers follow on their own; what Redis's asynchronous replication lost is counted (and must be
only the newest acknowledged writes), and nothing is left stuck.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.sentinel

from queuecore import Client, ConnectionConfig, Inspector, TaskRegistry, TaskState, Worker, task
from queuecore.core.errors import BrokerError, ConfigurationError, TaskIdConflict
from queuecore.core.topology import _newest_master, connect, connect_async, parse_redis_url, redact_url
from tests.conftest import FAST, wait_until
from tests.core.test_processes import REPO_ROOT, read_events, spawn  # noqa: F401  # spawn: a fixture
from tests.helpers.topologies import SentinelDeployment

pytestmark = pytest.mark.sentinel

MASTER_PASSWORD = "m4ster-secret"
SENTINEL_PASSWORD = "sentin3l-secret"
Q = "default"
FINAL = (TaskState.COMPLETED, TaskState.ARCHIVED)


# -- the URL (no server) --------------------------------------------------------------------------------


def test_a_sentinel_url_names_the_sentinels_the_master_and_its_database() -> None:
    target = parse_redis_url("redis+sentinel://app:p%40ss@s1:26379,10.0.0.2:26380,[::1]:26381/mymaster/3"
                             "?sentinel_username=watch&sentinel_password=s%26cret")
    assert target.kind == "sentinel"
    assert target.nodes == (("s1", 26379), ("10.0.0.2", 26380), ("::1", 26381))
    assert (target.service, target.db) == ("mymaster", 3)
    assert (target.username, target.password) == ("app", "p@ss")
    assert dict(target.options) == {"sentinel_username": "watch", "sentinel_password": "s&cret"}
    assert not target.tls
    assert "p@ss" not in repr(target) and "s&cret" not in repr(target)

    # A review: parse_qsl made a "+" in an option a space, as a form's text ("s+pw" sent "s pw"); the
    # password before the "@" kept it. Both decode alike now.
    plus = parse_redis_url("redis+sentinel://app:p+w@s1:26379/m?sentinel_password=s+pw&sentinel_username=a%2Bb")
    assert (plus.password, dict(plus.options)) == ("p+w", {"sentinel_password": "s+pw", "sentinel_username": "a+b"})

    plain = parse_redis_url("redis+sentinel://s1:26379/mymaster")
    assert (plain.db, plain.username, plain.password, dict(plain.options)) == (0, None, None, {})
    assert parse_redis_url("redis+sentinel://s1:26379,s1:26379/m").nodes == (("s1", 26379),)  # named twice: once

    tls = parse_redis_url("rediss+sentinel://s1:26379/m?ssl_cert_reqs=required&ssl_ca_certs=/etc/ca.pem")
    assert tls.tls and dict(tls.options) == {"ssl_cert_reqs": "required", "ssl_ca_certs": "/etc/ca.pem"}


@pytest.mark.parametrize(("url", "why"), [
    ("redis+sentinel://s1/mymaster", "is not host:port"),
    ("redis+sentinel://s1:0/mymaster", "is not host:port"),
    ("redis+sentinel://s1:65536/mymaster", "is not host:port"),
    ("redis+sentinel://s1:26379,s2:x/mymaster", "'s2:x' is not host:port"),
    ("redis+sentinel://s1:26379,/mymaster", "is not host:port"),
    # a review: accepted, each then failing to connect for ever
    ("redis+sentinel://-:26379/mymaster", "'-:26379' is not host:port"),
    ("redis+sentinel://...:26379/mymaster", "'...:26379' is not host:port"),
    ("redis+sentinel://[:]:26379/mymaster", "'[:]:26379' is not host:port"),
    ("redis+sentinel://s1:26379//mymaster//2", "an empty segment in the path"),
    ("redis+cluster://s1:7000//", "an empty segment in the path"),
    ("redis+sentinel:///mymaster", "name at least one host:port"),
    ("redis+sentinel://s1:26379", "name the sentinel master"),
    ("redis+sentinel://s1:26379/", "name the sentinel master"),
    ("redis+sentinel://s1:26379/my master", "name the sentinel master"),
    ("redis+sentinel://s1:26379/m/0/extra", "name the sentinel master"),
    ("redis+sentinel://s1:26379/m/16", "not a number from 0 to 15"),
    ("redis+sentinel://s1:26379/m/-1", "not a number from 0 to 15"),
    ("redis+sentinel://s1:26379/m/one", "not a number from 0 to 15"),
    ("redis+sentinel://s1:26379/m?timeout=3", "unknown option 'timeout'"),
    ("redis+sentinel://s1:26379/m?ssl_ca_certs=/etc/ca.pem", "ssl_ca_certs needs a TLS scheme"),
    ("redis+sentinel://s1:26379/m?ssl_cert_reqs=none", "ssl_cert_reqs needs a TLS scheme"),
    ("rediss+sentinel://s1:26379/m?ssl_cert_reqs=maybe", "ssl_cert_reqs must be one of"),
    ("redis+sentinel://s1:26379/m#frag", "no '#' fragment"),
    ("redis+cluster://s1:26379/m?sentinel_password=x", "unknown option 'sentinel_password'"),
    ("sentinel://s1:26379/m", "redis+sentinel://"),
])
def test_a_bad_sentinel_url_is_refused_with_the_reason(url: str, why: str) -> None:
    with pytest.raises(ConfigurationError, match="invalid Redis URL") as caught:
        ConnectionConfig(redis_url=url)
    assert why in str(caught.value)
    assert caught.value.field == "redis_url"  # type: ignore[attr-defined]


def test_passwords_never_appear_in_a_refusal() -> None:
    url = "redis+sentinel://app:hunter2@s1:26379/m/99?sentinel_password=hunter3&ssl_certfile=x"
    with pytest.raises(ConfigurationError) as caught:
        ConnectionConfig(redis_url=url)
    message = str(caught.value)
    assert "hunter2" not in message and "hunter3" not in message
    assert "app:***@s1:26379" in message and "sentinel_password=***" in message
    assert redact_url(url) == "redis+sentinel://app:***@s1:26379/m/99?sentinel_password=***&ssl_certfile=x"


def test_each_password_goes_to_its_own_servers_without_connecting() -> None:
    """The master's credentials go to the master only; ``sentinel_*`` to the sentinels only (building the
    clients opens no connection)."""
    target = parse_redis_url("rediss+sentinel://app:mpw@127.0.0.1:1,127.0.0.1:2/mymaster/2"
                             "?sentinel_username=watch&sentinel_password=spw&ssl_cert_reqs=none")
    for client in (connect(target, socket_timeout=1.5, connect_timeout=0.5),
                   connect_async(target, socket_timeout=1.5, connect_timeout=0.5)):
        pool: Any = client.connection_pool
        assert pool.service_name == "mymaster"
        kwargs = pool.connection_kwargs
        assert (kwargs["username"], kwargs["password"], kwargs["db"]) == ("app", "mpw", 2)
        assert (kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (1.5, 0.5)
        assert "SSL" in pool.connection_class.__name__
        sentinels = pool.sentinel_manager.sentinels
        assert [(s.connection_pool.connection_kwargs["host"], s.connection_pool.connection_kwargs["port"])
                for s in sentinels] == [("127.0.0.1", 1), ("127.0.0.1", 2)]
        for sentinel in sentinels:
            skw = sentinel.connection_pool.connection_kwargs
            assert (skw.get("username"), skw.get("password")) == ("watch", "spw")
            assert skw.get("socket_timeout") == 1.5
            assert "SSL" in sentinel.connection_pool.connection_class.__name__
        if isinstance(client, redis.Redis):
            client.close()


def _state(port: int, epoch: int, flags: str = "master", failover: str | None = None) -> dict[str, Any]:
    """A ``SENTINEL MASTER`` answer as redis-py parses it (``failover``: its ``failover-state``)."""
    names = flags.split(",")
    state = {"ip": "10.0.0.1", "port": port, "config-epoch": epoch, "flags": flags, "is_master": "master" in names,
             "is_sdown": "s_down" in names, "is_odown": "o_down" in names}
    return state if failover is None else {**state, "failover-state": failover}


PLANNED = "master,failover_in_progress,force_failover"  # the flags of the sentinel that leads SENTINEL FAILOVER


@pytest.mark.parametrize(("answers", "master"), [
    ([_state(1, 0), _state(1, 0), _state(1, 0)], ("10.0.0.1", 1)),
    ([_state(2, 1), _state(1, 0), _state(2, 1)], ("10.0.0.1", 2)),  # one sentinel not yet told of the failover
    # mid-failover: the sentinel that fails over has the newer epoch; the one not yet told sees the old master
    # (resumed after a stall) as up: no master is named until the new configuration is out
    ([_state(1, 1, "s_down,o_down,master,failover_in_progress"), _state(1, 0), _state(1, 0, "s_down,master")],
     None),
    ([_state(1, 0, "s_down,o_down,master"), _state(1, 0, "s_down,master")], None),
    ([], None),
    # a planned failover (as seen): the leader picks a replica while the others still name the master; the
    # master is refused from the failover's start (a refusal, rather than a write lost at the promotion)...
    ([_state(1, 0, PLANNED, "select_slave"), _state(1, 0), _state(1, 0)], None),
    # ...then promotes it: the master's writes would be lost from now on, though two sentinels still name it
    ([_state(1, 0, PLANNED, "wait_promotion"), _state(1, 0), _state(1, 0)], None),
    ([_state(1, 1, PLANNED, "reconf_slaves"), _state(1, 0), _state(1, 0)], None),
    ([_state(2, 1), _state(2, 1, "master,disconnected"), _state(1, 0)], ("10.0.0.1", 2)),  # switched
])
def test_the_newest_configuration_names_the_master(answers: list[dict[str, Any]], master: Any) -> None:
    assert _newest_master(answers) == master


# -- a real deployment ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelDeployment]:
    sentinels = SentinelDeployment(tmp_path_factory.mktemp("sentinel"), password=MASTER_PASSWORD,
                                   sentinel_password=SENTINEL_PASSWORD)
    try:
        yield sentinels.start()
    finally:
        sentinels.stop()


@pytest.fixture
def prefix() -> str:
    return f"qct-{uuid.uuid4().hex[:8]}"  # the servers are the module's own, and stopped after it


@pytest.fixture
def connection(deployment: SentinelDeployment, prefix: str) -> ConnectionConfig:
    return ConnectionConfig(redis_url=deployment.url, key_prefix=prefix)


def test_the_url_reaches_the_master_through_the_sentinels(deployment: SentinelDeployment,
                                                          connection: ConnectionConfig) -> None:
    assert connection.target.kind == "sentinel"
    client = connection.connect()
    try:
        assert isinstance(client.connection_pool, redis.sentinel.SentinelConnectionPool)
        assert client.set(f"{connection.key_prefix}:probe", "1")
        assert int(client.info("server")["tcp_port"]) == deployment.master().port
        assert client.execute_command("ROLE")[0] == "master"
    finally:
        client.close()
    # a sentinel that is down is passed over: the next one names the master
    dead_first = f"redis+sentinel://:{MASTER_PASSWORD}@127.0.0.1:1," + deployment.url.split("@", 1)[1]
    client = ConnectionConfig(redis_url=dead_first).connect()
    try:
        assert int(client.info("server")["tcp_port"]) == deployment.master().port
    finally:
        client.close()
    wrong = ConnectionConfig(redis_url=deployment.url.replace(SENTINEL_PASSWORD, "wrong"), connect_timeout=1).connect()
    try:
        with pytest.raises(redis.ConnectionError):  # no sentinel lets us in: no master is found
            wrong.ping()
    finally:
        wrong.close()


def test_a_master_name_no_sentinel_monitors_is_refused_at_the_start(deployment: SentinelDeployment,
                                                                    connection: ConnectionConfig) -> None:
    """A review: a misspelt master name was taken, and the worker logged "No master found" for ever,
    though every sentinel answers "No such master with that name". runworker refuses it at the start;
    a master that is down (a failover under way) is no reason to refuse."""
    from queuecore.core.errors import WrongServer
    from queuecore.management.commands.runworker import refuse_a_wrong_server

    typo = replace(connection, redis_url=connection.redis_url.replace(f"/{deployment.service}", "/qcmastr"))
    with pytest.raises(WrongServer, match="the sentinels monitor no master named 'qcmastr'"):
        refuse_a_wrong_server(typo)
    refuse_a_wrong_server(connection)  # the right name: nothing to refuse
    nowhere = replace(typo, redis_url="redis+sentinel://127.0.0.1:1/qcmastr", connect_timeout=0.5)
    refuse_a_wrong_server(nowhere)  # no sentinel answers: the worker waits for them


def test_clients_share_one_listener_per_sentinel_which_ends_with_the_last_of_them(tmp_path: Path) -> None:
    """A review: each client's listeners held its pool alive while they waited, so they never ended (3
    threads and 3 sentinel connections leaked per client: 150 after 50 clients, and an async result
    read makes a client per call). A deployment of its own: no earlier test's client shares its ports."""
    import gc

    deployment = SentinelDeployment(tmp_path / "sentinel", password=MASTER_PASSWORD).start()
    ports = {str(watcher.port) for watcher in deployment.watchers}

    def listeners() -> int:
        return sum(t.is_alive() and t.name.startswith("queuecore-sentinel-events-")
                   and t.name.rsplit(":", 1)[-1] in ports for t in threading.enumerate())

    def sentinel_subscribers() -> int:
        with deployment.watchers[0].client() as c:
            return sum(int(entry.get("sub", 0)) >= 1 for entry in c.client_list())

    async def ping_all(each: list[Any]) -> None:
        for aclient in each:
            await aclient.ping()
            await aclient.aclose()

    try:
        connection = ConnectionConfig(redis_url=deployment.url, key_prefix=f"qct-{uuid.uuid4().hex[:8]}")
        clients = [connection.connect() for _ in range(20)]
        for client in clients:
            client.ping()
        asyncio.run(ping_all([connection.connect_async() for _ in range(10)]))
        assert listeners() == len(deployment.watchers)  # one per sentinel, shared by all 30 clients
        wait_until(lambda: sentinel_subscribers() == 1, timeout=10, message="one subscription per sentinel")
        results = Client(connection=connection, registry=TaskRegistry())  # results' own clients share them too
        handle = results.enqueue("t.later", process_in=3600)
        assert asyncio.run(results.results.aread(Q, handle.id)).id == handle.id
        assert listeners() == len(deployment.watchers)
        results.close()
        del results, handle
        old_master = deployment.master()  # an event told to every pool: none may be held by its listener
        new_master = next(n for n in deployment.servers if n is not old_master)
        with deployment.watchers[0].client() as c:
            c.execute_command("SENTINEL", "FAILOVER", deployment.service)
        wait_until(lambda: sentinels_agree_on(deployment, new_master), timeout=30, message="the switch")
        for client in clients:
            client.close()
        del clients, client
        gc.collect()
        wait_until(lambda: listeners() == 0, timeout=10, message="the listeners to end with their last client")
        wait_until(lambda: sentinel_subscribers() == 0, timeout=10, message="the subscriptions to end")
    finally:
        deployment.stop()


def test_a_connection_kept_outside_the_pool_asks_the_sentinels(deployment: SentinelDeployment,
                                                               connection: ConnectionConfig) -> None:
    """The worker's fetcher and acker hold a connection of their own (``Scripts.dedicated()``), made from
    the pool's class and arguments. It must find the master through the sentinels, as pooled ones do
    (redis-py's own sentinel connection went to localhost:6379 when first used this way)."""
    master_port = deployment.master().port
    client = connection.connect()
    try:
        pool: Any = client.connection_pool
        own = pool.connection_class(**pool.connection_kwargs)
        try:
            own.send_command("INFO", "server")
            assert f"tcp_port:{master_port}" in own.read_response()
        finally:
            own.disconnect()
    finally:
        client.close()

    async def from_asyncio() -> str:
        aclient = connection.connect_async()
        try:
            apool: Any = aclient.connection_pool
            aown = apool.connection_class(**apool.connection_kwargs)
            try:
                await aown.send_command("INFO", "server")
                return str(await aown.read_response())
            finally:
                await aown.disconnect()
        finally:
            await aclient.aclose()
    assert f"tcp_port:{master_port}" in asyncio.run(from_asyncio())


def test_client_worker_inspector_and_results_through_the_sentinels(deployment: SentinelDeployment,
                                                                   connection: ConnectionConfig) -> None:
    registry = TaskRegistry()

    @task(name="t.add", registry=registry)
    def add(a: int, b: int) -> int:
        return a + b

    client = Client(connection=connection, registry=registry)
    inspector = Inspector(connection=connection)
    worker = Worker(connection=connection, registry=registry, **FAST)
    try:
        handles = [client.enqueue("t.add", {"a": i, "b": 1}, retention=600) for i in range(20)]
        assert inspector.queue_info(Q).pending == 20
        later = client.enqueue("t.add", {"a": 100, "b": 1}, process_in=3600, retention=600)
        doomed = client.enqueue("t.add", {"a": 0, "b": 0}, process_in=3600)
        worker.start()
        assert [h.get(timeout=20) for h in handles] == [i + 1 for i in range(20)]  # sync blocking waits
        # the actions an operator takes, by the Inspector, through the sentinels' master
        assert {t.id for t in inspector.list_tasks(Q, "scheduled", size=10).tasks} == {later.id, doomed.id}
        inspector.delete_task(Q, doomed.id)
        inspector.run_task(Q, later.id)
        assert asyncio.run(later.aget(timeout=20)) == 101  # an asyncio client through the sentinels too
        info = inspector.queue_info(Q)
        assert (info.pending, info.active, info.scheduled, info.completed, info.processed_today) == (0, 0, 0, 21, 21)
        assert {t.id for t in inspector.list_tasks(Q, "completed", size=50).tasks} == {h.id for h in [*handles, later]}
        assert [s.id for s in inspector.servers()] == [worker.server_id]
        redis_info = inspector.redis_info()
        assert redis_info.key_count and redis_info.queues == 1
        inspector.pause_queue(Q)
        assert inspector.queue_info(Q).paused
        inspector.unpause_queue(Q)
    finally:
        worker.shutdown(timeout=5)
        inspector.close()
        client.close()
    # the writes went to the master and were replicated: the replica answers for them
    replica = next(n for n in deployment.servers if n is not deployment.master())
    with replica.client() as c:
        wait_until(lambda: c.exists(connection.keys.queue(Q).completed), timeout=10,
                   message="the replica to have the completed set")


def test_adminctl_reads_and_acts_through_the_sentinels(deployment: SentinelDeployment,
                                                       connection: ConnectionConfig) -> None:
    client = Client(connection=connection, registry=TaskRegistry())
    try:
        ids = [client.enqueue("t.later", process_in=3600).id for _ in range(3)]
    finally:
        client.close()
    base = [sys.executable, "-m", "queuecore_adminctl", "--redis-url", deployment.url,
            "--prefix", connection.key_prefix, "--json"]
    out = subprocess.run([*base, "stats"], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert out.returncode == 0, out.stderr
    stats = json.loads(out.stdout)
    assert [(q["name"], q["scheduled"]) for q in stats["queues"]] == [(Q, 3)]
    assert stats["redis_url"] == redact_url(deployment.url)  # both passwords hidden
    assert MASTER_PASSWORD not in out.stdout and SENTINEL_PASSWORD not in out.stdout
    out = subprocess.run([*base, "task", "delete", Q, ids[0]], capture_output=True, text=True, timeout=60,
                         cwd=REPO_ROOT)
    assert out.returncode == 0, out.stderr
    inspector = Inspector(connection=connection)
    try:
        assert inspector.queue_info(Q).scheduled == 2
    finally:
        inspector.close()
    # a sentinel URL that reaches no sentinel: the CLI's "unreachable" exit code, passwords hidden
    dead = f"redis+sentinel://:{MASTER_PASSWORD}@127.0.0.1:1/{deployment.service}"
    out = subprocess.run([sys.executable, "-m", "queuecore_adminctl", "--redis-url", dead, "stats"],
                         capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert MASTER_PASSWORD not in out.stdout + out.stderr


def test_the_dashboard_reads_and_acts_through_the_sentinels(deployment: SentinelDeployment,
                                                            connection: ConnectionConfig, settings: Any,
                                                            admin_client: Any) -> None:
    settings.QUEUECORE = {"REDIS_URL": deployment.url, "KEY_PREFIX": connection.key_prefix}
    client = Client(connection=connection, registry=TaskRegistry())
    try:
        ids = [client.enqueue("t.shown", {"n": i}).id for i in range(2)]
    finally:
        client.close()
    page = admin_client.get(f"/queues/{Q}/pending/")
    assert page.status_code == 200
    body = page.content.decode()
    assert all(i in body for i in ids)
    redis_page = admin_client.get("/queues/redis/").content.decode()
    assert redact_url(deployment.url) in redis_page.replace("&amp;", "&")
    assert MASTER_PASSWORD not in body + redis_page and SENTINEL_PASSWORD not in body + redis_page
    assert admin_client.post(f"/queues/{Q}/tasks/{ids[0]}/delete/").status_code in (200, 302)
    inspector = Inspector(connection=connection)
    try:
        assert inspector.queue_info(Q).pending == 1
    finally:
        inspector.close()


# -- a master that stalls and comes back after the failover ---------------------------------------------


def sentinels_agree_on(deployment: SentinelDeployment, node: Any) -> bool:
    """Every sentinel names ``node`` as the master, up, in the same configuration (no failover under way)."""
    for watcher in deployment.watchers:
        with watcher.client() as c:
            state = c.sentinel_master(deployment.service)
        if int(state["port"]) != node.port or state["is_sdown"] or state["is_odown"] \
                or "failover_in_progress" in state["flags"]:
            return False
    return True


def test_a_client_leaves_a_stalled_master_that_comes_back_after_the_failover(
        deployment: SentinelDeployment, connection: ConnectionConfig) -> None:
    """The master stalls (SIGSTOP: a paused VM, a long pause, the losing side of a partition) long enough
    for the sentinels to promote the replica, then resumes. A client that was idle meanwhile still holds a
    connection to it, which never broke; the old master answers as a master until the sentinels demote it
    (about 10 s later) and then discards what it took. The client must ask the sentinels and move to the
    new master instead (redis-py alone went on writing to the old one: every such enqueue was lost)."""
    old_master = deployment.master()
    new_master = next(n for n in deployment.servers if n is not old_master)
    client = Client(connection=connection, registry=TaskRegistry())  # the default socket timeout: 5 s
    assert old_master.proc is not None
    try:
        first = client.enqueue("t.later", process_in=3600).id  # a pooled connection to the old master
        old_master.proc.send_signal(signal.SIGSTOP)
        try:
            wait_until(lambda: sentinels_agree_on(deployment, new_master), timeout=30,
                       message="the sentinels to promote the replica")
        finally:
            old_master.proc.send_signal(signal.SIGCONT)
        assert deployment.role(old_master) == "master"  # back, and a master still: nobody told it yet
        ids = [client.enqueue("t.later", process_in=3600).id for _ in range(20)]
    finally:
        client.close()
    with new_master.client() as on_new, old_master.client() as on_old:
        keys = connection.keys.queue(Q)
        assert [on_new.exists(keys.task(i)) for i in ids] == [1] * len(ids)
        assert [on_old.exists(keys.task(i)) for i in ids] == [0] * len(ids)
        assert on_new.exists(keys.task(first))  # replicated before the stall
        # what the sentinels do about 10 s later, done now: the old master follows the new one
        on_old.execute_command("REPLICAOF", "127.0.0.1", str(new_master.port))
    deployment.wait_replicas_in_sync(new_master)
    deployment.wait_settled()
    inspector = Inspector(connection=connection)
    try:
        assert inspector.queue_info(Q).scheduled == 21
    finally:
        inspector.close()


@pytest.mark.parametrize("fault", ["SENTINEL FAILOVER", "SIGKILL"])
def test_result_waits_follow_the_master_through_a_failover(tmp_path: Path, fault: str) -> None:
    """A sync and an asyncio wait block on the master when it fails over (planned, or killed). The
    asyncio wait raised RedisUnavailable as soon as its connection to the old master was closed (the
    asyncio client retries nothing unless told); after a kill both waits raised it within 2.5 s, the
    failover still under way. They go on, within their timeout, and return the results. Its own
    servers: the module's must keep their master for the tests after this one."""
    deployment = SentinelDeployment(tmp_path / "sentinel", password=MASTER_PASSWORD).start()
    registry = TaskRegistry()
    gate = threading.Event()

    @task(name="t.gated", registry=registry)
    def gated(n: int) -> int:
        gate.wait(60)
        return n

    connection = ConnectionConfig(redis_url=deployment.url, key_prefix=f"qct-{uuid.uuid4().hex[:8]}",
                                  socket_timeout=1.0)
    client = Client(connection=connection, registry=registry)
    worker = Worker(connection=connection, registry=registry, **FAST)
    outcomes: dict[str, Any] = {}

    def wait_for(name: str, call: Any) -> None:
        try:
            outcomes[name] = ("returned", call())
        except Exception as exc:
            outcomes[name] = (type(exc).__name__, str(exc))

    try:
        handles = [client.enqueue("t.gated", {"n": n}, retention=600) for n in (1, 2)]
        worker.start()
        calls = {"sync": lambda: handles[0].get(timeout=60),
                 "asyncio": lambda: asyncio.run(handles[1].aget(timeout=60))}
        waiters = [threading.Thread(target=wait_for, args=item) for item in calls.items()]
        for waiter in waiters:
            waiter.start()
        old_master = deployment.master()
        new_master = next(n for n in deployment.servers if n is not old_master)
        with old_master.client() as c:
            wait_until(lambda: c.info("clients")["blocked_clients"] == 2, timeout=10, message="both waits blocked")
        if fault == "SIGKILL":
            old_master.kill()
        else:
            with deployment.watchers[0].client() as c:
                c.execute_command("SENTINEL", "FAILOVER", deployment.service)
        wait_until(lambda: sentinels_agree_on(deployment, new_master), timeout=30, message="the failover")
        gate.set()
        for waiter in waiters:
            waiter.join(60)
        assert outcomes == {"sync": ("returned", 1), "asyncio": ("returned", 2)}
    finally:
        gate.set()
        worker.shutdown(timeout=5)
        client.close()
        deployment.stop()


def subscribers(node: Any, channel: str) -> int:
    """How many connections of ``node`` subscribe to ``channel`` (the sentinels subscribe to others)."""
    with node.client() as c:
        return int(dict(c.pubsub_numsub(channel))[channel])


def test_a_workers_subscription_follows_a_planned_failover_within_a_few_seconds(tmp_path: Path) -> None:
    """SENTINEL FAILOVER with an idle worker: its subscription (wake-ups, pushes, cancels) only reads,
    so it never learnt that the master had moved, and stayed on the former master until that one was
    demoted about 10 s later (periodic probe: task starts 0.2-0.6 s late, by the fetch poll, for
    those 10 s). It now sends a PING every second and subscribes again on the new master."""
    deployment = SentinelDeployment(tmp_path / "sentinel", password=MASTER_PASSWORD).start()
    connection = ConnectionConfig(redis_url=deployment.url, key_prefix=f"qct-{uuid.uuid4().hex[:8]}")
    worker = Worker(connection=connection, registry=TaskRegistry(), **FAST)
    try:
        worker.start()
        old_master = deployment.master()
        new_master = next(n for n in deployment.servers if n is not old_master)
        channel = connection.keys.queue(Q).wake_channel
        wait_until(lambda: subscribers(old_master, channel) == 1, timeout=10, message="the worker to subscribe")
        with deployment.watchers[0].client() as c:
            c.execute_command("SENTINEL", "FAILOVER", deployment.service)
        wait_until(lambda: sentinels_agree_on(deployment, new_master), timeout=30, message="the failover")
        switched = time.monotonic()
        wait_until(lambda: subscribers(new_master, channel) == 1, timeout=5,
                   message="the subscription to move to the new master")
        assert time.monotonic() - switched < 5
    finally:
        worker.shutdown(timeout=5)
        deployment.stop()


def test_a_producer_loses_no_acknowledged_enqueue_in_a_planned_failover(tmp_path: Path) -> None:
    """A probe at about 400 enqueues a second lost 3 to 266 acknowledged enqueues per SENTINEL FAILOVER:
    what the old master took from the replica's promotion until the client's next question to the
    sentinels (up to a second later). The client now hears the leading sentinel announce the failover
    (about 0.1 s before the promotion) and refuses the old master from then on."""
    deployment = SentinelDeployment(tmp_path / "sentinel", password=MASTER_PASSWORD).start()
    connection = ConnectionConfig(redis_url=deployment.url, key_prefix=f"qct-{uuid.uuid4().hex[:8]}",
                                  socket_timeout=1.0)
    client = Client(connection=connection, registry=TaskRegistry())
    acknowledged: list[str] = []
    refused: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        while not stop.is_set():
            try:
                acknowledged.append(client.enqueue("t.later", process_in=3600).id)
            except BrokerError as exc:
                refused.append(str(exc))
            stop.wait(0.002)

    producer = threading.Thread(target=produce)
    try:
        client.enqueue("t.later", process_in=3600)  # connected: the client listens to every sentinel
        for watcher in deployment.watchers:  # (the loss below is the assertion: this only lets it listen first)
            with watcher.client() as c:
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline and not any(int(e.get("sub", 0)) >= 1 for e in c.client_list()):
                    time.sleep(0.01)
        producer.start()
        wait_until(lambda: len(acknowledged) >= 200, timeout=20, message="200 acknowledged enqueues")
        old_master = deployment.master()
        new_master = next(n for n in deployment.servers if n is not old_master)
        with deployment.watchers[0].client() as c:
            c.execute_command("SENTINEL", "FAILOVER", deployment.service)
        wait_until(lambda: sentinels_agree_on(deployment, new_master), timeout=30, message="the switch")
        wait_until(lambda: len(acknowledged) >= 200 + 100 + len(refused), timeout=20,
                   message="enqueues acknowledged by the new master")
        stop.set()
        producer.join(10)
        keys = connection.keys.queue(Q)
        with new_master.client() as on_new:
            lost = [task_id for task_id in acknowledged if not on_new.exists(keys.task(task_id))]
        assert lost == [], f"{len(lost)} of {len(acknowledged)} acknowledged enqueues lost ({len(refused)} refused)"
        assert refused and all("is being replaced" in text or "no longer the master" in text for text in refused)
    finally:
        stop.set()
        if producer.is_alive():
            producer.join(10)
        client.close()
        deployment.stop()


def test_an_enqueue_while_the_sentinels_promote_a_replica_is_refused_not_lost(tmp_path: Path) -> None:
    """SENTINEL FAILOVER: the leading sentinel promotes the replica about a second before it announces
    the switch, and the other sentinels name the old master until then. Enqueues that the old master
    acknowledged in that second were discarded when it was demoted (a probe lost 63 to 69 at 37 a
    second). A client that sees the promotion under way refuses them: the caller is told."""
    deployment = SentinelDeployment(tmp_path / "sentinel", password=MASTER_PASSWORD).start()
    connection = ConnectionConfig(redis_url=deployment.url, key_prefix=f"qct-{uuid.uuid4().hex[:8]}",
                                  socket_timeout=1.0)
    client = Client(connection=connection, registry=TaskRegistry())
    try:
        first = client.enqueue("t.later", process_in=3600).id  # connected to the master
        old_master = deployment.master()
        new_master = next(n for n in deployment.servers if n is not old_master)
        leader = deployment.watchers[0]
        with leader.client() as c:
            c.execute_command("SENTINEL", "FAILOVER", deployment.service)
            wait_until(lambda: c.sentinel_master(deployment.service).get("failover-state")
                       in ("wait_promotion", "reconf_slaves"), timeout=10, interval=0.01,
                       message="the leading sentinel to promote the replica")
        # Its next command asks the sentinels: the time of the last question is kept where connections
        # see their pool, on redis-py's proxy of it (setting it on the pool itself changed nothing).
        client.redis.connection_pool.proxy._qc_checked_at = 0.0
        try:
            during = client.enqueue("t.later", process_in=3600).id
        except BrokerError as exc:
            during = None
            assert "is being replaced" in str(exc) or "no longer the master" in str(exc), exc
        wait_until(lambda: sentinels_agree_on(deployment, new_master), timeout=30, message="the switch")
        after = client.enqueue("t.later", process_in=3600).id
        with new_master.client() as on_new:
            keys = connection.keys.queue(Q)
            assert on_new.exists(keys.task(first)) and on_new.exists(keys.task(after))
            if during is not None:  # acknowledged: then by the new master, never by the one being replaced
                assert on_new.exists(keys.task(during))
    finally:
        client.close()
        deployment.stop()


# -- a failover mid-load (last: it leaves the old replica as master) --------------------------------------


def test_a_failover_mid_load_loses_only_the_replication_window_and_leaves_nothing_stuck(
        deployment: SentinelDeployment, connection: ConnectionConfig, spawn, tmp_path: Path) -> None:  # noqa: F811
    """Two worker processes drain ``proc.noop`` tasks while a client thread enqueues; the master gets
    SIGKILL mid-load. The handlers' log (a file, outside Redis) says what ran. Lost: acknowledged
    enqueues the new master does not have (those that had not run yet are lost tasks). Asynchronous
    replication ships the master's writes in order, so the replica holds a prefix of them: what is
    lost must be the newest enqueues acknowledged before the kill, one unbroken run, and every
    enqueue acknowledged after the failover must run."""
    old_master = deployment.master()
    new_master = next(n for n in deployment.servers if n is not old_master)
    log = tmp_path / "events.jsonl"
    workers = [spawn(redis_url=deployment.url, prefix=connection.key_prefix, log=log, concurrency=4,
                     lease=2.0, heartbeat=0.2, recover=0.3, socket_timeout=1.0) for _ in range(2)]
    client = Client(connection=ConnectionConfig(redis_url=deployment.url, key_prefix=connection.key_prefix,
                                                socket_timeout=1.0, connect_timeout=0.5), registry=TaskRegistry())
    acked: list[tuple[str, float]] = []  # (task id, time.monotonic() when the enqueue returned), in order
    refused: list[tuple[float, str]] = []  # the client was told: not a loss
    stop = threading.Event()
    failure: list[BaseException] = []

    def produce() -> None:
        i = 0
        try:
            while not stop.is_set():
                try:
                    handle = client.enqueue("proc.noop", {"tag": str(i)}, retention=600)
                    acked.append((handle.id, time.monotonic()))
                except (BrokerError, TaskIdConflict) as exc:  # a conflict: a retried enqueue had been applied
                    refused.append((time.monotonic(), type(exc).__name__))
                    stop.wait(0.02)  # pace the retries while there is no master
                i += 1
                stop.wait(0.003)  # pace: a few hundred enqueues a second
        except BaseException as exc:  # pragma: no cover - reported by the test
            failure.append(exc)

    def events(kind: str) -> list[dict[str, Any]]:
        return [e for e in read_events(log) if e["event"] == kind]

    inspector = Inspector(connection=connection)
    side = Client(connection=connection, registry=TaskRegistry())
    producer = threading.Thread(target=produce, name="producer", daemon=True)
    producer.start()
    try:
        for w in workers:
            wait_until(lambda w=w: any(s.pid == w.pid for s in inspector.servers()), timeout=20,
                       message=f"worker {w.pid} to register")
        wait_until(lambda: len(events("end")) >= 300, timeout=30, message="300 tasks run before the failover")
        assert not failure, failure
        # a few longer tasks running when the master dies: each worker holds their leases
        sleepers = [side.enqueue("proc.sleep", {"seconds": 1.5, "tag": f"s{i}"}, retention=600).id for i in range(4)]
        wait_until(lambda: {e["id"] for e in events("start")} >= set(sleepers), timeout=20,
                   message="the long tasks to start")

        killed_at = time.monotonic()
        old_master.kill()  # SIGKILL, and reaped: from here on only the new master can acknowledge anything
        acked_at_kill = len(acked)  # the old master acknowledged these (and at most the one being appended)
        killed_wall = time.time()

        wait_until(lambda: deployment.master() is new_master, timeout=30, message="the sentinels to promote")
        promoted_after = time.monotonic() - killed_at
        wait_until(lambda: deployment.role(new_master) == "master", timeout=10, message="the replica to be master")

        def new_master_ids() -> set[str]:  # enqueues that only the new master can have acknowledged
            return {task_id for task_id, _ in acked[acked_at_kill + 1:]}

        def ran_new() -> set[int]:
            ids = new_master_ids()
            return {e["pid"] for e in events("start") if e["id"] in ids}
        # clients and workers follow: enqueues acknowledged again, and each worker process fetches again
        wait_until(lambda: ran_new() == {w.pid for w in workers}, timeout=30,
                   message="both worker processes to run tasks enqueued after the failover")
        wait_until(lambda: len([a for a in acked if a[1] > killed_at]) >= 200, timeout=30,
                   message="200 enqueues acknowledged after the failover")
        stop.set()
        producer.join(10)
        assert not producer.is_alive() and not failure, failure
        first_ack_after = acked[acked_at_kill + 1][1]

        def drained() -> bool:
            info = inspector.queue_info(Q)
            return info.pending == info.active == info.retry == info.scheduled == 0
        wait_until(drained, timeout=30, message="the queue drained after the failover (nothing stuck)")
        assert all(w.alive for w in workers), "a worker process died in the failover"

        # what ran (the log) against what was acknowledged (the client) and what Redis has now
        started = events("start")
        ended = {e["id"] for e in events("end")}
        order = [task_id for task_id, _ in acked]
        lost_idx = [i for i, task_id in enumerate(order) if task_id not in ended]
        raw = connection.connect()
        try:
            keys = connection.keys.queue(Q)
            with raw.pipeline(transaction=False) as pipe:
                for task_id in [*order, *sleepers]:
                    pipe.hget(keys.task(task_id), "state")
                states = pipe.execute()
            sleeper_states, states = states[len(order):], states[:len(order)]
            leases = raw.zcard(keys.active)  # the active set is scored by lease expiry
            every_task = list(raw.scan_iter(match=f"{keys.task_prefix}*", count=1000))
            with raw.pipeline(transaction=False) as pipe:
                for key in every_task:
                    pipe.hget(key, "state")
                final_states = pipe.execute()
        finally:
            raw.close()

        # 1. Lost tasks (acknowledged, never run) are unknown to the new master: lost writes, not stuck tasks.
        missing_idx = [i for i, state in enumerate(states) if state is None]  # enqueues the new master lacks
        assert set(lost_idx) <= set(missing_idx), [(order[i], states[i]) for i in lost_idx]
        # 2. Only the replication window: the writes missing are one unbroken run of the newest enqueues the old
        #    master acknowledged (the replica had a prefix of its writes), from the last second before the kill.
        if missing_idx:
            assert missing_idx == list(range(missing_idx[0], missing_idx[-1] + 1)), missing_idx
            assert missing_idx[-1] < acked_at_kill + 1, (missing_idx, acked_at_kill)  # + the one in flight
            assert all(acked[i][1] >= killed_at - 1.0 for i in missing_idx), \
                [round(killed_at - acked[i][1], 3) for i in missing_idx]
        # 3. Everything acknowledged after the failover ran, and every task Redis knows is final.
        assert all(order[i] in ended for i in range(acked_at_kill + 1, len(order)))
        assert all(state in ("completed", "archived") for state in final_states), \
            sorted({str(s) for s in final_states})
        assert leases == 0, "a lease outlived the failover"
        # 4. The tasks running at the kill ended, once or (their lease recovered) twice, and are completed.
        assert sleeper_states == ["completed"] * len(sleepers), sleeper_states
        assert set(sleepers) <= ended
        # 5. The workers followed: both ran tasks after the failover (above) and beat on the new master.
        servers = {s.pid: s for s in inspector.servers()}
        assert set(servers) == {w.pid for w in workers}
        assert all(s.heartbeat_at.timestamp() > killed_wall for s in servers.values())
        new_ids = new_master_ids()
        first_run_after = {pid: min(e["t"] for e in started if e["id"] in new_ids and e["pid"] == pid) - killed_wall
                           for pid in servers}

        runs: dict[str, int] = {}
        for e in started:
            runs[e["id"]] = runs.get(e["id"], 0) + 1
        window = (killed_at - acked[missing_idx[0]][1]) if missing_idx else 0.0
        print(f"\nsentinel failover: replica promoted {promoted_after:.2f} s after the kill; the client's first "
              f"acknowledged enqueue {first_ack_after - killed_at:.2f} s after it, each worker's first task "
              f"{', '.join(f'{t:.2f}' for t in sorted(first_run_after.values()))} s after it; {len(acked)} enqueues "
              f"acknowledged ({acked_at_kill} before the kill), {len(refused)} refused meanwhile (the client was "
              f"told); LOST {len(missing_idx)} acknowledged enqueues (the oldest {window * 1000:.0f} ms before the "
              f"kill), {len(lost_idx)} of them never run; "
              f"{sum(1 for n in runs.values() if n > 1)} run twice (at least once), of which "
              f"{sum(runs[i] > 1 for i in sleepers)} of the {len(sleepers)} running at the kill")
    finally:
        stop.set()
        producer.join(10)
        inspector.close()
        side.close()
        client.close()
    # the old master comes back as a replica of the new one (never as an empty master: its data is gone)
    deployment.restart_as_replica(old_master)
    assert deployment.role(old_master) == "slave"


def test_a_failover_soon_after_every_sentinel_failed_once_is_followed(tmp_path: Path) -> None:
    """A review: a sentinel that fails to answer is left out for 30 s. Once all of them had failed (a
    network blip, the sentinels restarted), the client asked none for 30 s, kept the master it knew,
    and refused the new one after a failover ("no longer the master: the sentinels name <the old
    one>"): 26 s of refused enqueues. With every sentinel left out, all are asked."""
    deployment = SentinelDeployment(tmp_path / "sentinel", password=MASTER_PASSWORD).start()
    connection = ConnectionConfig(redis_url=deployment.url, key_prefix=f"qct-{uuid.uuid4().hex[:8]}",
                                  socket_timeout=1.0)
    client = connection.connect()
    pool: Any = getattr(client.connection_pool, "proxy", client.connection_pool)  # what its connections see
    key = f"{connection.key_prefix}:probe"
    try:
        client.set(key, "before")
        for watcher in deployment.watchers:
            watcher.kill()
        wait_until(lambda: client.set(key, "alone") and len(getattr(pool, "_qc_skipped", {}))
                   == len(deployment.watchers), timeout=10, message="the client to find every sentinel gone")
        for watcher in deployment.watchers:
            watcher.start()
        deployment.wait_settled()
        old_master = deployment.master()
        new_master = next(n for n in deployment.servers if n is not old_master)
        with deployment.watchers[0].client() as c:
            c.execute_command("SENTINEL", "FAILOVER", deployment.service)
        wait_until(lambda: sentinels_agree_on(deployment, new_master), timeout=30, message="the failover")
        switched = time.monotonic()
        refused: list[str] = []

        def written_on_the_new_master() -> bool:
            try:
                client.set(key, "after")
            except redis.RedisError as exc:
                refused.append(str(exc))
                return False
            with new_master.client() as on_new:
                return bool(on_new.get(key) == "after")
        wait_until(written_on_the_new_master, timeout=25, message="a write on the new master")
        assert time.monotonic() - switched < 10, refused[-3:]
    finally:
        client.close()
        deployment.stop()
