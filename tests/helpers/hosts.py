"""Several "hosts" on one machine, for the multi-host tests (``tests/scale/test_hosts.py``).

Each host is a Linux network namespace ``qc<rand>-<n>`` joined to the root namespace by a veth pair
on a /24 of its own (``10.213.X.1`` on the root side, ``10.213.X.2`` in the host), with ``lo`` up. A
private ``redis-server`` runs in the root namespace and listens on 127.0.0.1 and on every root-side
veth address, so a worker started in a host reaches Redis through its own link, as across a network;
taking that link down is a partition. Commands run in a host under
``ip netns exec <ns> unshare --uts``, with the host's own hostname, so a worker's server id
(``host:pid:random``) names its host. Process ids stay those of the root namespace (no pid namespace).

    with Hosts(2, workdir) as net:          # pytest.skip()s when namespaces cannot be made (not root)
        a, b = net.hosts
        worker = net.spawn_worker(a, prefix="p", log=workdir / "events.jsonl", concurrency=2)
        a.link_down(); a.link_up()

Everything is torn down by ``close()`` (also at interpreter exit if a caller forgot): the processes
started here are killed, the veth pairs removed, the namespaces deleted and Redis stopped.
"""

from __future__ import annotations

import atexit
import fcntl
import ipaddress
import os
import random
import shutil
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PrivateRedis, free_port
from tests.core.test_processes import WorkerProcess as ProcessBase
from tests.core.test_processes import read_events, task_events  # noqa: F401  # re-exported for test_hosts

REPO_ROOT = Path(__file__).resolve().parents[2]
NET_PREFIX = "10.213"  # each host gets 10.213.X.0/24, X picked free at set-up
ALLOC_LOCK = Path("/tmp/qc-hosts-subnets.lock")  # serialises subnet picking between concurrent runs


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=20)


def netns_unavailable() -> str | None:
    """Why network namespaces cannot be used here, or None when they can."""
    if not sys.platform.startswith("linux"):
        return "network namespaces need Linux"
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return f"{tool} (iproute2 / util-linux) is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    return None


