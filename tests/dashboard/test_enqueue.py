"""The dashboard's "Enqueue a task" (operators only), checked as adminctl enqueue checks it."""

from __future__ import annotations

import html as htmllib

from django.test import Client as DjangoClient
from django.urls import reverse

from queuecore import task

FORM = reverse("queuecore_dashboard:enqueue")
POST = reverse("queuecore_dashboard:enqueue_task")


def test_operators_enqueue_what_a_live_worker_runs(operator: DjangoClient, viewer: DjangoClient, make_worker,
                                                   registry, inspector) -> None:
    @task(name="t.greet", registry=registry)
    def greet(name: str) -> str:
        return f"hello {name}"

    assert viewer.get(FORM).status_code == 403 and viewer.post(POST, {"type": "t.greet"}).status_code == 403
    assert 'data-qc-enqueue-link' in operator.get(reverse("queuecore_dashboard:overview")).content.decode()
    refused = operator.post(POST, {"type": "t.greet", "queue": "default", "payload": '{"name": "ann"}'})
    assert refused.status_code == 400 and "Nothing was enqueued: no worker is running" in htmllib.unescape(
        refused.content.decode())
    worker = make_worker(queues="default")
    worker.stop()  # quiet: it publishes its types (a live worker handles t.greet) but takes nothing
    page = operator.get(FORM).content.decode()
    assert '<option value="t.greet">' in page
    misfit = operator.post(POST, {"type": "t.greet", "payload": '{"nom": "ann"}'})
    assert misfit.status_code == 400 and "does not fit" in htmllib.unescape(misfit.content.decode())
    bad = operator.post(POST, {"type": "t.greet", "payload": "[1]"})
    assert bad.status_code == 400 and "must be a JSON object" in htmllib.unescape(bad.content.decode())
    assert inspector.count("default", "pending") == inspector.count("default", "scheduled") == 0  # none stored
    done = operator.post(POST, {"type": "t.greet", "queue": "default", "payload": '{"name": "ann"}',
                                "process_in": "60"}, follow=True)
    text = htmllib.unescape(done.content.decode())
    assert "Enqueued t.greet in queue default as " in text
    (scheduled,) = inspector.list_tasks("default", "scheduled").tasks
    assert (scheduled.type, scheduled.payload) == ("t.greet", {"name": "ann"})
    forced = operator.post(POST, {"type": "t.nobody", "queue": "default", "force": "1"}, follow=True)
    assert "Warning: no live worker serving queue 'default' handles task type 't.nobody'" in htmllib.unescape(
        forced.content.decode())
