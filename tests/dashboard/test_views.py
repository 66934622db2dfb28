"""Every dashboard view through the Django test client, against real Redis state."""

from __future__ import annotations

import html as htmllib
import re
import time
from typing import Any
from urllib.parse import urlencode

import pytest
from django.test import Client as DjangoClient

from queuecore import Client, Inspector, current_task, task
from queuecore.core.clock import to_ms
from queuecore.core.keys import stats_minute
from queuecore.core.message import dumps
from tests.conftest import wait_until
from tests.dashboard.conftest import HX
from tests.helpers.state import seed_task

EVIL = "<script>window.__xss=1</script>"


def html(response: Any) -> str:
    return response.content.decode()


def rows(response: Any) -> list[str]:
    """The task ids of the task table's rows, in order."""
    return re.findall(r'<tr data-qc-task="([^"]+)"', html(response))


def trigger(response: Any) -> str:
    return response.headers.get("HX-Trigger", "")


# -- overview ---------------------------------------------------------------------------------------


def test_overview_shows_totals_queues_chart_servers_and_recent_actions(viewer: DjangoClient, client: Client,
                                                                      inspector: Inspector, redis_client: Any,
                                                                      connection: Any) -> None:
    for n in range(3):
        client.enqueue("mail.send", {"n": n}, queue="mail")
    client.enqueue("report.build", queue="reports", process_in=600)
    inspector.as_actor("dashboard:olga").pause_queue("reports")
    stats = connection.keys.queue("mail").stats
    redis_client.hset(stats, mapping={f"processed:{stats_minute(time.time())}": 40,
                                      f"failed:{stats_minute(time.time())}": 4})

    r = viewer.get("/queues/")
    assert r.status_code == 200
    body = html(r)
    assert 'data-qc-total="pending">3<' in body and 'data-qc-total="scheduled">1<' in body
    assert re.search(r'<tr data-qc-queue="mail">.*?data-qc-cell="size">3<', body, re.S)
    assert re.search(r'<tr data-qc-queue="reports">.*?qc-badge-paused', body, re.S)
    assert 'data-qc-chart="processed">40<' in body and 'data-qc-chart="failed">4<' in body
    assert body.count('class="qc-bar-processed"') == 60  # the last hour, by minute
    assert 'data-qc-stat="servers">0<' in body
    assert "dashboard:olga" in body and "queue.pause" in body
    assert "no-cache" in r.headers["Cache-Control"]
    # htmx and our JS come from static files of the app, never from a CDN
    scripts = re.findall(r'<script src="([^"]+)"', body)
    assert scripts and all(src.startswith("/static/") for src in scripts)
    assert any("htmx" in src for src in scripts)


def test_overview_partials_are_fragments_that_poll(viewer: DjangoClient, client: Client) -> None:
    client.enqueue("x", queue="default")
    for url, root in (("/queues/_/stats/", "qc-stats"), ("/queues/_/queues/", "qc-queue-table"),
                      ("/queues/_/chart/?range=month", "qc-chart")):
        r = viewer.get(url, headers=HX)
        body = html(r).strip()
        assert r.status_code == 200, url
        assert "<html" not in body
        first = body.split(">", 1)[0]
        assert f'id="{root}"' in first and 'hx-swap="outerHTML"' in first
        assert 'data-qc-poll="2"' in first and 'hx-trigger="qc:poll, qc:refresh from:body' in first
        assert "[" not in first.split('hx-trigger="', 1)[1].split('"', 1)[0]  # no JS filter: no eval needed
    month = html(viewer.get("/queues/_/chart/?range=month", headers=HX))
    assert month.count('class="qc-bar-processed"') == 30 and "Last 30 days" in month


def test_overview_page_with_a_chart_range_in_the_query(viewer: DjangoClient, client: Client) -> None:
    client.enqueue("x")
    body = html(viewer.get("/queues/?range=month"))
    assert body.count('class="qc-bar-processed"') == 30


def test_overview_without_queues(viewer: DjangoClient) -> None:
    body = html(viewer.get("/queues/"))
    assert "No queues yet" in body and "Nothing to chart" in body


# -- queue page -------------------------------------------------------------------------------------


def test_queue_page_lists_a_state_with_tabs_and_counts(viewer: DjangoClient, client: Client,
                                                       inspector: Inspector) -> None:
    ids = [client.enqueue("mail.send", {"to": f"user{n}@example.com"}).id for n in range(3)]
    client.enqueue("mail.send", process_in=60)
    r = viewer.get("/queues/default/pending/")
    assert r.status_code == 200
    body = html(r)
    assert rows(r) == ids  # oldest first
    assert 'data-qc-count="pending">3<' in body and 'data-qc-count="scheduled">1<' in body
    assert 'aria-current="page" data-qc-tab="pending"' in body
    assert "{&quot;to&quot;: &quot;user0@example.com&quot;}" in body  # payload preview, escaped JSON
    assert "HX-Request" in r.headers["Vary"]
    assert "Run now" not in body and 'name="task_id"' not in body  # read-only: no actions
    assert viewer.get("/queues/default/").url == "/queues/default/pending/"


def test_queue_page_htmx_request_gets_only_the_task_table(viewer: DjangoClient, client: Client) -> None:
    client.enqueue("mail.send")
    r = viewer.get("/queues/default/pending/", headers=HX)
    body = html(r).strip()
    assert body.startswith('<section id="qc-task-table"') and "<html" not in body
    first = body.split(">", 1)[0]  # polls (dashboard.js holds it while tasks are ticked), synchronised
    assert 'data-qc-poll="2"' in first and 'hx-sync="#qc-task-area:drop"' in first
    restore = viewer.get("/queues/default/pending/", headers={**HX, "HX-History-Restore-Request": "true"})
    assert "<html" in html(restore)  # a history restore needs the whole page


