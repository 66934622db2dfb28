"""Task lists in the dashboard: retry, archived and completed newest first, a sort toggle kept across
pages, polls, filters and actions, and a filter that stopped at its scan limit says what it searched."""

from __future__ import annotations

import re
import time
from typing import Any

from django.test import Client as DjangoClient

from queuecore import Client
from queuecore.core.inspector import FILTER_SCAN_LIMIT
from tests.adminctl.test_task_order import seed_pending
from tests.dashboard.conftest import HX
from tests.helpers.state import seed_task


def html(response: Any) -> str:
    return response.content.decode()


def rows(response: Any) -> list[str]:
    return re.findall(r'<tr data-qc-task="([^"]+)"', html(response))


def test_archived_newest_first_with_a_sort_toggle_kept_across_pages_and_polls(
        operator: DjangoClient, client: Client, redis_client: Any, connection: Any, settings: Any) -> None:
    settings.QUEUECORE = {**settings.QUEUECORE, "DASHBOARD": {"POLL_INTERVAL": 2, "PAGE_SIZE": 2}}
    next_to_run = client.enqueue("t.x").id
    q = connection.keys.queue("default")
    now = int(time.time() * 1000)
    names = [f"arch-{n}" for n in range(5)]
    for n, task_id in enumerate(names):
        seed_task(redis_client, q, task_id, "archived", score=now - 10_000 + n * 1000, error="boom")
    first = operator.get("/queues/default/archived/")
    assert rows(first) == ["arch-4", "arch-3"]
    toggle = re.search(r'<a class="[^"]*qc-sort" href="([^"]+)" data-qc-sort="newest"', html(first))
    assert toggle and toggle[1] == "/queues/default/archived/?sort=oldest"
    assert "Newest first" in html(first)
    oldest = operator.get(toggle[1])
    assert rows(oldest) == ["arch-0", "arch-1"] and "Oldest first" in html(oldest)
    assert 'href="/queues/default/archived/?sort=oldest&amp;page=2"' in html(oldest)  # the next page keeps it
    assert 'hx-get="/queues/default/archived/?sort=oldest"' in html(oldest)  # and so does the refresh
    assert '<input type="hidden" name="sort" value="oldest">' in html(oldest)  # the filter and the actions
    back = re.search(r'<a class="[^"]*qc-sort" href="([^"]+)" data-qc-sort="oldest"', html(oldest))
    assert back and back[1] == "/queues/default/archived/"  # the default order needs no parameter
    poll = operator.get("/queues/default/archived/?sort=oldest&page=2", headers=HX)
    assert rows(poll) == ["arch-2", "arch-3"]
    filtered = operator.get("/queues/default/archived/?sort=oldest&search=boom")
    assert rows(filtered) == ["arch-0", "arch-1"]
    assert '<a class="qc-btn qc-btn-ghost" href="/queues/default/archived/?sort=oldest">Clear</a>' in html(filtered)
    done = operator.post("/queues/default/archived/actions/",
                         {"action": "delete", "task_id": ["arch-0"], "sort": "oldest", "page": "2"})
    assert done.status_code == 302 and done["Location"] == "/queues/default/archived/?sort=oldest&page=2"
    # pending stays next-to-run first
    client.enqueue("t.x")
    assert rows(operator.get("/queues/default/pending/"))[0] == next_to_run


def test_a_filter_that_stopped_at_its_limit_says_what_it_searched(viewer: DjangoClient, redis_client: Any,
                                                                  connection: Any) -> None:
    total = FILTER_SCAN_LIMIT + 5_000
    needle = seed_pending(redis_client, connection, total, needle_at=total - 10)
    missed = viewer.get("/queues/big/pending/?search=99999")
    text = re.sub(r"\s+", " ", html(missed))
    assert f"No pending task matches among the oldest {FILTER_SCAN_LIMIT:,} of {total:,}." in text
    assert "so the other 5,000 were not searched" in text
    link = re.search(r'<a href="([^"]+)">search the newest first</a>', text)
    assert link and "search=99999" in link[1] and "sort=newest" in link[1]
    found = viewer.get(link[1].replace("&amp;", "&"))
    assert rows(found) == [needle]
    assert f"1 match among the newest {FILTER_SCAN_LIMIT:,} of {total:,}" in re.sub(r"\s+", " ", html(found))
