"""``QUEUECORE["DASHBOARD"]`` read and checked in one place, for ``manage.py check`` and for every request.

A site served by gunicorn never runs the checks, so the dashboard checks its settings where they enter:
``dashboard_access`` answers every request with an error page while ``dashboard_settings()`` has
problems, and the views use its values (never the raw setting).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from queuecore.conf import DEFAULTS, Config, get_config, import_path, setting_message
from queuecore.core.errors import ConfigurationError

logger = logging.getLogger("queuecore.dashboard")

MIN_POLL_INTERVAL, MAX_POLL_INTERVAL = 0.5, 3600  # seconds; the pages poll at most every 0.5 s (dashboard.js)
MAX_PAGE_SIZE = 500  # tasks on one page of a task list


class Problem(NamedTuple):
    """What is wrong with a setting, and the id of the system check that reports it."""

    message: str
    id: str


@dataclass(frozen=True)
class DashboardSettings:
    """The dashboard's settings, checked. A value with a problem holds its default instead (the access
    callback: ``None``), but nothing may be served while there are ``problems``."""

    poll_interval: float
    page_size: int
    access_callback: Callable[..., Any] | None  # None: the default (``access.default_access``)
    logout_url: str | None = None  # as given (a URL name or path); None: derived from LOGIN_URL
    problems: tuple[Problem, ...] = ()


def describe(problems: tuple[Problem, ...]) -> str:
    """The problems' messages on one line."""
    return " ".join(problem.message for problem in problems)


def read_dashboard_settings(dash: dict[str, Any]) -> DashboardSettings:
    """``dash`` (the merged ``QUEUECORE["DASHBOARD"]``) checked: its values, and every problem found."""
    problems = []
    callback = None
    path = dash.get("ACCESS_CALLBACK")
    if path not in (None, ""):
        setting = "QUEUECORE['DASHBOARD']['ACCESS_CALLBACK']"
        try:
            if not isinstance(path, str):
                raise ConfigurationError(f"cannot import {path!r} (a dotted path is a string)")
            callback = import_path(path)
            if not callable(callback):
                raise ConfigurationError(f"{path!r} is not callable")
        except ConfigurationError as exc:
            problems.append(Problem(f"{setting}: {exc}.", "queuecore_dashboard.E004"))
            callback = None
    poll, size = dash.get("POLL_INTERVAL"), dash.get("PAGE_SIZE")
    # The pages say how often they poll: NaN and infinity passed a "> 0" check and were shown as "every nan s".
    if (isinstance(poll, bool) or not isinstance(poll, (int, float))
            or not MIN_POLL_INTERVAL <= poll <= MAX_POLL_INTERVAL):
        problems.append(Problem(f"QUEUECORE['DASHBOARD']['POLL_INTERVAL'] must be a number of seconds from "
                                f"{MIN_POLL_INTERVAL} to {MAX_POLL_INTERVAL}, not {poll!r}.",
                                "queuecore_dashboard.E005"))
        poll = DEFAULTS["DASHBOARD"]["POLL_INTERVAL"]
    # A page's "select all" posts one field per task: Django refuses a form of over 1,000 fields
    # (DATA_UPLOAD_MAX_NUMBER_FIELDS) with a bare 400, so a page holds at most 500.
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_PAGE_SIZE:
        problems.append(Problem(f"QUEUECORE['DASHBOARD']['PAGE_SIZE'] must be an integer from 1 to {MAX_PAGE_SIZE}, "
                                f"not {size!r}.", "queuecore_dashboard.E005"))
        size = DEFAULTS["DASHBOARD"]["PAGE_SIZE"]
    logout = dash.get("LOGOUT_URL")  # one that does not resolve only hides the button (warning W003)
    return DashboardSettings(poll_interval=poll, page_size=size, access_callback=callback,
                             logout_url=str(logout) if logout else None, problems=tuple(problems))


_checked: tuple[Config, DashboardSettings] | None = None  # for the get_config() object it was read from
_unusable: str | None = None  # the connection setting's problem last logged (get_config() refused it)
_lock = threading.Lock()


def dashboard_settings() -> DashboardSettings:
    """The current settings, checked once per ``get_config()`` object: that is cached, and rebuilt only
    when settings change (``override_settings`` in tests). Problems are logged at ERROR when found, so
    once per process in production, however often the pages poll."""
    global _checked, _unusable
    try:
        config = get_config()
    except ConfigurationError as exc:  # REDIS_URL or KEY_PREFIX: nothing the dashboard shows would work
        message = setting_message(exc)
        with _lock:
            first, _unusable = _unusable != message, message
        if first:
            logger.error("The queuecore dashboard answers every request with an error page until the settings "
                         "are fixed: %s", message)
        return DashboardSettings(poll_interval=DEFAULTS["DASHBOARD"]["POLL_INTERVAL"],
                                 page_size=DEFAULTS["DASHBOARD"]["PAGE_SIZE"], access_callback=None,
                                 problems=(Problem(message, "queuecore.E002"),))
    checked = _checked
    if checked is None or checked[0] is not config:
        with _lock:
            checked = _checked
            if checked is None or checked[0] is not config:
                checked = _checked = (config, read_dashboard_settings(config.dashboard))
                if checked[1].problems:
                    logger.error("The queuecore dashboard answers every request with an error page until its "
                                 "settings are fixed: %s", describe(checked[1].problems))
    return checked[1]
