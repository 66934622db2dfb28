"""Issue 11, item 6: one alphabet for queue names and task types, enforced wherever a name enters.

A name is 1-200 characters; none of them a control, format (zero-width, direction), surrogate or
separator (whitespace) character, nor ``/``, ``{`` or ``}``; and it is not ``.`` or ``..``.
"""

from __future__ import annotations

import unicodedata
from typing import Any

import pytest

from queuecore import Client, ConfigurationError, Inspector, TaskRegistry, WorkerConfig, task
from queuecore.core.config import parse_queues
from queuecore.core.keys import (
    NAME_MAX_LENGTH,
    Keys,
    is_valid_name,
    validate_queue_name,
    validate_task_id,
    validate_type_name,
)

BAD_NAMES = [
    "", ".", "..", "a/b", "tenant-acme/../critical", "/", "./", "a/", "{q}", "a}b", "x" * 201,
    "nul\x00", "\x00", "bell\x07", "esc\x1b[31m", "del\x7f", "c1\x85", "c1\x9b",  # controls
    "zw\u200bsp", "zwnj\u200c", "zwj\u200d", "lrm\u200e", "rlo\u202e", "wj\u2060", "bom\ufeff", "shy\u00ad",
    "tag\U000e0041",  # format characters: invisible, or they reorder what is shown
    "sur\ud800", "\udfff",  # lone surrogates cannot even be stored as UTF-8
    "a b", "nbsp\u00a0", "ideo\u3000sp", "line\u2028sep", "tab\t", "\n",  # separators / whitespace
    None, 7, b"bytes",
]
GOOD_NAMES = [
    "default", "a", "x" * NAME_MAX_LENGTH, "emails.v2", "a:b", "t:a", "a-b_c", "ünï", "日本", "q?[x]", "a*b",
    "...", ".a", "a.", "a..b", "tenant-acme..critical", "%2e%2e", "a%2Fb", "%", "a#b", "a;b", "a@b", "a+b",
    "a&b=c", "~user", "-", "🚀", "a\\b", "..\\x", "e\u0301",  # a combining accent is a mark, not a format character
]


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
def test_bad_names_are_refused_as_queue_names_and_task_types(name: Any) -> None:
    assert not is_valid_name(name)
    for validate in (validate_queue_name, validate_type_name):
        with pytest.raises(ConfigurationError):
            validate(name)
    with pytest.raises(ConfigurationError):
        Keys("qc").queue(name)


@pytest.mark.parametrize("name", GOOD_NAMES, ids=repr)
def test_good_names_are_accepted(name: str) -> None:
    assert is_valid_name(name)
    assert validate_queue_name(name) == name == validate_type_name(name)
    assert Keys("qc").queue(name).base == f"qc:{{{name}}}:"


def test_the_alphabet_is_decided_per_character_by_unicode_category() -> None:
    forbidden_categories = {"Cc", "Cf", "Cs", "Zs", "Zl", "Zp"}
    for cp in range(0x110000):
        ch = chr(cp)
        expected = unicodedata.category(ch) not in forbidden_categories and ch not in "/{}" and ch != "."
        assert is_valid_name(ch) is expected, hex(cp)
        if ch.isspace():
            assert not is_valid_name(ch)


def test_the_error_says_what_is_allowed() -> None:
    with pytest.raises(ConfigurationError, match=r"invalid queue name 'a/b': 1-200 characters, none of them a "
                                                 r"control, zero-width or other format character, whitespace, "
                                                 r"'/', '\{' or '\}'; not '\.' or '\.\.'"):
        validate_queue_name("a/b")


@pytest.mark.parametrize("task_id", [".", ".."])
def test_dot_task_ids_are_refused(task_id: str) -> None:
    with pytest.raises(ConfigurationError):
        validate_task_id(task_id)


@pytest.mark.parametrize("name", ["nul\x00", "zw\u200bsp", "a/b", "..", "rlo\u202e"], ids=repr)
def test_every_entry_point_refuses_a_bad_name(name: str, client: Client, inspector: Inspector, redis_client,
                                              key_prefix: str, registry: TaskRegistry) -> None:
    with pytest.raises(ConfigurationError):
        client.enqueue("t", {}, queue=name)
    with pytest.raises(ConfigurationError):
        client.enqueue(name, {})
    with pytest.raises(ConfigurationError):
        client.enqueue_many([("t", {}), (name, {})])
    with pytest.raises(ConfigurationError):
        client.check("t", {}, queue=name)
    for call in (lambda: inspector.queue_info(name), lambda: inspector.pause_queue(name),
                 lambda: inspector.unpause_queue(name), lambda: inspector.remove_queue(name),
                 lambda: inspector.list_tasks(name, "pending"), lambda: inspector.get_task(name, "abc"),
                 lambda: inspector.run_task(name, "abc"), lambda: inspector.run_all(name, "archived"),
                 lambda: inspector.history(name), lambda: inspector.count(name, "pending")):
        with pytest.raises(ConfigurationError):
            call()
    with pytest.raises(ConfigurationError):
        WorkerConfig(queues={name: 1})
    with pytest.raises(ConfigurationError):
        WorkerConfig(queues=[name])
    with pytest.raises(ConfigurationError):
        parse_queues(f"default=2,{name}=1")
    with pytest.raises(ConfigurationError):
        task(name=name, registry=registry)(lambda: None)
    assert list(redis_client.scan_iter(match=f"{key_prefix}:*")) == []
    assert registry.names() == []


@pytest.mark.parametrize("name", ["tenant-acme..critical", "日本", "q?[x]", "%2e%2e", "a#b", "🚀"])
def test_awkward_valid_names_work_end_to_end(name: str, client: Client, inspector: Inspector) -> None:
    info = client.enqueue(name, {"q": name}, queue=name)
    assert name in inspector.queues()
    assert inspector.get_task(name, info.id).type == name
    inspector.pause_queue(name)
    assert [q.paused for q in inspector.all_queue_info() if q.name == name] == [True]


def test_a_queue_stored_under_a_name_now_refused_does_not_break_the_queue_list(
        client: Client, inspector: Inspector, redis_client, connection) -> None:
    """Earlier versions accepted names like 'a/../b'; such a name left in the registry set is skipped."""
    client.enqueue("t", {}, queue="good")
    redis_client.sadd(connection.keys.queues, "tenant-acme/../critical", "zw\u200b")
    assert inspector.queues() == ["good"]
    assert [q.name for q in inspector.all_queue_info()] == ["good"]
