"""System checks for the dashboard's requirements (``manage.py check``)."""

from __future__ import annotations

from typing import Any

from django.core.checks import Error, Tags, register

HTMX_MIDDLEWARE = "django_htmx.middleware.HtmxMiddleware"
REQUIRED_APPS = (
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django_htmx",
    "queuecore",
)
REQUIRED_MIDDLEWARE = (
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
)


@register(Tags.compatibility)
def check_dashboard(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """The htmx middleware, the apps and the middleware the dashboard relies on are installed."""
    from django.apps import apps
    from django.conf import settings

    middleware = list(getattr(settings, "MIDDLEWARE", None) or [])
    messages = []
    if HTMX_MIDDLEWARE not in middleware:
        messages.append(Error(f"The queuecore dashboard needs '{HTMX_MIDDLEWARE}' in MIDDLEWARE.",
                              hint="Add it after SessionMiddleware and AuthenticationMiddleware.",
                              id="queuecore_dashboard.E001"))
    missing_apps = [name for name in REQUIRED_APPS if not apps.is_installed(name)]
    if missing_apps:
        messages.append(Error(f"The queuecore dashboard needs these apps in INSTALLED_APPS: {', '.join(missing_apps)}.",
                              id="queuecore_dashboard.E002"))
    missing_middleware = [name for name in REQUIRED_MIDDLEWARE if name not in middleware]
    if missing_middleware:
        messages.append(Error(f"The queuecore dashboard needs these in MIDDLEWARE: {', '.join(missing_middleware)}.",
                              id="queuecore_dashboard.E003"))
    messages += _check_dashboard_setting()
    return messages


def _check_dashboard_setting() -> list[Error]:
    from django.utils.module_loading import import_string

    from queuecore.conf import merged_settings

    dash = merged_settings()["DASHBOARD"]
    out = []
    path = dash.get("ACCESS_CALLBACK")
    if path:
        try:
            import_string(path)
        except (ImportError, TypeError, ValueError) as exc:
            out.append(Error(f"QUEUECORE['DASHBOARD']['ACCESS_CALLBACK']: cannot import {path!r} ({exc}).",
                             id="queuecore_dashboard.E004"))
    poll, size = dash.get("POLL_INTERVAL"), dash.get("PAGE_SIZE")
    if isinstance(poll, bool) or not isinstance(poll, (int, float)) or poll <= 0:
        out.append(Error(f"QUEUECORE['DASHBOARD']['POLL_INTERVAL'] must be a positive number of seconds, not {poll!r}.",
                         id="queuecore_dashboard.E005"))
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= 1000:
        out.append(Error(f"QUEUECORE['DASHBOARD']['PAGE_SIZE'] must be an integer from 1 to 1000, not {size!r}.",
                         id="queuecore_dashboard.E005"))
    return out
