"""A queue of 100,000 tasks lists, filters and pages without the dashboard loading them all."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
from django.test import Client as DjangoClient

from queuecore.core.inspector import FILTER_SCAN_LIMIT, Inspector

TOTAL = 100_000
BATCH = 5_000
NEEDLE_EVERY = 1_000  # every 1000th task is of type "big.special"


def seed_big_queue(redis_client: Any, connection: Any, name: str = "big") -> None:
    """LPUSH + HSET in pipelined batches, in the layout of queuecore/core/keys.py (the oldest at the right)."""
    q = connection.keys.queue(name)
    now = time.time()
    redis_client.sadd(connection.keys.queues, name)
    for start in range(0, TOTAL, BATCH):
        pipe = redis_client.pipeline(transaction=False)
        ids = []
        for n in range(start, start + BATCH):
            special = n % NEEDLE_EVERY == 0
            msg = json.dumps({"type": "big.special" if special else "big.plain",
                              "payload": {"n": n, "tag": "needle" if special else "hay"},
                              "max_retry": 25, "enqueued_at": now})
            task_id = f"big-{n:06d}"
            pipe.hset(q.task(task_id), mapping={"msg": msg, "state": "pending",
                                                 "pending_since": int(now * 1000)})
            ids.append(task_id)
        pipe.lpush(q.pending, *ids)
        pipe.execute()


def rows(response: Any) -> list[str]:
    return re.findall(r'<tr data-qc-task="([^"]+)"', response.content.decode())


@pytest.mark.slow
def test_a_queue_of_100000_tasks_lists_pages_and_filters(viewer: DjangoClient, redis_client: Any, connection: Any,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    seed_big_queue(redis_client, connection)
    fetched: list[int] = []
    original = Inspector._infos

    def counting(self: Inspector, q: Any, state: str, ids: list[Any], **options: Any) -> Any:
        fetched.append(len(ids))
        return original(self, q, state, ids, **options)

    monkeypatch.setattr(Inspector, "_infos", counting)

    first = viewer.get("/queues/big/pending/")
    assert first.status_code == 200
    assert rows(first) == [f"big-{n:06d}" for n in range(25)]  # the oldest first
    body = re.sub(r"\s+", " ", first.content.decode())
    assert "Page <strong data-qc-page>1</strong> of 4,000" in body and 'data-qc-count="pending">100,000<' in body
    assert sum(fetched) == 25  # one page of task hashes, not the queue

    fetched.clear()
    later = viewer.get("/queues/big/pending/?page=4000", headers={"HX-Request": "true"})
    assert rows(later) == [f"big-{n:06d}" for n in range(TOTAL - 25, TOTAL)]
    assert sum(fetched) == 25

    fetched.clear()
    filtered = viewer.get("/queues/big/pending/?type=big.special&search=needle")
    expected = [f"big-{n:06d}" for n in range(0, FILTER_SCAN_LIMIT, NEEDLE_EVERY)]
    assert rows(filtered) == expected
    text = re.sub(r"\s+", " ", filtered.content.decode())
    assert f"{len(expected)} matches among the oldest {FILTER_SCAN_LIMIT:,} of 100,000" in text
    assert sum(fetched) <= FILTER_SCAN_LIMIT and max(fetched) <= 500  # bounded scan, in chunks

    overview = viewer.get("/queues/")
    assert re.search(r'<tr data-qc-queue="big">.*?data-qc-cell="size">100,000<', overview.content.decode(), re.S)
    redis_page = viewer.get("/queues/redis/?count=1")  # "Count keys"
    assert f'data-qc-stat="keys">{TOTAL + 2:,}<' in redis_page.content.decode()  # the hashes, pending, the queue set
