"""In a real headless chromium: the servers page tells running tasks from tasks fetched ahead, and a
failed task's page shows its attempts (issue 11, items 8 and 10)."""

from __future__ import annotations

import threading
from typing import Any

from playwright.sync_api import expect

from queuecore import Client, Inspector, current_task, task
from tests.browser.conftest import screenshot
from tests.conftest import wait_until


def test_servers_page_shows_busy_of_concurrency_and_fetched_ahead(operator_page: Any, client: Client,
                                                                  inspector: Inspector, make_worker: Any,
                                                                  registry: Any) -> None:
    page = operator_page
    release = threading.Event()

    @task(name="browser.hold", registry=registry)
    def hold(n: int) -> None:
        release.wait(30)

    try:
        ids = [client.enqueue("browser.hold", {"n": n}).id for n in range(3)]
        worker = make_worker(concurrency=1, prefetch=2)
        wait_until(lambda: any(s.waiting_count == 2 for s in inspector.servers()), 15,
                   message="one running task and two fetched ahead in the heartbeat")
        page.goto("/queues/servers/")
        card = page.locator(f"[data-qc-server='{worker.server_id}']")
        expect(card.locator("[data-qc-server-busy]")).to_have_text("1 / 1")
        expect(card.locator("[data-qc-server-waiting]")).to_have_text("2")
        expect(card.locator("tr[data-qc-worker-task]")).to_have_count(1)
        expect(card.locator("tr[data-qc-waiting-task]")).to_have_count(2)
        expect(page.locator("[data-qc-stat='busy']")).to_have_text("1")
        expect(page.locator("[data-qc-stat='waiting']")).to_have_text("2")
        screenshot(page, "servers-busy-and-fetched-ahead")
        release.set()  # all finish: the page follows through its polling
        expect(card.locator("tr[data-qc-worker-task]")).to_have_count(0, timeout=15_000)
        expect(card.locator("[data-qc-server-waiting]")).to_have_text("0")
        wait_until(lambda: all(inspector.count("default", s) == 0 for s in ("pending", "active")), 15,
                   message=f"{ids} to finish")
    finally:
        release.set()


def test_a_failed_tasks_page_shows_its_attempts(operator_page: Any, client: Client, inspector: Inspector,
                                               make_worker: Any, registry: Any) -> None:
    page = operator_page

    @task(name="browser.fails", registry=registry)
    def fails() -> None:
        raise ValueError(f"<script>alert('attempt {current_task().retried + 1}')</script>")

    info = client.enqueue("browser.fails", max_retry=1)
    worker = make_worker(retry_delay=lambda retried, error: 0.05)
    wait_until(lambda: inspector.get_task("default", info.id).state == "archived", 15, message="the archive")
    page.goto(f"/queues/default/tasks/{info.id}/")
    rows = page.locator("[data-qc-attempts] tr[data-qc-attempt]")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_contain_text(worker.server_id)
    expect(rows.nth(0)).to_contain_text("failed, retried")
    expect(rows.nth(0)).to_contain_text("ValueError: <script>alert('attempt 1')</script>")  # shown as text
    expect(rows.nth(1)).to_contain_text("failed, archived")
    expect(page.locator("dt", has_text="Last attempt started")).to_be_visible()
    screenshot(page, "task-attempts")
