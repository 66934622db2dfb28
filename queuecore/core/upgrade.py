"""Moving data written by earlier versions to where this version looks for it.

Until the keys that belong to no queue shared one hash tag, they were ``<prefix>:queues``,
``<prefix>:servers``, ``<prefix>:periodic``, ``<prefix>:alerts`` and ``<prefix>:audit``. A worker
moves them (``Keys.legacy_globals``) when it starts; operator tools read only the new names. Each
move merges into the new key with single-key commands (old and new may be in different cluster
slots) and is safe to repeat: two workers starting at once may both merge the same members, and at
worst copy the old audit entries twice.
"""

from __future__ import annotations

import logging
from typing import Any

from queuecore.core.keys import Keys

logger = logging.getLogger("queuecore.worker")


def move_legacy_global_keys(client: Any, keys: Keys) -> list[str]:
    """Merge each legacy global key into its new name and delete it; returns the old names moved."""
    moved = []
    for old, new in keys.legacy_globals():
        kind = client.type(old)
        if kind == "none":
            continue
        if kind == "set":
            members = client.smembers(old)
            if members:
                client.sadd(new, *members)
        elif kind == "zset":
            scores = dict(client.zrange(old, 0, -1, withscores=True))
            if scores:
                client.zadd(new, scores, gt=True)  # a fresher score already there wins
        elif kind == "hash":
            for field, value in client.hgetall(old).items():
                client.hsetnx(new, field, value)
        elif kind == "list":
            entries = client.lrange(old, 0, -1)
            if entries:
                client.rpush(new, *entries)  # older than anything written under the new name
        else:
            logger.warning("upgrade: %s holds a %s, not what queuecore wrote there: left alone", old, kind)
            continue
        client.delete(old)
        moved.append(old)
        logger.info("upgrade: moved %s to %s", old, new)
    return moved
