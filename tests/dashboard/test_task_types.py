"""The dashboard's task-type pages: a queue's types over a window, and one type's throughput, failure
rate, duration percentiles (labelled estimates), limits and failures grouped by error."""

from __future__ import annotations

import html as htmllib

from django.test import Client as DjangoClient
from django.urls import reverse

from queuecore import Inspector, task
from tests.conftest import wait_until
from tests.dashboard.conftest import HX


def run_some(make_worker, registry, client, inspector: Inspector) -> None:
    @task(name="t.ok", registry=registry)
    def ok() -> None:
        return None

    @task(name="t.flaky", registry=registry, max_retry=0, concurrency_limit=3)
    def flaky(n: int) -> None:
        if n % 2:
            raise ValueError(f"row {n} is bad")

    for _ in range(6):
        client.enqueue("t.ok")
    for n in range(4):
        client.enqueue("t.flaky", {"n": n})
    make_worker(queues="default")
    wait_until(lambda: inspector.count("default", "pending") == 0 and inspector.count("default", "archived") == 2
               and inspector.count("default", "active") == 0, 15, message="ten tasks run")


def test_a_queues_types_and_one_type(viewer: DjangoClient, make_worker, registry, client,
                                     inspector: Inspector) -> None:
    run_some(make_worker, registry, client, inspector)
    types = htmllib.unescape(viewer.get(reverse("queuecore_dashboard:task_types", args=["default"])).content.decode())
    assert 'data-qc-task-type="t.ok"' in types and 'data-qc-task-type="t.flaky"' in types
    assert "p50 / p95 / p99 (est.)" in types and "3 at once" in types
    url = reverse("queuecore_dashboard:task_type", args=["default", "t.flaky"])
    page = htmllib.unescape(viewer.get(url + "?window=24h").content.decode())
    assert 'data-qc-stat="processed">4<' in page and 'data-qc-stat="failure-rate">50' in page
    assert "estimates from duration buckets" in page and 'aria-current="page" data-qc-window="24h"' in page
    assert "ValueError</strong>: row <n> is bad" in page and 'data-qc-stat="limits">3 at once' in page
    fragment = viewer.get(url, headers=HX).content.decode()
    assert 'id="qc-task-type"' in fragment and "<html" not in fragment
    assert viewer.get(url + "?window=1y").status_code == 200  # an unknown window falls back to 1h
    missing = viewer.get(reverse("queuecore_dashboard:task_type", args=["default", "t.never"]))
    assert missing.status_code == 404 and "no task of type" in missing.content.decode()
    report = inspector.type_report("default", "t.flaky")
    assert (report.stats.processed, report.stats.failed, report.failure_rate) == (4, 2, 0.5)
    assert [g.count for g in report.failures.groups] == [2] and report.limit is not None
    every = inspector.type_reports("default")  # the list pages: limits and failures read once for all types
    assert [(r.stats.type, r.stats.processed, r.stats.failed, len(r.failures.groups)) for r in every] == [
        ("t.flaky", 4, 2, 1), ("t.ok", 6, 0, 0)]


def test_a_refresh_keeps_the_window_shown(viewer: DjangoClient, make_worker, registry, client,
                                          inspector: Inspector) -> None:
    """A review: both pages polled their URL without ``?window=``, so the 24 h view became the 1 h one
    at its first refresh."""
    import re

    run_some(make_worker, registry, client, inspector)
    for url in ("/queues/default/types/", "/queues/default/types/t.ok/"):
        page = viewer.get(url + "?window=24h").content.decode()
        polled = htmllib.unescape(re.search(r'<section id="qc-task-types?"[^>]*hx-get="([^"]*)"', page).group(1))
        assert polled == url + "?window=24h"
        refreshed = viewer.get(polled, headers=HX).content.decode()
        assert 'aria-current="page" data-qc-window="24h"' in refreshed, url


def test_a_types_failures_read_in_part_say_so(viewer: DjangoClient, make_worker, registry, client,
                                              inspector: Inspector, monkeypatch) -> None:
    """A review: past the scan's limit the type's failure groups were shown as exact counts."""
    import queuecore.core.inspector as inspector_module
    from queuecore.core.failures import read_failures

    run_some(make_worker, registry, client, inspector)
    url = reverse("queuecore_dashboard:task_type", args=["default", "t.flaky"])
    assert "some lists are longer" not in viewer.get(url).content.decode()
    monkeypatch.setattr(inspector_module, "read_failures",  # 2 archived tasks: longer than 1
                        lambda redis, keys, queues, limit: read_failures(redis, keys, queues, 1))
    page = htmllib.unescape(viewer.get(url).content.decode())
    assert "Counts are of the newest 1 failed tasks of the queue read (some lists are longer)." in page
