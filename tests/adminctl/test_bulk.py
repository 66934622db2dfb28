"""``adminctl task *-all`` and ``failures run|archive|delete`` as bulk jobs, and ``adminctl bulk``."""

from __future__ import annotations

import logging

import pytest

from queuecore import Client, Inspector
from tests.adminctl.test_failures import seed_failures


def enqueue_archived(client: Client, inspector: Inspector, queue: str, **types: int) -> None:
    for type_name, count in types.items():
        client.enqueue_many([(type_name, {"n": n}) for n in range(count)], queue=queue, process_in=3600)
    inspector.archive_all(queue, "scheduled")


def test_a_filtered_delete_all_acts_on_exactly_the_matches(adminctl, client: Client, inspector: Inspector) -> None:
    enqueue_archived(client, inspector, "reports", **{"t.a": 30, "t.b": 20})
    run = adminctl("task", "delete-all", "reports", "archived", "--filter", "type:t.a", "--yes", "--json")
    assert run.code == 0, run.stderr
    data = run.json()
    assert (data["status"], data["count"], data["skipped"], data["total"], data["scope"]["filter"]) == (
        "done", 30, 0, 30, "type:t.a")
    assert inspector.count("reports", "archived") == 20
    assert {t.type for t in inspector.list_tasks("reports", "archived", 1, 100).tasks} == {"t.b"}
    human = adminctl("task", "delete-all", "reports", "archived", "--type", "t.b", "--yes")
    assert human.code == 0 and "deleted 20 task(s) in" in human.stderr and "(bulk job " in human.stderr
    asked = adminctl("task", "archive-all", "reports", "pending", "--search", "x", input="n\n")
    assert "no pending tasks in queue reports" in asked.stderr  # nothing to do: nothing asked


def test_confirmation_says_a_filter_finds_the_tasks_first(adminctl, client: Client, inspector: Inspector) -> None:
    enqueue_archived(client, inspector, "reports", **{"t.a": 3})
    refused = adminctl("task", "delete-all", "reports", "archived", "--filter", "type:t.a", input="n\n")
    assert refused.code == 1 and "every archived task of queue reports that matches (among 3)" in refused.stderr
    assert inspector.count("reports", "archived") == 3 and len(inspector.bulk_jobs()) == 1  # the seed's archive


def test_background_queues_a_job_that_bulk_shows_and_cancels(adminctl, client: Client, inspector: Inspector) -> None:
    enqueue_archived(client, inspector, "reports", **{"t.a": 5})
    queued = adminctl("task", "run-all", "reports", "archived", "--yes", "--background", "--json").json()
    assert (queued["status"], queued["done"], queued["description"]) == (
        "queued", 0, "run archived tasks of queue reports")
    listed = adminctl("bulk", "ls", "--json").json()
    assert (listed[0]["id"], listed[0]["status"]) == (queued["id"], "queued")  # newest first
    assert [j["status"] for j in listed[1:]] == ["done"]  # the seed's archive-all
    table = adminctl("bulk", "ls")
    assert queued["id"] in table.stdout and "queued" in table.stdout and "run archived tasks" in table.stdout
    shown = adminctl("bulk", "show", queued["id"])
    assert shown.code == 0 and "0 of ~5" in shown.stdout
    cancelled = adminctl("bulk", "cancel", queued["id"])
    assert cancelled.code == 0 and f"bulk job {queued['id']} cancelled" in cancelled.stderr
    assert adminctl("bulk", "show", queued["id"], "--json").json()["status"] == "cancelled"
    assert inspector.count("reports", "archived") == 5  # a cancelled job that never ran did nothing
    again = adminctl("bulk", "cancel", queued["id"])
    assert again.code == 0 and "had already finished" not in again.stderr  # it was cancelled: it says so
    assert inspector.audit_log()[0].action == "bulk.cancel"


