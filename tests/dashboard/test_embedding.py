"""The dashboard inside a host site: the host's login and logout URLs, the checks that say when the
login page cannot work, and a host base template wrapping the dashboard without losing its parts."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.core.checks import run_checks
from django.test import Client as DjangoClient

from queuecore import Client, Inspector
from queuecore_dashboard.checks import check_login

HERE = Path(__file__).resolve().parent
HOST_TEMPLATES = HERE / "host_templates"
README = HERE.parents[1] / "README.md"


@pytest.fixture
def host(settings: Any) -> Any:
    """The host's URLs (dashboard at /ops/queues/, login at accounts:login), LOGIN_URL naming its login
    view, and its templates: its own base.html, its login page, and its wrapper of the dashboard
    (``queuecore_dashboard/base.html``, as the README shows)."""
    settings.ROOT_URLCONF = "tests.dashboard.host_urls"
    settings.LOGIN_URL = "accounts:login"
    settings.LOGOUT_REDIRECT_URL = "accounts:login"
    engine = dict(settings.TEMPLATES[0])
    engine["DIRS"] = [HOST_TEMPLATES, *engine["DIRS"]]
    settings.TEMPLATES = [engine]
    return settings


def html(response: Any) -> str:
    return response.content.decode()


def logout_action(page: str) -> str | None:
    found = re.search(r'<form method="post" action="([^"]*)"[^>]*data-qc-logout', page)
    return found.group(1) if found else None


# -- login ------------------------------------------------------------------------------------------


def test_anonymous_visitors_go_to_the_hosts_login_url(host: Any, anon: DjangoClient) -> None:
    r = anon.get("/ops/queues/")
    assert r.status_code == 302 and r.url == "/accounts/signin/?next=/ops/queues/"
    r = anon.get("/ops/queues/servers/", headers={"HX-Request": "true", "HX-Current-URL": "http://testserver/ops/queues/"})
    assert r.headers["HX-Redirect"] == "/accounts/signin/?next=/ops/queues/"
    assert anon.get("/accounts/signin/?next=/ops/queues/").status_code == 200


def test_the_login_path_works_end_to_end(host: Any, anon: DjangoClient, make_user: Any) -> None:
    make_user("olga", "view", "operate")
    r = anon.post("/accounts/signin/", {"username": "olga", "password": "pw-olga", "next": "/ops/queues/"})
    assert r.status_code == 302 and r.url == "/ops/queues/"
    assert anon.get("/ops/queues/").status_code == 200


def test_check_is_quiet_when_login_url_resolves(host: Any) -> None:
    assert check_login() == []
    host.LOGIN_URL = "/accounts/signin/"  # a path works as well as a name
    assert check_login() == []
    host.LOGIN_URL = "https://sso.example.com/login"  # another site: nothing to check here
    assert check_login() == []


@pytest.mark.parametrize("login_url", ["/accounts/login/", "admin:login", "login"])
def test_check_warns_when_login_url_does_not_resolve(host: Any, login_url: str) -> None:
    host.LOGIN_URL = login_url  # Django's default, the admin's without the admin, a name the host lacks
    (warning,) = check_login()
    assert warning.id == "queuecore_dashboard.W001"
    assert warning.msg == (f"LOGIN_URL {login_url!r} does not resolve to a page of this site: the queue dashboard "
                           "sends visitors who are not logged in there (a 404).")
    assert 'LOGIN_URL = "admin:login"' in warning.hint
    assert "queuecore_dashboard.W001" in {m.id for m in run_checks()}  # registered: manage.py check says it


def test_check_warns_when_djangos_login_view_has_no_template(host: Any) -> None:
    host.LOGIN_URL = "accounts:bare_login"
    (warning,) = check_login()
    assert warning.id == "queuecore_dashboard.W002"
    assert warning.msg == ("LOGIN_URL 'accounts:bare_login' is Django's LoginView, whose template 'host_missing.html' "
                           "does not exist: the login page would fail (a 500).")
    assert 'LOGIN_URL = "admin:login"' in warning.hint


def test_check_warns_when_the_logout_url_setting_does_not_resolve(host: Any, redis_url: str, key_prefix: str) -> None:
    host.QUEUECORE = {"REDIS_URL": redis_url, "KEY_PREFIX": key_prefix, "DASHBOARD": {"LOGOUT_URL": "nope:logout"}}
    (warning,) = check_login()
    assert warning.id == "queuecore_dashboard.W003"
    host.QUEUECORE = {"REDIS_URL": redis_url, "KEY_PREFIX": key_prefix, "DASHBOARD": {"LOGOUT_URL": "accounts:logout"}}
    assert check_login() == []


# -- logout -----------------------------------------------------------------------------------------


def test_log_out_posts_to_the_logout_url_next_to_the_login_url(host: Any, operator: DjangoClient) -> None:
    page = html(operator.get("/ops/queues/"))
    assert logout_action(page) == "/accounts/signout/"  # accounts:login -> accounts:logout
    host.LOGIN_URL = "/accounts/signin/"  # as a path: resolved to its name first
    assert logout_action(html(operator.get("/ops/queues/"))) == "/accounts/signout/"
    r = operator.post("/accounts/signout/")
    assert r.status_code in (200, 302)
    assert operator.get("/ops/queues/").status_code == 302  # logged out


def test_logout_url_setting_wins_and_no_button_without_one(host: Any, operator: DjangoClient, redis_url: str,
                                                          key_prefix: str) -> None:
    host.QUEUECORE = {"REDIS_URL": redis_url, "KEY_PREFIX": key_prefix, "DASHBOARD": {"LOGOUT_URL": "/bye/"}}
    assert logout_action(html(operator.get("/ops/queues/"))) == "/bye/"
    host.QUEUECORE = {"REDIS_URL": redis_url, "KEY_PREFIX": key_prefix}
    host.LOGIN_URL = "https://sso.example.com/login"  # nothing of this site to log out with
    page = html(operator.get("/ops/queues/"))
    assert logout_action(page) is None and "Log out" not in page


# -- a host base template ---------------------------------------------------------------------------


def test_a_host_base_template_keeps_navigation_live_toggle_and_messages(host: Any, operator: DjangoClient,
                                                                       client: Client, inspector: Inspector) -> None:
    client.enqueue("x", queue="emails")
    page = html(operator.get("/ops/queues/"))
    assert "The host's own header" in page and "The host's own footer" in page
    assert "<title>Queues · Queues</title>" in page
    assert "queuecore_dashboard/css/dashboard.css" in page.split("</head>")[0]  # assets in the host's head
    assert 'hx-headers=\'{"X-CSRFToken"' in page
    for href in ("/ops/queues/", "/ops/queues/servers/", "/ops/queues/redis/", "/ops/queues/audit/"):
        assert f'href="{href}"' in page
    assert "data-qc-live-toggle" in page and 'id="qc-offline"' in page
    assert logout_action(page) == "/accounts/signout/"
    r = operator.post("/ops/queues/emails/pause/", {"next": "/ops/queues/emails/pending/"})
    assert r.status_code == 302 and inspector.queue_info("emails").paused
    page = html(operator.get("/ops/queues/emails/pending/"))
    assert "The host's own header" in page
    assert 'id="qc-messages"' in page and "Queue emails paused" in page


def test_the_host_template_is_the_one_the_readme_shows() -> None:
    override = (HOST_TEMPLATES / "queuecore_dashboard" / "base.html").read_text()
    assert override in README.read_text()
