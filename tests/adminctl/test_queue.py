"""``adminctl queue ls|inspect|history|pause|unpause|remove``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from queuecore import Client, ConnectionConfig, Inspector
from tests.adminctl.conftest import widest_line
from tests.adminctl.test_stats import QUEUE_KEYS
from tests.helpers.state import seed_task

NOW_MS = int(datetime.now(UTC).timestamp() * 1000)


def test_queue_ls_table_and_json(adminctl, client: Client, inspector: Inspector) -> None:
    for _ in range(2):
        client.enqueue("t", queue="alpha")
    client.enqueue("t", queue="beta-with-a-rather-long-queue-name-for-the-table", process_in=60)
    inspector.pause_queue("alpha")
    run = adminctl("queue", "ls")
    assert run.code == 0
    assert widest_line(run.stdout) <= 80
    header, _rule, *rows = run.stdout.splitlines()
    assert header.split() == ["queue", "paused", "pending", "active", "scheduled", "retry", "archived", "completed"]
    assert rows[0].split() == ["alpha", "paused", "2", "0", "0", "0", "0", "0"]
    assert rows[1].startswith("beta-with-a-rat") and "…" in rows[1]  # long names are cut, numbers never
    assert rows[1].split()[1:] == ["no", "0", "0", "1", "0", "0", "0"]
    data = adminctl("queue", "ls", "--json").json()
    assert [q["name"] for q in data] == ["alpha", "beta-with-a-rather-long-queue-name-for-the-table"]
    assert all(set(q) == QUEUE_KEYS for q in data)
    assert data[0]["pending"] == 2 and data[0]["paused"] is True


def test_queue_ls_empty(adminctl) -> None:
    run = adminctl("queue", "ls")
    assert run.code == 0 and run.stdout == "" and "no queues yet" in run.stderr
    assert adminctl("queue", "ls", "--json").json() == []


def test_queue_inspect(adminctl, client: Client) -> None:
    client.enqueue("t", queue="work")
    client.enqueue("t", queue="work", process_in=60)
    run = adminctl("queue", "inspect", "work")
    assert run.code == 0
    assert widest_line(run.stdout) <= 80
    assert "work" in run.stdout and "running" in run.stdout
    assert "Size         2" in run.stdout
    assert "Last 60 min" in run.stdout and "age of the next task to run" in run.stdout
    data = adminctl("queue", "inspect", "work", "--json").json()
    assert set(data) == QUEUE_KEYS and data["pending"] == 1 and data["scheduled"] == 1 and data["size"] == 2
    missing = adminctl("queue", "inspect", "nope")
    assert missing.code == 1 and missing.stderr == "error: no queue named 'nope'\n" and missing.stdout == ""
    assert adminctl("queue", "inspect", "nope", "--json").code == 1


def test_queue_history_chart_and_json(adminctl, client: Client, redis_client, connection: ConnectionConfig) -> None:
    client.enqueue("t", queue="hist")
    stats = connection.keys.queue("hist").stats
    today = datetime.now(tz=UTC).date()
    redis_client.hset(stats, mapping={f"processed:{today.isoformat()}": 200, f"failed:{today.isoformat()}": 50,
                                      f"processed:{(today - timedelta(days=1)).isoformat()}": 100})
    run = adminctl("queue", "history", "hist", "--days", "3")
    assert run.code == 0
    assert widest_line(run.stdout) <= 80
    lines = run.stdout.splitlines()
    assert [line[:10] for line in lines[:3]] == [(today - timedelta(days=n)).isoformat() for n in (2, 1, 0)]
    assert lines[0].count("█") == 0 and lines[0].rstrip().endswith("0 processed, 0 failed")
    yesterday_bar, today_bar = lines[1].count("█"), lines[2].count("█") + lines[2].count("░")
    assert today_bar == 2 * yesterday_bar > 0  # bars scale with processed
    assert lines[2].count("░") == round(today_bar / 4)  # the failed quarter
    assert "3 days: 300 processed, 50 failed" in run.stdout
    data = adminctl("queue", "history", "hist", "--days", "3", "--json").json()
    assert data == [{"queue": "hist", "date": (today - timedelta(days=n)).isoformat(), "processed": p, "failed": f}
                    for n, p, f in ((2, 0, 0), (1, 100, 0), (0, 200, 50))]
    assert len(adminctl("queue", "history", "hist", "--json").json()) == 7  # the default
    assert adminctl("queue", "history", "nope").code == 1


def test_pause_and_unpause(adminctl, client: Client, inspector: Inspector) -> None:
    client.enqueue("t", queue="p")
    run = adminctl("queue", "pause", "p")
    assert run.code == 0 and "paused queue p" in run.stderr and run.stdout == ""
    assert inspector.queue_info("p").paused
    assert adminctl("queue", "unpause", "p", "--json").json() == {"queue": "p", "paused": False}
    assert not inspector.queue_info("p").paused
    assert adminctl("queue", "pause", "p", "--json").json() == {"queue": "p", "paused": True}
    assert adminctl("queue", "unpause", "p").code == 0
    for verb in ("pause", "unpause"):
        missing = adminctl("queue", verb, "nope")
        assert missing.code == 1 and "no queue named 'nope'" in missing.stderr


def test_remove_queue_empty_non_empty_force_and_prompt(adminctl, client: Client, inspector: Inspector) -> None:
    client.enqueue("t", queue="gone")
    inspector.delete_all("gone", "pending")
    run = adminctl("queue", "remove", "gone")
    assert run.code == 0 and "removed queue gone" in run.stderr
    assert "gone" not in inspector.queues()

    for _ in range(3):
        client.enqueue("t", queue="full")
    refused = adminctl("queue", "remove", "full")
    assert refused.code == 1
    assert refused.stderr == "error: queue 'full' holds 3 task(s); add --force to delete them too\n"
    declined = adminctl("queue", "remove", "full", "--force", input="n\n")
    assert declined.code == 1 and "delete its 3 task(s)" in declined.stderr and "aborted" in declined.stderr
    assert inspector.queue_info("full").pending == 3
    no_input = adminctl("queue", "remove", "full", "--force", input="")  # end of input is a no
    assert no_input.code == 1 and inspector.queue_info("full").pending == 3
    accepted = adminctl("queue", "remove", "full", "--force", input="y\n")
    assert accepted.code == 0 and "full" not in inspector.queues()

    for _ in range(2):
        client.enqueue("t", queue="scripted")
    data = adminctl("queue", "remove", "scripted", "--force", "--yes", "--json").json()
    assert data["queue"] == "scripted" and data["removed"] is True and data["tasks_deleted"] == 2
    assert data["keys_deleted"] >= 3
    assert adminctl("queue", "remove", "scripted").code == 1  # now unknown


def test_remove_queue_says_it_deletes_completed_tasks_and_counts_them(adminctl, redis_client,
                                                                    connection: ConnectionConfig,
                                                                    inspector: Inspector) -> None:
    """Completed tasks (kept results) do not block a removal, but they are deleted with the queue: the
    command asks first, and the counts (text, --json, audit log) include them."""
    def kept_results(name: str, completed: int, scheduled: int = 0) -> None:
        redis_client.sadd(connection.keys.queues, name)
        q = connection.keys.queue(name)
        for n in range(completed):
            seed_task(redis_client, q, f"c{n}", "completed", score=NOW_MS + 60_000, result='"r"')
        for n in range(scheduled):
            seed_task(redis_client, q, f"s{n}", "scheduled", score=NOW_MS + 60_000)

    kept_results("results", 2)
    declined = adminctl("queue", "remove", "results", input="n\n")
    assert declined.code == 1 and "2 completed with their results" in declined.stderr
    assert inspector.queue_info("results").completed == 2
    accepted = adminctl("queue", "remove", "results", input="y\n")
    assert accepted.code == 0 and "removed queue results and its 2 task(s)" in accepted.stderr
    assert "results" not in inspector.queues()

    kept_results("mixed", 2, scheduled=1)
    data = adminctl("queue", "remove", "mixed", "--force", "--yes", "--json").json()
    assert data["tasks_deleted"] == 3
    assert inspector.audit_log(1)[0].count == 3
