"""A timed pause in a real headless chromium: choose how long beside Pause; the choice survives the
panel's refreshes; the page then says until when and who paused the queue."""

from __future__ import annotations

import time
from typing import Any

from playwright.sync_api import expect

from queuecore import Inspector


def test_pause_a_queue_for_a_chosen_while(operator_page: Any, client: Any, inspector: Inspector) -> None:
    page = operator_page
    client.enqueue("browser.noop", queue="mail")
    page.goto("/queues/mail/pending/")
    page.get_by_label("Pause queue for").select_option("1800")
    page.wait_for_timeout(2500)  # the header refreshes every second: a chosen duration must survive it
    expect(page.get_by_label("Pause queue for")).to_have_value("1800")
    page.get_by_role("button", name="Pause queue").click()
    expect(page.locator("[data-qc-paused-until]")).to_contain_text("Paused until")
    info = inspector.queue_info("mail")
    assert info.paused and info.paused_until is not None
    assert 1790 < info.paused_until.timestamp() - time.time() <= 1800
    expect(page.locator("[data-qc-paused-until]")).to_contain_text(info.paused_by or "?")
    expect(page.locator(".qc-message-success")).to_contain_text("paused for 30m")

    page.goto("/queues/")
    row = page.locator("tr[data-qc-queue='mail']")
    expect(row.locator("[data-qc-paused-until]")).to_contain_text("until in 29m")
