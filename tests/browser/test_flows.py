"""End-to-end flows in a real headless chromium: log in, watch a queue fill, act on tasks, pause a queue."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from queuecore import Client, Inspector, current_task, task
from tests.browser.conftest import PASSWORD, log_in, screenshot
from tests.conftest import wait_until


def test_login_is_required_and_lands_on_the_overview(page: Any, make_operator: Any) -> None:
    make_operator("olga")
    page.goto("/queues/")
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/queues/$"))
    page.get_by_label("Username").fill("olga")
    page.get_by_label("Password").fill("wrong")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("alert")).to_contain_text("enter a correct username and password")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(re.compile(r"/queues/$"))
    expect(page.get_by_role("heading", name="Queues", exact=True).first).to_be_visible()
    expect(page.locator(".qc-role")).to_have_text("operator")


def test_a_queue_fills_and_drains_while_a_worker_runs_without_a_reload(operator_page: Any, client: Any,
                                                                      make_worker: Any, registry: Any) -> None:
    page = operator_page

    @task(name="browser.work", registry=registry)
    def work(n: int) -> int:
        return n

    expect(page.locator("#qc-queue-table")).to_contain_text("No queues yet")
    page.evaluate("window.__sameDocument = true")
    for n in range(12):
        client.enqueue("browser.work", {"n": n}, queue="fill")
    row = page.locator("tr[data-qc-queue='fill']")
    expect(row.locator("[data-qc-cell='pending']")).to_have_text("12")  # appears through htmx polling
    expect(page.locator("[data-qc-total='pending']")).to_have_text("12")

    make_worker(queues={"fill": 1}, concurrency=4)
    expect(row.locator("[data-qc-cell='processed']")).to_have_text("12", timeout=20_000)
    expect(row.locator("[data-qc-cell='pending']")).to_have_text("0")
    expect(page.locator("[data-qc-stat='servers']")).to_have_text("1")
    assert page.evaluate("window.__sameDocument") is True  # the page was never reloaded


def test_retry_an_archived_task(operator_page: Any, client: Any, inspector: Inspector) -> None:
    page = operator_page
    dead = client.enqueue("browser.flaky", {"order": 7}, queue="default", process_in=3600)
    inspector.archive_task("default", dead.id)
    keep = client.enqueue("browser.flaky", {"order": 8}, queue="default", process_in=3600)
    inspector.archive_task("default", keep.id)

    page.goto("/queues/default/archived/")
    expect(page.locator("[data-qc-count='archived']")).to_have_text("2")
    page.get_by_label(f"Select task {dead.id}").check()
    expect(page.locator("[data-qc-selected]")).to_have_text("1 selected")
    page.get_by_role("button", name="Run now").click()
    expect(page.locator(".qc-message-success")).to_contain_text("1 task(s) moved to pending")
    expect(page.locator(f"tr[data-qc-task='{dead.id}']")).to_have_count(0)
    expect(page.locator(f"tr[data-qc-task='{keep.id}']")).to_have_count(1)
    expect(page.locator("[data-qc-count='pending']")).to_have_text("1")  # the header refreshed on the event
    assert inspector.get_task("default", dead.id).state == "pending"
    assert inspector.get_task("default", keep.id).state == "archived"
    entry = inspector.audit_log()[0]
    assert (entry.actor, entry.action, entry.task_ids) == ("dashboard:operator", "tasks.run", [dead.id])

    page.goto("/queues/audit/")
    expect(page.locator("tr[data-qc-audit='tasks.run']")).to_contain_text("dashboard:operator")


def test_cancel_a_running_task(operator_page: Any, client: Any, make_worker: Any, registry: Any,
                               inspector: Inspector) -> None:
    page = operator_page

    @task(name="browser.forever", registry=registry)
    def forever() -> None:
        ctx = current_task()
        while not ctx.wait_cancelled(0.05):
            pass
        ctx.raise_if_cancelled()

    make_worker(queues={"default": 1}, concurrency=2)
    info = client.enqueue("browser.forever")
    wait_until(lambda: inspector.get_task("default", info.id).state == "active", message="the task to start")

    page.goto(f"/queues/default/tasks/{info.id}/")
    expect(page.locator("[data-qc-task-state]")).to_have_text("active")
    expect(page.locator("[data-qc-running-for]")).to_be_visible()
    screenshot(page, "task_active")
    page.get_by_role("button", name="Cancel task").click()
    # The task page polls while the task is not finished: it turns archived without a reload.
    expect(page.locator("[data-qc-task-state]")).to_have_text("archived", timeout=20_000)
    expect(page.locator("[data-qc-error]")).to_contain_text("cancel")
    assert inspector.get_task("default", info.id).state == "archived"
    assert inspector.audit_log()[0].action == "task.cancel"


def test_pause_and_unpause_a_queue(operator_page: Any, client: Any, inspector: Inspector) -> None:
    page = operator_page
    client.enqueue("browser.noop", queue="mail")
    page.goto("/queues/")
    row = page.locator("tr[data-qc-queue='mail']")
    expect(row.locator(".qc-badge")).to_have_text("running")
    row.get_by_role("button", name="Pause mail").click()
    expect(row.locator(".qc-badge")).to_have_text("paused")
    expect(page.locator(".qc-message-success")).to_contain_text("Queue mail paused")
    assert inspector.queue_info("mail").paused

    page.goto("/queues/mail/pending/")
    expect(page.locator("[data-qc-paused]")).to_be_visible()
    page.get_by_role("button", name="Unpause queue").click()
    expect(page.locator("[data-qc-paused]")).to_have_count(0)
    expect(page.locator(".qc-message-success")).to_contain_text("Queue mail unpaused")
    assert not inspector.queue_info("mail").paused
    assert [e.action for e in inspector.audit_log()[:2]] == ["queue.unpause", "queue.pause"]


def test_a_script_in_a_payload_shows_as_text(operator_page: Any, client: Any, inspector: Inspector) -> None:
    page = operator_page
    evil = "<script>window.__xss=1</script>"
    info = client.enqueue("browser.evil", {"note": evil}, queue="default")
    page.goto("/queues/default/pending/")
    expect(page.locator(f"tr[data-qc-task='{info.id}'] .qc-payload")).to_contain_text(evil)
    with page.expect_response(lambda r: "/queues/default/pending/" in r.url and r.request.headers.get("hx-request")):
        pass  # the next poll swaps the table in again through htmx
    expect(page.locator(f"tr[data-qc-task='{info.id}'] .qc-payload")).to_contain_text(evil)
    assert page.evaluate("typeof window.__xss") == "undefined"

    page.goto(f"/queues/default/tasks/{info.id}/")
    expect(page.locator("[data-qc-payload]")).to_contain_text(evil)
    assert page.evaluate("typeof window.__xss") == "undefined"
    assert page.evaluate("[...document.scripts].some(s => s.textContent.includes('__xss'))") is False


def test_the_live_refresh_can_be_paused_and_resumed(operator_page: Any) -> None:
    page = operator_page
    toggle = page.locator("[data-qc-live-toggle]")
    expect(toggle).to_have_attribute("aria-pressed", "true")
    toggle.click()
    expect(toggle).to_have_attribute("aria-pressed", "false")
    expect(toggle).to_contain_text("Paused")
    assert page.evaluate("window.qcPaused") is True
    page.reload()
    expect(page.locator("[data-qc-live-toggle]")).to_contain_text("Paused")  # remembered across pages
    with page.expect_request(lambda r: r.url.endswith("/queues/_/stats/")):
        page.locator("[data-qc-live-toggle]").click()  # resuming refreshes at once
    expect(page.locator("[data-qc-live-toggle]")).to_have_attribute("aria-pressed", "true")


def test_a_read_only_user_sees_no_action(page: Any, make_operator: Any, client: Any, inspector: Inspector) -> None:
    make_operator("vic", operate=False)
    info = client.enqueue("browser.x", queue="default", process_in=60)
    inspector.archive_task("default", info.id)
    log_in(page, "vic")
    expect(page.locator(".qc-role")).to_have_text("read-only")
    expect(page.locator("tr[data-qc-queue='default']")).to_be_visible()
    expect(page.get_by_role("button", name="Pause default")).to_have_count(0)
    page.goto("/queues/default/archived/")
    expect(page.locator(f"tr[data-qc-task='{info.id}']")).to_be_visible()
    expect(page.get_by_role("button", name="Run now")).to_have_count(0)
    expect(page.locator("input[data-qc-select]")).to_have_count(0)


@pytest.mark.parametrize("path", ["/queues/servers/", "/queues/redis/", "/queues/audit/"])
def test_every_page_renders_without_errors(operator_page: Any, path: str) -> None:
    response = operator_page.goto(path)
    assert response.status == 200
    expect(operator_page.locator(".qc-title").first).to_be_visible()


def test_a_redis_outage_shows_a_banner_and_the_page_recovers(operator_page: Any, private_redis: Any, settings: Any,
                                                             key_prefix: str) -> None:
    page = operator_page
    settings.QUEUECORE = {**settings.QUEUECORE, "REDIS_URL": private_redis.url}
    with Client(redis_url=private_redis.url, key_prefix=key_prefix) as own:
        own.enqueue("browser.x", queue="outage")
    page.goto("/queues/")
    expect(page.locator("tr[data-qc-queue='outage']")).to_be_visible()
    private_redis.stop()
    banner = page.locator("#qc-offline")
    expect(banner).to_contain_text("Redis is unreachable")  # the polls get 503s; the figures stay
    expect(page.locator("tr[data-qc-queue='outage']")).to_be_visible()
    private_redis.start()
    expect(banner).to_be_hidden()  # the next successful poll hides it
    response = page.goto("/queues/")
    assert response.status == 200
