"""Key builders, name validation and stats field suffixes (queuecore/core/keys.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from queuecore.core.errors import ConfigurationError
from queuecore.core.keys import (
    DEFAULT_PREFIX,
    Keys,
    QueueKeys,
    stats_day,
    stats_minute,
    validate_prefix,
    validate_queue_name,
    validate_task_id,
    validate_type_name,
)

QUEUE_KEY_BUILDERS = ("pending", "active", "scheduled", "retry", "archived", "completed", "paused", "stats",
                      "wake_channel", "task_prefix")


def all_queue_keys(q: QueueKeys) -> list[str]:
    return [getattr(q, name) for name in QUEUE_KEY_BUILDERS] + [
        q.task("abc-123"), q.unique("emails.send", "0f" * 16), *(q.state_key(s) for s in
                                                                 ("pending", "active", "archived"))]


# -- key layout ---------------------------------------------------------------------------------


def test_default_prefix_is_qc() -> None:
    assert Keys().prefix == DEFAULT_PREFIX == "qc"
    assert Keys().queue("default").pending == "qc:{default}:pending"


@pytest.mark.parametrize("prefix", ["qc", "myapp", "tenant-7.jobs", "a:b"])
def test_every_queue_key_has_the_queue_hash_tag_after_the_prefix(prefix: str) -> None:
    q = Keys(prefix).queue("emails")
    for key in all_queue_keys(q):
        assert key.startswith(f"{prefix}:{{emails}}:"), key
        # the hash tag is the FIRST {...} of the key, so the whole queue lives in one cluster slot
        assert key[key.index("{") + 1: key.index("}")] == "emails"


def test_queue_key_suffixes_and_state_key() -> None:
    q = Keys("p").queue("q1")
    assert q.base == "p:{q1}:"
    assert (q.pending, q.active, q.scheduled, q.retry, q.archived, q.completed) == (
        "p:{q1}:pending", "p:{q1}:active", "p:{q1}:scheduled", "p:{q1}:retry", "p:{q1}:archived",
        "p:{q1}:completed")
    assert (q.paused, q.stats, q.wake_channel) == ("p:{q1}:paused", "p:{q1}:stats", "p:{q1}:wake")
    assert q.task("abc") == "p:{q1}:t:abc"
    assert q.task("abc").startswith(q.task_prefix)
    assert q.unique("mail.send", "d1g") == "p:{q1}:unique:mail.send:d1g"
    for state in ("pending", "active", "scheduled", "retry", "archived", "completed"):
        assert q.state_key(state) == getattr(q, state)


def test_global_keys_use_the_prefix() -> None:
    k = Keys("tenant1")
    assert k.queues == "tenant1:{/}:queues"
    assert k.servers == "tenant1:{/}:servers"
    assert k.server("host:42:abcd") == "tenant1:servers:{host:42:abcd}"
    assert k.queue("mail").cancel_channel == "tenant1:{mail}:cancel"
    assert k.all_pattern == "tenant1:*"
    assert k.legacy_globals()[0] == ("tenant1:queues", "tenant1:{/}:queues")


def test_no_queue_name_reaches_the_global_keys() -> None:
    """The keys of no queue carry the hash tag "/", which no queue name may hold: a queue's SCAN
    pattern (what removing a queue deletes) never matches them, whatever the queue is called."""
    import fnmatch

    k = Keys("qc")
    globals_ = [k.queues, k.servers, k.periodic, k.alerts, k.audit]
    for name in ("qc", "/", "{/}", "queues", "qc:{/}"):
        try:
            q = k.queue(name)
        except ConfigurationError:
            continue  # refused as a queue name: cannot collide
        pattern = q.all_pattern.replace("\\", "")
        assert not any(fnmatch.fnmatchcase(g, pattern) for g in globals_), name


def test_two_prefixes_never_share_keys() -> None:
    a, b = Keys("a").queue("q"), Keys("b").queue("q")
    assert not set(all_queue_keys(a)) & set(all_queue_keys(b))


def test_scan_patterns_escape_glob_characters_in_names() -> None:
    assert Keys("a*b").all_pattern == "a\\*b:*"
    assert Keys("p").queue("q?[x]").all_pattern == "p:{q\\?\\[x\\]}:*"


def test_queue_scan_pattern_matches_only_that_queue(redis_client, key_prefix: str) -> None:
    keys = Keys(key_prefix)
    glob_queue, lookalike = keys.queue("a?"), keys.queue("ab")
    redis_client.set(glob_queue.paused, "1")
    redis_client.set(lookalike.paused, "1")
    assert set(redis_client.scan_iter(match=glob_queue.all_pattern)) == {glob_queue.paused}
    assert set(redis_client.scan_iter(match=keys.all_pattern)) == {glob_queue.paused, lookalike.paused}


# -- validation ---------------------------------------------------------------------------------

def test_no_queue_name_reaches_a_limits_keys() -> None:
    """A review: removing a queue named ``lim:<type>`` deleted that type's limit state (its pattern is
    the limit's keys), and its tasks ran past the limit. Such a name is refused; ``lim`` and ``limx`` are not."""
    k = Keys("qc")
    limit = k.limit("t.x")
    with pytest.raises(ConfigurationError, match="may not start with 'lim:'"):
        k.queue("lim:t.x")
    for name in ("lim", "limx", "lim-t.x", "x:lim:t.x"):
        assert not limit.base.startswith(k.queue(name).base), name  # a queue's keys all start with its base


