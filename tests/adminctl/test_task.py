"""``adminctl task ...``: listing (paging, filters, escaping, truncation), inspecting, single and bulk actions."""

from __future__ import annotations

import re
import time

import pytest

from queuecore import Client, ConnectionConfig, Inspector
from queuecore.core.clock import to_ms
from queuecore.core.config import DEFAULT_MAX_ARCHIVE_SIZE
from queuecore.core.inspector import BULK_CHUNK
from tests.adminctl.conftest import widest_line
from tests.helpers.heartbeats import seed_heartbeat
from tests.helpers.state import seed_task

TASK_KEYS = {"id", "queue", "type", "state", "payload", "retried", "max_retry", "last_error", "last_failed_at",
             "next_process_at", "enqueued_at", "started_at", "completed_at", "archived_at", "timeout", "deadline",
             "retention", "unique_key", "result", "cancel_requested", "decode_error", "worker", "fetched_at",
             "attempts"}
TASK_KEYS |= {"snoozed", "waiting"}  # flow control: snoozes, and why a limit holds the task back
TASK_KEYS |= {"progress", "edits"}  # what a running handler reported; the operators' payload edits
TASK_KEYS |= {"priority", "archived_by"}  # results: its place in the queue, and who archived it
PAGE_KEYS = {"tasks", "total", "page", "size", "pages", "matched", "scanned_all"}

HOSTILE = {"markup": "[bold]x[/bold]", "html": "<script>alert(1)</script>", "ansi": "\x1b[31mred\x1b[0m",
           "bidi": "abc\u202edcb", "c1": "\x9b2J"}


def ids_in(stdout: str) -> list[str]:
    return [line.split()[0] for line in stdout.splitlines()[2:] if line and not line.startswith("page ")]


def test_ls_pages_oldest_first_with_footer_and_json(adminctl, client: Client) -> None:
    ids = [client.enqueue("page.task", {"n": i}).id for i in range(25)]
    first = adminctl("task", "ls", "default", "pending", "--size", "10")
    assert first.code == 0
    assert ids_in(first.stdout) == ids[:10]
    assert first.stdout.splitlines()[-1] == "page 1 of 3 · 1-10 of 25 pending tasks in queue default"
    third = adminctl("task", "ls", "default", "pending", "--size", "10", "--page", "3")
    assert ids_in(third.stdout) == ids[20:]
    assert "21-25 of 25" in third.stdout
    past = adminctl("task", "ls", "default", "pending", "--size", "10", "--page", "9")
    assert past.code == 1 and past.stdout == "" and "no such page: page 9 is past the end: 3 page(s)" in past.stderr
    data = adminctl("task", "ls", "default", "pending", "--size", "10", "--page", "2", "--json").json()
    assert set(data) == PAGE_KEYS
    assert (data["total"], data["page"], data["size"], data["pages"], data["matched"]) == (25, 2, 10, 3, None)
    assert [t["id"] for t in data["tasks"]] == ids[10:20]
    assert all(set(t) == TASK_KEYS for t in data["tasks"])
    assert data["tasks"][0]["payload"] == {"n": 10} and data["tasks"][0]["state"] == "pending"


def test_ls_filters_by_type_and_search(adminctl, client: Client) -> None:
    wanted = [client.enqueue("mail.send", {"to": f"user{i}@example.com"}).id for i in range(3)]
    client.enqueue("report.build", {"to": "user1@example.com"})
    by_type = adminctl("task", "ls", "default", "pending", "--type", "mail.send", "--json").json()
    assert [t["id"] for t in by_type["tasks"]] == wanted and by_type["matched"] == 3 and by_type["total"] == 4
    both = adminctl("task", "ls", "default", "pending", "--type", "mail.send", "--search", "USER1@")
    assert ids_in(both.stdout) == [wanted[1]]
    assert "1-1 of 1 matching, among 4 pending tasks" in both.stdout
    none = adminctl("task", "ls", "default", "pending", "--search", "nobody")
    assert none.code == 0 and none.stdout == "" and "matches" in none.stderr


def test_ls_empty_state_and_missing_queue(adminctl, client: Client) -> None:
    client.enqueue("t")
    empty = adminctl("task", "ls", "default", "archived")
    assert empty.code == 0 and "no archived tasks in queue default" in empty.stderr
    assert adminctl("task", "ls", "default", "archived", "--json").json()["tasks"] == []
    missing = adminctl("task", "ls", "nope", "pending")
    assert missing.code == 1 and missing.stderr == "error: no queue named 'nope'\n"


