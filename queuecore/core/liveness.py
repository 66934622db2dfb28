"""The worker's liveness file and the health check that reads it.

A worker given a ``health_file`` rewrites that file after each successful heartbeat (a small JSON
object: server id, pid, host, key prefix, heartbeat interval, status, time) and removes it when it
stops cleanly. ``check_health`` is what ``manage.py queuecore_healthcheck`` runs: healthy when the
file is there, was written within ``max_age`` seconds (three heartbeat intervals by default: the
heartbeat's own TTL in Redis), the worker's Redis answers a PING, and the worker's heartbeat is
still in Redis. A stopped (SIGSTOP), hung, killed or Redis-less worker stops rewriting the file,
so it goes stale within ``max_age``.

One file per worker process: a worker that finds its file written by another live worker logs an
ERROR (the check could not tell them apart), and removes the file on a clean stop only if it is its
own. The children of ``runworker --processes N`` write ``<file>.1`` .. ``<file>.N``; the check given
``<file>`` itself, when it does not exist, checks those (``check_health``).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from queuecore.core.errors import ConfigurationError
from queuecore.core.keys import Keys
from queuecore.core.limits import MAX_PROCESSES
from queuecore.core.topology import redact_url

logger = logging.getLogger("queuecore.worker")


def check_health_file(path: str | os.PathLike[str]) -> str:
    """``path`` as a string when a health file can be written there; else ``ConfigurationError`` (its
    directory does not exist, or it is a directory)."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ConfigurationError(f"health_file {path!r}: the directory {directory!r} does not exist",
                                 field="health_file")
    if os.path.isdir(path):
        raise ConfigurationError(f"health_file {path!r} is a directory: name a file in it", field="health_file")
    return path


class LivenessFile:
    """Written by the heartbeater after each beat that reached Redis (one small file write)."""

    def __init__(self, path: str | os.PathLike[str], *, server_id: str, pid: int, host: str, key_prefix: str,
                 interval: float, redis_url: str = "") -> None:
        self.path = check_health_file(path)
        self._failing = False  # a write failed: logged once, and again once it works
        self._shared_with: str | None = None  # another live worker found writing this file (logged once)
        self._interval = interval
        self._fixed = {"server_id": server_id, "pid": pid, "host": host, "key_prefix": key_prefix,
                       "heartbeat_interval": interval, "redis": redact_url(redis_url) if redis_url else ""}

    def touch(self, status: str) -> None:
        """Replace the file atomically (a reader never sees half of it). A failed write (disk full,
        directory gone) is logged once, never raised: the heartbeat itself went through."""
        self._check_owner()
        try:
            self._write(status)
        except OSError as exc:
            if not self._failing:
                logger.error("cannot write the health file %s (%s): health checks will fail", self.path, exc)
            self._failing = True
            return
        if self._failing:
            logger.warning("the health file %s is written again", self.path)
            self._failing = False

    def _write(self, status: str) -> None:
        _replace(self.path, {**self._fixed, "status": status, "heartbeat_at": time.time()})

    def _read(self) -> dict[str, Any] | None:
        try:
            with open(self.path, encoding="utf-8") as f:
                info = json.load(f)
        except (OSError, ValueError):
            return None
        return info if isinstance(info, dict) else None

    def _check_owner(self) -> None:
        """Log an ERROR (once per other writer) when the file holds another worker's recent heartbeat:
        two workers given one file overwrite each other, and the check then follows either one."""
        info = self._read()
        other = info.get("server_id") if info else None
        if not info or not other or other == self._fixed["server_id"] or other == self._shared_with:
            return
        written = info.get("heartbeat_at")
        if not isinstance(written, (int, float)) or time.time() - written > 3 * self._interval:
            return  # stale: left by a worker that stopped
        if info.get("host") == self._fixed["host"] and not _alive(info.get("pid")):
            return  # left by a process that died here (the one this worker replaces, say)
        self._shared_with = str(other)
        logger.error("the health file %s is also written by worker %s (pid %s): give each worker a file of "
                     "its own, or the health check cannot tell them apart", self.path, other, info.get("pid"))

    def remove(self) -> None:
        """Remove the file on a clean stop, unless another worker wrote it last (it is then theirs)."""
        info = self._read()
        if info is not None and info.get("server_id") != self._fixed["server_id"]:
            return
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        except OSError as exc:  # made a directory meanwhile, its directory unwritable: the stop goes on
            logger.error("cannot remove the health file %s (%s)", self.path, exc)


def remove_left_files(path: str | os.PathLike[str], processes: int, host: str) -> list[str]:
    """Before ``runworker --processes N`` starts its children: remove ``path`` and ``path.K`` for K
    above N that earlier runs left (a bare file hides the children's files from the check, and a slot
    beyond N would be found stale for ever); returns those removed. A file whose writer still runs on
    this host is another worker's, and is left."""
    path = os.fspath(path)
    removed = []
    for candidate in (path, *(f"{path}.{k}" for k in range(processes + 1, MAX_PROCESSES + 1))):
        try:
            with open(candidate, encoding="utf-8") as f:
                info = json.load(f)
        except FileNotFoundError:
            continue
        except (OSError, ValueError):
            info = None
        if isinstance(info, dict) and info.get("host") == host and _alive(info.get("pid")):
            continue
        try:
            os.unlink(candidate)
        except FileNotFoundError:
            continue
        except OSError as exc:  # a directory by that name, an unwritable directory: its child says so
            logger.warning("cannot remove the health file %s left by an earlier run (%s)", candidate, exc)
            continue
        removed.append(candidate)
    return removed


