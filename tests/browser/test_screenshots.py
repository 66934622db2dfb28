"""A tour of the main pages over a lively namespace, saving screenshots to tests/artifacts/screenshots/.

Look at them after a change to the templates or the CSS: the pages must look finished and readable.
"""

from __future__ import annotations

import random
import time
from typing import Any

from playwright.sync_api import expect

from queuecore import Client, Inspector, current_task, task
from queuecore.core.clock import to_ms
from queuecore.core.keys import stats_day, stats_minute
from tests.browser.conftest import screenshot
from tests.conftest import wait_until
from tests.helpers.state import seed_task

TRACEBACK = """ConnectionError: SMTP server smtp.example.com:587 refused the connection (attempt {n})

Traceback (most recent call last):
  File "/srv/app/emails/tasks.py", line 42, in send_welcome
    smtp.send_message(message)
  File "/usr/lib/python3.11/smtplib.py", line 986, in send_message
    return self.sendmail(from_addr, to_addrs, flatmsg, mail_options, rcpt_options)
ConnectionError: SMTP server smtp.example.com:587 refused the connection"""


def seed(client: Client, redis_client: Any, connection: Any) -> dict[str, list[str]]:
    """Queues with tasks in every state, errors, results and an hour and a month of counters."""
    rnd = random.Random(7)
    now = time.time()
    ids: dict[str, list[str]] = {"archived": [], "retry": []}
    client.enqueue_many([("emails.send_welcome", {"user_id": 1000 + i, "template": "welcome"}) for i in range(18)],
                        queue="default")
    client.enqueue_many([("reports.build", {"report_id": i, "format": "pdf", "rows": rnd.randint(10, 9000)})
                         for i in range(9)], queue="default")
    client.enqueue_many([("images.thumbnail", {"path": f"/uploads/{i:04d}.jpg", "sizes": [64, 256]})
                         for i in range(23)], queue="low")
    for i in range(4):
        client.enqueue("billing.charge", {"invoice": f"INV-{2024 + i}", "amount_cents": 4900}, queue="critical",
                       process_in=600 + 300 * i)
    client.enqueue("emails.digest", {"segment": "weekly"}, queue="emails")
    q = connection.keys.queue("default")
    for i in range(6):
        task_id = f"retry-{i:02d}"
        seed_task(redis_client, q, task_id, "retry", score=to_ms(now + 30 + 45 * i), type="emails.send_welcome",
                  payload={"user_id": 2000 + i, "template": "welcome"}, retried=i % 3 + 1,
                  error=TRACEBACK.format(n=i % 3 + 1), failed_at=to_ms(now - 20 * i))
        ids["retry"].append(task_id)
    for i in range(8):
        task_id = f"dead-{i:02d}"
        kind = i % 2
        seed_task(redis_client, q, task_id, "archived", score=to_ms(now - 400 * (i + 1)),
                  type="reports.build" if kind else "emails.send_welcome",
                  payload={"report_id": 70 + i, "format": "csv"} if kind else {"user_id": 3000 + i},
                  retried=25, max_retry=25,
                  error=(f"ValueError: report {70 + i} has no rows\n\nTraceback (most recent call last):\n"
                         f"  File \"/srv/app/reports/tasks.py\", line 88, in build\n    raise ValueError(...)"
                         if kind else TRACEBACK.format(n=25)),
                  failed_at=to_ms(now - 400 * (i + 1)))
        ids["archived"].append(task_id)
    for i in range(5):
        seed_task(redis_client, q, f"done-{i:02d}", "completed", score=to_ms(now + 3600), type="reports.build",
                  payload={"report_id": 50 + i, "format": "pdf"},
                  result=f'{{"rows": {120 * (i + 1)}, "pages": {i + 2}}}',
                  started_at=to_ms(now - 90 - i), completed_at=to_ms(now - 88 - i))
    pipe = redis_client.pipeline()
    for name, scale in (("default", 40), ("critical", 12), ("low", 25)):
        stats = connection.keys.queue(name).stats
        processed_total = failed_total = 0
        for minute in range(60):
            busy = scale * (1.2 + 0.8 * ((minute % 20) / 20)) * rnd.uniform(0.7, 1.2)
            processed, failed = int(busy), int(busy * rnd.uniform(0.0, 0.08))
            pipe.hincrby(stats, f"processed:{stats_minute(now - 60 * minute)}", processed)
            pipe.hincrby(stats, f"failed:{stats_minute(now - 60 * minute)}", failed)
            processed_total += processed
            failed_total += failed
        for day in range(30):
            pipe.hincrby(stats, f"processed:{stats_day(now - 86400 * day)}", scale * 900 + rnd.randint(0, scale * 400))
            pipe.hincrby(stats, f"failed:{stats_day(now - 86400 * day)}", rnd.randint(0, scale * 40))
        pipe.hincrby(stats, "processed", processed_total * 30)
        pipe.hincrby(stats, "failed", failed_total * 30)
    pipe.execute()
    return ids


