"""The task filter language (``filters.py``), parsed and applied by the Inspector's lists."""

from __future__ import annotations

import pytest

from queuecore.core import filters
from queuecore.core.errors import ConfigurationError
from queuecore.core.filters import Term, parse
from queuecore.core.limits import MAX_PAYLOAD_DEPTH


def test_terms_quotes_negation_and_paths() -> None:
    assert parse('type:emails.* error:"connection refused" -id:ab payload.user.plan:pro 42 "two words"') == [
        Term("type", "emails.*"), Term("error", "connection refused", quoted=True), Term("id", "ab", negated=True),
        Term("payload.user.plan", "pro"), Term("", "42"), Term("", "two words", quoted=True)]
    assert parse("   ") == []
    assert filters.describe(parse('error:"a b" -type:x')) == 'error:"a b" -type:x'


@pytest.mark.parametrize(("text", "why"), [
    ("colour:red", "unknown filter field 'colour'"), ("payload:3", "name a path"), ('error:"open', "not closed"),
    ("type:", "needs a value"), ("x " * 21, "at most 20 terms"), ("a" * 2001, "at most 2,000"),
    ("payload.:1", "name a path"), ("payload.a..b:1", "name a path"), ("payload.a.:1", "name a path"),
])
def test_bad_filters_say_what_is_wrong(text: str, why: str) -> None:
    with pytest.raises(ConfigurationError, match=why):
        parse(text)


def test_what_reads_as_a_filter() -> None:
    assert filters.looks_like_filter("type:emails.send") and filters.looks_like_filter("boom -error:x")
    assert not filters.looks_like_filter('"user_id": 5005') and not filters.looks_like_filter("timeout 30s")


def test_lists_and_exports_apply_the_filter(client, inspector) -> None:
    client.enqueue("emails.send", {"user": {"plan": "pro", "id": 1}, "tags": ["a", "b"]})
    client.enqueue("emails.digest", {"user": {"plan": "free", "id": 2}})
    client.enqueue("sms.send", {"user": {"plan": "pro", "id": 3}, "count": 3})

    def ids(text: str) -> list[int]:
        page = inspector.list_tasks("default", "pending", size=50, filter=text)
        found = [t.payload["user"]["id"] for t in page.tasks]
        assert found == [t.payload["user"]["id"] for t in inspector.iter_tasks("default", "pending", filter=text)]
        return found

    assert ids("type:emails.*") == [1, 2]
    assert ids("payload.user.plan:pro") == [1, 3]
    assert ids("payload.user.plan:pro -type:sms.*") == [1]
    assert ids("payload.count:3") == [3] and ids('payload.count:"3"') == []  # JSON values: 3 is not "3"
    assert ids("payload.tags.1:b") == [1] and ids("payload.missing.key:x") == []
    assert ids('type:emails.send "plan":"pro"') == [1]  # free text as the plain search reads it
    # the search box and --search take the language too, and plain text stays plain
    assert [t.type for t in inspector.list_tasks("default", "pending", search="-type:emails.*").tasks] == ["sms.send"]
    assert len(inspector.list_tasks("default", "pending", search='"plan": "pro"').tasks) == 2
    with pytest.raises(ConfigurationError, match="unknown filter field"):
        inspector.list_tasks("default", "pending", filter="colour:red")


def test_a_bad_filter_is_refused_when_the_list_or_the_export_is_asked_for(client, inspector) -> None:
    """Not while an export streams (where the caller can no longer answer with an error), and a value
    nested past the JSON parser's depth is a ConfigurationError, not a RecursionError."""
    client.enqueue("t", {"x": [[1]]})
    # Within the 2,000 characters a filter may have: past the parser's depth before Python 3.13, parsed
    # by 3.13's, whose value then failed the match with a TypeError (orjson's own depth limit).
    deep = "payload.x:" + "[" * 995 + "]" * 995
    with pytest.raises(ConfigurationError, match="nested too deeply"):
        inspector.list_tasks("default", "pending", filter=deep)
    deepest = "payload.x:" + "[" * MAX_PAYLOAD_DEPTH + "]" * MAX_PAYLOAD_DEPTH  # as deep as a payload may be
    page = inspector.list_tasks("default", "pending", filter=deepest)
    assert (page.tasks, page.scanned, page.matched) == ([], 1, 0)
    for bad in (deep, 'error:"'):
        with pytest.raises(ConfigurationError):
            inspector.iter_tasks("default", "pending", filter=bad)  # at the call: nothing iterated yet