def test_queue_page_shows_state_specific_columns(viewer: DjangoClient, client: Client, inspector: Inspector,
                                                 redis_client: Any, connection: Any) -> None:
    q = connection.keys.queue("default")
    client.enqueue("x")
    now = time.time()
    seed_task(redis_client, q, "r1", "retry", score=to_ms(now + 90), retried=2,
              error="TimeoutError: upstream took too long\n\nTraceback ...", failed_at=to_ms(now))
    seed_task(redis_client, q, "a1", "archived", score=to_ms(now - 60), error="KeyError: 'user'")
    seed_task(redis_client, q, "c1", "completed", score=to_ms(now + 600), result=dumps({"rows": 12}),
              started_at=to_ms(now - 3), completed_at=to_ms(now - 1))
    seed_task(redis_client, q, "w1", "active", score=to_ms(now + 30), started_at=to_ms(now - 80), lease=1)
    seed_task(redis_client, q, "w2", "active", score=to_ms(now + 30), started_at=to_ms(now - 5), lease=1)
    # A worker's heartbeat: w1's handler started 75 s ago (5 s after its fetch); w2 waits for a slot.
    beat = {"id": "h:1:x", "host": "h", "pid": 1, "concurrency": 1, "queues": {"default": 1},
            "strict_priority": False, "started_at": now - 100, "status": "active", "heartbeat_at": now,
            "workers": [{"task_id": "w1", "queue": "default", "type": "x", "started_at": now - 75, "deadline": None}],
            "waiting": [{"task_id": "w2", "queue": "default", "type": "x", "fetched_at": now - 5}]}
    redis_client.set(connection.keys.server("h:1:x"), dumps(beat))
    redis_client.zadd(connection.keys.servers, {"h:1:x": to_ms(now + 60)})
    retry = html(viewer.get("/queues/default/retry/"))
    assert "TimeoutError: upstream took too long" in retry and "Traceback" not in retry  # first line only
    assert "Next attempt" in retry and re.search(r">in 1m \d\ds<", retry)
    assert "2 / 25" in retry
    archived = html(viewer.get("/queues/default/archived/"))
    assert "KeyError: &#x27;user&#x27;" in archived and ">1m 00s ago<" in archived
    completed = html(viewer.get("/queues/default/completed/"))
    assert "{&quot;rows&quot;: 12}" in completed
    active = html(viewer.get("/queues/default/active/"))
    assert re.search(r">1m 1[5-9]s<", active)  # running for, since its handler started
    assert "fetched ahead" in active and ">1m 2" not in active  # w2 has no running time


def test_queue_page_filters_by_type_and_by_text(viewer: DjangoClient, client: Client) -> None:
    wanted = client.enqueue("reports.build", {"customer": "acme"}).id
    client.enqueue("reports.build", {"customer": "globex"})
    client.enqueue("mail.send", {"customer": "acme"})
    r = viewer.get("/queues/default/pending/?type=reports.build&search=ACME")
    assert rows(r) == [wanted]
    assert "1 match of 3" in re.sub(r"\s+", " ", html(r))
    assert [len(rows(viewer.get(f"/queues/default/pending/?{q}"))) for q in ("type=mail.send", "search=acme")] == [1, 2]
    none = html(viewer.get("/queues/default/pending/?search=nobody"))
    assert "No pending task matches" in none and 'href="/queues/default/pending/"' in none


def test_queue_page_paginates(viewer: DjangoClient, client: Client, settings: Any) -> None:
    settings.QUEUECORE = {**settings.QUEUECORE, "DASHBOARD": {"POLL_INTERVAL": 2, "PAGE_SIZE": 2}}
    ids = [client.enqueue("x", {"n": n}).id for n in range(5)]
    first, last = viewer.get("/queues/default/pending/"), viewer.get("/queues/default/pending/?page=3")
    assert rows(first) == ids[:2] and rows(last) == ids[4:]
    assert 'href="/queues/default/pending/?page=2"' in html(first)
    assert "Page <strong data-qc-page>1</strong> of 3" in html(first)
    assert 'rel="prev"' in html(last) and 'href="/queues/default/pending/?page=2"' in html(last)
    past = html(viewer.get("/queues/default/pending/?page=9", headers=HX))  # a poll of a page that emptied
    assert "Page 9 is past the end" in past
    assert viewer.get("/queues/default/pending/?page=9").status_code == 404  # opened by its URL: no such page
    assert viewer.get("/queues/default/pending/?page=nonsense").status_code == 404


def test_queue_header_partial(viewer: DjangoClient, client: Client) -> None:
    client.enqueue("x")
    r = viewer.get("/queues/default/header/?state=retry", headers=HX)
    body = html(r).strip()
    assert body.startswith('<section id="qc-queue-header"')
    assert 'aria-current="page" data-qc-tab="retry"' in body and 'data-qc-count="pending">1<' in body
    assert "qc:tasks-changed from:body" in body.split(">", 1)[0]