@dataclass
class Host:
    """One network namespace with a veth link to the root namespace."""

    name: str  # its hostname
    netns: str
    subnet: int  # X of 10.213.X.0/24
    root_if: str  # veth end in the root namespace
    host_if: str  # veth end in the host

    @property
    def root_ip(self) -> str:
        """The root namespace's address on this host's link (where Redis listens for it)."""
        return f"{NET_PREFIX}.{self.subnet}.1"

    @property
    def ip(self) -> str:
        """The host's own address."""
        return f"{NET_PREFIX}.{self.subnet}.2"

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` wrapped to run inside this host, with its hostname (``exec``s all the way down,
        so the process started is ``argv`` itself, with the pid ``Popen`` reports)."""
        return ["ip", "netns", "exec", self.netns, "unshare", "--uts",
                "sh", "-c", 'hostname "$0" && exec "$@"', self.name, *argv]

    def run(self, argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.command(argv), capture_output=True, text=True, timeout=30, **kwargs)

    def link_down(self) -> None:
        """Cut the host off (its interface down: its packets go nowhere, its sockets get no answer)."""
        _ip("-n", self.netns, "link", "set", self.host_if, "down")

    def link_up(self) -> None:
        _ip("-n", self.netns, "link", "set", self.host_if, "up")  # its address and route come back with it


@dataclass
class WorkerProcess(ProcessBase):
    """One ``tests.helpers.worker_proc`` process running in a host."""

    host: Host | None = None


class Hosts:
    """``count`` hosts and a Redis they all reach through their own links; a context manager."""

    def __init__(self, count: int, workdir: Path, names: list[str] | None = None) -> None:
        reason = netns_unavailable()
        if reason:
            pytest.skip(reason)
        self.workdir = workdir
        self.tag = uuid.uuid4().hex[:6]
        self.names = names or [f"host-{chr(ord('a') + i)}" for i in range(count)]
        if len(self.names) != count:
            raise ValueError("one name per host")
        self.hosts: list[Host] = []
        self.redis: PrivateRedis | None = None
        self.workers: list[WorkerProcess] = []
        self._closed = False
        atexit.register(self.close)
        try:
            self._make_hosts(count)
            self._start_redis()
        except BaseException:
            self.close()
            raise

    # -- set-up -----------------------------------------------------------------------------------

    def _make_hosts(self, count: int) -> None:
        ALLOC_LOCK.touch(exist_ok=True)
        with open(ALLOC_LOCK) as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # two runs never pick the same subnet at once
            taken = self._subnets_in_use()
            free = [x for x in range(1, 255) if x not in taken]
            random.shuffle(free)
            if len(free) < count:
                raise RuntimeError(f"no free {NET_PREFIX}.X.0/24 subnets left")
            for n in range(count):
                netns = f"qc{self.tag}-{n}"
                added = _ip("netns", "add", netns, check=False)
                if added.returncode != 0:
                    pytest.skip(f"cannot create a network namespace (ip netns add {netns}): "
                                f"{added.stderr.strip() or added.returncode}")
                host = Host(name=self.names[n], netns=netns, subnet=free[n],
                            root_if=f"qc{self.tag}-{n}r", host_if=f"qc{self.tag}-{n}h")
                self.hosts.append(host)
                self._link(host)

    @staticmethod
    def _subnets_in_use() -> set[int]:
        """X of every 10.213.X.0/24 an address or route of the root namespace already uses."""
        out = _ip("-4", "-o", "addr", "show").stdout + _ip("-4", "route", "show", "table", "all").stdout
        used = set()
        for word in out.split():
            try:
                net = ipaddress.ip_network(word, strict=False)
            except ValueError:
                continue
            parts = str(net.network_address).split(".")
            if ".".join(parts[:2]) == NET_PREFIX:
                used.add(int(parts[2]))
        return used

    def _link(self, host: Host) -> None:
        _ip("link", "add", host.root_if, "type", "veth", "peer", "name", host.host_if)
        _ip("link", "set", host.host_if, "netns", host.netns)
        _ip("addr", "add", f"{host.root_ip}/24", "dev", host.root_if)
        _ip("link", "set", host.root_if, "up")
        _ip("-n", host.netns, "addr", "add", f"{host.ip}/24", "dev", host.host_if)
        _ip("-n", host.netns, "link", "set", host.host_if, "up")
        _ip("-n", host.netns, "link", "set", "lo", "up")

    def _start_redis(self) -> None:
        data = self.workdir / f"redis-{self.tag}"
        data.mkdir(parents=True, exist_ok=True)
        binds = ["127.0.0.1", *(h.root_ip for h in self.hosts)]
        # The last --bind wins: it lists loopback and every root-side link address. Protected mode off:
        # the hosts' addresses are not loopback (the server is reachable from these links only).
        self.redis = PrivateRedis(free_port(), data, ["--bind", *binds, "--protected-mode", "no"])
        self.redis.start()

    # -- use --------------------------------------------------------------------------------------

    @property
    def local_url(self) -> str:
        """Redis as the root namespace (the "third host") reaches it: 127.0.0.1."""
        assert self.redis is not None
        return self.redis.url

    def redis_url(self, host: Host) -> str:
        """Redis as ``host`` reaches it: across its link."""
        assert self.redis is not None
        return f"redis://{host.root_ip}:{self.redis.port}/0"

    def spawn_worker(self, host: Host, *, prefix: str, log: Path, **options: object) -> WorkerProcess:
        """Start ``python -m tests.helpers.worker_proc`` in ``host``, connected through its link.

        ``options`` are worker_proc's flags (``concurrency=2`` → ``--concurrency 2``)."""
        args = ["--redis-url", self.redis_url(host), "--prefix", prefix, "--log", str(log)]
        for name, value in options.items():
            args += [f"--{name.replace('_', '-')}", str(value)]
        env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "QC_PROC_LOG")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        stderr_path = self.workdir / f"worker-{len(self.workers)}-{host.name}.stderr"
        with open(stderr_path, "wb") as err:
            proc = subprocess.Popen(host.command([sys.executable, "-m", "tests.helpers.worker_proc", *args]),
                                    cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=err,
                                    stderr=subprocess.STDOUT)
        worker = WorkerProcess(proc, log, stderr_path, args, host=host)
        self.workers.append(worker)
        return worker

    def stop_workers(self) -> None:
        """SIGKILL every worker still running (tests end with this; recovery is tested, not drains)."""
        for worker in self.workers:
            if worker.proc.poll() is None:
                worker.proc.kill()
            try:
                worker.proc.wait(10)
            except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not ignorable
                pass

    # -- tear-down --------------------------------------------------------------------------------

    def close(self) -> None:
        """Kill the processes, remove the links and namespaces, stop Redis. Safe to call twice."""
        if self._closed:
            return
        errors: list[str] = []
        try:
            self.stop_workers()
        except Exception as exc:  # pragma: no cover - keep tearing down
            errors.append(f"workers: {exc}")
        for host in list(self.hosts):  # a host is dropped once removed, so a close() cut short can be redone
            # Anything still inside the namespace was started by us (through this harness).
            pids = _ip("netns", "pids", host.netns, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), 9)
                except (ProcessLookupError, ValueError):
                    pass
            deleted = _ip("link", "del", host.root_if, check=False)  # removes both ends
            if deleted.returncode != 0 and "Cannot find device" not in deleted.stderr:
                errors.append(f"ip link del {host.root_if}: {deleted.stderr.strip()}")
            gone = _ip("netns", "del", host.netns, check=False)
            if gone.returncode != 0:
                errors.append(f"ip netns del {host.netns}: {gone.stderr.strip()}")
            self.hosts.remove(host)
        if self.redis is not None:
            self.redis.stop()
        self._closed = True
        atexit.unregister(self.close)
        if errors:
            raise RuntimeError("tearing the hosts down: " + "; ".join(errors))

    def __enter__(self) -> Hosts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
