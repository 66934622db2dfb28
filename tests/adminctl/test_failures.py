"""``adminctl failures``: groups of failed tasks, shown and acted on as one."""

from __future__ import annotations

import time

from queuecore import Client, ConnectionConfig, Inspector
from queuecore.core.clock import to_ms
from tests.helpers.state import seed_task

NOW_MS = to_ms(time.time())


def error(head: str, func: str) -> str:
    return (f'{head}\n\nTraceback (most recent call last):\n  File "/srv/app/billing.py", line 12, in {func}\n'
            f"    charge()\n{head}")


def seed_failures(redis_client, connection: ConnectionConfig, client: Client) -> None:
    client.enqueue("t", queue="billing")  # registers the queues
    client.enqueue("t", queue="mail")
    billing, mail = connection.keys.queue("billing"), connection.keys.queue("mail")
    for n in range(4):
        seed_task(redis_client, billing, f"b{n}", "archived", score=NOW_MS - n, type="billing.charge",
                  error=error(f"CardDeclined: card 4000{n} declined for order {n}7", "charge"), failed_at=NOW_MS - n)
    seed_task(redis_client, mail, "m0", "retry", score=NOW_MS + 60_000, type="mail.send",
              error=error("CardDeclined: card 40009 declined for order 97", "charge"), failed_at=NOW_MS + 1)
    seed_task(redis_client, mail, "m1", "archived", score=NOW_MS, type="mail.send",
              error=error("SMTPError: 550 <bob@example.org> refused", "send"), failed_at=NOW_MS)


def test_ls_groups_across_queues_with_json(adminctl, redis_client, connection, client: Client) -> None:
    seed_failures(redis_client, connection, client)
    run = adminctl("failures", "ls", "--json")
    assert run.code == 0, run.stderr
    data = run.json()
    assert (data["scanned"], data["scanned_all"]) == (6, True)
    assert [(g["error_type"], g["message"], g["count"], g["queues"], g["by_state"]) for g in data["groups"]] == [
        ("CardDeclined", "card <n> declined for order <n>", 5, ["billing", "mail"], {"archived": 4, "retry": 1}),
        ("SMTPError", "<n> <bob@example.org> refused", 1, ["mail"], {"archived": 1})]
    table = adminctl("failures", "ls")
    assert table.code == 0 and data["groups"][0]["key"] in table.stdout and "CardDeclined" in table.stdout
    assert "6 failed task(s) read" in table.stderr + table.stdout
    only_mail = adminctl("failures", "ls", "--queue", "mail", "--json").json()
    assert [g["count"] for g in only_mail["groups"]] == [1, 1]


def test_show_then_delete_a_group_and_unknown_groups(adminctl, redis_client, connection, client: Client) -> None:
    seed_failures(redis_client, connection, client)
    key = adminctl("failures", "ls", "--json").json()["groups"][0]["key"]
    shown = adminctl("failures", "show", key, "--tasks", "2", "--json").json()
    assert shown["count"] == 5 and [t["id"] for t in shown["tasks"]] == ["m0", "b0"]
    refused = adminctl("failures", "delete", key, input="n\n")
    assert refused.code == 1 and "This will delete 5 task(s)" in refused.stderr + refused.stdout
    refused_json = adminctl("failures", "delete", key, "--json", input="n\n")  # --json asks too
    assert refused_json.code == 1 and "This will delete 5 task(s)" in refused_json.stderr
    assert refused_json.stdout == ""
    assert adminctl("failures", "show", key, "--json").json()["count"] == 5  # nothing was deleted
    done = adminctl("failures", "delete", key, "--yes")
    assert done.code == 0 and "deleted 5 task(s)" in done.stderr + done.stdout
    ins = Inspector(connection=connection)
    try:
        assert (ins.count("billing", "archived"), ins.count("mail", "retry"), ins.count("mail", "archived")) == (
            0, 0, 1)
        entry = ins.audit_log()[0]
        assert (entry.action, entry.queue, entry.count) == ("failures.delete", None, 5)
        assert sorted(entry.task_ids) == ["b0", "b1", "b2", "b3", "m0"]
    finally:
        ins.close()
    gone = adminctl("failures", "run", key, "--yes")
    assert gone.code == 1 and f"no failure group {key}" in gone.stderr
    assert adminctl("failures", "show", "nope").code == 1


def test_a_group_action_after_a_partial_read_says_it_takes_the_tasks_read(
        adminctl, redis_client, connection, client: Client, monkeypatch) -> None:
    """A review: with a list longer than the scan, the confirmation gave the count read as if it were the
    group's; the action takes only those, and now says so."""
    import queuecore.core.inspector as inspector_module
    from queuecore.core.failures import read_failures

    seed_failures(redis_client, connection, client)
    monkeypatch.setattr(inspector_module, "read_failures",  # a list of 4 archived tasks is longer than 3
                        lambda redis, keys, queues, limit: read_failures(redis, keys, queues, 3))
    report = adminctl("failures", "ls", "--json").json()
    assert report["scanned_all"] is False
    key = report["groups"][0]["key"]
    refused = adminctl("failures", "delete", key, input="n\n")
    assert refused.code == 1
    assert f"Only the newest {report['scanned']} failed tasks were read" in refused.stderr
    monkeypatch.undo()  # every task read: no such note
    full = adminctl("failures", "delete", key, input="n\n")
    assert full.code == 1 and "This will delete" in full.stderr and "Only the newest" not in full.stderr