def test_a_queue_named_oddly_or_like_a_page_is_reachable(operator: DjangoClient, client: Client,
                                                         inspector: Inspector) -> None:
    # Queue names hold no "/" (issue 11): every queue is one path segment; see test_queue_names.py.
    a = client.enqueue("x", queue="team:a").id
    b = client.enqueue("x", queue="servers").id
    overview = html(operator.get("/queues/"))
    assert 'href="/queues/team:a/pending/"' in overview and 'href="/queues/servers/pending/"' in overview
    assert rows(operator.get("/queues/team:a/pending/")) == [a]
    assert rows(operator.get("/queues/servers/pending/")) == [b]
    assert operator.get(f"/queues/team:a/tasks/{a}/").status_code == 200
    assert operator.post("/queues/team:a/pause/").status_code == 302
    assert inspector.queue_info("team:a").paused


# -- task page --------------------------------------------------------------------------------------


def test_task_page_shows_every_field(viewer: DjangoClient, client: Client, redis_client: Any,
                                     connection: Any) -> None:
    info = client.enqueue("reports.build", {"report": 7, "options": {"format": "pdf"}}, max_retry=5,
                          timeout=90, retention=3600)
    q = connection.keys.queue("default")
    error = "ValueError: no rows\n\nTraceback (most recent call last):\n  File \"reports.py\", line 3\n" + "x" * 3000
    redis_client.hset(q.task(info.id), mapping={"error": error, "retried": 2, "failed_at": to_ms(time.time())})
    r = viewer.get(f"/queues/default/tasks/{info.id}/")
    assert r.status_code == 200
    body = html(r)
    pretty = '{\n  "report": 7,\n  "options": {\n    "format": "pdf"\n  }\n}'
    assert pretty.replace('"', "&quot;") in body
    assert "x" * 3000 in body  # the whole last error
    assert "2 of 5" in body and "1m 30s" in body and "1h 00m" in body
    assert 'data-qc-task-state>pending<' in body
    assert "Run now" not in body and "Archive" not in body  # read-only
    assert 'id="qc-task"' in body and "hx-get" in body  # a pending task is polled


def test_task_page_ages_are_measured_by_redis_time_not_the_web_servers_clock(viewer: DjangoClient, client: Client,
                                                                              monkeypatch) -> None:
    """A page's ages count from the shared inspector's clock (Redis's time: ``AligningClock``), not from
    the web server's: with that clock 2h 5m after the enqueue, the task page says "2h 05m ago"."""
    from queuecore.core import inspector as inspector_module
    from queuecore.core.clock import FakeClock
    from queuecore_dashboard.inspector import shared_inspector

    info = client.enqueue("reports.build", {"report": 1})
    assert info.enqueued_at is not None
    redis_time = FakeClock(info.enqueued_at.timestamp() + 2 * 3600 + 5 * 60 + 2)
    monkeypatch.setattr(inspector_module, "AligningClock", lambda read_redis_time, **_options: redis_time)
    shared_inspector.cache_clear()  # the next request builds the process's inspector, with that clock
    try:
        body = html(viewer.get(f"/queues/default/tasks/{info.id}/"))
    finally:
        shared_inspector.cache_clear()
    enqueued = re.search(r"<dt>Enqueued</dt><dd>(.*?)</dd>", body, re.S)
    assert enqueued is not None and "(2h 05m ago)" in enqueued.group(1), enqueued


def test_task_page_result_and_terminal_states_stop_polling(viewer: DjangoClient, client: Client,
                                                           redis_client: Any, connection: Any) -> None:
    client.enqueue("x")
    now = time.time()
    seed_task(redis_client, connection.keys.queue("default"), "done-1", "completed", score=to_ms(now + 60),
              result=dumps({"rows": 3, "note": EVIL}), started_at=to_ms(now - 2.5), completed_at=to_ms(now))
    body = html(viewer.get("/queues/default/tasks/done-1/", headers=HX)).strip()
    assert "&quot;rows&quot;: 3" in body and "ran 2.5s" in body
    assert "hx-get" not in body.split(">", 1)[0]  # finished: the fragment stops polling
    assert EVIL not in body and "&lt;script&gt;" in body


def test_task_page_htmx_when_the_task_is_gone(viewer: DjangoClient, client: Client) -> None:
    client.enqueue("x")
    r = viewer.get("/queues/default/tasks/vanished/", headers=HX)
    assert r.status_code == 200 and "no longer stored" in html(r) and "hx-get" not in html(r)
    assert viewer.get("/queues/default/tasks/vanished/").status_code == 404


def test_task_actions_offered_by_state(operator: DjangoClient, client: Client, redis_client: Any,
                                       connection: Any) -> None:
    q = connection.keys.queue("default")
    pending = client.enqueue("x").id
    archived = client.enqueue("x", process_in=60).id
    Inspector(connection=connection).archive_task("default", archived)
    seed_task(redis_client, q, "busy", "active", score=to_ms(time.time() + 30), lease=1)

    def buttons(task_id: str) -> set[str]:
        body = html(operator.get(f"/queues/default/tasks/{task_id}/"))
        return set(re.findall(r'/tasks/[^/]+/(run|archive|delete|cancel)/"', body))

    assert buttons(pending) == {"archive", "delete"}
    assert buttons(archived) == {"run", "delete"}
    assert buttons("busy") == {"cancel"}


# -- escaping ---------------------------------------------------------------------------------------


