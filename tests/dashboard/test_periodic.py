"""The dashboard's periodic tasks page: entries with schedule in words, next and last fire, last outcome
and recent fires; pause, resume and run now are POST + CSRF + the operate permission, via the Inspector."""

from __future__ import annotations

from django.test import Client as DjangoClient
from django.urls import reverse

from queuecore import Inspector
from tests.core.test_periodic_inspector import declare
from tests.dashboard.conftest import HX

URL = reverse("queuecore_dashboard:periodic")


def action_url(name: str, verb: str) -> str:
    return reverse("queuecore_dashboard:periodic_action", args=[name, verb])


def test_the_page_lists_entries_with_their_schedule_in_words(viewer: DjangoClient, redis_client, connection,
                                                             inspector: Inspector) -> None:
    page = viewer.get(URL)
    assert page.status_code == 200 and "No periodic task." in page.content.decode()
    declare(redis_client, connection)
    task_id = inspector.run_periodic("nightly")
    html = viewer.get(URL).content.decode()
    assert 'data-qc-periodic="nightly"' in html and 'data-qc-periodic="ping"' in html
    assert "every day at 02:30 (Europe/Paris)" in html and "every hour" in html
    assert "missed fires skipped" in html and "missed fires run once late" in html
    assert reverse("queuecore_dashboard:task", args=["low", task_id]) in html  # the recent fire links to its task
    assert 'aria-current="page">Periodic</a>' in html
    assert "Run now" not in html  # a viewer sees no actions
    fragment = viewer.get(URL, headers=HX).content.decode()
    assert 'id="qc-periodic"' in fragment
    assert "<html" not in fragment and "hx-trigger" in fragment


def test_operators_pause_resume_and_run(operator: DjangoClient, redis_client, connection, inspector: Inspector) -> None:
    declare(redis_client, connection)
    assert "Run now" in operator.get(URL).content.decode()
    response = operator.post(action_url("ping", "pause"))
    assert response.status_code == 302 and response["Location"] == URL
    assert inspector.periodic_entry("ping").paused
    fragment = operator.post(action_url("ping", "resume"), headers=HX)
    assert fragment.status_code == 200 and "qc:periodic-changed" in fragment["HX-Trigger"]
    assert "Periodic task ping resumed" in fragment.content.decode()
    assert not inspector.periodic_entry("ping").paused
    operator.post(action_url("nightly", "run"), headers=HX)
    entry = inspector.periodic_entry("nightly")
    assert entry.last_kind == "manual" and inspector.get_task("low", entry.last_task_id).state == "pending"
    assert [a.actor for a in inspector.audit_log()[:3]] == ["dashboard:olga"] * 3


def test_actions_need_post_csrf_and_the_operate_permission(viewer: DjangoClient, operator: DjangoClient,
                                                          redis_client, connection, inspector: Inspector) -> None:
    declare(redis_client, connection)
    assert viewer.post(action_url("ping", "pause")).status_code == 403
    assert operator.get(action_url("ping", "pause")).status_code == 405
    strict = DjangoClient(enforce_csrf_checks=True)
    strict.force_login(_user("olga"))
    assert strict.post(action_url("ping", "pause")).status_code == 403
    assert not inspector.periodic_entry("ping").paused
    assert operator.post(action_url("nope", "pause")).status_code == 404
    assert operator.post(action_url("ping", "explode")).status_code == 404


def _user(name: str):
    from django.contrib.auth.models import User

    return User.objects.get(username=name)
