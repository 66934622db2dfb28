"""One ``Inspector`` per process, shared by every request; each request acts under its own name."""

from __future__ import annotations

from functools import cache
from typing import Any

from django.core.signals import setting_changed
from django.dispatch import receiver
from django.http import HttpRequest

from queuecore.conf import get_config
from queuecore.core.config import ConnectionConfig
from queuecore.core.inspector import Inspector


@cache
def shared_inspector(connection: ConnectionConfig) -> Inspector:
    """The process's inspector for ``connection`` (its Redis client is thread-safe)."""
    return Inspector(connection=connection, actor="dashboard")


def inspector_for(request: HttpRequest) -> Inspector:
    """The shared inspector, recording actions in the audit log as ``dashboard:<username>``."""
    return shared_inspector(get_config().connection).as_actor(f"dashboard:{request.user.get_username()}")


@receiver(setting_changed)
def _reset(*, setting: str, **kwargs: Any) -> None:
    if setting == "QUEUECORE":
        # Forget the inspectors of the old settings. Their clients are not closed: a request may be
        # using one right now; redis-py closes a client's connections when it is garbage-collected.
        shared_inspector.cache_clear()
