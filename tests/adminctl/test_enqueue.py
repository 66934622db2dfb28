"""``adminctl enqueue``: options, output, and every way it refuses."""

from __future__ import annotations

import re

from queuecore import Inspector
from tests.adminctl.test_task import TASK_KEYS
from tests.helpers.heartbeats import seed_heartbeat, signature


def test_enqueue_prints_the_id_and_stores_the_task(adminctl, inspector: Inspector, redis_client, connection) -> None:
    seed_heartbeat(redis_client, connection.keys, types={"demo.echo": signature(var_keyword=True)})  # a live worker
    run = adminctl("enqueue", "demo.echo", "--payload", '{"greeting": "hi", "n": [1, 2]}')
    assert run.code == 0
    task_id = run.stdout.strip()
    assert re.fullmatch(r"[0-9a-f]{32}", task_id) and run.stdout == task_id + "\n"  # the id alone on stdout
    assert "enqueued demo.echo in queue default (pending)" in run.stderr
    info = inspector.get_task("default", task_id)
    assert (info.type, info.payload, info.state, info.max_retry) == ("demo.echo", {"greeting": "hi", "n": [1, 2]},
                                                                     "pending", 25)


def test_enqueue_with_every_option_and_json(adminctl, inspector: Inspector, redis_client, connection) -> None:
    seed_heartbeat(redis_client, connection.keys, queues=["low"],
                   types={"reports.build": signature("id"), "other": signature()})
    data = adminctl("enqueue", "reports.build", "-p", '{"id": 3}', "--queue", "low", "--process-in", "5m",
                    "--max-retry", "3", "--timeout", "1m30s", "--unique", "1h", "--task-id", "report-3",
                    "--retention", "2h", "--json").json()
    assert set(data) == TASK_KEYS
    assert (data["id"], data["queue"], data["type"], data["state"], data["max_retry"], data["timeout"],
            data["retention"]) == ("report-3", "low", "reports.build", "scheduled", 3, 90.0, 7200.0)
    assert data["unique_key"]
    info = inspector.get_task("low", "report-3")
    assert info.state == "scheduled" and info.payload == {"id": 3}
    assert 290 <= (info.next_process_at - info.enqueued_at).total_seconds() <= 310
    # the same unique task again: refused
    dup = adminctl("enqueue", "reports.build", "-p", '{"id": 3}', "--queue", "low", "--unique", "1h")
    assert dup.code == 1 and dup.stdout == "" and len(dup.stderr.splitlines()) == 1 and "error:" in dup.stderr
    # the same task id again: refused
    taken = adminctl("enqueue", "other", "--queue", "low", "--task-id", "report-3")
    assert taken.code == 1 and "report-3" in taken.stderr


def test_enqueue_payload_from_stdin_and_file(adminctl, inspector: Inspector, tmp_path, redis_client,
                                             connection) -> None:
    seed_heartbeat(redis_client, connection.keys, types={"t": signature(optional=["from"])})
    from_stdin = adminctl("enqueue", "t", "--payload", "-", input='{"from": "stdin"}')
    assert inspector.get_task("default", from_stdin.stdout.strip()).payload == {"from": "stdin"}
    path = tmp_path / "payload.json"
    path.write_text('{"from": "file"}')
    from_file = adminctl("enqueue", "t", "--payload", f"@{path}")
    assert inspector.get_task("default", from_file.stdout.strip()).payload == {"from": "file"}


def test_enqueue_refuses_bad_payloads_with_exit_1(adminctl, inspector: Inspector, tmp_path) -> None:
    (tmp_path / "latin1.json").write_bytes(b'{"name": "caf\xe9"}')
    for payload, message in (("{not json", "is not valid JSON"), ("[1, 2]", "must be a JSON object"),
                             ('"text"', "must be a JSON object"), (f"@{tmp_path}/missing.json", "cannot read"),
                             (f"@{tmp_path}/latin1.json", "latin1.json' is not UTF-8 text (byte 13: b'\\xe9')")):
        run = adminctl("enqueue", "t", "--payload", payload)
        assert run.code == 1, payload
        assert run.stdout == "" and message in run.stderr and len(run.stderr.splitlines()) == 1, run
    from_stdin = adminctl("enqueue", "t", "--payload", "-", input=b"\xff\xfe{}")
    assert from_stdin.code == 1 and from_stdin.stderr == "error: stdin is not UTF-8 text (byte 0: b'\\xff')\n"
    bad_type = adminctl("enqueue", "has space")
    assert bad_type.code == 2 and "invalid task type" in bad_type.stderr
    # A file or stdin far longer than any payload (an export given by mistake, /dev/zero) was read whole,
    # into memory, before the size check: now reading stops at 4 times max_payload_bytes (512 KB here).
    (tmp_path / "huge.json").write_bytes(b" " * (4 * 512 * 1024 + 1))
    for args, input_text in (((f"@{tmp_path}/huge.json",), None), (("-",), " " * (4 * 512 * 1024 + 1))):
        huge = adminctl("enqueue", "t", "--payload", *args, input=input_text)
        assert huge.code == 1 and "is over 2,097,152 bytes: no payload of at most 524,288 bytes" in huge.stderr, huge
    assert inspector.queues() == []  # nothing was enqueued
