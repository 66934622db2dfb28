"""The dashboard and flow control: a timed pause (the choice, until when and who), the limits panel,
and a task held back by a limit."""

from __future__ import annotations

import threading
import time

from django.test import Client as DjangoClient

from queuecore import Client, Inspector, task
from tests.conftest import wait_until
from tests.dashboard.conftest import HX


def html(response) -> str:
    return response.content.decode()


def test_pause_for_a_chosen_while_shows_until_when_and_who(operator: DjangoClient, client: Client,
                                                           inspector: Inspector) -> None:
    client.enqueue("x")
    page = html(operator.get("/queues/default/pending/"))
    assert 'name="for"' in page and 'value="1800">for 30 minutes' in page
    r = operator.post("/queues/default/pause/", {"for": "1800"}, headers={**HX, "HX-Target": "qc-queue-header"})
    info = inspector.queue_info("default")
    assert info.paused and info.paused_until is not None
    assert 1790 < info.paused_until.timestamp() - time.time() <= 1800
    assert info.paused_by and info.paused_by.startswith("dashboard:")
    assert "paused for 30m" in html(r) and "resumes by itself" in html(r)
    assert "data-qc-paused-until" in html(r) and "Paused until" in html(r) and info.paused_by in html(r)
    overview = html(operator.get("/queues/"))
    assert "data-qc-paused-until" in overview and "until in 29m" in overview
    assert operator.post("/queues/default/pause/", {"for": "7"}).status_code == 400  # not an offered choice
    operator.post("/queues/default/unpause/")
    r = operator.post("/queues/default/pause/", {"for": ""}, headers={**HX, "HX-Target": "qc-queue-header"})
    assert inspector.queue_info("default").paused_until is None and "until unpaused" in html(r)


def test_overview_lists_limits_and_the_task_page_says_why_a_task_waits(operator: DjangoClient, make_worker,
                                                                       client: Client, registry, inspector):
    release = threading.Event()
    started = threading.Event()

    @task(name="api.call", registry=registry, concurrency_limit=1, rate_limit="30/m", limit_key="tenant")
    def call(tenant: str) -> None:
        started.set()
        release.wait(10)

    try:
        client.enqueue(call, {"tenant": "acme"}, queue="default")
        make_worker(queues={"default": 1}, concurrency=2)
        wait_until(started.is_set, 10)
        # Only now: two tasks fetched together race for the one slot (no order is promised), so the
        # second must arrive once the first holds it to be the one held back.
        held = client.enqueue(call, {"tenant": "acme"}, queue="default")
        wait_until(lambda: inspector.get_task("default", held.id).waiting, 10)
        overview = html(operator.get("/queues/"))
        assert 'data-qc-limit="api.call"' in overview
        row = overview[overview.index('data-qc-limit="api.call"'):]
        row = row[:row.index("</tr>")]
        assert "acme" in row and "1 / 1" in row and "1 / 30 per 1m" in row
        page = html(operator.get(f"/queues/default/tasks/{held.id}/"))
        assert "concurrency limit of api.call [acme]" in page
    finally:
        release.set()


def test_overview_without_limits(operator: DjangoClient) -> None:
    assert "No live worker runs a task type with a limit" in html(operator.get("/queues/"))


def test_the_limits_panel_refreshes_itself(viewer: DjangoClient) -> None:
    overview = html(viewer.get("/queues/"))
    assert 'id="qc-limits"' in overview and 'hx-get="/queues/_/limits/"' in overview
    panel = html(viewer.get("/queues/_/limits/", headers=HX))
    assert panel.lstrip().startswith('<section id="qc-limits"') and "No live worker runs" in panel