def test_user_data_prints_literally_escaped_and_truncated(adminctl, client: Client) -> None:
    long_text = "y" * 500
    info = client.enqueue("evil-type", {**HOSTILE, "long": long_text})
    # Task types hold no control character now (issue 11); one stored by an earlier version still prints safely.
    task_key = client.keys.queue("default").task(info.id)
    stored = client.redis.hget(task_key, "msg")
    client.redis.hset(task_key, "msg", stored.replace('"evil-type"', '"evil\\u001b[2Jtype"'))
    run = adminctl("task", "ls", "default", "pending")
    assert run.code == 0
    out = run.stdout
    assert "\x1b" not in out and "\u202e" not in out and "\x9b" not in out  # nothing reaches the terminal raw
    assert "evil\\x1b[2Jtype"[:8] in out  # the escape shows as text (the type may be cut by the table)
    assert "[bold]x[/bold]" in out or '"markup": "[bold]x[/bold]"'[:14] in out
    assert '{"markup": "[bold]' in out
    assert "…" in out and long_text[:100] not in out  # truncated in the table
    assert widest_line(out) <= 80
    wide = adminctl("task", "ls", "default", "pending", env={"COLUMNS": "400"}).stdout
    assert "…" in wide and long_text[:100] not in wide and widest_line(wide) < 200  # cut on a wide screen too
    whole = adminctl("task", "inspect", "default", info.id)
    assert whole.code == 0
    text = whole.stdout
    assert "\x1b" not in text and "\u202e" not in text
    assert "evil\\x1b[2Jtype" in text
    assert '"markup": "[bold]x[/bold]"' in text and '"html": "<script>alert(1)</script>"' in text
    assert '"ansi": "\\u001b[31mred\\u001b[0m"' in text
    assert "\\u202e" in text and "\\x9b" in text
    assert long_text in text.replace("\n", "")  # whole in inspect
    data = adminctl("task", "inspect", "default", info.id, "--json").json()
    assert data["payload"] == {**HOSTILE, "long": long_text} and data["type"] == "evil\x1b[2Jtype"


def test_a_long_task_id_is_never_cut_and_numbers_keep_their_width(adminctl, client: Client) -> None:
    """A custom id of 200 characters (the longest allowed) on 80 columns: the table folds it onto more
    lines, whole and in order, rather than cutting it (or the figures beside it) with an ellipsis."""
    long_id = "".join(f"{n:03d}-" for n in range(50))[:200]
    client.enqueue("t", {}, task_id=long_id)
    short = client.enqueue("t", {})
    run = adminctl("task", "ls", "default", "pending")
    assert run.code == 0
    out = run.stdout
    assert "…" not in out  # nothing cut: neither the id nor the waiting time
    assert widest_line(out) <= 80
    assert short.id in out  # a usual id stays on one line
    body = out.splitlines()
    first = next(i for i, line in enumerate(body) if line.startswith(long_id[:10]))
    pieces = []
    for line in body[first:]:
        piece = line.split()[0] if line.strip() else ""
        if not long_id.startswith("".join(pieces) + piece) or not piece:
            break
        pieces.append(piece)
    assert "".join(pieces) == long_id


def test_a_bad_queue_name_is_a_usage_error_for_every_task_command(adminctl) -> None:
    """Exit 2, as for ``task ls``: the name is wrong for the whole command, not for one id."""
    for command in (["task", "inspect"], ["task", "run"], ["task", "archive"], ["task", "delete"],
                    ["task", "cancel"], ["task", "kill"]):
        for json_flag in ([], ["--json"]):
            run = adminctl(*command, "a{b}", "abc", *json_flag)
            assert run.code == 2 and "invalid queue name 'a{b}'" in run.stderr, (command, run)
            assert run.stdout == ""
    assert adminctl("task", "ls", "a{b}", "pending").code == 2


def test_a_bulk_action_with_nothing_to_do_checks_its_filter_and_answers_a_jobs_shape(adminctl,
                                                                                     client: Client) -> None:
    client.enqueue("t", {})  # the queue exists; it has no archived task
    for args in (["--filter", "payload.x:"], ["--filter", "nosuchfield:1"], ["--type", "has space"]):
        run = adminctl("task", "delete-all", "default", "archived", *args, "--yes")
        assert run.code == 2 and run.stdout == "", (args, run)
    data = adminctl("task", "delete-all", "default", "archived", "--yes", "--json").json()
    assert data == {"queue": "default", "state": "archived", "action": "delete", "count": 0, "done": 0,
                    "skipped": 0, "status": "done"}


