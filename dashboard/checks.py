"""System checks for the dashboard's requirements (``manage.py check``)."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, Tags, Warning, register

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


LOGIN_HINT = ('Set LOGIN_URL = "admin:login" (the Django admin\'s login page, with django.contrib.admin '
              'and its URLs; dashboard users are staff), or to the name or path of your own login view.')


@register(Tags.urls)
def check_login(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``LOGIN_URL``, where the dashboard sends visitors who are not logged in, is a working page of
    this site; a configured ``LOGOUT_URL`` resolves."""
    from django.conf import settings
    from django.contrib.auth.views import LoginView
    from django.template import TemplateDoesNotExist
    from django.template.loader import get_template

    from queuecore.conf import merged_settings

    from .access import is_external, match_of, url_of

    messages: list[CheckMessage] = []
    login = str(settings.LOGIN_URL)
    match = match_of(login)
    if match is None and not is_external(login):
        messages.append(Warning(
            f"LOGIN_URL {login!r} does not resolve to a page of this site: the queue dashboard sends visitors "
            "who are not logged in there (a 404).", hint=LOGIN_HINT, id="queuecore_dashboard.W001"))
    elif match is not None:
        view_class = getattr(match.func, "view_class", None)
        if isinstance(view_class, type) and issubclass(view_class, LoginView):
            template = (getattr(match.func, "view_initkwargs", {}).get("template_name")
                        or getattr(view_class, "template_name", None) or "registration/login.html")
            try:
                get_template(template)
            except TemplateDoesNotExist:
                messages.append(Warning(
                    f"LOGIN_URL {login!r} is Django's LoginView, whose template {template!r} does not exist: "
                    "the login page would fail (a 500).",
                    hint=f"Add the template {template!r} (a form posting username and password), "
                         'or set LOGIN_URL = "admin:login".', id="queuecore_dashboard.W002"))
    logout = merged_settings()["DASHBOARD"].get("LOGOUT_URL")
    if logout and url_of(str(logout)) is None:
        messages.append(Warning(
            f"QUEUECORE['DASHBOARD']['LOGOUT_URL'] {logout!r} does not resolve: the dashboard shows no Log out.",
            hint="Give the name or the path of your logout view (e.g. \"admin:logout\"), or None to use the "
                 "URL named like LOGIN_URL's with \"logout\" for \"login\".", id="queuecore_dashboard.W003"))
    return messages


def _check_dashboard_setting() -> list[Error]:
    """``QUEUECORE["DASHBOARD"]``'s problems, as the requests find them (``settings_check``)."""
    from queuecore.conf import merged_settings

    from .settings_check import read_dashboard_settings

    return [Error(problem.message, id=problem.id)
            for problem in read_dashboard_settings(merged_settings()["DASHBOARD"]).problems]
