"""A task list's filter as it enters the dashboard: a filter that cannot be read, or is too long, is
a 400 everywhere it is used (the list, its htmx table, its export, an action on "all"), never a 500,
an empty export that looks like "no match", or a dropped filter that lists (and acts on) every task."""

from __future__ import annotations

import pytest
from django.test import Client as DjangoClient

from queuecore import Client, Inspector

HX = {"HX-Request": "true"}
DEEP = "payload.x:" + "[" * 995 + "]" * 995  # deeper than any payload: RecursionError (3.13: TypeError), a 500 before
TOO_LONG = "needle " + "x" * 2000  # over the search field's 2,000 characters: dropped before


@pytest.mark.parametrize("search", [DEEP, 'error:"', "-type:x type:", TOO_LONG], ids=["deep", "quote", "empty", "long"])
def test_a_filter_that_cannot_be_used_is_a_400_everywhere(viewer: DjangoClient, operator: DjangoClient,
                                                           client: Client, inspector: Inspector, search: str) -> None:
    for n in range(3):
        client.enqueue("t", {"n": n})
    for url, headers in (("/queues/default/pending/", {}), ("/queues/default/pending/", HX),
                         ("/queues/default/pending/export.csv", {}), ("/queues/default/pending/export.jsonl", {})):
        response = viewer.get(url, {"search": search}, headers=headers)
        assert response.status_code == 400, (url, headers, response.status_code)
    acted = operator.post("/queues/default/pending/actions/", {"action": "archive", "all": "1", "search": search},
                          headers=HX)
    assert acted.status_code == 400
    assert inspector.count("default", "pending") == 3 and inspector.bulk_jobs() == []  # nothing queued or done


def test_a_type_over_its_length_is_a_400(viewer: DjangoClient, client: Client) -> None:
    client.enqueue("t", {})
    assert viewer.get("/queues/default/pending/", {"type": "t" * 201}).status_code == 400


def test_all_matches_of_a_capped_scan_say_at_least(operator: DjangoClient, client: Client) -> None:
    """The filter scans 20,000 tasks for its count; the action on "all" finds every match: the label
    and the question before it must not promise the smaller number."""
    from queuecore.core.inspector import FILTER_SCAN_LIMIT

    for start in range(0, FILTER_SCAN_LIMIT + 5, 1000):
        client.enqueue_many([("t", {"tag": "needle" if n in (5, FILTER_SCAN_LIMIT + 2) else "hay"})
                             for n in range(start, min(start + 1000, FILTER_SCAN_LIMIT + 5))])
    page = operator.get("/queues/default/pending/", {"search": "needle"}).content.decode()
    assert "All matches (at least 1)" in page
    assert "at least 1, maybe more (only the first 20,000 were searched for this count)?" in page
    assert "All 1 match<" not in page
