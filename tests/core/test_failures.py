"""Failures grouped by the fingerprint of their last error (``failures.py``), on real tasks that failed
in a real worker."""

from __future__ import annotations

import pytest

from queuecore import task
from queuecore.core.errors import ConfigurationError, FailureGroupNotFound
from queuecore.core.failures import fingerprint, normalise_message
from tests.conftest import wait_until

TRACE = '''{head}

Traceback (most recent call last):
  File "/srv/app/{file}", line {line}, in {func}
    charge(order)
  File "/usr/lib/python3.11/socket.py", line 12, in connect
    raise err
{head}'''


def test_what_varies_between_occurrences_is_taken_out() -> None:
    assert normalise_message("user 5005 not found in 'eu-west' (took 3.25s)") == "user <n> not found in '…' (took <n>s)"
    assert normalise_message("timeout to 10.0.0.7:5432 after 30s") == "timeout to <address> after <n>s"
    assert normalise_message("order 0f3a9c2e11b04d7e gone; id=123e4567-e89b-12d3-a456-426614174000") == \
        "order <id> gone; id=<uuid>"
    assert normalise_message('bad key "a b"\n   next line') == 'bad key "…" next line'


def test_an_apostrophe_is_no_quote() -> None:
    """A review: the apostrophe of "can't" was paired with the next quote, so the quoted value stayed
    in the message and each occurrence made a group of its own."""
    forms = {normalise_message(f"can't multiply sequence by non-int of type '{t}'") for t in ("float", "str")}
    assert forms == {"can't multiply sequence by non-int of type '…'"}
    assert normalise_message("couldn't find user 'ann' (tried 3 times)") == "couldn't find user '…' (tried <n> times)"
    assert normalise_message("'NoneType' object has no attribute 'id'") == "'…' object has no attribute '…'"


def test_one_kind_of_failure_has_one_fingerprint_and_the_handler_frame_tells_kinds_apart() -> None:
    one = fingerprint(TRACE.format(head="ConnectionError: timeout to 10.0.0.7:5432", file="pay.py", line=40,
                                   func="charge_task"))
    two = fingerprint(TRACE.format(head="ConnectionError: timeout to 10.0.0.9:5432", file="pay.py", line=41,
                                   func="charge_task"))
    elsewhere = fingerprint(TRACE.format(head="ConnectionError: timeout to 10.0.0.7:5432", file="mail.py", line=9,
                                         func="send_task"))
    assert one == two and one.key == two.key
    assert (one.error_type, one.message, one.frame) == ("ConnectionError", "timeout to <address>", "pay.py:charge_task")
    assert elsewhere.key != one.key
    through_core = TRACE.format(head="ConnectionError: timeout to 10.0.0.7:5432", file="pay.py", line=40,
                                func="charge_task").replace(
        "Traceback (most recent call last):\n",
        'Traceback (most recent call last):\n  File "/venv/site-packages/queuecore/core/tracing.py", line 80, '
        'in process\n    return call()\n')
    assert fingerprint(through_core) == one  # queuecore's own frames are passed over
    assert fingerprint("worker lost (lease expired)") == fingerprint("worker lost (lease expired)")
    assert fingerprint("worker lost (lease expired)").error_type == ""
    assert fingerprint("TaskTimeout").error_type == "TaskTimeout"


def test_groups_of_real_failures_and_acting_on_a_whole_group(make_worker, registry, client, inspector) -> None:
    @task(name="t.lookup", registry=registry, max_retry=0)
    def lookup(user: int) -> None:
        raise LookupError(f"user {user} not found")

    @task(name="t.connect", registry=registry, max_retry=0)
    def connect(host: str) -> None:
        raise ConnectionError(f"timeout to {host}:5432")

    for n in range(5):
        client.enqueue("t.lookup", {"user": 1000 + n})
    for n in range(3):
        client.enqueue("t.connect", {"host": f"10.0.0.{n}"}, queue="db")
    make_worker(queues="default,db")
    wait_until(lambda: inspector.count("default", "archived") == 5 and inspector.count("db", "archived") == 3,
               15, message="eight archived failures")

    never_ran = client.enqueue("t.lookup", {"user": 1}, process_in=3600).id
    inspector.archive_task("default", never_ran)  # archived by an operator before it failed: no failure
    report = inspector.failure_groups()
    assert report.scanned == 8 and report.scanned_all
    assert [(g.fingerprint.error_type, g.fingerprint.message, g.count, g.queues, g.types) for g in report.groups] == [
        ("LookupError", "user <n> not found", 5, ["default"], ["t.lookup"]),
        ("ConnectionError", "timeout to <address>", 3, ["db"], ["t.connect"])]
    lookups = report.groups[0]
    assert lookups.fingerprint.frame == "test_failures.py:lookup"
    assert lookups.first_seen is not None and lookups.last_seen is not None
    assert lookups.first_seen <= lookups.last_seen
    assert lookups.by_state() == {"archived": 5}
    assert lookups.example.startswith("LookupError: user 100")
    assert [g.count for g in inspector.failure_groups("db").groups] == [3]
    assert [(g.key, g.count) for g in report.of_type("t.connect").groups] == [(report.groups[1].key, 3)]
    assert report.of_type("t.none").groups == [] and report.of_type("t.lookup").scanned == report.scanned

    job = inspector.as_actor("ops").act_on_failure_group(lookups.key, "run")
    assert (job.status, job.done, job.skipped, job.total, job.actor) == ("done", 5, 0, 5, "ops")
    wait_until(lambda: inspector.count("default", "archived") == 6 and inspector.count("default", "pending") == 0,
               15, message="the five to run and fail again")
    job = inspector.act_on_failure_group(lookups.key, "delete")
    assert (job.status, job.done, job.scope.group) == ("done", 5, lookups.key)
    assert inspector.count("default", "archived") == 1 and inspector.count("db", "archived") == 3
    entries = inspector.audit_log()[:2]
    assert [(e.action, e.count, e.actor) for e in entries] == [
        ("failures.delete", 5, "api"), ("failures.run", 5, "ops")]
    assert len(entries[0].task_ids) == 5 and f"bulk job {job.id}: ok" in entries[0].outcome
    with pytest.raises(FailureGroupNotFound):
        inspector.act_on_failure_group(lookups.key, "delete")
    with pytest.raises(ConfigurationError, match="one of run, archive, delete"):
        inspector.act_on_failure_group(report.groups[1].key, "cancel")


def test_the_django_apps_middleware_is_not_taken_for_the_handler(make_worker, registry, client, inspector) -> None:
    """Under runworker every handler runs inside queuecore.middleware.django_db_connections: its frame
    was every group's "handler frame", so two handlers failing alike fell into one group (and a
    group action would have acted on both)."""
    pytest.importorskip("django")
    from queuecore.middleware import django_db_connections

    @task(name="t.first", registry=registry, max_retry=0)
    def first() -> None:
        raise LookupError("not found")

    @task(name="t.second", registry=registry, max_retry=0)
    def second() -> None:
        raise LookupError("not found")

    client.enqueue("t.first", {})
    client.enqueue("t.second", {})
    make_worker(middleware=[django_db_connections])
    wait_until(lambda: inspector.count("default", "archived") == 2, 15, message="two archived failures")
    groups = inspector.failure_groups().groups
    assert sorted(g.fingerprint.frame for g in groups) == ["test_failures.py:first", "test_failures.py:second"]
    assert [g.count for g in groups] == [1, 1]
