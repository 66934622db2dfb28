"""Seed a worker heartbeat by hand: a live "worker" that serves some queues and publishes some task
types, for tests of what operator tools do with heartbeats (without running a worker)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from typing import Any

import redis

from queuecore.core.clock import to_ms
from queuecore.core.keys import Keys


def signature(*params: str, optional: Iterable[str] = (), var_keyword: bool = False) -> dict[str, Any]:
    """A published signature: ``params`` required, ``optional`` with defaults."""
    names = [*params, *optional]
    return {"params": sorted(names), "required": sorted(params), "var_keyword": var_keyword}


def seed_heartbeat(r: redis.Redis, keys: Keys, *, server_id: str = "seed-host:1:aaaa0001",
                   queues: Iterable[str] = ("default",), types: Mapping[str, Any] | None = None,
                   ttl: float = 60.0, max_archive_size: int | None = None) -> str:
    """Write a live heartbeat of ``server_id`` serving ``queues`` and handling ``types`` (name ->
    ``signature(...)``; None publishes no types, as an older worker would), keeping ``max_archive_size``
    archived tasks per queue (None: says nothing, as an older worker). Returns the server id."""
    now = time.time()
    host, pid, _ = server_id.split(":")
    info = {"id": server_id, "host": host, "pid": int(pid), "concurrency": 1, "queues": {q: 1 for q in queues},
            "strict_priority": False, "started_at": now - 10, "status": "active", "heartbeat_at": now,
            "workers": [], "waiting": [], **({"max_archive_size": max_archive_size} if max_archive_size else {})}
    r.set(keys.server(server_id), json.dumps(info), px=to_ms(ttl))
    if types is not None:
        r.set(keys.server_task_types(server_id), json.dumps({"types": dict(types)}), px=to_ms(ttl))
    r.zadd(keys.servers, {server_id: to_ms(now + ttl)})
    return server_id
