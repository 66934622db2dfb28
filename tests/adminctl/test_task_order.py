"""``adminctl task ls``: retry, archived and completed newest first, ``--sort`` turns any list around
(the --json shape unchanged), and a filter that stopped at its scan limit says what it searched."""

from __future__ import annotations

import json
import re
import time
from typing import Any

from queuecore import Client
from queuecore.core.inspector import FILTER_SCAN_LIMIT
from tests.adminctl.test_task import PAGE_KEYS
from tests.helpers.state import seed_task


def ids_in(text: str, ids: list[str]) -> list[str]:
    """The ids of ``ids`` in the order the table shows them (ids are cut short in the table)."""
    found = [(text.find(i[:12]), i) for i in ids if i[:12] in text]
    return [i for _, i in sorted(found)]


def test_archived_is_newest_first_and_sort_turns_it_around(adminctl, redis_client: Any, connection: Any,
                                                            client: Client) -> None:
    client.enqueue("t.x")  # makes the queue known
    q = connection.keys.queue("default")
    now = int(time.time() * 1000)
    names = [f"arch-{n}" for n in range(5)]
    for n, task_id in enumerate(names):  # arch-4 archived last
        seed_task(redis_client, q, task_id, "archived", score=now - 10_000 + n * 1000, error="boom")
    newest = adminctl("task", "ls", "default", "archived")
    assert newest.code == 0 and ids_in(newest.stdout, names) == names[::-1]
    assert newest.stdout.splitlines()[-1].endswith("· newest first")
    oldest = adminctl("task", "ls", "default", "archived", "--sort", "oldest", "--size", "2", "--page", "2")
    assert ids_in(oldest.stdout, names) == names[2:4]
    data = adminctl("task", "ls", "default", "archived", "--sort", "newest", "--json").json()
    assert set(data) == PAGE_KEYS and [t["id"] for t in data["tasks"]] == names[::-1]
    pending = adminctl("task", "ls", "default", "pending", "--sort", "newest", "--json").json()
    assert set(data) == set(pending) and pending["total"] == 1
    assert adminctl("task", "ls", "default", "archived", "--sort", "sideways").code == 2  # a usage error


def seed_pending(redis_client: Any, connection: Any, total: int, needle_at: int) -> str:
    """``total`` pending tasks (the oldest at the right), one of them, ``needle_at`` from the oldest,
    with the payload ``{"n": 99999}``."""
    q = connection.keys.queue("big")
    redis_client.sadd(connection.keys.queues, "big")
    pipe = redis_client.pipeline(transaction=False)
    ids = []
    for n in range(total):
        task_id = f"big-{n:06d}"
        payload = {"n": 99999 if n == needle_at else n}
        pipe.hset(q.task(task_id), mapping={"msg": json.dumps({"type": "big.t", "payload": payload}),
                                             "state": "pending"})
        ids.append(task_id)
        if len(ids) == 5000:
            pipe.lpush(q.pending, *ids)
            ids = []
    if ids:
        pipe.lpush(q.pending, *ids)
    pipe.execute()
    return f"big-{needle_at:06d}"


def test_a_search_that_stopped_at_its_limit_says_what_it_searched(adminctl, redis_client: Any,
                                                                 connection: Any) -> None:
    total = FILTER_SCAN_LIMIT + 5_000
    needle = seed_pending(redis_client, connection, total, needle_at=total - 10)  # among the newest
    missed = adminctl("task", "ls", "big", "pending", "--search", "99999")
    assert missed.code == 0 and missed.stdout == ""
    message = " ".join(missed.stderr.split())
    assert (f"no match among the oldest {FILTER_SCAN_LIMIT:,} of {total:,} pending tasks in queue big searched"
            in message), message
    assert "--sort newest" in message and "--type" in message
    found = adminctl("task", "ls", "big", "pending", "--search", "99999", "--sort", "newest")
    assert needle[:12] in found.stdout
    footer = " ".join(found.stdout.split())
    assert re.search(rf"among the newest {FILTER_SCAN_LIMIT:,} of {total:,} pending tasks in queue big", footer)
    assert "--sort oldest" in footer
