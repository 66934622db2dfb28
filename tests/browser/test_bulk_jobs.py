"""Bulk jobs in a real headless chromium (issue 16, item 2): "all" starts a job whose panel shows its
progress live and can be cancelled; the Bulk jobs page lists it; what it did is audited.

No sleeps: the job's driver is held on a ``threading.Event`` between two chunks, and waits are for
elements."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from playwright.sync_api import expect

from queuecore import Client, Inspector
from queuecore.core.inspector import InspectorBulkOperations


def test_a_bulk_job_shows_its_progress_and_stops_when_cancelled(operator_page: Any, client: Client,
                                                                  inspector: Inspector,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    page = operator_page
    client.enqueue_many([("browser.noop", {"n": n}) for n in range(1_500)], queue="big", process_in=3600)
    first_done, release = threading.Event(), threading.Event()
    chunk = InspectorBulkOperations.state_chunk
    calls: list[int] = []

    def held_after_the_first(self: InspectorBulkOperations, *args: Any) -> int:
        if calls:  # the second chunk waits until the test has looked and cancelled
            first_done.set()
            assert release.wait(30), "the test never released the job"
        calls.append(1)
        return chunk(self, *args)

    monkeypatch.setattr(InspectorBulkOperations, "state_chunk", held_after_the_first)
    questions: list[str] = []
    page.on("dialog", lambda dialog: (questions.append(dialog.message), dialog.accept()))
    page.goto("/queues/big/scheduled/")
    table = page.locator("#qc-task-table")
    table.locator("[data-qc-select-all]").check()
    table.get_by_role("button", name="Delete").click()
    assert first_done.wait(15)
    panel = page.locator("#qc-bulk-jobs [data-qc-bulk-job]")
    expect(panel).to_have_attribute("data-qc-bulk-status", "running")
    expect(panel.locator("[data-qc-bulk-progress]")).to_contain_text("500 of ~1,500")  # refreshed while it runs
    assert 0.3 < float(panel.locator("progress").get_attribute("value") or 0) < 0.4
    expect(panel).to_contain_text("Delete scheduled tasks of queue big")
    panel.get_by_role("button", name="Cancel").click()
    expect(panel).to_contain_text("stopping after this chunk")
    release.set()
    expect(panel).to_have_attribute("data-qc-bulk-status", "cancelled")
    summary = panel.locator("[data-qc-bulk-summary]")
    expect(summary).to_contain_text("Cancelled: deleted 1,000 task(s) before it stopped")
    assert questions[-1] == "Stop this bulk job? What it has done stays done."
    assert inspector.count("big", "scheduled") == 500
    expect(table.locator("[data-qc-table-count]")).to_contain_text("500")  # the list refreshed when it ended
    panel.locator("[data-qc-dismiss]").click()  # the strip's finished panel can be put away
    expect(panel).to_have_count(0)
    entry = inspector.audit_log()[0]
    assert entry.action == "tasks.delete_all" and entry.count == 1_000 and "cancelled after 1,000" in entry.outcome

    page.get_by_role("link", name="Bulk jobs").click()
    listed = page.locator("[data-qc-bulk-job]").first
    expect(listed).to_have_attribute("data-qc-bulk-status", "cancelled")
    expect(listed).to_contain_text("started by dashboard:")


def test_a_bulk_jobs_panel_waits_while_live_refresh_is_paused(operator_page: Any, client: Client,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A review: the panel refreshed itself every second (htmx "every 1s") whatever Live said, and in a
    hidden tab; it is now one of the panels dashboard.js's timer refreshes."""
    from tests.browser.test_console import wait_ticks

    page = operator_page
    client.enqueue_many([("browser.noop", {"n": n}) for n in range(1_000)], queue="big", process_in=3600)
    first_done, release = threading.Event(), threading.Event()
    chunk = InspectorBulkOperations.state_chunk

    def held_after_the_first(self: InspectorBulkOperations, *args: Any) -> int:
        if first_done.is_set():
            assert release.wait(30), "the test never released the job"
        first_done.set()
        return chunk(self, *args)

    monkeypatch.setattr(InspectorBulkOperations, "state_chunk", held_after_the_first)
    page.on("dialog", lambda dialog: dialog.accept())
    page.goto("/queues/big/scheduled/")
    page.locator("#qc-task-table [data-qc-select-all]").check()
    page.locator("#qc-task-table").get_by_role("button", name="Delete").click()
    panel = page.locator("#qc-bulk-jobs [data-qc-bulk-job]")
    expect(panel.locator("[data-qc-bulk-progress]")).to_contain_text("500 of ~1,000")
    job_url = f"bulk/_/{panel.get_attribute('data-qc-bulk-job')}/"
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url) if job_url in request.url else None)
    page.locator("[data-qc-live-toggle]").click()
    expect(page.locator("[data-qc-live-toggle]")).to_have_attribute("aria-pressed", "false")
    asked.clear()
    wait_ticks(page, 12)  # three seconds of the refresh timer
    assert asked == []
    release.set()
    page.locator("[data-qc-live-toggle]").click()  # resumed: the panel catches up
    expect(panel).to_have_attribute("data-qc-bulk-status", "done")
    assert asked
