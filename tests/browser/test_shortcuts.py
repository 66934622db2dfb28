"""Keyboard shortcuts and the refresh interval an operator chooses, in headless chromium under the
dashboard's strict CSP."""

from __future__ import annotations

import re
from typing import Any

from playwright.sync_api import expect

from queuecore import Client
from tests.browser.test_console import RECORD_VIOLATIONS


def test_shortcuts_navigate_focus_and_page(operator_page: Any, client: Client) -> None:
    page = operator_page
    page.add_init_script(RECORD_VIOLATIONS)
    for n in range(30):  # two pages of 25
        client.enqueue("t.a", {"n": n})
    page.goto("/queues/default/pending/")
    page.keyboard.press("?")
    expect(page.locator("#qc-shortcuts")).to_be_visible()
    page.keyboard.press("Escape")
    expect(page.locator("#qc-shortcuts")).to_be_hidden()
    page.keyboard.press("]")
    expect(page).to_have_url(re.compile(r"page=2"))
    expect(page.locator("a[rel=prev]")).to_be_visible()  # on page 2, there is a way back
    page.keyboard.press("/")
    expect(page.locator('input[type="search"]')).to_be_focused()
    page.keyboard.type("g")  # typed into the box: not a shortcut
    expect(page.locator('input[type="search"]')).to_have_value("g")
    page.locator("body").click()
    page.keyboard.press("g")
    page.keyboard.press("s")
    expect(page.locator('.qc-nav a[aria-current="page"]')).to_have_text("Servers")
    page.wait_for_load_state("load")  # its scripts (deferred) are in before the next key
    page.keyboard.press("l")
    expect(page.locator("[data-qc-live-toggle]")).to_have_attribute("aria-pressed", "false")
    page.keyboard.press("l")
    assert page.evaluate("window.__qcViolations") == []


def test_the_chosen_refresh_interval_is_used_and_remembered(operator_page: Any) -> None:
    page = operator_page
    page.goto("/queues/")
    page.locator("select[data-qc-interval]").select_option("15")
    assert page.evaluate("window.qcPollOverride") == 15
    page.reload()
    expect(page.locator("select[data-qc-interval]")).to_have_value("15")
    assert page.evaluate("window.qcPollOverride") == 15
    page.locator("select[data-qc-interval]").select_option("")
    assert page.evaluate("window.qcPollOverride") is None
