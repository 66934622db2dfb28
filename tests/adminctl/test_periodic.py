"""``adminctl periodic ls|inspect|pause|resume|run``, in-process against the test's Redis prefix."""

from __future__ import annotations

from queuecore import Inspector
from tests.adminctl.conftest import widest_line
from tests.core.test_periodic_inspector import declare


def test_ls_table_and_json(adminctl, redis_client, connection) -> None:
    run = adminctl("periodic", "ls")
    assert run.code == 0 and run.stdout == "" and "no periodic entries" in run.stderr
    declare(redis_client, connection)
    run = adminctl("periodic", "ls")
    assert run.code == 0, run.stderr
    assert widest_line(run.stdout) <= 80
    rows = run.stdout.splitlines()[2:]
    assert rows[0].startswith("nightly ") and "every day" in rows[0] and any(r.startswith("ping ") for r in rows)
    data = adminctl("periodic", "ls", "--json").json()
    assert [(e["name"], e["queue"], e["paused"]) for e in data] == [("nightly", "low", False),
                                                                    ("ping", "default", False)]
    assert data[0]["description"] == "every day at 02:30 (Europe/Paris)" and data[0]["next_fire_at"]


def test_pause_resume_run_and_inspect(adminctl, redis_client, connection, inspector: Inspector) -> None:
    declare(redis_client, connection)
    run = adminctl("periodic", "pause", "ping")
    assert run.code == 0 and "paused periodic entry ping" in run.stderr
    assert adminctl("periodic", "pause", "ping", "--json").json() == {"name": "ping", "paused": True,
                                                                      "changed": False}
    assert "(paused)" in adminctl("periodic", "ls").stdout
    assert adminctl("periodic", "resume", "ping", "--json").json()["changed"] is True
    ran = adminctl("periodic", "run", "nightly", "--json").json()
    assert ran["name"] == "nightly" and inspector.get_task("low", ran["task_id"]).state == "pending"
    run = adminctl("periodic", "inspect", "nightly")
    assert run.code == 0 and "Recent fires" in run.stdout and "manual" in run.stdout
    detail = adminctl("periodic", "inspect", "nightly", "--json").json()
    assert detail["last_task_id"] == ran["task_id"] and detail["recent"][0]["kind"] == "manual"


def test_unknown_entry_is_an_operational_error(adminctl, redis_client, connection) -> None:
    declare(redis_client, connection)
    for verb in ("inspect", "pause", "resume", "run"):
        run = adminctl("periodic", verb, "nope")
        assert run.code == 1 and "no periodic entry named 'nope'" in run.stderr, (verb, run)
