"""Issue 11, item 6: no dashboard URL can address another queue, whatever the queue's name.

With a queue named ``tenant-acme/../critical``, the Pause button of its row paused ``critical``:
the browser normalised the ``..`` segment away. Names now exclude ``/`` and are never ``.`` or
``..``, and every queue URL routes on a converter that takes exactly that alphabet.
"""

from __future__ import annotations

import html as html_lib
import re
from urllib.parse import unquote, urlsplit

import pytest
from django.test import Client as DjangoClient
from django.urls import NoReverseMatch, URLPattern, resolve, reverse

from queuecore import Client, Inspector
from queuecore.core.keys import is_valid_name
from queuecore_dashboard import urls as dashboard_urls
from tests.badinput.test_name_alphabet import BAD_NAMES, GOOD_NAMES

SAMPLES = {"task_id": "abc-123", "state": "pending", "verb": "run", "key": "3fa2c1d09e7b", "type_name": "t.x",
           "fmt": "csv"}
QUEUE_ROUTES = [p for p in dashboard_urls.urlpatterns if isinstance(p, URLPattern) and "qname" in str(p.pattern)]
ROUTE_NAMES = sorted(str(p.name) for p in QUEUE_ROUTES)
# Valid names that look like URL syntax, dot segments, escapes or another script.
AWKWARD = ["tenant-acme..critical", "...", ".a", "%2e%2e", ".%2E", "a%2Fb", "q?[x]", "a#b", "a;b", "a&b=c", "~u",
           "日本", "e\u0301", "\\x", "..\\..\\critical", "a\\..\\b"]


def queue_url(route: str, qname: str) -> str:
    pattern = next(p for p in QUEUE_ROUTES if p.name == route)
    kwargs = {key: SAMPLES[key] for key in pattern.pattern.converters if key != "qname"}
    return reverse(f"queuecore_dashboard:{route}", kwargs={"qname": qname, **kwargs})


def browser_path(url: str) -> str:
    """The path a browser requests for ``url`` (a link or form action on a dashboard page), as the
    server sees it: WHATWG URL parsing turns ``\\`` into ``/`` and removes dot segments (``.``,
    ``..``, and their ``%2e`` spellings); the server then percent-decodes the path."""
    path = urlsplit(url.replace("\\", "/")).path
    out: list[str] = []
    segments = path.split("/")[1:]
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        lowered = segment.lower()
        if lowered in ("..", ".%2e", "%2e.", "%2e%2e"):
            if out:
                out.pop()
            if last:
                out.append("")
        elif lowered in (".", "%2e"):
            if last:
                out.append("")
        else:
            out.append(segment)
    return unquote("/" + "/".join(out))


def test_every_dashboard_route_with_a_queue_is_covered() -> None:
    assert ROUTE_NAMES == ["queue_failure_action", "queue_failures", "queue_header", "queue_pause", "queue_redirect",
                           "queue_remove", "queue_state", "queue_unpause", "task", "task_action", "task_edit",
                           "task_type", "task_types", "tasks_action", "tasks_export"]


def test_the_browser_model_normalises_what_a_browser_does() -> None:
    assert browser_path("/queues/tenant-acme/../critical/pause/") == "/queues/critical/pause/"
    assert browser_path("/queues/a/%2E%2e/b/") == "/queues/b/"
    assert browser_path("/queues/a\\..\\b/pause/") == "/queues/b/pause/"
    assert browser_path("/queues/a%252e/") == "/queues/a%2e/"


@pytest.mark.parametrize("qname", [*GOOD_NAMES, *AWKWARD], ids=repr)
@pytest.mark.parametrize("route", ROUTE_NAMES)
def test_every_queue_url_of_a_valid_name_leads_back_to_that_name(route: str, qname: str) -> None:
    url = queue_url(route, qname)
    path = browser_path(url)
    assert path == unquote(url), f"a browser would rewrite {url!r} to {path!r}"
    match = resolve(path)
    assert (match.url_name, match.kwargs["qname"]) == (route, qname), url


@pytest.mark.parametrize("qname", [n for n in BAD_NAMES if isinstance(n, str)], ids=repr)
@pytest.mark.parametrize("route", ROUTE_NAMES)
def test_no_queue_url_exists_for_a_refused_name(route: str, qname: str) -> None:
    with pytest.raises(NoReverseMatch):
        queue_url(route, qname)


