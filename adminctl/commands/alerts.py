"""``adminctl alerts``: the active and pending alerts (QUEUECORE['ALERTS'], evaluated by one worker at a time)."""

from __future__ import annotations

import click
from rich import box
from rich.table import Table
from rich.text import Text

from queuecore.core.alerts import Alert, PendingAlert

from ..app import App
from ..fmt import escape, human_duration, timestamp
from ..options import json_option
from ..render import SEVERITY_STYLES


def alerts_table(alerts: list[Alert], now: float) -> Table:
    """One row per active alert: severity, alert id, since when, message."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for header in ("Severity", "Alert", "Since", "Message"):
        table.add_column(header, overflow="fold")
    for a in alerts:
        table.add_row(Text(a.severity, style=SEVERITY_STYLES.get(a.severity, "")), Text(escape(a.id)),
                      Text(timestamp(a.since_dt, now)), Text(escape(a.message)))
    return table


def pending_table(pending: list[PendingAlert], now: float) -> Table:
    """One row per pending alert: severity, alert id, how long it has held of its rule's ``for`` (then
    it fires), message. ``--json`` gives the times."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, title="pending (waiting out their rule's for)",
                  title_justify="left")
    for header in ("Severity", "Alert", "Held", "Message"):
        table.add_column(header, overflow="fold")
    for p in pending:
        held = f"{human_duration(now - p.alert.since)} of {human_duration(p.hold_for)}"
        table.add_row(Text(p.alert.severity), Text(escape(p.alert.id)), Text(held), Text(escape(p.alert.message)))
    return table


@click.command()
@click.option("--pending", is_flag=True, help="Only the pending alerts: those that hold but wait out their rule's for.")
@json_option
@click.pass_obj
def alerts(app: App, pending: bool) -> None:
    """List the active alerts with since when they fire, then the pending ones.

    Rules live in QUEUECORE['ALERTS'] (or Worker(alerts=...)); the worker
    that holds the evaluator lease fires and resolves them. An alert whose
    rule has a "for" is pending until it has held that long.

    \b
    Examples:
      adminctl alerts
      adminctl alerts --json | jq -r '.[] | select(.severity == "critical") | .id'
      adminctl alerts --pending --json
    """
    active, waiting = app.inspector.alerts_and_pending()
    if pending:
        if app.json:
            app.terminal.json([p.to_dict() for p in waiting])
        elif not waiting:
            app.terminal.info("no pending alerts")
        else:
            app.terminal.print(pending_table(waiting, app.now()))
        return
    if app.json:
        app.terminal.json([a.to_dict() for a in active])
        return
    if active:
        app.terminal.print(alerts_table(active, app.now()))
    else:
        app.terminal.info("no active alerts")
    if waiting:
        app.terminal.print(pending_table(waiting, app.now()))