def test_payloads_errors_types_and_queue_names_are_escaped(operator: DjangoClient, client: Client,
                                                           redis_client: Any, connection: Any) -> None:
    info = client.enqueue("x", {"note": EVIL, EVIL: 1}, queue="q<b>")
    redis_client.hset(connection.keys.queue("q<b>").task(info.id), "error", f"Boom: {EVIL}")
    pages = [html(operator.get(url)) for url in ("/queues/", "/queues/q%3Cb%3E/pending/",
                                                  f"/queues/q%3Cb%3E/tasks/{info.id}/")]
    for body in pages:
        assert EVIL not in body and "<b>" not in body
        assert "q&lt;b&gt;" in body
    assert "&lt;script&gt;window.__xss=1&lt;/script&gt;" in pages[1] and "&lt;script&gt;" in pages[2]
    assert "Boom: &lt;script&gt;" in pages[2]


# -- actions ----------------------------------------------------------------------------------------


def test_run_an_archived_task_without_javascript(operator: DjangoClient, client: Client,
                                                 inspector: Inspector) -> None:
    info = client.enqueue("x", process_in=60)
    inspector.archive_task("default", info.id)
    r = operator.post(f"/queues/default/tasks/{info.id}/run/")
    assert r.status_code == 302 and r.url == f"/queues/default/tasks/{info.id}/"
    assert inspector.get_task("default", info.id).state == "pending"
    follow = html(operator.get(r.url))
    assert f"Task {info.id} moved to pending." in follow
    entry = inspector.audit_log()[0]
    assert (entry.actor, entry.action, entry.task_ids) == ("dashboard:olga", "task.run", [info.id])


def test_task_action_with_htmx_returns_the_fragment_an_event_and_the_message(operator: DjangoClient,
                                                                             client: Client,
                                                                             inspector: Inspector) -> None:
    info = client.enqueue("x")
    r = operator.post(f"/queues/default/tasks/{info.id}/archive/", headers=HX)
    assert r.status_code == 200
    body = html(r)
    assert body.lstrip().startswith('<section id="qc-task"') and "data-qc-task-state>archived<" in body
    assert "qc:tasks-changed" in trigger(r)
    assert 'id="qc-messages"' in body and 'hx-swap-oob="afterbegin"' in body and "archived." in body
    assert inspector.get_task("default", info.id).state == "archived"


def test_an_action_that_does_not_fit_the_state_gives_a_message(operator: DjangoClient, client: Client,
                                                               inspector: Inspector) -> None:
    info = client.enqueue("x")
    r = operator.post(f"/queues/default/tasks/{info.id}/cancel/", follow=True)
    assert r.status_code == 200
    assert f"cannot cancel task {info.id!r}: it is pending" in html(r).replace("&#x27;", "'")
    assert inspector.get_task("default", info.id).state == "pending"
    assert inspector.audit_log()[0].outcome == f"cannot cancel task {info.id!r}: it is pending"


def test_delete_a_task_goes_back_to_the_queue(operator: DjangoClient, client: Client, inspector: Inspector) -> None:
    info = client.enqueue("x")
    r = operator.post(f"/queues/default/tasks/{info.id}/delete/")
    assert r.status_code == 302 and r.url == "/queues/default/pending/"
    htmx = operator.post(f"/queues/default/tasks/{client.enqueue('x').id}/delete/", headers=HX)
    assert htmx.headers["HX-Redirect"] == "/queues/default/pending/"
    assert inspector.count("default", "pending") == 0


@pytest.mark.parametrize("qname", ["servers", "failures", "ordinary"])
def test_delete_from_a_task_page_opened_directly_goes_to_its_state_list(
        operator: DjangoClient, client: Client, inspector: Inspector, qname: str) -> None:
    """Opened with no ``?next=`` and no Referer (a bookmark, the Failures page, a host that sends no
    referrer), the task page's Delete went to ``<queue>/``: for a queue named like a dashboard page
    (``servers``, ``failures``...) that is the other page."""
    info = client.enqueue("x", queue=qname, process_in=60)
    page = operator.get(f"/queues/{qname}/tasks/{info.id}/")
    found = re.search(r'name="next" value="([^"]+)"', html(page))
    assert found and found.group(1) == f"/queues/{qname}/scheduled/"
    r = operator.post(f"/queues/{qname}/tasks/{info.id}/delete/", {"next": found.group(1)}, follow=True)
    assert r.redirect_chain[0][0] == f"/queues/{qname}/scheduled/"
    assert f"<title>{qname} · scheduled · queuecore</title>" in html(r) and "deleted" in html(r)
    # a referer that is the page of that name, not a list of the queue, is not taken for one
    other = client.enqueue("x", queue=qname)
    page = operator.get(f"/queues/{qname}/tasks/{other.id}/", headers={"Referer": f"http://testserver/queues/{qname}/"})
    assert re.search(r'name="next" value="([^"]+)"', html(page)).group(1) == f"/queues/{qname}/pending/"


def test_an_action_on_a_task_page_keeps_the_list_it_was_opened_from(operator: DjangoClient, client: Client,
                                                                    inspector: Inspector) -> None:
    """A review: after Run now (htmx), the swapped-in panel's Delete and refresh went to the task's state
    list, not the filtered list the page was opened from (the action's Referer is the task page)."""
    came_from = "/queues/default/archived/?search=needle&page=1"
    client.enqueue("x", {"needle": 1}, task_id="t1")
    inspector.archive_task("default", "t1")
    page = html(operator.get("/queues/default/tasks/t1/", headers={"Referer": "http://testserver" + came_from}))
    nexts = {htmllib.unescape(v) for v in re.findall(r'name="next" value="([^"]+)"', page)}
    assert nexts == {came_from}  # Run now's form and Delete's
    r = operator.post("/queues/default/tasks/t1/run/", {"next": came_from},
                      headers={**HX, "Referer": "http://testserver/queues/default/tasks/t1/"})
    panel = html(r)
    assert inspector.get_task("default", "t1").state.value == "pending"
    assert {htmllib.unescape(v) for v in re.findall(r'name="next" value="([^"]+)"', panel)} == {came_from}
    polled = htmllib.unescape(re.search(r'hx-get="([^"]+)"', panel).group(1))
    assert polled == "/queues/default/tasks/t1/?" + urlencode({"next": came_from})