def test_the_converter_takes_exactly_the_alphabet() -> None:
    """Its regex never spans a ``/`` nor takes ``.``/``..``; what the regex lets through beyond the
    alphabet (format characters newer than the pattern) its ``to_python`` refuses, so the route
    as a whole matches a name exactly when ``is_valid_name`` does."""
    converter = dashboard_urls.QueueNameConverter()

    def routable(name: str) -> bool:
        if not re.fullmatch(converter.regex, name):
            return False
        try:
            return converter.to_python(name) == name
        except ValueError:
            return False

    for cp in range(0x110000):
        assert routable(chr(cp)) is is_valid_name(chr(cp)), hex(cp)
    for name in [*GOOD_NAMES, *AWKWARD]:
        assert routable(name) and converter.to_url(name) == name
    for bad in BAD_NAMES:
        if isinstance(bad, str):
            assert not routable(bad), repr(bad)
            with pytest.raises(ValueError):
                converter.to_url(bad)
    assert not re.fullmatch(converter.regex, "a/b") and not routable("..") and not routable(".")


@pytest.mark.parametrize("path", ["/queues/tenant-acme/../critical/pause/",
                                  "/queues/tenant-acme%2F..%2Fcritical/pause/", "/queues/../pause/", "/queues/./pause/",
                                  "/queues/%2e%2e/pause/",
                                  "/queues/zw%E2%80%8Bsp/pause/", "/queues/nul%00/pause/", "/queues/a%20b/pause/"])
def test_a_hand_made_path_naming_another_queue_pauses_nothing(operator: DjangoClient, client: Client,
                                                              inspector: Inspector, path: str) -> None:
    client.enqueue("x", queue="critical")
    assert operator.post(path).status_code == 404, path
    assert not inspector.queue_info("critical").paused
    assert inspector.audit_log() == []


def test_each_row_of_the_overview_links_and_pauses_its_own_queue(operator: DjangoClient, client: Client,
                                                                 inspector: Inspector) -> None:
    names = [*AWKWARD, "critical"]
    for name in names:
        client.enqueue("x", queue=name)
    body = operator.get("/queues/").content.decode()
    rows = re.findall(r'<tr data-qc-queue="([^"]*)">(.*?)</tr>', body, re.S)
    assert sorted(html_lib.unescape(name) for name, _ in rows) == sorted(names)
    for row_name, row in rows:
        name = html_lib.unescape(row_name)
        link = html_lib.unescape(re.search(r'class="qc-queue-link" href="([^"]+)"', row).group(1))
        action = html_lib.unescape(re.search(r'formaction="([^"]+)"', row).group(1))  # the row's button
        assert resolve(browser_path(link)).kwargs["qname"] == name
        target = resolve(browser_path(action))
        assert (target.url_name, target.kwargs["qname"]) == ("queue_pause", name)
    for name in AWKWARD:  # pressing each row's button pauses that queue and no other
        assert operator.post(queue_url("queue_pause", name)).status_code == 302
        assert inspector.queue_info(name).paused
        assert not inspector.queue_info("critical").paused
    assert sorted(e.queue or "" for e in inspector.audit_log()) == sorted(AWKWARD)


def test_the_views_receive_the_same_awkward_name(operator: DjangoClient, client: Client,
                                                 inspector: Inspector) -> None:
    for name in AWKWARD:
        info = client.enqueue("x", {"n": name}, queue=name)
        page = operator.get(queue_url("queue_state", name))
        assert page.status_code == 200, name
        assert f'data-qc-task="{info.id}"' in page.content.decode()
        detail = operator.get(reverse("queuecore_dashboard:task", kwargs={"qname": name, "task_id": info.id}))
        assert detail.status_code == 200, name
        deleted = operator.post(reverse("queuecore_dashboard:task_action",
                                        kwargs={"qname": name, "task_id": info.id, "verb": "delete"}))
        assert deleted.status_code == 302, name
        assert inspector.count(name, "pending") == 0
        assert [e.queue for e in inspector.audit_log(limit=1)] == [name]


def test_audit_entries_naming_a_queue_refused_now_are_shown_as_text(viewer: DjangoClient, client: Client,
                                                                     redis_client, connection) -> None:
    """An earlier version recorded actions on queues such as 'tenant-acme/../critical'; the pages that
    list operator actions show the name without a link instead of failing."""
    import json

    client.enqueue("x", queue="critical")
    for queue, ids in (("tenant-acme/../critical", ["abc"]), ("zw\u200bsp", []), ("critical", ["..", "ok-1"])):
        redis_client.lpush(connection.keys.audit, json.dumps({
            "at": 1_800_000_000.0, "actor": "cli:old", "action": "queue.pause", "queue": queue, "task_ids": ids,
            "state": None, "count": 0, "outcome": "ok"}))
    for page in ("/queues/", "/queues/audit/"):
        response = viewer.get(page)
        assert response.status_code == 200, page
        body = response.content.decode()
        assert "tenant-acme/../critical" in body and 'href="/queues/tenant-acme' not in body
        assert 'href="/queues/critical/pending/"' in body
    audit = viewer.get("/queues/audit/").content.decode()
    assert 'href="/queues/critical/tasks/ok-1/"' in audit and 'href="/queues/critical/tasks/../"' not in audit