def test_failure_group_in_the_background_and_in_the_foreground(adminctl, redis_client, connection,
                                                                client: Client, inspector: Inspector) -> None:
    seed_failures(redis_client, connection, client)
    key = inspector.failure_groups().groups[0].key
    queued = adminctl("failures", "archive", key, "--background", "--yes", "--json").json()
    assert queued["scope"]["group"] == key and queued["status"] == "queued"
    assert queued["total"] == 1  # of its 5 tasks, the one still to be retried: 4 are archived already
    assert adminctl("bulk", "cancel", queued["id"], "--json").json()["status"] == "cancelled"
    done = adminctl("failures", "run", key, "--queue", "billing", "--yes", "--json").json()
    assert (done["status"], done["done"], done["scope"]["queue"]) == ("done", 4, "billing")
    assert inspector.count("billing", "pending") == 4 + 1  # and the task that registered the queue


def test_bad_input_exits_with_a_clear_error_and_queues_nothing(adminctl, client: Client,
                                                               inspector: Inspector) -> None:
    enqueue_archived(client, inspector, "reports", **{"t.a": 2})
    bad = adminctl("task", "delete-all", "reports", "archived", "--filter", "colour:red", "--yes")
    assert bad.code == 2 and "unknown filter field 'colour'" in bad.stderr
    long = adminctl("task", "delete-all", "reports", "archived", "--search", "x" * 2001, "--yes")
    assert long.code == 2 and "a search is at most 2,000 characters" in long.stderr
    assert len(inspector.bulk_jobs()) == 1  # the seed's archive-all only
    # A search as long as a list takes (the dashboard offers "All N matches" for it) is taken by a job too.
    fits = adminctl("task", "delete-all", "reports", "archived", "--search", "x" * 1500, "--yes")
    assert fits.code == 0, fits
    for args in (("bulk", "show", "nope"), ("bulk", "cancel", "nope"), ("bulk", "show", "../../x")):
        run = adminctl(*args)
        assert run.code == 1 and "no bulk job" in run.stderr and "Traceback" not in run.stderr, args
    assert adminctl("bulk", "ls", "--limit", "0").code == 2


@pytest.mark.parametrize("option", ["--type", "--search", "--filter"])
def test_an_empty_filter_option_is_refused_not_read_as_no_filter(adminctl, client: Client, inspector: Inspector,
                                                                  option: str) -> None:
    """A review: ``delete-all Q archived --type "$T" --yes`` with T unset deleted every archived task of
    every type (an empty option was no filter); ``task ls`` and ``export`` listed everything."""
    enqueue_archived(client, inspector, "reports", **{"t.a": 2, "t.b": 2})
    for value in ("", "  "):
        refused = adminctl("task", "delete-all", "reports", "archived", option, value, "--yes")
        assert refused.code == 2 and "was given empty" in refused.stderr and "Traceback" not in refused.stderr
    assert inspector.count("reports", "archived") == 4
    for args in (("task", "ls", "reports", "archived"), ("task", "export", "reports", "archived")):
        refused = adminctl(*args, option, "")
        assert refused.code == 2 and "was given empty" in refused.stderr, args
        assert adminctl(*args).code == 0, args


def test_a_delete_all_deletes_no_more_than_the_count_confirmed(adminctl, client: Client, inspector: Inspector,
                                                                monkeypatch) -> None:
    """Tasks enqueued while the operator read the question are not among those deleted."""
    from queuecore_adminctl.terminal import Terminal

    client.enqueue_many([("t.a", {"n": n}) for n in range(5)], queue="reports")
    late = []

    def producer_meanwhile(self: Terminal, question: str) -> bool:
        late.extend(h.id for h in client.enqueue_many([("t.b", {"n": n}) for n in range(100)], queue="reports"))
        return True

    monkeypatch.setattr(Terminal, "confirm", producer_meanwhile)
    run = adminctl("task", "delete-all", "reports", "pending")
    assert run.code == 0, run.stderr
    assert "This will delete 5 pending task(s)" in run.stderr and "deleted 5 task(s)" in run.stderr
    assert inspector.count("reports", "pending") == 100
    assert {t.id for t in inspector.list_tasks("reports", "pending", 1, 200).tasks} == set(late)