def _alive(pid: Any) -> bool:
    """Whether a process with this pid runs on this host (any pid we may not signal counts as alive)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


@dataclass(frozen=True)
class HealthReport:
    ok: bool
    reason: str  # one line: what is wrong, or what was found healthy

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1


def _replace(path: str, info: dict[str, Any]) -> None:
    """Write ``info`` as the JSON file ``path``, atomically (a reader never sees half of it)."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".qc-health-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(info))
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_given_up(path: str | os.PathLike[str], slot: int, reason: str) -> None:
    """Mark the health file of a supervised worker process whose slot the supervisor gave up (a crash
    loop): the check of the supervisor's files is unhealthy while it is there, not healthy on the
    others. A write that fails is logged, never raised."""
    try:
        _replace(os.fspath(path), {"server_id": f"worker process {slot}", "status": "given up", "reason": reason,
                                   "heartbeat_at": time.time()})
    except OSError as exc:
        logger.error("cannot write the health file %s (%s)", os.fspath(path), exc)


def check_health(path: str | os.PathLike[str], redis_client: Any, *, max_age: float | None = None,
                 now: float | None = None) -> HealthReport:
    """Is the worker that writes ``path`` alive, and does its Redis answer? ``redis_client``: a
    client of that Redis (short timeouts advised); ``max_age``: default three heartbeat intervals.

    When ``path`` does not exist but ``path.1``, ``path.2`` ... do (the children of ``runworker
    --processes N``), every one of those is checked: healthy when none is unhealthy (a missing one is
    a child stopped cleanly) and at least one is there."""
    path = os.fspath(path)
    if not os.path.exists(path):
        slots = [f"{path}.{n}" for n in range(1, MAX_PROCESSES + 1) if os.path.exists(f"{path}.{n}")]
        if slots:
            reports = [(slot, _check_one(slot, redis_client, max_age=max_age, now=now)) for slot in slots]
            bad = [(slot, r) for slot, r in reports if not r.ok]
            if bad:
                return HealthReport(False, f"{len(bad)} of {len(reports)} worker processes unhealthy: "
                                    + "; ".join(r.reason for _, r in bad))
            return HealthReport(True, f"{len(reports)} worker processes ({path}.N) alive: "
                                + "; ".join(r.reason for _, r in reports))
    return _check_one(path, redis_client, max_age=max_age, now=now)


def _check_one(path: str, redis_client: Any, *, max_age: float | None, now: float | None) -> HealthReport:
    try:
        with open(path, encoding="utf-8") as f:
            info = json.load(f)
        mtime = os.stat(path).st_mtime
    except FileNotFoundError:
        return HealthReport(False, f"no health file at {path}: the worker is not running (or stopped cleanly)")
    except (OSError, ValueError) as exc:
        return HealthReport(False, f"cannot read the health file {path}: {exc}")
    if not isinstance(info, dict):
        return HealthReport(False, f"the health file {path} is not a JSON object")
    interval = info.get("heartbeat_interval")
    limit = max_age if max_age is not None else 3 * float(interval if isinstance(interval, (int, float)) else 5.0)
    age = (time.time() if now is None else now) - mtime
    server_id = str(info.get("server_id", "?"))
    if age > limit:
        return HealthReport(False, f"worker {server_id}: last heartbeat {age:.1f}s ago (limit {limit:.1f}s): "
                                   "stopped, hung, dead or cut off from Redis")
    if info.get("status") == "given up":
        return HealthReport(False, f"{server_id} was given up by its supervisor: {info.get('reason', '?')}")
    if info.get("status") in ("stopping", "stopped"):
        return HealthReport(False, f"worker {server_id} is {info['status']}")
    started = time.perf_counter()
    try:
        redis_client.ping()
        latency = time.perf_counter() - started
        prefix = info.get("key_prefix")
        if isinstance(prefix, str) and prefix and not redis_client.exists(Keys(prefix).server(server_id)):
            where = info.get("redis")
            where = f"the worker writes to {where}: give the check that Redis URL" if where and isinstance(
                where, str) else "another Redis or prefix"
            return HealthReport(False, f"worker {server_id}: its heartbeat is not in Redis under prefix {prefix!r} "
                                       f"({where}; or it expired)")
    except Exception as exc:
        return HealthReport(False, f"Redis does not answer: {type(exc).__name__}: {exc}")
    return HealthReport(True, f"worker {server_id} alive (heartbeat {age:.1f}s ago), Redis answers in "
                              f"{latency * 1000:.1f} ms")


def ping(redis_client: Any) -> tuple[bool, float, str | None]:
    """(reachable, latency in seconds, error) of one PING: the readiness view's probe."""
    started = time.perf_counter()
    try:
        redis_client.ping()
    except Exception as exc:
        return False, time.perf_counter() - started, f"{type(exc).__name__}: {exc}"
    return True, time.perf_counter() - started, None

