"""The dashboard's export of a task list (JSON Lines or CSV), with the list's filter and order."""

from __future__ import annotations

import csv
import io
import json

from django.test import Client as DjangoClient
from django.urls import reverse

from queuecore import Client


def body(response) -> str:
    return b"".join(response.streaming_content).decode()


def test_export_streams_the_filtered_list(viewer: DjangoClient, anon: DjangoClient, client: Client) -> None:
    ids = [client.enqueue("t.a" if n % 2 else "t.b", {"n": n}).id for n in range(5)]
    url = reverse("queuecore_dashboard:tasks_export", args=["default", "pending", "jsonl"])
    assert anon.get(url).status_code == 302  # to the login page
    response = viewer.get(url)
    assert response.status_code == 200 and response["Content-Type"].startswith("application/x-ndjson")
    assert response["Content-Disposition"] == 'attachment; filename="default-pending.jsonl"'
    assert [json.loads(line)["id"] for line in body(response).splitlines()] == ids
    filtered = viewer.get(reverse("queuecore_dashboard:tasks_export", args=["default", "pending", "csv"]),
                          {"type": "t.a", "sort": "newest"})
    rows = list(csv.reader(io.StringIO(body(filtered))))
    assert [r[0] for r in rows[1:]] == [ids[3], ids[1]]
    for queue, fmt in (("default", "xml"), ("nope", "csv")):
        assert viewer.get(reverse("queuecore_dashboard:tasks_export", args=[queue, "pending", fmt])).status_code == 404


def test_the_list_links_to_its_export_with_its_filter(viewer: DjangoClient, client: Client) -> None:
    client.enqueue("t.a", {"n": 1})
    page = viewer.get(reverse("queuecore_dashboard:queue_state", args=["default", "pending"]),
                      {"type": "t.a", "sort": "newest"}).content.decode()
    export = reverse("queuecore_dashboard:tasks_export", args=["default", "pending", "csv"])
    assert f'href="{export}?type=t.a&amp;sort=newest" download>CSV</a>' in page
    assert reverse("queuecore_dashboard:queue_failures", args=["default"]) in page
    assert reverse("queuecore_dashboard:task_types", args=["default"]) in page
