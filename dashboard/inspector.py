"""One ``Inspector`` per process, shared by every request; each request acts under its own name."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Any

from django.core.signals import setting_changed
from django.dispatch import receiver
from django.http import HttpRequest

from queuecore.conf import get_config
from queuecore.core.client import Client
from queuecore.core.config import ConnectionConfig
from queuecore.core.inspector import Inspector, RedisInfo


@cache
def shared_inspector(connection: ConnectionConfig) -> Inspector:
    """The process's inspector for ``connection`` (its Redis client is thread-safe)."""
    return Inspector(connection=connection, actor="dashboard")


def redis_now() -> datetime:
    """Now by Redis's clock (the shared inspector's), so the ages pages show agree with what workers
    wrote, whatever this web server's clock says."""
    return datetime.fromtimestamp(shared_inspector(get_config().connection).clock.now(), UTC)


def inspector_for(request: HttpRequest) -> Inspector:
    """The shared inspector, recording actions in the audit log as ``dashboard:<username>``."""
    return shared_inspector(get_config().connection).as_actor(f"dashboard:{request.user.get_username()}")


@dataclass(frozen=True)
class KeyCount:
    """How many keys were under our prefix when an operator last counted them, and when."""

    count: int
    at: datetime


# The last count per connection, in this process. Counting SCANs the whole database (about 1.4 s at a
# million keys), so the Redis page counts only when asked ("Count keys") and shows this count, with
# its age, on every other visit. One count runs at a time, and a count younger than RECOUNT_AFTER
# seconds is shown again instead of scanning: pressing the button again and again, or many visitors
# pressing it at once, costs Redis one SCAN per RECOUNT_AFTER per web process.
RECOUNT_AFTER = 10.0
_key_counts: dict[ConnectionConfig, KeyCount] = {}
_counting = threading.Lock()


def redis_info_for(request: HttpRequest, *, count_keys: bool = False) -> tuple[RedisInfo, KeyCount | None]:
    """``Inspector.redis_info`` without a key count (no SCAN), unless ``count_keys`` and the last count
    is older than ``RECOUNT_AFTER``; and the last count made in this process, None when there was none."""
    connection = get_config().connection
    if count_keys:
        with _counting:
            last = _key_counts.get(connection)
            if last is None or (redis_now() - last.at).total_seconds() >= RECOUNT_AFTER:
                info = inspector_for(request).redis_info(count_keys=True)
                if info.key_count is not None:
                    _key_counts[connection] = KeyCount(info.key_count, redis_now())
                return info, _key_counts.get(connection)
    return inspector_for(request).redis_info(count_keys=False), _key_counts.get(connection)


@receiver(setting_changed)
def _reset(*, setting: str, **kwargs: Any) -> None:
    if setting == "QUEUECORE":
        # Forget the inspectors of the old settings. Their clients are not closed: a request may be
        # using one right now; redis-py closes a client's connections when it is garbage-collected.
        shared_inspector.cache_clear()


@cache
def shared_client(connection: ConnectionConfig) -> Client:
    """The process's client for ``connection``, for what operators enqueue from the dashboard."""
    return Client(connection=connection)