def test_cancel_a_running_task(operator: DjangoClient, client: Client, make_worker: Any, registry: Any,
                               inspector: Inspector) -> None:
    @task(name="t.forever", registry=registry)
    def forever() -> None:
        ctx = current_task()
        while not ctx.wait_cancelled(0.05):
            pass
        ctx.raise_if_cancelled()

    make_worker(queues={"default": 1})
    info = client.enqueue("t.forever")
    wait_until(lambda: inspector.get_task("default", info.id).state == "active", message="the task to run")
    r = operator.post(f"/queues/default/tasks/{info.id}/cancel/", headers=HX)
    assert r.status_code == 200 and "asked to stop" in html(r)
    wait_until(lambda: inspector.get_task("default", info.id).state == "archived", message="the task to stop")
    assert "cancel" in (inspector.get_task("default", info.id).last_error or "")


def test_bulk_action_on_selected_tasks(operator: DjangoClient, client: Client, inspector: Inspector) -> None:
    ids = [client.enqueue("x", {"n": n}, process_in=60).id for n in range(4)]
    for task_id in ids:
        inspector.archive_task("default", task_id)
    r = operator.post("/queues/default/archived/actions/", {"action": "run", "task_id": ids[:2]}, headers=HX)
    assert r.status_code == 200 and sorted(rows(r)) == sorted(ids[2:])
    assert "qc:tasks-changed" in trigger(r) and "2 task(s) moved to pending." in html(r)
    assert inspector.count("default", "pending") == 2
    entry = inspector.audit_log()[0]
    assert (entry.actor, entry.action, entry.task_ids, entry.count) == ("dashboard:olga", "tasks.run", ids[:2], 2)


def test_bulk_action_reports_tasks_left_alone(operator: DjangoClient, client: Client, inspector: Inspector) -> None:
    archived = client.enqueue("x", process_in=60).id
    inspector.archive_task("default", archived)
    r = operator.post("/queues/default/archived/actions/", {"action": "run", "task_id": [archived, "gone-1"]},
                      follow=True)
    body = html(r)
    assert "1 task(s) moved to pending." in body and "1 task(s) left as they were" in body


def test_an_action_on_ticked_tasks_leaves_those_that_left_the_list(operator: DjangoClient, client: Client,
                                                                    inspector: Inspector) -> None:
    """A review: ticked tasks were acted on whatever state they were in by then, so "delete" on the
    archived list deleted a task an operator had meanwhile run again (pending), and one never archived."""
    rerun = client.enqueue("x", process_in=60).id
    inspector.archive_task("default", rerun)
    inspector.run_task("default", rerun)  # back to pending since the archived list was read
    never = client.enqueue("x").id  # pending, never on that list
    still = client.enqueue("x", process_in=60).id
    inspector.archive_task("default", still)
    r = operator.post("/queues/default/archived/actions/", {"action": "delete", "task_id": [rerun, never, still]},
                      follow=True)
    body = html(r)
    assert "1 task(s) deleted." in body and "2 task(s) left as they were" in body and "it is pending" in body
    assert [inspector.get_task("default", t).state for t in (rerun, never)] == ["pending", "pending"]
    entry = inspector.audit_log()[0]
    assert (entry.action, entry.state, entry.count) == ("tasks.delete", "archived", 1)


def _finished_job(inspector: Inspector, job_id: str) -> Any:
    wait_until(lambda: inspector.bulk_job(job_id).finished, message="the bulk job to finish")
    return inspector.bulk_job(job_id)


def test_bulk_action_on_every_task_in_the_state(operator: DjangoClient, client: Client,
                                                inspector: Inspector) -> None:
    for n in range(5):
        client.enqueue("x", {"n": n})
    r = operator.post("/queues/default/pending/actions/", {"action": "archive", "all": "1", "type": "", "search": "",
                                                           "page": "1"})
    assert r.status_code == 302 and r.url.startswith("/queues/bulk/_/")  # without htmx: to the job's page
    job = _finished_job(inspector, r.url.rstrip("/").rsplit("/", 1)[1])
    assert (job.status, job.done, job.actor) == ("done", 5, "dashboard:olga")
    assert inspector.count("default", "pending") == 0 and inspector.count("default", "archived") == 5
    assert "Archived 5 task(s)." in html(operator.get(r.url))
    r = operator.post("/queues/default/archived/actions/", {"action": "delete", "all": "1"}, headers=HX)
    body = html(r)
    job_id = re.search(r'data-qc-bulk-job="(\w+)"', body).group(1)  # type: ignore[union-attr]
    assert '<div id="qc-bulk-jobs" hx-swap-oob="afterbegin">' in body and 'data-qc-bulk-cancel' in body
    assert _finished_job(inspector, job_id).done == 5 and inspector.count("default", "archived") == 0
    assert [e.action for e in inspector.audit_log()[:2]] == ["tasks.delete_all", "tasks.archive_all"]
    panel = operator.get(f"/queues/bulk/_/{job_id}/", headers=HX)
    assert "Deleted 5 task(s)." in html(panel) and "hx-trigger" not in html(panel).split(">", 3)[2]  # stops polling
    assert "qc:tasks-changed" in panel["HX-Trigger"] and "qc:queues-changed" in panel["HX-Trigger"]


