"""Issue 16's "Fix first" items seen through Django's test client: the dashboard's own
Content-Security-Policy, unchanged refreshes answered with 204, the overview's queue table paged and
filtered by name, "all" in a filtered list decided on the server, messages with a subject, the recent
actions fragment, and a task deleted from its page returning to a checked local list."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client as DjangoClient

from queuecore import Client, Inspector
from tests.conftest import wait_until
from tests.dashboard.conftest import HX
from tests.helpers.heartbeats import seed_heartbeat


def html(response: Any) -> str:
    return response.content.decode()


def test_every_dashboard_response_carries_a_strict_policy(operator: DjangoClient, client: Client) -> None:
    info = client.enqueue("x")
    for response in (operator.get("/queues/"), operator.get("/queues/_/stats/", headers=HX),
                     operator.get(f"/queues/default/tasks/{info.id}/"), operator.get("/queues/nope/pending/"),
                     operator.post(f"/queues/default/tasks/{info.id}/archive/", headers=HX)):
        policy = response["Content-Security-Policy"]
        assert "default-src 'self'" in policy and "script-src 'self'" in policy and "unsafe" not in policy
    page = html(operator.get("/queues/default/pending/"))
    assert "<script>" not in page and " style=" not in page and " onclick=" not in page and "hx-on" not in page
    assert '"allowEval": false' in page  # htmx evaluates nothing


def test_a_host_policy_from_djangos_csp_middleware_is_the_one_sent(operator: DjangoClient, settings,
                                                                    client: Client) -> None:
    """The host sends its own policy from Django's CSP middleware (Django 6), which leaves alone a
    response that has one: the dashboard's policy replaced the host's (``frame-ancestors 'none'``
    became ``'self'``; a host's nonce never reached the header)."""
    csp = pytest.importorskip("django.utils.csp", reason="Django's CSP middleware came with Django 6")
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "django.middleware.csp.ContentSecurityPolicyMiddleware"]
    settings.SECURE_CSP = {"default-src": [csp.CSP.SELF], "frame-ancestors": [csp.CSP.NONE]}
    info = client.enqueue("x")
    for response in (operator.get("/queues/"), operator.get(f"/queues/default/tasks/{info.id}/"),
                     operator.post(f"/queues/default/tasks/{info.id}/archive/", headers=HX)):
        assert response["Content-Security-Policy"] == "default-src 'self'; frame-ancestors 'none'"


def test_an_unchanged_refresh_is_204(viewer: DjangoClient, client: Client) -> None:
    client.enqueue("x", process_in=3600)
    first = viewer.get("/queues/_/stats/", headers=HX)
    digest = re.search(r'data-qc-hash="([0-9a-f]+)"', html(first))
    assert first.status_code == 200 and digest
    same = viewer.get("/queues/_/stats/", headers={**HX, "X-QC-Have": digest.group(1)})
    assert same.status_code == 204 and same.content == b""
    client.enqueue("x", process_in=3600)  # a change: the fragment comes back whole
    changed = viewer.get("/queues/_/stats/", headers={**HX, "X-QC-Have": digest.group(1)})
    assert changed.status_code == 200 and 'data-qc-hash="' in html(changed)


def test_the_queue_table_is_paged_and_filtered_by_name(operator: DjangoClient, client: Client) -> None:
    for n in range(60):
        client.enqueue("x", queue=f"q{n:02d}", process_in=3600)
    client.enqueue("x", queue="mail-eu", process_in=3600)
    overview = html(operator.get("/queues/"))
    assert overview.count("<tr data-qc-queue=") == 50 and "page 1 of 2" in overview
    second = html(operator.get("/queues/_/queues/?qpage=2", headers=HX))
    assert second.count("<tr data-qc-queue=") == 11 and 'data-qc-queue="q59"' in second
    found = html(operator.get("/queues/_/queues/?q=MAIL", headers=HX))
    assert re.findall(r'<tr data-qc-queue="([^"]+)"', found) == ["mail-eu"] and "1 of 61 queues" in found
    assert 'hx-get="/queues/_/queues/?q=MAIL"' in found  # its refresh keeps the filter
    assert found.count('name="csrfmiddlewaretoken"') == 1  # one shared form for every row's button
    # An action from a filtered page answers with that page.
    r = operator.post("/queues/mail-eu/pause/", {"q": "MAIL", "next": "/queues/?q=MAIL"},
                      headers={**HX, "HX-Target": "qc-queue-table"})
    assert re.findall(r'<tr data-qc-queue="([^"]+)"', html(r)) == ["mail-eu"]
    assert 'data-qc-subject="qc-subject-queue-mail-eu"' in html(r)


def test_all_in_a_filtered_list_acts_on_exactly_the_matches(operator: DjangoClient, client: Client,
                                                            inspector: Inspector) -> None:
    keep = [client.enqueue("x", {"n": n}).id for n in range(5)]
    gone = [client.enqueue("x", {"tag": "needle", "n": n}).id for n in range(3)]
    page = html(operator.get("/queues/default/pending/?search=needle", headers=HX))
    assert "All 3 matches" in page and "data-qc-poll" not in page.split(">", 1)[0]  # a filter does not poll
    assert 'data-qc-confirm-all="Delete all 3 pending tasks containing “needle” in queue default?"' in page
    r = operator.post("/queues/default/pending/actions/", {"action": "delete", "all": "1", "search": "needle",
                                                           "task_id": keep[:1]}, headers=HX)
    job_id = re.search(r'data-qc-bulk-job="(\w+)"', html(r)).group(1)  # type: ignore[union-attr]
    wait_until(lambda: inspector.bulk_job(job_id).finished, message="the bulk job to finish")
    job = inspector.bulk_job(job_id)
    assert (job.status, job.done, job.total, job.scope.search) == ("done", 3, 3, "needle")
    remaining = {t.id for t in inspector.list_tasks("default", "pending", 1, 100).tasks}
    assert remaining == set(keep) and not remaining & set(gone)


