"""``adminctl alerts``: the active alerts, as a table and as JSON, in-process against the test's prefix."""

from __future__ import annotations

from queuecore.core.alerts import Alert
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