def test_bulk_cancel_every_active_task(operator: DjangoClient, client: Client, redis_client: Any,
                                       connection: Any, inspector: Inspector) -> None:
    q = connection.keys.queue("default")
    client.enqueue("x")
    for n in range(2):
        seed_task(redis_client, q, f"busy-{n}", "active", score=to_ms(time.time() + 30), lease=1)
    r = operator.post("/queues/default/active/actions/", {"action": "cancel", "all": "1"})
    job = _finished_job(inspector, r.url.rstrip("/").rsplit("/", 1)[1])
    assert "Asked to stop 2 task(s)." in html(operator.get(r.url)) and job.done == 2
    assert redis_client.hget(q.task("busy-0"), "cancel") == "1"
    assert inspector.audit_log()[0].action == "tasks.cancel_all"


def test_bulk_jobs_page_lists_them_and_cancel_is_for_operators(operator: DjangoClient, viewer: DjangoClient,
                                                               client: Client, inspector: Inspector) -> None:
    client.enqueue("x", process_in=3600)
    queued = inspector.as_actor("cli:ops").start_bulk_job("delete", queue="default", state="scheduled")
    page = html(operator.get("/queues/bulk/"))
    assert f'data-qc-bulk-job="{queued.id}"' in page and "Delete scheduled tasks of queue default" in page
    assert "started by cli:ops" in page and "data-qc-bulk-cancel" in page
    assert "data-qc-bulk-cancel" not in html(viewer.get("/queues/bulk/"))
    assert f'data-qc-bulk-job="{queued.id}"' in html(operator.get("/queues/"))  # open jobs show on every page
    assert viewer.post(f"/queues/bulk/_/{queued.id}/cancel/").status_code == 403
    assert operator.get(f"/queues/bulk/_/{queued.id}/cancel/").status_code == 405
    r = operator.post(f"/queues/bulk/_/{queued.id}/cancel/", headers=HX)
    assert 'data-qc-bulk-status="cancelled"' in html(r) and inspector.count("default", "scheduled") == 1
    # the request, then the job's own entry: it ended at once, queued, with no driver
    assert [e.action for e in inspector.audit_log()[:2]] == ["tasks.delete_all", "bulk.cancel"]
    assert operator.get("/queues/bulk/_/nosuchjob/").status_code == 404
    assert operator.post("/queues/bulk/_/nosuchjob/cancel/").status_code == 404


@pytest.mark.parametrize(("state", "data", "message"), [
    ("pending", {"action": "run", "task_id": ["a"]}, "Run now does not apply to pending tasks."),
    ("pending", {"action": "archive"}, "Select tasks first"),
    ("pending", {"action": "explode", "task_id": ["a"]}, "Choose an action."),
    ("pending", {"action": "delete", "task_id": ["bad id!"]}, "Invalid task id."),
])
def test_bulk_action_refuses_what_does_not_fit(operator: DjangoClient, client: Client, inspector: Inspector,
                                               state: str, data: dict[str, Any], message: str) -> None:
    client.enqueue("x")
    r = operator.post(f"/queues/default/{state}/actions/", data, follow=True)
    assert message in html(r).replace("&quot;", '"').replace("&#x27;", "'")
    assert inspector.count("default", "pending") == 1
    assert inspector.audit_log() == []


def test_pause_and_unpause_from_the_overview_and_the_queue_page(operator: DjangoClient, client: Client,
                                                                inspector: Inspector) -> None:
    client.enqueue("x")
    r = operator.post("/queues/default/pause/", headers={**HX, "HX-Target": "qc-queue-table"})
    assert inspector.queue_info("default").paused
    assert html(r).lstrip().startswith('<section id="qc-queue-table"') and "qc-badge-paused" in html(r)
    assert "qc:queues-changed" in trigger(r) and "Queue default paused" in html(r)
    assert 'aria-label="Unpause default"' in html(r) and "Resume" not in html(r)
    r = operator.post("/queues/default/unpause/", {"state": "retry"}, headers={**HX, "HX-Target": "qc-queue-header"})
    assert not inspector.queue_info("default").paused
    assert html(r).lstrip().startswith('<section id="qc-queue-header"') and 'data-qc-tab="retry"' in html(r)
    assert "Queue default unpaused" in html(r)
    r = operator.post("/queues/default/pause/", {"next": "/queues/default/retry/"})
    assert r.status_code == 302 and r.url == "/queues/default/retry/"
    r = operator.get("/queues/default/retry/")
    assert "Unpause queue" in html(r) and "Resume" not in html(r)
    assert operator.post("/queues/default/resume/").status_code == 404  # one word: unpause
    r = operator.post("/queues/default/unpause/", {"next": "https://evil.example/"})
    assert r.url == "/queues/"  # an outside next is ignored
    for name in ("overview", "login"):  # a word is no URL (it was reversed as a view name: a 500, the login page)
        r = operator.post("/queues/default/pause/", {"next": name})
        assert (r.status_code, r.url) == (302, "/queues/"), name
        operator.post("/queues/default/unpause/")
    assert [e.action for e in inspector.audit_log()] == ["queue.unpause", "queue.pause"] * 3 + [
        "queue.unpause", "queue.pause"]