def test_a_page_past_the_end_exits_1_with_json_too(adminctl, client: Client) -> None:
    client.enqueue("t", {})
    for json_flag in ([], ["--json"]):
        run = adminctl("task", "ls", "default", "pending", "--page", "99", *json_flag)
        assert run.code == 1 and "no such page: page 99 is past the end" in run.stderr and run.stdout == ""
    assert adminctl("task", "ls", "default", "pending", "--json").json()["total"] == 1


def test_errors_escaped_in_tables_and_whole_in_inspect(adminctl, redis_client, connection: ConnectionConfig) -> None:
    q = connection.keys.queue("failing")
    redis_client.sadd(connection.keys.queues, "failing")
    error = ("ValueError: [red]boom[/red] <b>" + "z" * 300 + "\n\nTraceback (most recent call last):\n"
             '  File "app.py", line 3, in handler\nValueError: [red]boom[/red]')
    now_ms = to_ms(time.time())
    seed_task(redis_client, q, "t-archived", "archived", score=now_ms - 60_000, type="job.fail",
              payload={"n": 1}, error=error, failed_at=now_ms - 60_000, retried=3, max_retry=3)
    seed_task(redis_client, q, "t-retry", "retry", score=now_ms + 300_000, type="job.fail", payload={"n": 2},
              error="TimeoutError: slow\nmore", failed_at=now_ms, retried=1)
    archived = adminctl("task", "ls", "failing", "archived")
    assert archived.code == 0
    header, _, row, *_ = archived.stdout.splitlines()
    assert header.split() == ["id", "type", "retried", "archived", "last", "error"]
    assert row.startswith("t-archived") and "3/3" in row and "1m ago" in row
    assert "ValueError: [red]boom[/red] <b>" in row and row.rstrip().endswith("…") and "Traceback" not in row
    retry = adminctl("task", "ls", "failing", "retry")
    assert "1/25" in retry.stdout and "in 4m" in retry.stdout and "TimeoutError: slow" in retry.stdout
    assert "more" not in retry.stdout  # the first line only
    whole = adminctl("task", "inspect", "failing", "t-archived").stdout
    assert "Last error" in whole and "z" * 300 in whole.replace("\n", "") and "Traceback (most recent call" in whole
    assert "[red]boom[/red]" in whole


def test_inspect_several_and_missing(adminctl, client: Client) -> None:
    a = client.enqueue("t", {"a": 1}, process_in=60, retention=30, timeout=90)
    b = client.enqueue("t", {"b": 2})
    run = adminctl("task", "inspect", "default", a.id, b.id)
    assert run.code == 0
    assert run.stdout.count("Payload") == 2 and "scheduled" in run.stdout and "Due" in run.stdout
    assert re.search(r"^Timeout +1m 30s", run.stdout, re.M) and re.search(r"^Retention +30s", run.stdout, re.M)
    both = adminctl("task", "inspect", "default", a.id, "nope", b.id, "--json")
    assert both.code == 1 and both.stderr == "error: no task 'nope' in queue 'default'\n"
    assert [t["id"] for t in both.json()] == [a.id, b.id]
    one = adminctl("task", "inspect", "default", a.id, "--json").json()
    assert isinstance(one, dict) and set(one) == TASK_KEYS and one["state"] == "scheduled"
    missing = adminctl("task", "inspect", "default", "nope", "--json")
    assert missing.code == 1 and missing.stdout == ""
    bad_id = adminctl("task", "inspect", "default", "not a valid id")
    assert bad_id.code == 1 and "invalid task id" in bad_id.stderr


