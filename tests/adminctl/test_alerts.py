"""``adminctl alerts``: the active alerts, as a table and as JSON, in-process against the test's prefix."""

from __future__ import annotations

import re
from dataclasses import replace

from queuecore.core.alerts import Alert, PendingAlert
from queuecore.core.clock import to_ms


def fire(scripts, *alerts: Alert) -> None:
    now = to_ms(alerts[0].since)
    held, fired, _ = scripts.alerts_apply("test", now_ms=now, lease_until_ms=now + 1000,
                                          fire=[(a.id, a.to_json()) for a in alerts])
    assert held and fired == [a.id for a in alerts]


BACKLOG = Alert(id="big/emails", rule="big", kind="backlog", subject="emails", severity="critical",
                message="queue emails: 12 pending tasks (above 10) [bold]x[/bold]\x1b[31m", value=12.0,
                threshold=10.0, since=1_800_000_000.0)
MEMORY = Alert(id="mem/redis", rule="mem", kind="memory", subject="redis", severity="warning",
               message="Redis memory at 91% of maxmemory (above 80%)", value=0.91, threshold=0.8,
               since=1_800_000_060.0)


def test_no_alerts(adminctl) -> None:
    run = adminctl("alerts")
    assert run.code == 0 and run.stdout == "" and "no active alerts" in run.stderr
    assert adminctl("alerts", "--json").json() == []


def test_table_and_json(adminctl, scripts) -> None:
    fire(scripts, MEMORY, BACKLOG)
    run = adminctl("alerts")
    assert run.code == 0, run.stderr
    rows = run.stdout.splitlines()
    assert rows[0].split() == ["Severity", "Alert", "Since", "Message"]
    text = run.stdout
    assert text.index("big/emails") < text.index("mem/redis")  # oldest first
    assert "2027-01-15 08:00:00Z" in text and "[bold]x[/bold]" in text and "\x1b" not in text
    data = adminctl("alerts", "--json").json()
    assert [(a["id"], a["severity"], a["since"]) for a in data] == [
        ("big/emails", "critical", "2027-01-15T08:00:00+00:00"), ("mem/redis", "warning", "2027-01-15T08:01:00+00:00")]
    assert data[0]["message"] == BACKLOG.message and data[0]["value"] == 12.0 and data[0]["threshold"] == 10.0


def pend(scripts, *pending: PendingAlert) -> None:
    """Mark alerts pending as an evaluator does: since each alert's ``since``, saying what it says."""
    for p in pending:
        now = to_ms(p.alert.since)
        held, _, _ = scripts.alerts_apply("test", now_ms=now, lease_until_ms=now + 1000,
                                          pend=[(p.alert.id, p.to_json())])
        assert held


SLOW = PendingAlert(Alert(id="slow/emails", rule="slow", kind="latency", subject="emails", severity="warning",
                          message="queue emails: oldest pending task waited 95s (above 60s) [red]y[/red]",
                          value=95.0, threshold=60.0, since=1_800_000_120.0), hold_for=300.0)


def test_pending_alerts_follow_the_active_ones_and_have_their_own_json(adminctl, scripts) -> None:
    pend(scripts, replace(SLOW, alert=replace(SLOW.alert, since=scripts.redis.time()[0] - 100)))
    run = adminctl("alerts")
    assert run.code == 0, run.stderr
    assert "no active alerts" in run.stderr and "pending (waiting out their rule's for)" in run.stdout
    assert re.search(r"slow/emails +1m 4\ds of 5m0?s? +queue emails: oldest", run.stdout), run.stdout
    assert "[red]y[/red]" in run.stdout
    scripts.redis.delete(scripts.keys.alerts)
    pend(scripts, SLOW)
    fire(scripts, BACKLOG)
    text = adminctl("alerts").stdout
    assert text.index("big/emails") < text.index("pending (waiting") < text.index("slow/emails")
    assert [a["id"] for a in adminctl("alerts", "--json").json()] == ["big/emails"]  # unchanged: active only
    [data] = adminctl("alerts", "--pending", "--json").json()
    assert (data["id"], data["since"], data["for"], data["fires_at"]) == (
        "slow/emails", "2027-01-15T08:02:00+00:00", 300.0, "2027-01-15T08:07:00+00:00")
    only = adminctl("alerts", "--pending").stdout
    assert "slow/emails" in only and "big/emails" not in only
