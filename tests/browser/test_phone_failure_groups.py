"""Failure groups on a 390 px phone, in a real headless chromium under the dashboard's strict CSP: on
the task-type page and on the Failures page each group is a block of its own (the error wrapped across
the screen, its count, dates, newest tasks and actions labelled below it), nothing scrolls sideways,
neither the page nor the table; the Failures page's table neither on a 768 px tablet; at 1440 px both
stay tables."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import expect

from queuecore import Client, Inspector, task
from tests.browser.conftest import screenshot
from tests.browser.test_console import RECORD_VIOLATIONS
from tests.conftest import wait_until

PHONE = {"width": 390, "height": 844}
TABLET = {"width": 768, "height": 1024}
DESKTOP = {"width": 1440, "height": 900}
# Four kinds of failure with long messages, two of them with a long word that only breaks anywhere.
ERRORS = [
    (ConnectionError, "upstream payments gateway refused the connection while reconciling the ledger of the "
                      "merchant account after the TLS handshake had completed and the request body was sent"),
    (ValueError, "field customer_billing_address_line_two_normalised_with_locale_fallback_chain_and_legacy_"
                 "postcode_lookup_table is required for invoices issued in the European Economic Area"),
    (PermissionError, "cannot write /srv/app/storage/exports/merchants/reconciliation/quarterly/ledger_export"
                      "_with_all_adjustments_and_disputes.csv: the export volume is mounted read-only"),
    (RuntimeError, "the reconciliation window closed before every settlement batch of the acquiring bank was "
                   "matched against the ledger, so the run was abandoned and will be tried again later"),
]
TASKS_PER_ERROR = 2


def fail_in_several_ways(client: Client, make_worker: Any, registry: Any, inspector: Inspector) -> None:
    # One try of two, the second an hour away: the tasks wait in retry, so every group offers all
    # three actions (a group all archived offers no Archive).
    @task(name="billing.reconcile_ledger", registry=registry, max_retry=1, retry_delay=lambda n, error: 3600)
    def reconcile(kind: int, n: int) -> None:
        error, message = ERRORS[kind]
        raise error(message)

    for kind in range(len(ERRORS)):
        for n in range(TASKS_PER_ERROR):
            client.enqueue("billing.reconcile_ledger", {"kind": kind, "n": n}, queue="billing")
    make_worker(queues={"billing": 1}, concurrency=2)
    wait_until(lambda: inspector.count("billing", "retry") == len(ERRORS) * TASKS_PER_ERROR, 15,
               message="every task failed and waits to be retried")


def within_screen(page: Any, locator: Any, what: str) -> None:
    """``locator`` is shown and lies between the screen's left and right edges."""
    expect(locator).to_be_visible()
    # Measured in the page in one step: a live refresh may swap the element between two protocol calls.
    box = locator.evaluate("""(el) => { const r = el.getBoundingClientRect();
      return {x: r.x, width: r.width}; }""")
    width = page.viewport_size["width"]
    assert box is not None and box["width"] > 0, what
    assert box["x"] >= 0 and box["x"] + box["width"] <= width, f"{what} is at {box}, outside 0-{width} px"


def tables_fit(page: Any) -> None:
    hidden = page.evaluate("""[...document.querySelectorAll('.qc-group-table')].map(
        (t) => t.closest('.qc-table-wrap')).map((w) => w.scrollWidth - w.clientWidth)""")
    assert hidden and all(n <= 0 for n in hidden), f"a failure table scrolls sideways by {hidden} px"


def no_sideways_scroll(page: Any) -> None:
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the page is {overflow} px wider than the screen"
    tables_fit(page)


def hold_still(page: Any) -> None:
    """Pause the live refresh and let any refresh in flight land: the checks then measure a page that
    no swap changes under them."""
    if not page.evaluate("window.qcPaused === true"):
        page.locator("[data-qc-live-toggle]").click()
    page.wait_for_load_state("networkidle")


