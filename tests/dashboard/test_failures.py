"""The dashboard's Failures page: failed tasks grouped by error, across queues and per queue; run,
archive and delete a whole group (POST + CSRF + the operate permission, through the Inspector)."""

from __future__ import annotations

import html as htmllib
import re

from django.test import Client as DjangoClient
from django.urls import reverse

from queuecore import Client, Inspector
from tests.adminctl.test_failures import seed_failures
from tests.conftest import wait_until
from tests.dashboard.conftest import HX

URL = reverse("queuecore_dashboard:failures")


def test_groups_across_queues_and_per_queue(viewer: DjangoClient, redis_client, connection, client: Client,
                                            inspector: Inspector) -> None:
    empty = viewer.get(URL)
    assert empty.status_code == 200 and "No failed tasks." in empty.content.decode()
    seed_failures(redis_client, connection, client)
    key = inspector.failure_groups().groups[0].key
    page = htmllib.unescape(viewer.get(URL).content.decode())
    assert f'data-qc-failure-group="{key}"' in page
    assert "card <n> declined for order <n>" in page and "billing.py:charge" in page
    assert "4 archived, 1 retry" in page and "6 failed tasks read." in page
    assert reverse("queuecore_dashboard:task", args=["mail", "m0"]) in page  # its newest tasks link to them
    assert 'aria-current="page">Failures</a>' in page
    assert "data-qc-failure-action" not in page  # a viewer sees no actions
    mail = htmllib.unescape(viewer.get(reverse("queuecore_dashboard:queue_failures", args=["mail"])).content.decode())
    assert mail.count("data-qc-failure-group=") == 2 and "Failures in queue mail" in mail
    fragment = viewer.get(URL, headers=HX).content.decode()
    assert 'id="qc-failures"' in fragment and "<html" not in fragment
    assert viewer.get(reverse("queuecore_dashboard:queue_failures", args=["nope"])).status_code == 404


def test_operators_act_on_a_group_viewers_cannot(operator: DjangoClient, viewer: DjangoClient, redis_client,
                                                 connection, client: Client, inspector: Inspector) -> None:
    seed_failures(redis_client, connection, client)
    key = inspector.failure_groups().groups[0].key
    page = htmllib.unescape(operator.get(URL).content.decode())
    assert 'data-confirm="Delete 5 tasks failing with “CardDeclined: card <n> declined for order <n>” in ' \
           'billing, mail?"' in page
    delete = reverse("queuecore_dashboard:failure_action", args=[key, "delete"])
    assert viewer.post(delete).status_code == 403
    assert operator.get(delete).status_code == 405  # POST only
    assert inspector.count("billing", "archived") == 4
    done = operator.post(delete, headers=HX)
    job_id = re.search(r'data-qc-bulk-job="(\w+)"', done.content.decode()).group(1)  # type: ignore[union-attr]
    assert done.status_code == 200 and f"Delete tasks of failure group {key} in every queue" in done.content.decode()
    wait_until(lambda: inspector.bulk_job(job_id).finished, message="the group's bulk job to finish")
    assert (inspector.bulk_job(job_id).status, inspector.bulk_job(job_id).done) == ("done", 5)
    assert (inspector.count("billing", "archived"), inspector.count("mail", "retry")) == (0, 0)
    assert inspector.audit_log()[0].actor.startswith("dashboard:")
    again = operator.post(delete)
    assert again.status_code == 404 and "it may have been acted on already" in again.content.decode()
    run = reverse("queuecore_dashboard:queue_failure_action", args=["mail", inspector.failure_groups().groups[0].key,
                                                                    "run"])
    ran = operator.post(run)
    assert ran.status_code == 302 and ran.url.startswith("/queues/bulk/_/")
    wait_until(lambda: inspector.bulk_job(ran.url.rstrip("/").rsplit("/", 1)[1]).finished, message="the run")
    assert (inspector.count("mail", "archived"), inspector.count("mail", "pending")) == (0, 2)  # and the seed one
    assert operator.post(reverse("queuecore_dashboard:failure_action", args=[key, "cancel"])).status_code == 404


def test_archive_is_offered_for_and_takes_only_a_groups_tasks_still_to_be_retried(
        operator: DjangoClient, redis_client, connection, client: Client, inspector: Inspector) -> None:
    """An archived task has nothing to archive: a group all archived offers no Archive (its job said
    "0 archived, 5 skipped: gone or moved on", though nothing had moved), and a mixed group's Archive
    counts and takes its retry tasks only."""
    seed_failures(redis_client, connection, client)  # CardDeclined: 4 archived + 1 retry; SMTPError: 1 archived
    card, smtp = (g.key for g in inspector.failure_groups().groups)
    page = htmllib.unescape(operator.get(URL).content.decode())
    rows = {key: page.split(f'data-qc-failure-group="{key}"', 1)[1].split("</tr>", 1)[0] for key in (card, smtp)}
    assert 'data-qc-failure-action="archive"' not in rows[smtp]
    assert 'data-qc-failure-action="run"' in rows[smtp] and 'data-qc-failure-action="delete"' in rows[smtp]
    assert 'data-confirm="Archive 1 task failing with “CardDeclined' in rows[card]
    refused = operator.post(reverse("queuecore_dashboard:failure_action", args=[smtp, "archive"]), headers=HX)
    assert refused.status_code == 200 and "has no task to archive: every one is archived" in htmllib.unescape(
        refused.content.decode())
    assert inspector.bulk_jobs() == []  # nothing was queued
    job = inspector.act_on_failure_group(card, "archive")
    assert (job.status, job.total, job.done, job.skipped) == ("done", 1, 1, 0)
    assert (inspector.count("mail", "retry"), inspector.count("mail", "archived")) == (0, 2)


def test_a_partial_read_is_said_on_the_page_and_in_each_actions_confirmation(
        operator: DjangoClient, redis_client, connection, client: Client, monkeypatch) -> None:
    """A review: the confirmation gave the count read as the group's; the action takes those only."""
    import queuecore.core.inspector as inspector_module
    from queuecore.core.failures import read_failures

    seed_failures(redis_client, connection, client)
    monkeypatch.setattr(inspector_module, "read_failures",  # a list of 4 archived tasks is longer than 3
                        lambda redis, keys, queues, limit: read_failures(redis, keys, queues, 3))
    page = htmllib.unescape(operator.get(URL).content.decode())
    assert "a group's actions take those only" in page
    confirms = re.findall(r'data-confirm="([^"]*)"', page)
    assert confirms and all("Only the newest 5 failed tasks were read" in c for c in confirms)
    monkeypatch.undo()
    page = htmllib.unescape(operator.get(URL).content.decode())
    assert "Only the newest" not in page and "a group's actions" not in page
