"""The task page: its adminctl command to copy, and "Edit the payload and run it" for operators."""

from __future__ import annotations

import html as htmllib
import json
import shlex

from django.test import Client as DjangoClient
from django.urls import reverse

from queuecore import Client
from tests.helpers.state import seed_task


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


def test_an_undecodable_task_offers_no_edit_and_a_forced_edit_post_says_why(operator: DjangoClient, client: Client,
                                                                          inspector, redis_client, connection) -> None:
    """The form was offered for a task whose message cannot be decoded, and a forced save raised
    TaskDecodeError past the view: a 500 page. A ``null`` payload was taken for ``{}``."""
    q = connection.keys.queue("default")
    seed_task(redis_client, q, "garbled", "archived", score=1_800_000_000_000, msg="{not json", error="boom")
    page = operator.get(reverse("queuecore_dashboard:task", args=["default", "garbled"])).content.decode()
    assert "This task cannot be decoded" in page and "data-qc-task-edit" not in page
    edit_url = reverse("queuecore_dashboard:task_edit", args=["default", "garbled"])
    refused = operator.post(edit_url, {"payload": '{"a": 1}', "force": "1"}, follow=True)
    assert refused.status_code == 200
    assert "Nothing changed: cannot edit task 'garbled': its stored message cannot be decoded" in \
        htmllib.unescape(refused.content.decode())
    assert redis_client.hget(q.task("garbled"), "msg") == "{not json"
    info = client.enqueue("t.offline", {"a": 1}, process_in=3600)
    null = operator.post(reverse("queuecore_dashboard:task_edit", args=["default", info.id]),
                         {"payload": "null", "force": "1"}, follow=True)
    assert "Nothing changed: a task's payload is a JSON object, not NoneType" in htmllib.unescape(null.content.decode())
    assert inspector.get_task("default", info.id).payload == {"a": 1}


def test_a_payload_within_the_limit_can_be_saved_back_as_the_form_shows_it(operator: DjangoClient, client: Client,
                                                                           inspector) -> None:
    """A review: 400 KB of ``{"flags": [0, 0, ...]}`` (under the 512 KiB limit) was shown indented, 1.4M
    characters, past the form's 1.1M: saved back unchanged it was refused, "the payload text is over"."""
    payload = {"flags": [0] * 200_000}
    info = client.enqueue("t.offline", payload, process_in=3600)
    page = operator.get(reverse("queuecore_dashboard:task", args=["default", info.id])).content.decode()
    shown = htmllib.unescape(page.split('id="qc-edit-payload"', 1)[1].split(">", 1)[1].split("</textarea>", 1)[0])
    assert len(shown) <= 1_100_000 and json.loads(shown) == payload
    saved = operator.post(reverse("queuecore_dashboard:task_edit", args=["default", info.id]),
                          {"payload": shown, "force": "1"}, follow=True)
    assert "has its new payload" in htmllib.unescape(saved.content.decode())
    assert inspector.get_task("default", info.id).state == "pending"
    small = client.enqueue("t.offline", {"a": 1}, process_in=3600)  # indented as before when it fits
    page = operator.get(reverse("queuecore_dashboard:task", args=["default", small.id])).content.decode()
    assert '{\n  &quot;a&quot;: 1\n}</textarea>' in page
