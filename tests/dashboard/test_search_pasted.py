"""Text copied from the dashboard's own rendering of a payload (the table's one-line preview, the task
page's indented block) finds the task when pasted into the search box."""

from __future__ import annotations

import html as htmllib
import re
from typing import Any
from urllib.parse import urlencode

from django.test import Client as DjangoClient

from queuecore import Client


def rows(response: Any) -> list[str]:
    return re.findall(r'<tr data-qc-task="([^"]+)"', response.content.decode())


def test_pasting_what_the_dashboard_shows_finds_the_task(viewer: DjangoClient, client: Client) -> None:
    wanted = client.enqueue("mail.send", {"user_id": 5005, "plan": "pro team", "to": ["a@x.io"]}).id
    client.enqueue("mail.send", {"user_id": 6006, "plan": "pro team", "to": ["b@x.io"]})
    table = viewer.get("/queues/default/pending/").content.decode()
    previews = [htmllib.unescape(p) for p in re.findall(r'<code class="qc-payload"[^>]*>(.*?)</code>', table)]
    shown = next(p for p in previews if "5005" in p)
    assert '"user_id": 5005' in shown  # displayed with spaces; stored compact
    detail = viewer.get(f"/queues/default/tasks/{wanted}/").content.decode()
    block = htmllib.unescape(re.search(r"<pre [^>]*data-qc-payload>(.*?)</pre>", detail, re.S)[1])
    lines = block.splitlines()
    two_lines = "\n".join(lines[1:3])  # '"user_id": 5005,\n  "plan": "pro team",' as a mouse selects it
    for pasted in (shown, '"user_id": 5005,', block, two_lines):
        found = viewer.get("/queues/default/pending/?" + urlencode({"search": pasted}))
        assert rows(found) == [wanted], pasted


def test_the_search_box_takes_the_filter_language_and_suggests_terms(viewer, client) -> None:
    keep = client.enqueue("t.a", {"user": {"plan": "pro"}}).id
    client.enqueue("t.a", {"user": {"plan": "free"}})
    client.enqueue("t.b", {"user": {"plan": "pro"}})
    url = "/queues/default/pending/"
    page = viewer.get(url).content.decode()
    assert '<option value="type:t.a">' in page and '<option value="payload.user.plan:">' in page
    filtered = viewer.get(url, {"search": "type:t.a payload.user.plan:pro"}).content.decode()
    assert re.findall(r'data-qc-task="([^"]+)"', filtered) == [keep]
    plain = viewer.get(url, {"search": "colour:red"})  # not a field of the language: plain text, no match
    assert plain.status_code == 200 and re.findall(r'data-qc-task="([^"]+)"', plain.content.decode()) == []
    broken = viewer.get(url, {"search": 'error:"never closed'})
    assert broken.status_code == 400 and "a quote is not closed" in broken.content.decode()