def test_ctrl_c_counts_the_chunk_redis_finished(adminctl, client: Client, inspector: Inspector, monkeypatch,
                                                caplog) -> None:
    """A review: Ctrl-C right after Redis acted on a chunk, before the job counted it, left "cancelled
    after 0" in the summary and the audit while 500 tasks were gone. Ctrl-C now asks the job to stop
    between chunks, so each chunk acted on is counted."""
    import os
    import signal

    from queuecore.core.inspector import InspectorBulkOperations

    enqueue_archived(client, inspector, "reports", **{"t.a": 1_500})
    chunk = InspectorBulkOperations.state_chunk

    def ctrl_c_after_the_first(self: InspectorBulkOperations, *args: object) -> object:
        result = chunk(self, *args)
        os.kill(os.getpid(), signal.SIGINT)  # as the terminal sends it, while the chunk's reply is in hand
        return result

    monkeypatch.setattr(InspectorBulkOperations, "state_chunk", ctrl_c_after_the_first)
    with caplog.at_level(logging.INFO, logger="queuecore.bulk"):
        run = adminctl("task", "delete-all", "reports", "archived", "--yes", "--json")
    # a review: it exited 0 (so "delete-all ... --yes && next-step" went on) and logged its own going on
    # as a recovery, "taken up by <itself> ...; its driver before stopped"
    assert run.code == 130, run.stderr
    assert "taken up by" not in caplog.text and "goes on, driven by" in caplog.text
    job = run.json()
    deleted = 1_500 - inspector.count("reports", "archived")
    assert (job["status"], job["done"], deleted) == ("cancelled", 500, 500)
    assert inspector.audit_log()[0].outcome.startswith(f"bulk job {job['id']}: cancelled after 500")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # given back


def test_a_job_another_operator_cancels_exits_1(adminctl, client: Client, inspector: Inspector,
                                                monkeypatch) -> None:
    """A review: a foreground ``delete-all --yes`` that another operator cancelled (``bulk cancel``, the
    dashboard) exited 0 with work left undone, so ``delete-all ... --yes && next-step`` went on."""
    from queuecore.core.inspector import InspectorBulkOperations

    enqueue_archived(client, inspector, "reports", **{"t.a": 1_500})
    chunk = InspectorBulkOperations.state_chunk

    def cancelled_meanwhile(self: InspectorBulkOperations, *args: object) -> object:
        result = chunk(self, *args)
        (open_job,) = [j for j in inspector.bulk_jobs() if not j.finished]
        inspector.cancel_bulk_job(open_job.id)  # the other operator, between two chunks
        return result

    monkeypatch.setattr(InspectorBulkOperations, "state_chunk", cancelled_meanwhile)
    run = adminctl("task", "delete-all", "reports", "archived", "--yes", "--json")
    assert run.code == 1, run.stderr
    assert run.json()["status"] == "cancelled" and inspector.count("reports", "archived") == 1_000


def test_the_ctrl_c_handler_takes_no_lock() -> None:
    """A handler that set an Event blocked while its thread held that Event's lock (the main thread
    inside ``wait``, following a job; or a second Ctrl-C handled inside the first one's ``set()``): a
    hang for good. Here another thread plays the handler while the lock is held."""
    import signal
    import threading

    from queuecore_adminctl.commands.bulk import CtrlC, _ctrl_c_sets

    event = CtrlC()
    with _ctrl_c_sets(event):
        handler = signal.getsignal(signal.SIGINT)
        assert callable(handler)
        with event._cond:  # type: ignore[attr-defined]  # as Event.wait holds it
            ran = threading.Thread(target=handler, args=(signal.SIGINT, None))
            ran.start()
            ran.join(5)
            assert not ran.is_alive()
        assert event.is_set() and event.wait(0)
    assert not CtrlC().wait(0.01)