def test_tour_of_the_main_pages(operator_page: Any, client: Client, redis_client: Any, connection: Any,
                                make_worker: Any, registry: Any, inspector: Inspector) -> None:
    page = operator_page

    @task(name="billing.reconcile", registry=registry)
    def reconcile(account: int) -> None:
        ctx = current_task()
        while not ctx.wait_cancelled(0.05):
            pass

    ids = seed(client, redis_client, connection)
    for account in (17, 42, 93):
        client.enqueue("billing.reconcile", {"account": account}, queue="critical")
    make_worker(queues={"critical": 1}, concurrency=4)
    wait_until(lambda: len(inspector.workers()) == 3, message="three reconciles running, in the heartbeat")
    inspector.as_actor("dashboard:olga").pause_queue("emails")
    inspector.as_actor("adminctl:ops").run_task("default", ids["retry"][0])

    page.goto("/queues/")
    expect(page.locator("tr[data-qc-queue='emails'] .qc-badge")).to_have_text("paused")
    expect(page.locator("[data-qc-stat='servers']")).to_have_text("1")
    bars = page.locator("#qc-chart rect.qc-bar-processed")
    expect(bars).to_have_count(60)
    assert float(bars.nth(30).get_attribute("height")) > 0
    screenshot(page, "overview")
    page.emulate_media(color_scheme="dark")
    screenshot(page, "overview_dark")
    page.emulate_media(color_scheme="light")

    page.goto("/queues/default/pending/")
    expect(page.locator("tr[data-qc-task]")).to_have_count(25)
    expect(page.locator("[data-qc-page]")).to_have_text("1")
    page.get_by_label("Select task", exact=False).first.check()
    screenshot(page, "queue_pending")

    page.goto("/queues/default/archived/")
    expect(page.locator("tr[data-qc-task]")).to_have_count(8)
    expect(page.locator(".qc-error-line").first).to_contain_text("Error")
    screenshot(page, "queue_archived")
    page.set_viewport_size({"width": 420, "height": 900})
    screenshot(page, "queue_archived_narrow")
    page.set_viewport_size({"width": 1400, "height": 900})

    page.goto("/queues/default/retry/?search=attempt+2")
    expect(page.locator("tr[data-qc-task]")).to_have_count(2)
    screenshot(page, "queue_filtered")

    page.goto(f"/queues/default/tasks/{ids['archived'][0]}/")
    expect(page.locator("[data-qc-error]")).to_contain_text("Traceback")
    screenshot(page, "task")

    page.goto("/queues/default/tasks/done-00/")
    expect(page.locator("[data-qc-result]")).to_contain_text('"rows": 120')
    screenshot(page, "task_completed")

    page.goto("/queues/servers/")
    expect(page.locator("tr[data-qc-worker-task]")).to_have_count(3)
    screenshot(page, "servers")

    page.goto("/queues/redis/")
    expect(page.locator("[data-qc-stat='version']")).not_to_have_text("—")
    screenshot(page, "redis")

    page.goto("/queues/audit/")
    expect(page.locator("tr[data-qc-audit]")).to_have_count(2)
    screenshot(page, "audit")