def test_remove_a_queue_only_when_empty(operator: DjangoClient, client: Client, inspector: Inspector) -> None:
    info = client.enqueue("x", queue="old")
    r = operator.post("/queues/old/remove/", follow=True)
    assert "holds 1 task(s)" in html(r) and "old" in inspector.queues()
    inspector.delete_task("old", info.id)
    r = operator.post("/queues/old/remove/")
    assert r.status_code == 302 and r.url == "/queues/"
    assert "old" not in inspector.queues()


def test_actions_on_unknown_queues_and_tasks_are_404(operator: DjangoClient, client: Client) -> None:
    client.enqueue("x")
    assert operator.post("/queues/nope/pause/").status_code == 404
    assert operator.post("/queues/default/tasks/missing/run/").status_code == 404
    assert operator.get("/queues/nope/pending/").status_code == 404
    assert operator.get("/queues/nope/").status_code == 404
    body = html(operator.get("/queues/nope/pending/"))
    assert "Not found" in body and "no queue named" in body


def test_actions_need_post(operator: DjangoClient, client: Client, inspector: Inspector) -> None:
    info = client.enqueue("x")
    assert operator.get(f"/queues/default/tasks/{info.id}/archive/").status_code == 405
    assert operator.get("/queues/default/pause/").status_code == 405
    assert operator.get("/queues/default/pending/actions/").status_code == 405
    assert inspector.get_task("default", info.id).state == "pending" and not inspector.queue_info("default").paused


