"""A dashboard setting that cannot work is found where it enters, not only by ``manage.py check``: every
request gets a "Dashboard misconfigured" page (500) naming the problem to staff, and the log says it once."""

from __future__ import annotations

import logging
from html import unescape
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client as DjangoClient
from django.urls import URLPattern, reverse

from queuecore import Inspector
from queuecore_dashboard import urls as dashboard_urls
from queuecore_dashboard.access import access_callback, default_access
from tests.dashboard.conftest import HX

TITLE = "Dashboard misconfigured"
GENERIC = "The queue dashboard is misconfigured; the site's log says why."

BAD_SETTINGS = {
    "page-size-not-a-number": ({"PAGE_SIZE": "abc"},
                               "QUEUECORE['DASHBOARD']['PAGE_SIZE'] must be an integer from 1 to 500, not 'abc'."),
    "page-size-too-large": ({"PAGE_SIZE": 10**6},
                            "QUEUECORE['DASHBOARD']['PAGE_SIZE'] must be an integer from 1 to 500, not 1000000."),
    "poll-interval-nan": ({"POLL_INTERVAL": float("nan")},
                          "QUEUECORE['DASHBOARD']['POLL_INTERVAL'] must be a number of seconds from 0.5 to 3600, "
                          "not nan."),
    "callback-not-importable": ({"ACCESS_CALLBACK": "no.such.module.f"},
                                "QUEUECORE['DASHBOARD']['ACCESS_CALLBACK']: cannot import 'no.such.module.f' "
                                "(No module named 'no')."),
}


def text(response: Any) -> str:
    return unescape(response.content.decode())


@pytest.fixture(params=list(BAD_SETTINGS), ids=list(BAD_SETTINGS))
def problem(request: Any, dashboard_settings: Any) -> str:
    """A bad ``QUEUECORE["DASHBOARD"]`` value set; the problem the dashboard names."""
    value, message = BAD_SETTINGS[request.param]
    config = dashboard_settings.QUEUECORE
    dashboard_settings.QUEUECORE = {**config, "DASHBOARD": {**config["DASHBOARD"], **value}}
    return message


@pytest.fixture
def outsider(make_user: Any) -> DjangoClient:
    """A logged-in user who is not staff."""
    c = DjangoClient()
    c.force_login(make_user("nina", "view", staff=False))
    return c


def test_staff_see_the_problem_on_every_page(viewer: DjangoClient, problem: str) -> None:
    for url in ("/queues/", "/queues/default/pending/"):
        r = viewer.get(url)
        assert r.status_code == 500, url
        assert TITLE in text(r) and problem in text(r), url
        assert "every  s" not in text(r)  # the refresh menu names an interval (the setting, or its default)


def test_other_users_are_told_the_log_says_why(anon: DjangoClient, outsider: DjangoClient, problem: str) -> None:
    login = anon.get("/queues/")
    assert login.status_code == 302 and login.url.startswith("/accounts/login/")  # first, as before
    r = outsider.get("/queues/")
    assert r.status_code == 500
    assert TITLE in text(r) and GENERIC in text(r)
    assert "QUEUECORE" not in text(r) and problem not in text(r)


def test_htmx_requests_get_the_banner_line_not_a_fragment(viewer: DjangoClient, outsider: DjangoClient,
                                                          operator: DjangoClient, problem: str,
                                                          inspector: Inspector) -> None:
    poll = viewer.get("/queues/_/stats/", headers=HX)
    assert poll.status_code == 500  # htmx swaps no error response: dashboard.js shows X-Qc-Error in its banner
    assert poll["X-Qc-Error"] == f"{TITLE}: {problem}"
    assert outsider.get("/queues/_/stats/", headers=HX)["X-Qc-Error"] == f"{TITLE}; the site's log says why."
    action = operator.post("/queues/default/pause/", headers=HX)
    assert action.status_code == 500 and action["X-Qc-Error"] == f"{TITLE}: {problem}"
    assert inspector.audit_log() == []  # nothing was done


def test_the_problem_is_logged_once_not_on_every_request(viewer: DjangoClient, problem: str,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="queuecore.dashboard"):
        assert viewer.get("/queues/").status_code == 500
        assert viewer.get("/queues/_/stats/", headers=HX).status_code == 500
    logged = [r for r in caplog.records if r.name == "queuecore.dashboard" and r.levelno == logging.ERROR]
    assert len(logged) == 1
    assert problem in logged[0].getMessage()


SAMPLE_ARGUMENTS = {"qname": "default", "state": "pending", "task_id": "t1", "verb": "archive", "server_id": "s1",
                    "job_id": "j1", "name": "n1", "key": "k1", "type_name": "t.x", "fmt": "csv"}


def test_every_dashboard_url_checks_the_settings(settings: Any, make_user: Any) -> None:
    settings.QUEUECORE = {**settings.QUEUECORE, "DASHBOARD": {"POLL_INTERVAL": float("nan")}}
    c = DjangoClient()
    c.force_login(make_user("sam", superuser=True))
    patterns = [p for p in dashboard_urls.urlpatterns if isinstance(p, URLPattern)]
    assert len(patterns) > 30
    for pattern in patterns:
        url = reverse(f"queuecore_dashboard:{pattern.name}",
                      kwargs={name: SAMPLE_ARGUMENTS[name] for name in pattern.pattern.converters})
        r = c.post(url)  # a POST reaches pages and actions alike
        assert r.status_code == 500 and r["X-Qc-Error"].startswith(TITLE), url


def test_access_callback_is_the_checked_setting(settings: Any) -> None:
    assert access_callback() is default_access
    settings.QUEUECORE = {**settings.QUEUECORE,
                          "DASHBOARD": {"ACCESS_CALLBACK": "tests.dashboard.test_access.only_alice_acts"}}
    assert access_callback().__name__ == "only_alice_acts"
    settings.QUEUECORE = {**settings.QUEUECORE, "DASHBOARD": {"ACCESS_CALLBACK": "os.sep"}}
    with pytest.raises(ImproperlyConfigured, match=r"'os\.sep' is not callable"):
        access_callback()



@pytest.mark.parametrize("setting, value, named", [
    ("REDIS_URL", "nope://x", "QUEUECORE['REDIS_URL']"),
    ("KEY_PREFIX", "", "QUEUECORE['KEY_PREFIX']"),
])
def test_a_connection_setting_that_cannot_work_is_named_not_a_traceback(
        settings: Any, viewer: DjangoClient, outsider: DjangoClient, caplog: pytest.LogCaptureFixture,
        setting: str, value: str, named: str) -> None:
    """Where Redis is (``REDIS_URL``, ``KEY_PREFIX``): without it no page works. The same error page,
    naming the setting to staff, and one ERROR line for two requests."""
    settings.QUEUECORE = {**settings.QUEUECORE, setting: value}
    with caplog.at_level(logging.ERROR, logger="queuecore.dashboard"):
        page = viewer.get("/queues/")
        poll = viewer.get("/queues/_/stats/", headers=HX)
    assert page.status_code == 500 and TITLE in text(page) and named in text(page)
    assert poll.status_code == 500 and poll["X-Qc-Error"].startswith(f"{TITLE}: {named}")
    other = outsider.get("/queues/")
    assert other.status_code == 500 and GENERIC in text(other) and "QUEUECORE" not in text(other)
    logged = [r for r in caplog.records if r.name == "queuecore.dashboard" and r.levelno == logging.ERROR]
    assert len(logged) == 1 and named in logged[0].getMessage()