def test_recent_actions_is_a_fragment_refreshed_by_actions(operator: DjangoClient, client: Client) -> None:
    client.enqueue("x")
    r = operator.get("/queues/_/activity/", headers=HX)
    first = html(r).split(">", 1)[0]
    assert 'id="qc-activity"' in first and "qc:tasks-changed from:body" in first and "qc:queues-changed" in first
    operator.post("/queues/default/pause/")
    assert "queue.pause" in html(operator.get("/queues/_/activity/", headers=HX))


def test_deleting_a_task_returns_to_the_list_it_came_from_if_local(operator: DjangoClient, client: Client) -> None:
    ids = [client.enqueue("x").id for _ in range(3)]
    page = html(operator.get(f"/queues/default/tasks/{ids[0]}/",
                             headers={"Referer": "http://testserver/queues/default/pending/?search=x&page=1"}))
    assert '<input type="hidden" name="next" value="/queues/default/pending/?search=x&amp;page=1">' in page
    assert "next=%2Fqueues%2Fdefault%2Fpending%2F%3Fsearch%3Dx%26page%3D1" in page  # its refresh keeps it
    r = operator.post(f"/queues/default/tasks/{ids[0]}/delete/", {"next": "/queues/default/pending/?search=x"})
    assert r.status_code == 302 and r["Location"] == "/queues/default/pending/?search=x"
    r = operator.post(f"/queues/default/tasks/{ids[1]}/delete/", {"next": "https://evil.example/queues/"},
                      headers=HX)
    assert r["HX-Redirect"] == "/queues/default/pending/"  # not a local URL: the queue's pending list
    r = operator.post(f"/queues/default/tasks/{ids[2]}/delete/", {"next": "/admin/"})
    assert r["Location"] == "/queues/default/pending/"  # not a dashboard URL either


@pytest.mark.parametrize("next_url", ["/queues/../accounts/logout/", "/queues/..//evil.example/",
                                      "/queues/%2e%2e/admin/", "/queues/default/./pending/", "/queues//x/",
                                      "/queues/servers/", "/queues/default/tasks/abc/"])
def test_a_next_url_that_leaves_the_lists_of_the_queue_is_not_followed(operator: DjangoClient, client: Client,
                                                                        next_url: str) -> None:
    """A review: ``next`` was checked as a path starting with the dashboard's prefix, so dot segments
    ("/queues/../accounts/logout/", resolved by the browser) led out of it; and a task's delete went to
    any dashboard page, where the README promises a list of the task's queue."""
    task_id = client.enqueue("x").id
    r = operator.post(f"/queues/default/tasks/{task_id}/delete/", {"next": next_url})
    assert (r.status_code, r["Location"]) == (302, "/queues/default/pending/")
    operator.post("/queues/default/pause/")
    r = operator.post("/queues/default/unpause/", {"next": next_url})
    assert r.url == ("/queues/servers/" if next_url == "/queues/servers/" else
                     "/queues/default/tasks/abc/" if next_url.endswith("abc/") else "/queues/")


def test_archiving_all_past_the_archive_size_says_how_many_the_workers_will_delete(
        operator: DjangoClient, client: Client, inspector: Inspector, dashboard_settings: Any, redis_client: Any,
        connection: Any) -> None:
    """Probe: "Archive all" on 120,000 tasks asked nothing about MAX_ARCHIVE_SIZE (10,000), and the workers
    then deleted 110,000 of them. The question now says so when the archive would pass its size."""
    dashboard_settings.QUEUECORE = {**dashboard_settings.QUEUECORE, "MAX_ARCHIVE_SIZE": 5}
    for n in range(3):
        inspector.archive_task("default", client.enqueue("x", {"n": n}).id)
    for n in range(4):
        client.enqueue("x", {"m": n})
    page = html(operator.get("/queues/default/pending/", headers=HX))
    assert ('data-qc-confirm-all="Archive all 4 pending tasks in queue default? The archive keeps 5 tasks '
            '(MAX_ARCHIVE_SIZE): the workers will then delete the oldest 2 archived tasks for good."') in page
    assert 'data-qc-confirm-all="Delete all 4 pending tasks in queue default?"' in page
    dashboard_settings.QUEUECORE = {**dashboard_settings.QUEUECORE, "MAX_ARCHIVE_SIZE": 7}
    page = html(operator.get("/queues/default/pending/", headers=HX))
    assert 'data-qc-confirm-all="Archive all 4 pending tasks in queue default?"' in page  # room for all
    # The workers' own MAX_ARCHIVE_SIZE (from their heartbeats) wins over the site's: the smallest of those
    # serving the queue, which is what the archive is trimmed to
    seed_heartbeat(redis_client, connection.keys, server_id="h:1:a", queues=["default"], max_archive_size=6)
    seed_heartbeat(redis_client, connection.keys, server_id="h:2:b", queues=["other"], max_archive_size=1)
    page = html(operator.get("/queues/default/pending/", headers=HX))
    assert ('data-qc-confirm-all="Archive all 4 pending tasks in queue default? The archive keeps 6 tasks '
            '(MAX_ARCHIVE_SIZE): the workers will then delete the oldest archived task for good."') in page
