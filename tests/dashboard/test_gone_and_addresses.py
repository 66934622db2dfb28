"""What the dashboard says about a task that is no longer stored (an action's success must not read as
a failure), the queue table's address, and the scripts a page loads with DEBUG on."""

from __future__ import annotations

import html as htmllib

from django.test import Client as DjangoClient
from django.test import override_settings
from django.urls import reverse

from queuecore import Client, Inspector, task
from tests.conftest import wait_until
from tests.core.worker_support import task_or_none
from tests.dashboard.conftest import HX


def text(response) -> str:  # type: ignore[no-untyped-def]
    return htmllib.unescape(response.content.decode())


def test_the_page_of_a_task_a_worker_finished_before_it_opened_says_so(operator: DjangoClient, make_worker,
                                                                        registry, inspector: Inspector) -> None:
    """Enqueue, then the redirect to the task's page: a quick task without a retention is completed and
    deleted by then. The page said "Not found" under "Enqueued ... as <id>", and operators enqueued
    again; it now says the task is not stored and why (still a 404: there is nothing to show)."""
    @task(name="t.quick", registry=registry)
    def quick() -> None:
        return None

    make_worker(queues="default")
    enqueued = operator.post(reverse("queuecore_dashboard:enqueue_task"), {"type": "t.quick", "queue": "default"})
    assert enqueued.status_code == 302
    task_id = enqueued.url.rstrip("/").rsplit("/", 1)[1]
    wait_until(lambda: task_or_none(inspector, "default", task_id) is None and inspector.queue_info(
        "default").processed_today == 1, 10, message="the task run and deleted")
    page = operator.get(enqueued.url)
    assert page.status_code == 404
    assert f"Enqueued t.quick in queue default as {task_id}." in text(page)  # the action's message
    assert f"Task {task_id} is no longer stored." in text(page)
    assert "completes is deleted at once" in text(page)


def test_an_action_on_a_task_deleted_meanwhile_shows_it_gone(operator: DjangoClient, client: Client,
                                                              inspector: Inspector) -> None:
    """Another operator deleted the task: the panel said nothing but a banner "Not found" and kept
    offering actions on a task that no longer exists."""
    gone = client.enqueue("x").id
    inspector.delete_task("default", gone)
    url = reverse("queuecore_dashboard:task_action", args=["default", gone, "archive"])
    panel = operator.post(url, headers=HX)
    assert panel.status_code == 200
    assert f"Task {gone} is no longer stored." in text(panel)
    assert f"Nothing done: no task '{gone}' in queue 'default'" in text(panel)
    assert "data-qc-task-action" not in text(panel) and "hx-get" not in text(panel)
    page = operator.post(url)
    assert page.status_code == 404 and f"Task {gone} is no longer stored." in text(page)
    missing = operator.get(reverse("queuecore_dashboard:queue_state", args=["nope", "pending"]), headers=HX)
    assert missing.status_code == 404 and missing["X-Qc-Error"] == "Not found: no queue named 'nope'"


def test_the_queue_tables_filter_and_pages_are_in_the_address(viewer: DjangoClient, client: Client) -> None:
    """Filtering or paging the overview's queue table put nothing in the address: a reload or Back showed
    every queue again. Its refreshes (the table itself asking) leave the address alone."""
    for n in range(3):
        client.enqueue("x", queue=f"q-{n}")
    url = reverse("queuecore_dashboard:overview_queues")
    filtered = viewer.get(url, {"q": "q-1"}, headers=HX)
    assert filtered.status_code == 200 and filtered["HX-Push-Url"] == reverse("queuecore_dashboard:overview") + "?q=q-1"
    cleared = viewer.get(url, headers=HX)
    assert cleared["HX-Push-Url"] == reverse("queuecore_dashboard:overview")
    refresh = viewer.get(url, {"q": "q-1"}, headers={**HX, "HX-Trigger": "qc-queue-table"})
    assert refresh.status_code == 200 and "HX-Push-Url" not in refresh
    reloaded = viewer.get(filtered["HX-Push-Url"])
    assert reloaded.status_code == 200 and "1 of 3 queues" in text(reloaded)


@override_settings(DEBUG=True)
def test_with_debug_on_pages_load_htmx_without_django_htmxs_debug_script(viewer: DjangoClient) -> None:
    """django-htmx's debug script (added by ``{% htmx_script %}`` when DEBUG is on) replaces the page with
    any error response and ``eval``s its scripts: under the dashboard's CSP that broke every error
    banner on the bundled site, whose DEBUG is on by default."""
    page = text(viewer.get(reverse("queuecore_dashboard:overview")))
    assert "django-htmx.js" not in page
    assert "/django_htmx/htmx" in page and ".min.js" in page
