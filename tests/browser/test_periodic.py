"""The periodic tasks page in a real headless chromium: pause, resume and run an entry now through htmx."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import expect

from queuecore import Inspector
from tests.browser.conftest import screenshot
from tests.core.test_periodic_inspector import declare


def test_pause_resume_and_run_a_periodic_task(operator_page: Any, redis_client: Any, connection: Any,
                                              inspector: Inspector) -> None:
    page = operator_page
    declare(redis_client, connection)
    page.goto("/queues/periodic/")
    page.evaluate("window.__sameDocument = true")
    ping = page.locator("tr[data-qc-periodic='ping']")
    expect(ping).to_contain_text("every hour")
    ping.get_by_role("button", name="Pause ping").click()
    expect(ping.locator("[data-qc-periodic-paused]")).to_be_visible()
    expect(page.locator(".qc-message-success", has_text="Periodic task ping paused")).to_be_visible()
    assert inspector.periodic_entry("ping").paused
    ping.get_by_role("button", name="Resume ping").click()
    expect(ping.locator("[data-qc-periodic-paused]")).to_have_count(0)
    assert not inspector.periodic_entry("ping").paused
    nightly = page.locator("tr[data-qc-periodic='nightly']")
    nightly.get_by_role("button", name="Run nightly now").click()
    expect(page.locator(".qc-message-success", has_text="Periodic task nightly enqueued now")).to_be_visible()
    expect(nightly.locator("[data-qc-periodic-outcome]")).to_have_text("pending")
    entry = inspector.periodic_entry("nightly")
    assert entry.last_kind == "manual" and inspector.get_task("low", entry.last_task_id).state == "pending"
    assert page.evaluate("window.__sameDocument") is True  # every action swapped a fragment, no reload
    screenshot(page, "periodic")