def check_groups(page: Any, actions: bool) -> None:
    hold_still(page)
    rows = page.locator("tr[data-qc-failure-group]")
    expect(rows).to_have_count(len(ERRORS))
    for i in range(len(ERRORS)):
        row = rows.nth(i)
        within_screen(page, row.locator(".qc-group-error"), f"group {i}'s error")
        count = row.locator("[data-qc-failure-count]")
        within_screen(page, count, f"group {i}'s count")
        expect(count).to_contain_text(str(TASKS_PER_ERROR))
        chips = row.locator(".qc-chip")
        expect(chips).to_have_count(TASKS_PER_ERROR)
        for c in range(TASKS_PER_ERROR):
            within_screen(page, chips.nth(c), f"group {i}'s task {c}")
        if actions:
            for verb in ("Run", "Archive", "Delete"):
                button = row.get_by_role("button", name=verb)
                within_screen(page, button, f"group {i}'s {verb} button")
                button.click(trial=True)  # enabled, and nothing covers it: a tap would reach it
    labels = page.evaluate("""[...document.querySelectorAll('tr[data-qc-failure-group] td[data-label]')].map(
        (td) => getComputedStyle(td, '::before').content)""")
    assert '"Tasks"' in labels and '"Last seen"' in labels and '"Newest"' in labels, labels
    # The long words wrap inside the screen; the error is not cut into one letter per line either.
    widths = page.evaluate("[...document.querySelectorAll('.qc-group-error')].map((td) => td.offsetWidth)")
    assert all(w > 300 for w in widths), f"an error cell is too narrow on the phone: {widths}"
    no_sideways_scroll(page)
    expect(page.locator(".qc-group-table thead")).to_be_hidden()  # each cell carries its own label
    assert page.evaluate("window.__qcViolations") == []


def test_a_task_type_at_390_px(operator_page: Any, client: Client, make_worker: Any, registry: Any,
                               inspector: Inspector) -> None:
    page = operator_page
    page.add_init_script(RECORD_VIOLATIONS)
    fail_in_several_ways(client, make_worker, registry, inspector)
    page.set_viewport_size(PHONE)
    response = page.goto("/queues/billing/types/billing.reconcile_ledger/")
    assert response is not None and response.status == 200
    check_groups(page, actions=False)
    expect(page.locator(".qc-group-table").first).to_contain_text("postcode_lookup_table is required")
    within_screen(page, page.get_by_role("link", name="Act on them on the queue's Failures page"), "the link")
    screenshot(page, "phone-task-type-failures")
    page.locator("[data-qc-live-toggle]").click()  # live again
    with page.expect_response(lambda r: r.request.headers.get("x-qc-refresh") == "1"):
        pass  # a refresh (every second here) keeps the blocks as they are
    check_groups(page, actions=False)

    page.set_viewport_size(DESKTOP)  # a table again, with its header
    expect(page.locator(".qc-group-table thead")).to_be_visible()
    screenshot(page, "desktop-task-type-failures")
    assert page.evaluate("getComputedStyle(document.querySelector('tr[data-qc-failure-group]')).display") == (
        "table-row")


def test_the_failures_page_at_390_px(operator_page: Any, client: Client, make_worker: Any, registry: Any,
                                     inspector: Inspector) -> None:
    page = operator_page
    page.add_init_script(RECORD_VIOLATIONS)
    fail_in_several_ways(client, make_worker, registry, inspector)
    page.set_viewport_size(PHONE)
    for path in ("/queues/failures/", "/queues/billing/failures/"):
        response = page.goto(path)
        assert response is not None and response.status == 200
        check_groups(page, actions=True)
    screenshot(page, "phone-failures")

    page.set_viewport_size(TABLET)  # seven columns do not fit there either: blocks too, actions in reach
    rows = page.locator("tr[data-qc-failure-group]")
    tables_fit(page)
    for i in range(len(ERRORS)):
        within_screen(page, rows.nth(i).get_by_role("button", name="Delete"), f"group {i}'s Delete button")

    page.set_viewport_size(DESKTOP)
    expect(page.locator(".qc-group-table thead")).to_be_visible()
    screenshot(page, "desktop-failures")
    assert page.evaluate("getComputedStyle(document.querySelector('tr[data-qc-failure-group]')).display") == (
        "table-row")
