"""The memory figure is labelled an estimate wherever the dashboard shows it."""

from __future__ import annotations

import re

from django.test import Client as DjangoClient

from queuecore import Client


def test_memory_is_labelled_an_estimate(viewer: DjangoClient, client: Client) -> None:
    client.enqueue("t.x", {"blob": "x" * 5000})
    overview = viewer.get("/queues/").content.decode()
    assert "Memory (est.)</th>" in overview
    assert re.search(r'data-qc-cell="memory">≈&nbsp;\d', overview)
    queue = viewer.get("/queues/default/pending/").content.decode()
    assert re.search(r"<dt>Memory \(est\.\)</dt><dd [^>]*>≈&nbsp;\d", queue)
    redis_page = viewer.get("/queues/redis/").content.decode()
    assert "Memory (est.)</th>" in redis_page and "≈&nbsp;" in redis_page

