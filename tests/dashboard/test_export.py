"""The dashboard's export of a task list (JSON Lines or CSV), with the list's filter and order."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.test import Client as DjangoClient
from django.urls import reverse

from queuecore import Client
from queuecore.core.errors import RedisUnavailable


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


def test_an_export_cut_short_by_redis_ends_saying_so(viewer: DjangoClient, dashboard_settings,
                                                      private_redis) -> None:
    """Dashboard probe: with Redis gone mid-stream the download ended after 3,500 of 53,800 tasks on a
    whole line, an HTTP 200 that looked complete. Its last line now says it is not, and the stream
    fails, so that a server with chunked transfer ends the download as failed."""
    dashboard_settings.QUEUECORE = {**dashboard_settings.QUEUECORE, "REDIS_URL": private_redis.url}
    for fmt, parse_last in (("jsonl", json.loads), ("csv", lambda line: next(csv.reader([line])))):
        if fmt == "csv":
            private_redis.start()  # empty again: it keeps nothing on disk
        there = Client(redis_url=private_redis.url, key_prefix=dashboard_settings.QUEUECORE["KEY_PREFIX"])
        there.enqueue_many([("t.a", {"n": n}) for n in range(700)])  # more than one read of 500
        there.close()
        response = viewer.get(reverse("queuecore_dashboard:tasks_export", args=["default", "pending", fmt]))
        stream = iter(response.streaming_content)
        first = [next(stream) for _ in range(10)]  # the first read of 500 is done
        private_redis.stop()
        rest: list[bytes] = []
        with pytest.raises(RedisUnavailable):
            for chunk in stream:
                rest.append(chunk)
        lines = b"".join(first + rest).decode().splitlines()
        assert len(lines) == 500 + (fmt == "csv") + 1
        last = parse_last(lines[-1])
        if fmt == "jsonl":
            assert last["complete"] is False and last["export_error"].startswith("RedisUnavailable: ")
        else:
            assert last[0].startswith("# export incomplete: RedisUnavailable: ")