def test_actions_need_the_csrf_token(make_user: Any, client: Client, inspector: Inspector) -> None:
    client.enqueue("x")
    strict = DjangoClient(enforce_csrf_checks=True)
    strict.force_login(make_user("csrf", "view", "operate"))
    assert strict.post("/queues/default/pause/").status_code == 403
    assert not inspector.queue_info("default").paused
    page = strict.get("/queues/default/pending/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html(page)).group(1)
    assert re.search(r'hx-headers=\'\{"X-CSRFToken": "[^"]+"\}\'', html(page))
    assert strict.post("/queues/default/pause/", {"csrfmiddlewaretoken": token}).status_code == 302
    assert inspector.queue_info("default").paused


# -- servers, Redis, audit --------------------------------------------------------------------------


def test_servers_page_lists_live_workers_with_their_tasks(viewer: DjangoClient, client: Client, make_worker: Any,
                                                          registry: Any, inspector: Inspector, redis_client: Any,
                                                          connection: Any) -> None:
    @task(name="t.slow", registry=registry)
    def slow() -> None:
        ctx = current_task()
        while not ctx.wait_cancelled(0.05):
            pass

    worker = make_worker(queues={"default": 1}, concurrency=3)
    info = client.enqueue("t.slow")
    wait_until(lambda: [w.task_id for w in inspector.workers()] == [info.id], message="the heartbeat to show the task")
    stale = {"id": "ghost:1:dead", "host": "ghost", "pid": 1, "concurrency": 1, "queues": {"default": 1},
             "strict_priority": False, "started_at": time.time() - 999, "status": "active",
             "heartbeat_at": time.time() - 999, "workers": []}
    redis_client.set(connection.keys.server("ghost:1:dead"), dumps(stale))
    redis_client.zadd(connection.keys.servers, {"ghost:1:dead": to_ms(time.time() - 60)})  # expired heartbeat
    r = viewer.get("/queues/servers/")
    body = html(r)
    assert r.status_code == 200
    assert f'data-qc-server="{worker.server_id}"' in body
    assert f'data-qc-worker-task="{info.id}"' in body and "t.slow" in body
    assert "ghost" not in body  # a stale heartbeat is gone
    assert 'data-qc-stat="busy">1<' in body and "of 3 slots" in body
    fragment = html(viewer.get("/queues/servers/", headers=HX)).strip()
    assert fragment.startswith('<section id="qc-servers"') and "hx-get" in fragment.split(">", 1)[0]


def test_servers_page_shows_a_worker_serving_a_queue_name_this_version_refuses(viewer: DjangoClient,
                                                                               redis_client: Any,
                                                                               connection: Any) -> None:
    """A review: a live worker of an earlier version serving a queue whose name this version refuses
    (which the README says to drain with that version) made the Servers page a 500 (NoReverseMatch)."""
    now = time.time()
    old = {"id": "old:7:w", "host": "old", "pid": 7, "concurrency": 2, "queues": {"old queue": 1},
           "strict_priority": False, "started_at": now - 60, "status": "active", "heartbeat_at": now,
           "workers": [{"task_id": "abc", "queue": "old queue", "type": "t.old", "started_at": now - 1}],
           "waiting": [{"task_id": "def", "queue": "old queue", "type": "t.old", "fetched_at": now - 1}]}
    redis_client.set(connection.keys.server("old:7:w"), dumps(old))
    redis_client.zadd(connection.keys.servers, {"old:7:w": to_ms(now + 60)})
    for headers in ({}, HX):
        r = viewer.get("/queues/servers/", headers=headers)
        body = html(r)
        assert r.status_code == 200 and 'data-qc-server="old:7:w"' in body
        assert "old queue" in body and 'data-qc-worker-task="abc"' in body and 'data-qc-waiting-task="def"' in body
        assert 'href="/queues/old queue' not in body


def test_servers_page_without_workers(viewer: DjangoClient) -> None:
    assert "No worker is running" in html(viewer.get("/queues/servers/"))


def test_redis_page(viewer: DjangoClient, client: Client, redis_client: Any, key_prefix: str) -> None:
    client.enqueue("x", queue="alpha")
    r = viewer.get("/queues/redis/")
    body = html(r)
    assert r.status_code == 200
    assert f'data-qc-stat="version">{redis_client.info()["redis_version"]}<' in body
    assert f"<code>{key_prefix}:</code>" in body and 'href="/queues/alpha/pending/"' in body
    keys = len(list(redis_client.scan_iter(match=f"{key_prefix}:*")))
    assert 'data-qc-stat="keys">—<' in body  # not counted on a visit (a SCAN of the whole database)
    assert f'data-qc-stat="keys">{keys}<' in html(viewer.get("/queues/redis/?count=1"))  # on demand
    assert html(viewer.get("/queues/redis/", headers=HX)).lstrip().startswith('<section id="qc-redis"')


def test_audit_page_pages_through_the_log(viewer: DjangoClient, client: Client, inspector: Inspector) -> None:
    info = client.enqueue("x", queue="mail")
    ops = inspector.as_actor("dashboard:olga")
    for _ in range(26):
        ops.pause_queue("mail")
        ops.unpause_queue("mail")
    ops.archive_task("mail", info.id)
    first = html(viewer.get("/queues/audit/"))
    assert first.count("<tr data-qc-audit=") == 50
    assert 'data-qc-audit="task.archive"' in first and f'href="/queues/mail/tasks/{info.id}/"' in first
    assert 'href="?page=2"' in first
    second = html(viewer.get("/queues/audit/?page=2"))
    assert second.count("<tr data-qc-audit=") == 3 and 'href="?page=1"' in second and "?page=3" not in second
    for past in (3, 202, 10**6):  # past the log's end, or past what it can ever hold: no such page
        response = viewer.get(f"/queues/audit/?page={past}")
        assert response.status_code == 404 and "No such page" in html(response)


def test_the_enqueue_form_is_not_cached(operator: DjangoClient) -> None:
    response = operator.get("/queues/enqueue/")
    assert response.status_code == 200 and "no-store" in response["Cache-Control"]


# -- Redis unreachable ------------------------------------------------------------------------------


def test_unreachable_redis_gives_a_friendly_503(viewer: DjangoClient, operator: DjangoClient, settings: Any,
                                                key_prefix: str) -> None:
    settings.QUEUECORE = {"REDIS_URL": "redis://127.0.0.1:1/0", "KEY_PREFIX": key_prefix}
    for c, method, url in ((viewer, "get", "/queues/"), (viewer, "get", "/queues/default/pending/"),
                           (viewer, "get", "/queues/_/stats/"), (operator, "post", "/queues/default/pause/")):
        r = getattr(c, method)(url)
        assert r.status_code == 503, url
        body = html(r)
        assert "Redis is unreachable" in body and "Traceback" not in body


def test_too_many_bulk_jobs_is_refused_saying_so_and_nothing_starts(operator: DjangoClient, client: Client,
                                                                     inspector: Inspector) -> None:
    from queuecore.core.bulkjobs import MAX_OPEN

    client.enqueue("x", process_in=3600)
    for _ in range(MAX_OPEN):  # queued, no driver (as adminctl --background leaves them with no worker)
        inspector.start_bulk_job("delete", queue="default", state="scheduled")
    r = operator.post("/queues/default/scheduled/actions/", {"action": "delete", "all": "1"}, headers=HX)
    assert r.status_code == 409 and "Too many bulk jobs" in r["X-Qc-Error"] and "Nothing was started" in html(r)
    assert len(inspector.bulk_jobs()) == MAX_OPEN and inspector.count("default", "scheduled") == 1


def test_the_chart_of_every_queue_leaves_out_one_removed_since_they_were_listed(viewer: DjangoClient, client: Client,
                                                                               monkeypatch) -> None:
    """A queue removed between the listing of the queues and the reading of its history made the whole
    overview chart (and each of its polls) a 404 "no queue named ..."."""
    client.enqueue("t.x", {})
    listed = Inspector.queues
    monkeypatch.setattr(Inspector, "queues", lambda self: [*listed(self), "removed-meanwhile"])
    for range_name in ("hour", "month"):
        response = viewer.get("/queues/_/chart/", {"range": range_name})
        assert response.status_code == 200, range_name


def test_all_acts_on_no_more_than_the_count_the_page_showed(operator: DjangoClient, client: Client,
                                                             inspector: Inspector) -> None:
    """The "All 3" confirmation's count goes back with the action: tasks enqueued after the page was
    rendered are left alone."""
    shown = [client.enqueue("x", {"n": n}).id for n in range(3)]
    body = html(operator.get("/queues/default/pending/"))
    fields = dict(re.findall(r'<input type="hidden" name="(counted|counted_at)" value="(\d+)">', body))
    assert fields["counted"] == "3" and "All 3" in body
    late = [client.enqueue("x", {"n": n}).id for n in range(3, 7)]
    r = operator.post("/queues/default/pending/actions/", {"action": "delete", "all": "1", **fields})
    job = _finished_job(inspector, r.url.rstrip("/").rsplit("/", 1)[1])
    assert (job.status, job.done, job.total) == ("done", 3, 3)
    assert {t.id for t in inspector.list_tasks("default", "pending", 1, 20).tasks} == set(late)
    assert not set(shown) & {t.id for t in inspector.list_tasks("default", "pending", 1, 20).tasks}
    for bad in ({"counted": "-1"}, {"counted_at": "x"}, {"counted": str(10**16)}):
        refused = operator.post("/queues/default/pending/actions/", {"action": "delete", "all": "1", **fields, **bad},
                                headers=HX)
        assert "This page is out of date: reload it." in html(refused)
        assert inspector.count("default", "pending") == 4
