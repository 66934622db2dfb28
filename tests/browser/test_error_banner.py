"""When a refresh gets an error page, the banner says what the server said went wrong (a corrupt key,
named), not "Redis is unreachable" for every 5xx."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import expect


def test_a_corrupt_key_is_named_in_the_banner_not_called_unreachable(operator_page: Any, client: Any,
                                                                    redis_client: Any, key_prefix: str) -> None:
    page = operator_page
    client.enqueue("browser.x", queue="bad")
    page.goto("/queues/bad/pending/")
    expect(page.locator("#qc-offline")).to_be_hidden()
    key = f"{key_prefix}:{{bad}}:retry"
    redis_client.set(key, "garbage")  # the next refresh of the queue's counts reads it
    banner = page.locator("#qc-offline")
    expect(banner).to_contain_text("Corrupt data in Redis")
    expect(banner).to_contain_text(key)
    expect(banner).not_to_contain_text("unreachable")
    redis_client.delete(key)
    expect(banner).to_be_hidden()  # the next successful refresh hides it


def test_the_overview_names_a_corrupt_queue_and_goes_on_showing_the_others(operator_page: Any, client: Any,
                                                                         redis_client: Any, key_prefix: str) -> None:
    """One queue's corrupt key made every refresh of the overview's queue table an error page."""
    page = operator_page
    client.enqueue("browser.x", queue="bad")
    client.enqueue("browser.x", queue="fine")
    page.goto("/queues/")
    expect(page.locator("tr[data-qc-queue='bad']")).to_be_visible()
    key = f"{key_prefix}:{{bad}}:retry"
    redis_client.set(key, "garbage")
    bad = page.locator("tr[data-qc-queue='bad']")
    expect(bad).to_contain_text("corrupt")
    expect(bad.locator("[data-qc-problem]")).to_contain_text(key)
    expect(page.locator("tr[data-qc-queue='fine'] [data-qc-cell='pending']")).to_have_text("1")
    expect(page.locator("#qc-offline")).to_be_hidden()
    redis_client.delete(key)
    expect(bad).to_contain_text("running")
