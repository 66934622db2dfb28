"""Issue 11, items 5 and 6 through Django: ``manage.py check`` reports a setting that cannot work
with the core's own message (the field and its allowed range), under the ``QUEUECORE`` key."""

from __future__ import annotations

import math
from typing import Any

import pytest

from queuecore.checks import check_settings
from queuecore.conf import get_config
from queuecore.core import limits
from queuecore.core.errors import ConfigurationError

pytestmark = pytest.mark.usefixtures("no_task_types")  # the settings checks read the task registry (W002)


@pytest.mark.parametrize(("key", "value", "check_id", "field", "allowed"), [
    ("LEASE_DURATION", math.nan, "queuecore.E005", "lease_duration", limits.INTERVAL),
    ("HEARTBEAT_INTERVAL", math.inf, "queuecore.E005", "heartbeat_interval", limits.INTERVAL),
    ("RECOVER_INTERVAL", -1, "queuecore.E005", "recover_interval", limits.INTERVAL),
    ("REPAIR_INTERVAL", math.nan, "queuecore.E005", "repair_interval", limits.REPAIR_INTERVAL),
    ("SHUTDOWN_TIMEOUT", 1e300, "queuecore.E005", "shutdown_timeout", limits.INTERVAL),
    ("DEFAULT_TIMEOUT", math.inf, "queuecore.E005", "default_timeout", limits.TIMEOUT),
    ("CONCURRENCY", 0, "queuecore.E005", "concurrency", limits.CONCURRENCY),
    ("PREFETCH", 10**9, "queuecore.E005", "prefetch", limits.PREFETCH),
    ("MAX_ARCHIVE_SIZE", 0, "queuecore.E005", "max_archive_size", limits.MAX_ARCHIVE_SIZE),
    ("ARCHIVE_MAX_AGE", math.nan, "queuecore.E005", "archive_max_age", limits.ARCHIVE_MAX_AGE),
    ("MAX_PAYLOAD_BYTES", math.nan, "queuecore.E002", "max_payload_bytes", limits.MAX_PAYLOAD_BYTES),
    ("MAX_PAYLOAD_BYTES", 0, "queuecore.E002", "max_payload_bytes", limits.MAX_PAYLOAD_BYTES),
    ("DEFAULT_MAX_RETRY", 10**30, "queuecore.E002", "default_max_retry", limits.MAX_RETRY),
])
def test_a_setting_that_cannot_work_is_reported_with_its_range(settings: Any, key: str, value: Any, check_id: str,
                                                               field: str, allowed: limits.Range) -> None:
    settings.QUEUECORE = {key: value}
    messages = check_settings()
    assert [m.id for m in messages] == [check_id]
    assert messages[0].msg.startswith(f"QUEUECORE['{key}']: {field} "), messages[0].msg
    assert allowed.describe() in messages[0].msg


def test_the_check_says_exactly_what_the_core_says(settings: Any) -> None:
    settings.QUEUECORE = {"LEASE_DURATION": math.nan}
    assert [m.msg for m in check_settings()] == [
        "QUEUECORE['LEASE_DURATION']: lease_duration is out of range: got nan; allowed: a number from 0.001 to "
        "86400 seconds (1 day)"]
    with pytest.raises(ConfigurationError, match=r"^lease_duration is out of range: got nan"):
        get_config().worker_config()


@pytest.mark.parametrize("name", ["tenant-acme/../critical", "..", "nul\x00", "zw\u200bsp", "rlo\u202e"])
def test_a_queue_name_outside_the_alphabet_is_reported(settings: Any, name: str) -> None:
    settings.QUEUECORE = {"QUEUES": {"default": 1, name: 1}}
    messages = check_settings()
    assert [m.id for m in messages] == ["queuecore.E003"]
    assert "invalid queue name" in messages[0].msg


@pytest.mark.parametrize("weight", [math.inf, math.nan, 10**30, 2.5, "x"])
def test_a_weight_that_cannot_work_is_reported(settings: Any, weight: Any) -> None:
    settings.QUEUECORE = {"QUEUES": {"default": weight}}
    assert [m.id for m in check_settings()] == ["queuecore.E003"]
