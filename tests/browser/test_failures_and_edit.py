"""The new operator pages in a real headless chromium, under the dashboard's own strict CSP: a whole
failure group deleted, a failed task's payload edited and run, a task type's figures."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import expect

from queuecore import Client, Inspector
from tests.adminctl.test_failures import seed_failures
from tests.browser.conftest import screenshot
from tests.browser.test_console import RECORD_VIOLATIONS


def no_violations(page: Any) -> None:
    assert page.evaluate("window.__qcViolations") == []


def test_delete_a_failure_group(operator_page: Any, redis_client: Any, connection: Any, client: Client,
                                inspector: Inspector) -> None:
    page = operator_page
    page.add_init_script(RECORD_VIOLATIONS)
    seed_failures(redis_client, connection, client)
    group = inspector.failure_groups().groups[0]
    page.goto("/queues/failures/")
    row = page.locator(f"tr[data-qc-failure-group='{group.key}']")
    expect(row).to_contain_text("card <n> declined for order <n>")
    expect(row.locator("[data-qc-failure-count]")).to_contain_text("5")
    screenshot(page, "failures")
    row.get_by_role("button", name="Delete").click()  # the confirm() dialog is accepted by the fixture
    panel = page.locator("#qc-bulk-jobs [data-qc-bulk-job]")  # a bulk job: its panel, live, until it ends
    expect(panel).to_contain_text(f"Delete tasks of failure group {group.key} in every queue")
    expect(panel.locator("[data-qc-bulk-summary]")).to_contain_text("Deleted 5 task(s)")
    expect(row).to_have_count(0)
    assert inspector.count("billing", "archived") == 0 and inspector.count("mail", "retry") == 0
    no_violations(page)


def test_edit_a_payload_and_run(operator_page: Any, client: Client, inspector: Inspector) -> None:
    page = operator_page
    page.add_init_script(RECORD_VIOLATIONS)
    info = client.enqueue("t.offline", {"amount": -5}, process_in=3600)
    page.goto(f"/queues/default/tasks/{info.id}/")
    page.get_by_text("Edit the payload and run it").click()
    page.get_by_label("New payload (a JSON object)").fill('{"amount": 5}')
    page.get_by_label("Run it even if no live worker's handler takes this payload").check()
    page.get_by_role("button", name="Save and run").click()
    expect(page.locator(".qc-message-success", has_text="has its new payload and waits in pending")).to_be_visible()
    expect(page.locator("[data-qc-task-edits]")).to_contain_text('{"amount":-5}')
    task = inspector.get_task("default", info.id)
    assert (task.state, task.payload) == ("pending", {"amount": 5})
    no_violations(page)
