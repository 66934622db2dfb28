"""Who may see the dashboard and who may act: one decorator calling ``ACCESS_CALLBACK``.

``QUEUECORE["DASHBOARD"]["ACCESS_CALLBACK"]`` is a dotted path to ``f(request, level) -> bool``,
``level`` being ``"view"`` or ``"operate"``. The default, ``default_access``, lets active staff
with the view permission see, and those with the operate permission act; superusers have both.

While ``QUEUECORE["DASHBOARD"]`` has a value the dashboard cannot use (``settings_check``), every
request gets a "Dashboard misconfigured" page (500) instead, naming the problems to staff only.

Visitors who are not logged in go to the host's ``LOGIN_URL`` (``manage.py check`` warns when it
does not resolve); the Log out button posts to ``logout_url()``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import NoReverseMatch, Resolver404, ResolverMatch, get_script_prefix, resolve, reverse
from django_htmx.http import HttpResponseClientRedirect

from .settings_check import Problem, dashboard_settings, describe

VIEW = "view"
OPERATE = "operate"
VIEW_PERMISSION = "queuecore_dashboard.view_dashboard"
OPERATE_PERMISSION = "queuecore_dashboard.operate_queues"


def default_access(request: HttpRequest, level: str) -> bool:
    """Active staff with the view (or operate) permission see; only the operate permission acts."""
    user = request.user
    if not (user.is_active and user.is_staff):
        return False
    if level == OPERATE:
        return user.has_perm(OPERATE_PERMISSION)
    return user.has_perm(VIEW_PERMISSION) or user.has_perm(OPERATE_PERMISSION)


def access_callback() -> Callable[[HttpRequest, str], bool]:
    """``ACCESS_CALLBACK`` (imported once per configuration), else ``default_access``;
    ``ImproperlyConfigured`` while the dashboard's settings have problems."""
    checked = dashboard_settings()
    if checked.problems:
        raise ImproperlyConfigured(describe(checked.problems))
    return checked.access_callback or default_access


def allowed(request: HttpRequest, level: str) -> bool:
    return bool(access_callback()(request, level))


def dashboard_access(level: str = VIEW) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """Let the view run only for users the callback allows at ``level``.

    Anonymous users go to the login page (htmx requests through ``HX-Redirect``); then, while the
    settings have problems, everyone gets the "Dashboard misconfigured" page; others who are not
    allowed get a 403 page. Sets ``request.qc_can_operate`` for the templates.
    """

    def decorate(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                return _to_login(request)
            problems = dashboard_settings().problems
            if problems:
                return _misconfigured(request, problems)
            callback = access_callback()
            if not callback(request, level):
                message = ("Your account may see the dashboard but not act on queues and tasks."
                           if level == OPERATE and callback(request, VIEW)
                           else "Your account may not see the queue dashboard.")
                return render(request, "queuecore_dashboard/error.html",
                              {"title": "Not allowed", "message": message, "status": 403, "can_operate": False,
                               "request": request, "poll": dashboard_settings().poll_interval},
                              status=403)
            request.qc_can_operate = level == OPERATE or bool(callback(request, OPERATE))
            return view(request, *args, **kwargs)

        return wrapper

    return decorate


def _misconfigured(request: HttpRequest, problems: tuple[Problem, ...]) -> HttpResponse:
    """The error page for settings the dashboard cannot use: a 500, as it is the site's fault and lasts
    until someone fixes the settings (not a 503: retrying does not help). Only staff see the problems;
    the log has them for everyone else (``dashboard_settings``)."""
    title = "Dashboard misconfigured"
    if getattr(request.user, "is_staff", False):
        message = ('The QUEUECORE["DASHBOARD"] setting of this site has values the dashboard cannot use; '
                   "fix them and restart the site (manage.py check reports them too).")
        detail = "\n".join(problem.message for problem in problems)
        banner = f"{title}: {describe(problems)}"
    else:
        message = "The queue dashboard is misconfigured; the site's log says why."
        detail, banner = "", f"{title}; the site's log says why."
    response = render(request, "queuecore_dashboard/error.html",
                      {"title": title, "message": message, "detail": detail, "status": 500, "can_operate": False,
                       "request": request, "poll": dashboard_settings().poll_interval}, status=500)
    set_error_banner(response, banner)
    return response


def set_error_banner(response: HttpResponse, line: str) -> None:
    """Set the ``X-Qc-Error`` header of an error page: the line dashboard.js shows in its banner when an
    htmx request (a refresh, an action) gets the page, which htmx does not swap in."""
    line = " ".join(line.split())[:300]
    response["X-Qc-Error"] = line.encode("ascii", "backslashreplace").decode("ascii")  # header-safe


def _to_login(request: HttpRequest) -> HttpResponse:
    htmx = getattr(request, "htmx", None)
    if htmx:
        # A poll or action after the session expired: send the whole page to the login form.
        response = redirect_to_login(htmx.current_url_abs_path or request.get_full_path())
        return HttpResponseClientRedirect(response["Location"])
    return redirect_to_login(request.get_full_path())


def url_of(value: str) -> str | None:
    """A URL name (``"admin:login"``) reversed, or a path or absolute URL as given; ``None`` for a name
    that does not reverse."""
    try:
        return reverse(value)
    except NoReverseMatch:
        return value if "/" in value else None


def is_external(value: str) -> bool:
    """A URL of another site (a single sign-on server): nothing to resolve here."""
    return "://" in value or value.startswith("//")


def match_of(value: str) -> ResolverMatch | None:
    """Which view of this site a URL name or path (``LOGIN_URL``) leads to; ``None`` when none does."""
    path = url_of(value)
    if path is None or is_external(path):
        return None
    prefix = get_script_prefix()
    if path.startswith(prefix):
        path = "/" + path[len(prefix):]
    try:
        return resolve(path.split("?", 1)[0])
    except Resolver404:
        return None


def logout_url() -> str | None:
    """Where the Log out button posts: ``QUEUECORE["DASHBOARD"]["LOGOUT_URL"]`` when set, else the URL
    named like ``LOGIN_URL``'s with ``logout`` for ``login`` (``admin:login`` -> ``admin:logout``,
    ``login`` -> ``logout``, ``account_login`` -> ``account_logout``); ``None`` (no button) when
    neither resolves."""
    from django.conf import settings

    configured = dashboard_settings().logout_url
    if configured:
        return url_of(configured)
    match = match_of(str(settings.LOGIN_URL))
    if match is None or "login" not in match.view_name:
        return None
    head, _, tail = match.view_name.rpartition("login")
    try:
        return reverse(f"{head}logout{tail}")
    except NoReverseMatch:
        return None
