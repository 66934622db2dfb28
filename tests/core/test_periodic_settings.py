"""QUEUECORE['PERIODIC']: validated by ``manage.py check`` (queuecore.E007) and read by the adapter."""

from __future__ import annotations

import pytest

from queuecore.checks import check_settings
from queuecore.conf import get_config
from queuecore.core.errors import ConfigurationError
from queuecore.core.periodic import Cron, Every


def test_valid_entries_pass_the_check_and_are_read(settings, redis_url) -> None:
    settings.QUEUECORE = {"REDIS_URL": redis_url, "PERIODIC": {
        "nightly": {"task": "reports.build", "cron": "0 3 * * *", "timezone": "Europe/Paris", "queue": "low"},
        "ping": {"task": "demo.noop", "every": 30}}}
    assert check_settings() == []
    entries = get_config().periodic_entries()
    assert [(e.name, e.queue, e.schedule) for e in entries] == [
        ("nightly", "low", Cron.parse("0 3 * * *", "Europe/Paris")), ("ping", "default", Every(30))]


def test_a_bad_entry_is_an_error_naming_it(settings, redis_url) -> None:
    settings.QUEUECORE = {"REDIS_URL": redis_url, "PERIODIC": {"nightly": {"task": "t", "cron": "0 25 * * *"}}}
    [message] = check_settings()
    assert message.id == "queuecore.E007"
    assert message.msg.startswith("QUEUECORE['PERIODIC']: periodic entry 'nightly': invalid cron expression "
                                  "'0 25 * * *'")
    with pytest.raises(ConfigurationError, match=r"^QUEUECORE\['PERIODIC'\]: periodic entry 'nightly'"):
        get_config().periodic_entries()


def test_periodic_must_be_a_dict(settings, redis_url) -> None:
    settings.QUEUECORE = {"REDIS_URL": redis_url, "PERIODIC": "0 3 * * *"}
    [message] = check_settings()
    assert message.id == "queuecore.E007" and "PERIODIC must be a dict" in message.msg


def test_runworker_refuses_a_bad_entry(settings, redis_url) -> None:
    from django.core.management import CommandError, call_command

    settings.QUEUECORE = {"REDIS_URL": redis_url, "PERIODIC": {"nightly": {"task": "t", "cron": "0 3 * *"}}}
    with pytest.raises(CommandError, match=r"QUEUECORE\['PERIODIC'\]: periodic entry 'nightly': invalid cron"):
        call_command("runworker")


def test_a_payload_over_max_payload_bytes_is_refused_where_it_enters(settings, redis_url, connection,
                                                                    registry) -> None:
    """A review: the entries were checked at the default limit (512 KiB), so with MAX_PAYLOAD_BYTES 100
    a 208-byte payload passed ``check`` and ``runworker``, then every fire was refused in the scheduler."""
    import dataclasses

    from django.core.management import CommandError, call_command

    from queuecore.core.periodic import PeriodicEntry
    from queuecore.core.worker import Worker

    big = {"task": "t", "every": 5, "payload": {"blob": "x" * 200}}
    settings.QUEUECORE = {"REDIS_URL": redis_url, "MAX_PAYLOAD_BYTES": 100,
                          "PERIODIC": {"a_big": big, "b_small": {"task": "t", "every": 5}}}
    [message] = check_settings()
    assert message.id == "queuecore.E007"
    assert message.msg.startswith("QUEUECORE['PERIODIC']: periodic entry 'a_big': payload: ")
    assert "over the limit of 100 bytes" in message.msg
    with pytest.raises(CommandError, match=r"periodic entry 'a_big': payload: .*over the limit of 100 bytes"):
        call_command("runworker")
    settings.QUEUECORE = {"REDIS_URL": redis_url, "MAX_PAYLOAD_BYTES": 2**20, "PERIODIC": {"a_big": big}}
    assert check_settings() == []  # the configured limit, not the default, either way
    entry = PeriodicEntry.from_spec("a_big", big)  # built in Python: the worker checks it against its limit
    with pytest.raises(ConfigurationError, match=r"periodic entry 'a_big': payload: .*over the limit of 100 bytes"):
        Worker(connection=dataclasses.replace(connection, max_payload_bytes=100), registry=registry,
               periodic=[entry])
