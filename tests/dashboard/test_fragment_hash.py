"""A polling fragment's ``data-qc-hash`` goes on the fragment's own start tag, never into task data.

A review: the hash was inserted before the first ``data-qc-poll=`` anywhere in the fragment; in a
filtered task list (whose root does not poll) that was a payload's text, so the inserted quote closed
the payload's ``title`` attribute and the rest of the payload became attributes of the page: htmx
attributes (``hx-post``, ``hx-trigger=load``) that a strict CSP does not stop, sending the operator's
CSRF header."""

from __future__ import annotations

from html.parser import HTMLParser

from django.test import Client as DjangoClient

from queuecore import Client

HX = {"HX-Request": "true"}
EVIL = "data-qc-poll=x hx-post=/queues/default/pause/ hx-trigger=load z="


class StartTags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def start_tags(html: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = StartTags()
    parser.feed(html)
    return parser.tags


def test_task_text_that_names_the_poll_attribute_stays_text(operator: DjangoClient, client: Client) -> None:
    client.enqueue("signup", {"name": EVIL}, task_id="t1")
    for url in ("/queues/default/pending/?search=trigger", "/queues/default/pending/"):  # filtered, and polling
        body = operator.get(url, headers=HX).content.decode()
        tags = start_tags(body)
        assert not [attrs for _, attrs in tags if attrs.get("hx-post") == "/queues/default/pause/"]
        payloads = [attrs for tag, attrs in tags if tag == "code" and "qc-payload" in (attrs.get("class") or "")]
        assert payloads and all(set(attrs) == {"class", "title"} and EVIL in (attrs["title"] or "")
                                for attrs in payloads), payloads
        hashed = [tag for tag, attrs in tags if "data-qc-hash" in attrs]
        assert hashed == ([] if "search" in url else ["section"])  # the polling root alone carries the hash