BAD_NAMES = ["", "has space", "tab\there", "new\nline", "trailing\n", "\nleading", "br{ace", "br}ace", "{q}",
             " lead", None, 42, b"bytes"]


@pytest.mark.parametrize("name", ["default", "critical", "emails.v2", "a", "x" * 200, "ünïcode", "q:1", "a-b_c"])
def test_valid_queue_names(name: str) -> None:
    assert validate_queue_name(name) == name
    assert Keys("p").queue(name).queue == name


@pytest.mark.parametrize("name", [*BAD_NAMES, "x" * 201])
def test_invalid_queue_names_are_refused(name: object) -> None:
    with pytest.raises(ConfigurationError):
        validate_queue_name(name)
    with pytest.raises(ConfigurationError):
        Keys("p").queue(name)  # type: ignore[arg-type]


@pytest.mark.parametrize("prefix", ["qc", "x" * 64, "my-app:jobs", "tenant.7"])
def test_valid_prefixes(prefix: str) -> None:
    assert validate_prefix(prefix) == prefix
    assert Keys(prefix).prefix == prefix


@pytest.mark.parametrize("prefix", [*BAD_NAMES, "x" * 65])
def test_invalid_prefixes_are_refused(prefix: object) -> None:
    with pytest.raises(ConfigurationError):
        validate_prefix(prefix)
    with pytest.raises(ConfigurationError):
        Keys(prefix)  # type: ignore[arg-type]


@pytest.mark.parametrize("task_id", ["abc", "0f3a9c", "A-Z_0.9:x", "x" * 200, "550e8400-e29b-41d4-a716-446655440000"])
def test_valid_task_ids(task_id: str) -> None:
    assert validate_task_id(task_id) == task_id


@pytest.mark.parametrize("task_id", [*BAD_NAMES, "x" * 201, "a/b", "a*b", "ä", "a,b", "a\\b"])
def test_invalid_task_ids_are_refused(task_id: object) -> None:
    with pytest.raises(ConfigurationError):
        validate_task_id(task_id)


@pytest.mark.parametrize("name", ["emails.send", "app.tasks.resize_image", "x" * 200, "t"])
def test_valid_type_names(name: str) -> None:
    assert validate_type_name(name) == name


@pytest.mark.parametrize("name", [*BAD_NAMES, "x" * 201])
def test_invalid_type_names_are_refused(name: object) -> None:
    with pytest.raises(ConfigurationError):
        validate_type_name(name)


def test_configuration_error_is_a_value_error_with_a_useful_message() -> None:
    with pytest.raises(ValueError, match="queue name"):
        validate_queue_name("a b")


# -- stats suffixes -----------------------------------------------------------------------------


def test_stats_day_and_minute_are_utc() -> None:
    leap_evening = datetime(2024, 2, 29, 23, 59, 59, tzinfo=UTC).timestamp()
    assert stats_day(leap_evening) == "2024-02-29"
    assert stats_minute(leap_evening) == "2024-02-29T23:59"
    one_second_later = leap_evening + 1
    assert stats_day(one_second_later) == "2024-03-01"
    assert stats_minute(one_second_later) == "2024-03-01T00:00"
    assert stats_day(0) == "1970-01-01"
    assert stats_minute(0.5) == "1970-01-01T00:00"


def test_stats_minute_extends_stats_day_and_sorts_in_time_order() -> None:
    start = datetime(2026, 12, 31, 23, 0, tzinfo=UTC).timestamp()
    stamps = [stats_minute(start + 60 * n) for n in range(0, 120, 7)]
    assert stamps == sorted(stamps)
    for n in range(0, 120, 7):
        assert stats_minute(start + 60 * n).startswith(stats_day(start + 60 * n) + "T")
