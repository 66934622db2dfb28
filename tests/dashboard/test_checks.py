"""The dashboard's system checks report exactly what is missing."""

from __future__ import annotations

from typing import Any

from django.test import override_settings

from queuecore_dashboard.checks import check_dashboard
from tests import settings as test_settings


def test_the_test_settings_pass() -> None:
    assert check_dashboard() == []


def test_htmx_middleware_missing() -> None:
    middleware = [m for m in test_settings.MIDDLEWARE if "htmx" not in m]
    with override_settings(MIDDLEWARE=middleware):
        (error,) = check_dashboard()
    assert error.id == "queuecore_dashboard.E001"
    assert error.msg == "The queuecore dashboard needs 'django_htmx.middleware.HtmxMiddleware' in MIDDLEWARE."


def test_apps_and_middleware_missing() -> None:
    apps = [a for a in test_settings.INSTALLED_APPS if a not in ("django.contrib.sessions", "django_htmx")]
    middleware = [m for m in test_settings.MIDDLEWARE if "sessions" not in m and "messages" not in m]
    with override_settings(INSTALLED_APPS=apps, MIDDLEWARE=middleware):
        errors = check_dashboard()
    assert [(e.id, e.msg) for e in errors] == [
        ("queuecore_dashboard.E002",
         "The queuecore dashboard needs these apps in INSTALLED_APPS: django.contrib.sessions, django_htmx."),
        ("queuecore_dashboard.E003",
         "The queuecore dashboard needs these in MIDDLEWARE: django.contrib.sessions.middleware.SessionMiddleware, "
         "django.contrib.messages.middleware.MessageMiddleware."),
    ]


def test_check_is_registered(settings: Any) -> None:
    from django.core import checks

    settings.MIDDLEWARE = [m for m in test_settings.MIDDLEWARE if "htmx" not in m]
    assert "queuecore_dashboard.E001" in [m.id for m in checks.run_checks()]


def test_dashboard_settings_are_checked(settings: Any) -> None:
    settings.QUEUECORE = {"DASHBOARD": {"ACCESS_CALLBACK": "no.such.callback", "POLL_INTERVAL": 0,
                                        "PAGE_SIZE": "25"}}
    errors = check_dashboard()
    assert [e.id for e in errors] == ["queuecore_dashboard.E004", "queuecore_dashboard.E005",
                                      "queuecore_dashboard.E005"]
    assert "cannot import 'no.such.callback'" in errors[0].msg
    assert errors[1].msg == ("QUEUECORE['DASHBOARD']['POLL_INTERVAL'] must be a number of seconds from 0.5 to 3600, "
                             "not 0.")
    assert errors[2].msg == "QUEUECORE['DASHBOARD']['PAGE_SIZE'] must be an integer from 1 to 500, not '25'."
    for poll in (float("nan"), float("inf"), 0.1, 7200):  # the pages said "every nan s", "every inf s"
        settings.QUEUECORE = {"DASHBOARD": {"POLL_INTERVAL": poll}}
        assert [e.id for e in check_dashboard()] == ["queuecore_dashboard.E005"], poll
    settings.QUEUECORE = {"DASHBOARD": {"ACCESS_CALLBACK": "queuecore_dashboard.access.default_access",
                                        "POLL_INTERVAL": 2.5}}
    assert check_dashboard() == []


def test_an_access_callback_that_is_not_callable_is_an_error(settings: Any) -> None:
    settings.QUEUECORE = {"DASHBOARD": {"ACCESS_CALLBACK": "os.sep"}}  # imports, but a request would call a string
    assert [(e.id, e.msg) for e in check_dashboard()] == [
        ("queuecore_dashboard.E004", "QUEUECORE['DASHBOARD']['ACCESS_CALLBACK']: 'os.sep' is not callable.")]