def test_single_actions_report_each_id_and_exit_1_if_any_failed(adminctl, client: Client,
                                                                 inspector: Inspector) -> None:
    s1, s2 = (client.enqueue("t", process_in=600).id for _ in range(2))
    p1 = client.enqueue("t").id
    run = adminctl("task", "archive", "default", s1, "nope", s2)
    assert run.code == 1
    assert run.stderr.splitlines() == [f"{s1}: archived", "error: nope: no task 'nope' in queue 'default'",
                                       f"{s2}: archived", "2 of 3 done, 1 failed"]
    assert inspector.get_task("default", s1).state == "archived"
    run_json = adminctl("task", "run", "default", s1, p1, "--json")
    assert run_json.code == 1  # p1 is pending: not runnable
    data = run_json.json()
    assert data["queue"] == "default" and data["action"] == "run"
    assert data["results"][0] == {"id": s1, "ok": True, "error": None, "error_type": None}
    assert data["results"][1]["ok"] is False and data["results"][1]["error_type"] == "InvalidTaskState"
    assert inspector.get_task("default", s1).state == "pending"
    ok = adminctl("task", "kill", "default", p1)  # kill is archive
    assert ok.code == 0 and ok.stderr == f"{p1}: archived\n"
    assert inspector.get_task("default", p1).state == "archived"
    gone = adminctl("task", "delete", "default", p1, s2, "--json")
    assert gone.code == 0 and all(r["ok"] for r in gone.json()["results"])
    assert inspector.count("default", "archived") == 0
    assert adminctl("task", "delete", "default", p1).code == 1  # already gone
    not_active = adminctl("task", "cancel", "default", s1)
    assert not_active.code == 1 and s1 in not_active.stderr


@pytest.mark.parametrize("bulk,state,after", [("archive-all", "scheduled", "archived"),
                                              ("delete-all", "scheduled", None)])
def test_bulk_actions_on_more_than_a_chunk(adminctl, client: Client, inspector: Inspector, bulk: str, state: str,
                                           after: str | None) -> None:
    n = BULK_CHUNK * 2 + 37
    client.enqueue_many([("bulk.t", {"i": i}) for i in range(n)], queue="big", process_in=3600)
    declined = adminctl("task", bulk, "big", state, input="n\n")
    assert declined.code == 1
    assert f"This will {bulk.split('-')[0]} {n:,} {state} task(s) of queue big." in declined.stderr
    assert "aborted: nothing was changed" in declined.stderr
    assert inspector.count("big", state) == n
    accepted = adminctl("task", bulk, "big", state, input="y\n")
    assert accepted.code == 0, accepted.stderr
    assert f" {n:,} {state} task(s) of queue big" in accepted.stderr
    assert inspector.count("big", state) == 0
    assert "MAX_ARCHIVE_SIZE" not in declined.stderr  # far from the archive's size
    if after:
        assert inspector.count("big", after) == n
    nothing = adminctl("task", bulk, "big", state)
    assert nothing.code == 0 and "nothing to do" in nothing.stderr


def test_archive_all_past_the_default_archive_size_says_the_oldest_will_be_deleted(
        adminctl, client: Client, inspector: Inspector) -> None:
    """Probe: archiving 120,000 tasks asked nothing, and the workers then deleted 110,000 of them."""
    client.enqueue_many([("bulk.t", {"i": i}) for i in range(DEFAULT_MAX_ARCHIVE_SIZE - 2)], queue="big")
    for i in range(3):
        inspector.archive_task("big", client.enqueue("bulk.t", {"a": i}, queue="big").id)
    declined = adminctl("task", "archive-all", "big", "pending", input="n\n")
    assert declined.code == 1 and inspector.count("big", "archived") == 3
    assert (f"Queue big would hold {DEFAULT_MAX_ARCHIVE_SIZE + 1:,} archived task(s): no live worker serves it to "
            f"say how many it keeps; by default workers keep {DEFAULT_MAX_ARCHIVE_SIZE:,} (MAX_ARCHIVE_SIZE)"
            ) in " ".join(declined.stderr.split())


def test_archive_all_warns_at_the_size_the_queues_workers_keep(adminctl, client: Client, inspector: Inspector,
                                                               redis_client, connection) -> None:
    """The workers' MAX_ARCHIVE_SIZE comes with their heartbeats: the smallest among those serving the
    queue is the one its archive is trimmed to (adminctl used to warn only past the default 10,000)."""
    for i in range(3):
        inspector.archive_task("small", client.enqueue("bulk.t", {"a": i}, queue="small").id)
    client.enqueue_many([("bulk.t", {"i": i}) for i in range(4)], queue="small")
    seed_heartbeat(redis_client, connection.keys, server_id="h:1:a", queues=["small"], max_archive_size=50)
    seed_heartbeat(redis_client, connection.keys, server_id="h:2:b", queues=["small"], max_archive_size=5)
    seed_heartbeat(redis_client, connection.keys, server_id="h:3:c", queues=["other"], max_archive_size=1)
    declined = adminctl("task", "archive-all", "small", "pending", input="n\n")
    assert declined.code == 1 and inspector.count("small", "archived") == 3
    assert ("Queue small would hold 7 archived task(s): its workers keep at most 5 (MAX_ARCHIVE_SIZE) and delete "
            "the oldest beyond it for good.") in " ".join(declined.stderr.split())
    seed_heartbeat(redis_client, connection.keys, server_id="h:2:b", queues=["small"], max_archive_size=8)
    assert "MAX_ARCHIVE_SIZE" not in adminctl("task", "archive-all", "small", "pending", input="n\n").stderr


