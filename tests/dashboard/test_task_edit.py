"""The task page: its adminctl command to copy, and "Edit the payload and run it" for operators."""

from __future__ import annotations

import html as htmllib
import shlex

from django.test import Client as DjangoClient
from django.urls import reverse

from queuecore import Client


def test_edit_the_payload_and_run(operator: DjangoClient, viewer: DjangoClient, client: Client, inspector) -> None:
    info = client.enqueue("t.offline", {"note": "it's \"quoted\""}, process_in=3600)
    page_url = reverse("queuecore_dashboard:task", args=["default", info.id])
    seen = htmllib.unescape(viewer.get(page_url).content.decode())
    command = seen.split("data-qc-enqueue-command>", 1)[1].split("</pre>", 1)[0]
    assert shlex.split(command) == ["adminctl", "enqueue", "t.offline", "--queue", "default", "--payload",
                                    '{"note":"it\'s \\"quoted\\""}']
    assert "data-qc-task-edit" not in seen  # viewers cannot edit
    assert "data-qc-task-edit" in operator.get(page_url).content.decode()
    edit_url = reverse("queuecore_dashboard:task_edit", args=["default", info.id])
    assert viewer.post(edit_url, {"payload": "{}"}).status_code == 403
    bad = operator.post(edit_url, {"payload": "{not json"}, follow=True)
    assert "Nothing changed: the payload is not valid JSON" in htmllib.unescape(bad.content.decode())
    unrun = operator.post(edit_url, {"payload": '{"note": "x"}'}, follow=True)
    assert "Nothing changed: no worker is running" in htmllib.unescape(unrun.content.decode())
    assert inspector.get_task("default", info.id).state == "scheduled"
    done = operator.post(edit_url, {"payload": '{"note": "fixed"}', "force": "1"}, follow=True)
    text = htmllib.unescape(done.content.decode())
    assert f"Task {info.id} has its new payload and waits in pending." in text
    assert "data-qc-task-edits" in text and '{"note":"it\'s \\"quoted\\""}' in text
    task = inspector.get_task("default", info.id)
    assert (task.state, task.payload, task.edits[0]["actor"]) == ("pending", {"note": "fixed"}, "dashboard:olga")
