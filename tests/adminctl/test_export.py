"""``adminctl task export``: a task list on stdout as JSON Lines or CSV, filtered like ``task ls``."""

from __future__ import annotations

import csv
import io
import json

from queuecore import Client


def test_export_jsonl_csv_and_filters(adminctl, client: Client) -> None:
    ids = [client.enqueue("t.a" if n % 2 else "t.b", {"n": n}).id for n in range(6)]
    run = adminctl("task", "export", "default", "pending")
    assert run.code == 0, run.stderr
    rows = [json.loads(line) for line in run.stdout.splitlines()]
    assert [r["id"] for r in rows] == ids and rows[0]["payload"] == {"n": 0}
    table = list(csv.reader(io.StringIO(adminctl("task", "export", "default", "pending", "--format", "csv",
                                                 "--type", "t.b", "--sort", "newest").stdout)))
    assert table[0][:4] == ["id", "queue", "type", "state"] and [r[0] for r in table[1:]] == [ids[4], ids[2], ids[0]]
    assert len(adminctl("task", "export", "default", "pending", "--json", "--limit", "2").stdout.splitlines()) == 2
    assert [json.loads(x)["id"] for x in adminctl("task", "export", "default", "pending", "--search", '"n": 3'
                                                  ).stdout.splitlines()] == [ids[3]]
    missing = adminctl("task", "export", "nope", "pending")
    assert missing.code == 1 and missing.stdout == "" and "nope" in missing.stderr


def test_task_ls_and_export_take_the_filter_language(adminctl, client: Client) -> None:
    a = client.enqueue("t.a", {"user": {"plan": "pro"}}).id
    client.enqueue("t.a", {"user": {"plan": "free"}})
    client.enqueue("t.b", {"user": {"plan": "pro"}})
    listed = adminctl("task", "ls", "default", "pending", "--filter", "type:t.a payload.user.plan:pro", "--json")
    assert [t["id"] for t in listed.json()["tasks"]] == [a]
    exported = adminctl("task", "export", "default", "pending", "--filter", "-type:t.b", "--json")
    assert len(exported.stdout.splitlines()) == 2
    bad = adminctl("task", "ls", "default", "pending", "--filter", "colour:red")
    assert bad.code == 2 and "unknown filter field 'colour'" in bad.stderr
