"""``adminctl type ls|show``: a queue's task types and one type's figures, limits and failures."""

from __future__ import annotations

from queuecore import Inspector
from tests.dashboard.test_task_types import run_some


def test_ls_and_show_with_json(adminctl, make_worker, registry, client, inspector: Inspector) -> None:
    run_some(make_worker, registry, client, inspector)
    listed = adminctl("type", "ls", "default", "--json").json()
    assert listed["window"] == "1h"
    by_type = {t["type"]: t for t in listed["types"]}
    assert (by_type["t.ok"]["processed"], by_type["t.ok"]["failed"]) == (6, 0)
    assert (by_type["t.flaky"]["processed"], by_type["t.flaky"]["failure_rate"]) == (4, 0.5)
    table = adminctl("type", "ls", "default", "--window", "24h")
    assert table.code == 0 and "t.flaky" in table.stdout and "50.0%" in table.stdout and "3 at once" in table.stdout
    shown = adminctl("type", "show", "default", "t.flaky", "--json").json()
    assert shown["limit"]["concurrency_limit"] == 3
    assert [(g["error_type"], g["message"], g["count"]) for g in shown["failures"]["groups"]] == [
        ("ValueError", "row <n> is bad", 2)]
    detail = adminctl("type", "show", "default", "t.flaky")
    assert detail.code == 0 and "p50/p95/p99, estimates" in detail.stdout and "row <n> is bad" in detail.stdout
    missing = adminctl("type", "show", "default", "t.never")
    assert missing.code == 1 and "no task of type 't.never' has run in queue 'default'" in missing.stderr
    assert adminctl("type", "ls", "default", "--window", "2y").code == 2


def test_show_says_when_the_failures_were_read_in_part(adminctl, make_worker, registry, client,
                                                       inspector: Inspector, monkeypatch) -> None:
    """A review: past the scan's limit the type's failure groups were shown as exact counts."""
    import queuecore.core.inspector as inspector_module
    from queuecore.core.failures import read_failures

    run_some(make_worker, registry, client, inspector)
    assert "some lists are longer" not in adminctl("type", "show", "default", "t.flaky").stdout
    monkeypatch.setattr(inspector_module, "read_failures",  # 2 archived tasks: longer than 1
                        lambda redis, keys, queues, limit: read_failures(redis, keys, queues, 1))
    detail = adminctl("type", "show", "default", "t.flaky")
    assert detail.code == 0 and "of the newest 1 failed tasks of the queue read" in " ".join(detail.stdout.split())


def test_a_failure_rate_near_an_end_is_not_rounded_to_it() -> None:
    """A review: ``type ls`` and ``type show`` printed 2,000 failures of 2,001 as ``100.0%`` (and one of
    10,000 as ``0.0%``), where ``stats`` and the dashboard say ``>99.9%`` and ``<0.1%``."""
    from types import SimpleNamespace

    from queuecore_adminctl.commands.types import _rate

    assert [_rate(SimpleNamespace(failure_rate=rate)) for rate in (2000 / 2001, 1 / 10_000, 0.5, 0.0, 1.0, None)] == [
        ">99.9%", "<0.1%", "50.0%", "0%", "100%", "-"]