def test_run_all_with_yes_and_json(adminctl, client: Client, inspector: Inspector) -> None:
    n = BULK_CHUNK + 1
    client.enqueue_many([("bulk.t", {"i": i}) for i in range(n)], queue="again", process_in=3600)
    inspector.archive_all("again", "scheduled")
    data = adminctl("task", "run-all", "again", "archived", "--yes", "--json").json()
    assert {k: data[k] for k in ("queue", "state", "action", "count", "status", "done")} == {
        "queue": "again", "state": "archived", "action": "run", "count": n, "status": "done", "done": n}
    assert inspector.bulk_job(data["id"]).done == n
    assert inspector.count("again", "pending") == n
    assert adminctl("task", "run-all", "again", "archived", "--json").json()["count"] == 0
    assert adminctl("task", "run-all", "nope", "archived", "--yes").code == 1


def test_printed_ages_are_measured_by_redis_time_not_this_hosts_clock(adminctl, client: Client, monkeypatch) -> None:
    """adminctl's ages count from its Inspector's clock (Redis's time: ``AligningClock``), not from
    the clock of the host that prints them: with that clock 2h 5m after the enqueue, the task's age
    reads 2h 5m, whatever this host's clock says."""
    from queuecore.core import inspector as inspector_module
    from queuecore.core.clock import FakeClock

    info = client.enqueue("t.age", queue="ages")
    assert info.enqueued_at is not None
    redis_time = FakeClock(info.enqueued_at.timestamp() + 2 * 3600 + 5 * 60 + 2)
    monkeypatch.setattr(inspector_module, "AligningClock", lambda read_redis_time, **_options: redis_time)
    run = adminctl("task", "inspect", "ages", info.id)
    assert run.code == 0, run.stderr
    enqueued_line = next(line for line in run.stdout.splitlines() if "Enqueued" in line)
    assert "(2h 5m ago)" in enqueued_line, enqueued_line


@pytest.mark.parametrize("stop", ["ctrl-c", "redis-gone"])
def test_an_action_on_many_ids_cut_off_still_reports_what_it_did(adminctl, client: Client, inspector: Inspector,
                                                                 monkeypatch, stop: str) -> None:
    """A review: ``--json task delete Q <3,000 ids>`` interrupted (Ctrl-C) printed nothing, though 1,138
    tasks had been deleted, and Redis failing mid-way did the same: a script could not tell which."""
    from queuecore.core.errors import RedisUnavailable

    ids = [client.enqueue("t.x", {"n": n}, queue="many").id for n in range(4)]
    delete = Inspector.delete_task

    def cut_off_at_the_third(self: Inspector, queue: str, task_id: str) -> None:
        if task_id == ids[2]:
            raise KeyboardInterrupt if stop == "ctrl-c" else RedisUnavailable("Redis is unreachable: gone")
        delete(self, queue, task_id)

    monkeypatch.setattr(Inspector, "delete_task", cut_off_at_the_third)
    run = adminctl("--json", "task", "delete", "many", *ids)
    assert run.code == (130 if stop == "ctrl-c" else 2), run
    report = run.json()
    assert [r["id"] for r in report["results"] if r["ok"]] == ids[:2]
    assert report["stopped"]["at"] == ids[2] and report["stopped"]["not_tried"] == ids[3:]
    assert report["stopped"]["reason"] == ("interrupted" if stop == "ctrl-c" else
                                           "RedisUnavailable: Redis is unreachable: gone")
    assert inspector.count("many", "pending") == 2
    plain = adminctl("task", "delete", "many", ids[3], ids[2])
    assert plain.code == (130 if stop == "ctrl-c" else 2) and f"stopped at {ids[2]}" in plain.stderr, plain
    assert inspector.count("many", "pending") == 1
    if stop == "redis-gone":  # nothing done before it: Redis's error alone, as before
        alone = adminctl("task", "delete", "many", ids[2])
        assert alone.code == 2 and alone.stderr.count("\n") == 1 and "Redis is unreachable: gone" in alone.stderr
