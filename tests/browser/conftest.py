"""Browser tests: Debian's chromium driven by Playwright's Python package, against pytest-django's live_server.

The browser is never downloaded: it is launched from ``/usr/bin/chromium`` (``executable_path``);
without it the tests are skipped with the reason. Screenshots go to ``tests/artifacts/screenshots/``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
SCREENSHOTS = Path(__file__).resolve().parents[1] / "artifacts" / "screenshots"
PASSWORD = "correct horse battery staple"


def chromium_path() -> str | None:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    return "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    """One chromium for the browser tests, closed after the last of them.

    While it runs, Playwright's sync API keeps an event loop running in this thread, so Django
    would refuse the ORM calls the tests make (creating users): ``DJANGO_ALLOW_ASYNC_UNSAFE`` is
    set for that time only, and the loop is gone before the other test packages run.
    """
    executable = chromium_path()
    if executable is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium); browser tests need it")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright Python package is not installed (pip install playwright)")
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as p:
            instance = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
            yield instance
            instance.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture(autouse=True)
def dashboard_settings(settings: Any, redis_url: str, key_prefix: str) -> Any:
    """The dashboard reads the test's own key prefix and polls every second."""
    settings.QUEUECORE = {"REDIS_URL": redis_url, "KEY_PREFIX": key_prefix,
                          "DASHBOARD": {"POLL_INTERVAL": 1, "PAGE_SIZE": 25}}
    return settings


@pytest.fixture
def page(browser: Any, live_server: Any) -> Iterator[Any]:
    """A fresh browser tab (its own cookies) on the live server; confirm() dialogs are accepted."""
    from playwright.sync_api import expect

    expect.set_options(timeout=15_000)
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1400, "height": 900},
                                  locale="en-GB", timezone_id="UTC")
    tab = context.new_page()
    tab.on("dialog", lambda dialog: dialog.accept())
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    yield tab
    # A route handler (a test's own proxy, e.g. one adding a host's policy) may be mid-fetch when the
    # test ends: let it finish before the context closes, or its error surfaces in the next test.
    tab.unroute_all(behavior="wait")
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


@pytest.fixture
def make_operator(transactional_db: None) -> Callable[..., Any]:
    """A dashboard user: ``make_operator("olga")`` (view + operate), ``make_operator("vic", operate=False)``."""
    from django.contrib.auth.models import Permission, User

    def factory(username: str = "operator", *, operate: bool = True) -> Any:
        user = User.objects.create_user(username, password=PASSWORD, is_staff=True)
        codenames = ["view_dashboard", "operate_queues"] if operate else ["view_dashboard"]
        user.user_permissions.set(Permission.objects.filter(content_type__app_label="queuecore_dashboard",
                                                            codename__in=codenames))
        return user

    return factory


def log_in(page: Any, username: str, password: str = PASSWORD, next_path: str = "/queues/") -> None:
    from playwright.sync_api import expect

    page.goto(f"/accounts/login/?next={next_path}")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    expect(page.locator(".qc-user")).to_contain_text(username)


@pytest.fixture
def operator_page(page: Any, make_operator: Callable[..., Any]) -> Any:
    """A tab logged in as an operator (view and operate permissions)."""
    make_operator("operator")
    log_in(page, "operator")
    return page


def screenshot(page: Any, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
