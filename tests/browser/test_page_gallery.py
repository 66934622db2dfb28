"""Every dashboard page at 1440 px and at 390 px (a phone), over a lively namespace: each renders, the
phone view never scrolls sideways, and each is photographed. With QUEUECORE_UPDATE_SCREENSHOTS=1 the
pictures go to docs/screenshots/ (what the README shows); otherwise to tests/artifacts/screenshots/."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from queuecore import Client, Inspector, current_task, task
from queuecore.core.alerts import Alert, PendingAlert
from tests.adminctl.test_alerts import fire, pend
from tests.browser.test_screenshots import seed
from tests.conftest import wait_until

DOCS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "screenshots"
WIDTHS = {"1440": {"width": 1440, "height": 900}, "390": {"width": 390, "height": 844}}


def test_every_page_at_1440_and_390(operator_page: Any, client: Client, redis_client: Any, connection: Any,
                                    make_worker: Any, registry: Any, inspector: Inspector, scripts: Any) -> None:
    from playwright.sync_api import expect

    page = operator_page

    @task(name="billing.reconcile", registry=registry)
    def reconcile(account: int) -> None:
        ctx = current_task()
        ctx.set_progress(account % 10, 10, "accounts")
        while not ctx.wait_cancelled(0.05):
            pass

    @task(name="billing.ping", registry=registry, max_retry=0)
    def ping(n: int) -> None:
        if n % 4 == 0:
            raise TimeoutError(f"bank API did not answer within {n + 3}s")

    ids = seed(client, redis_client, connection)
    now = redis_client.time()[0]
    fire(scripts, Alert(id="reconcile-stuck/critical", rule="reconcile-stuck", kind="overdue", subject="critical",
                        severity="critical", message="queue critical: 2 tasks past their deadline by more than 60s",
                        value=2.0, threshold=None, since=now - 300))
    pend(scripts, PendingAlert(Alert(id="slow/default", rule="slow", kind="latency", subject="default",
                                     severity="warning", message="queue default: oldest pending task waited 95s "
                                     "(above 60s)", value=95.0, threshold=60.0, since=now - 40), hold_for=300.0))
    for n in range(12):
        client.enqueue("billing.ping", {"n": n}, queue="critical")
    for account in (17, 42):
        client.enqueue("billing.reconcile", {"account": account}, queue="critical")
    make_worker(queues={"critical": 1}, concurrency=4)
    wait_until(lambda: len(inspector.workers()) == 2 and inspector.count("critical", "archived") == 3,
               message="two reconciles running, in the heartbeat, and the pings done")
    ops = inspector.as_actor("dashboard:olga")
    ops.act_on_all("default", "delete", "archived", filter="type:reports.nothing-of-this-type")
    ops.cancel_bulk_job(ops.start_bulk_job("run", queue="default", state="retry").id)  # cancelled before it ran
    pages = {
        "overview": "/queues/", "queue-pending": "/queues/default/pending/",
        "queue-archived": "/queues/default/archived/", "task": f"/queues/default/tasks/{ids['archived'][0]}/",
        "failures": "/queues/failures/", "task-types": "/queues/critical/types/",
        "task-type": "/queues/critical/types/billing.ping/", "servers": "/queues/servers/",
        "periodic": "/queues/periodic/", "redis": "/queues/redis/", "bulk": "/queues/bulk/",
        "audit": "/queues/audit/",
    }
    folder = DOCS if os.environ.get("QUEUECORE_UPDATE_SCREENSHOTS") == "1" else ARTIFACTS
    folder.mkdir(parents=True, exist_ok=True)
    for width, viewport in WIDTHS.items():
        page.set_viewport_size(viewport)
        for name, path in pages.items():
            response = page.goto(path)
            assert response is not None and response.status == 200, (name, width)
            page.wait_for_load_state("load")
            if name == "overview":  # the alerts card: the active alert, then the pending one
                expect(page.locator("#qc-alerts [data-qc-alert]")).to_have_count(1)
                expect(page.locator("#qc-alerts [data-qc-pending-alert='slow/default']")).to_contain_text(
                    "in 4m")
            overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 0, f"{name} at {width} px is {overflow} px wider than the screen"
            page.screenshot(path=str(folder / f"{name}-{width}.png"))
