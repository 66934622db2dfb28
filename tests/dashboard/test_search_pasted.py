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
