"""``adminctl task edit``: a new payload for a scheduled, retry or archived task, and run it."""

from __future__ import annotations

from queuecore import Client


def test_edit_runs_with_the_new_payload_and_inspect_shows_the_edit(adminctl, client: Client, inspector) -> None:
    info = client.enqueue("t.offline", {"a": 1}, process_in=3600)  # scheduled; no worker handles it
    refused = adminctl("task", "edit", "default", info.id, "--payload", '{"a": 2}')
    assert refused.code == 1 and "no worker is running" in refused.stderr
    bad = adminctl("task", "edit", "default", info.id, "--payload", "[1]", "--force")
    assert bad.code == 1 and "must be a JSON object" in bad.stderr
    done = adminctl("task", "edit", "default", info.id, "--payload", '{"a": 2}', "--force", "--json")
    assert done.code == 0 and done.json()["payload"] == {"a": 2} and done.json()["state"] == "pending"
    shown = adminctl("task", "inspect", "default", info.id)
    assert "Payload edited by cli:" in shown.stdout and '{"a":1}' in shown.stdout
    again = adminctl("task", "edit", "default", info.id, "--payload", '{"a": 3}', "--force")
    assert again.code == 1 and "it is pending" in again.stderr
