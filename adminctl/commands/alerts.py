"""``adminctl alerts``: the active alerts (QUEUECORE['ALERTS'], evaluated by one worker at a time)."""

from __future__ import annotations

import click
from rich import box
from rich.table import Table
from rich.text import Text

from queuecore.core.alerts import Alert

from ..app import App
from ..fmt import escape, timestamp
from ..options import json_option

SEVERITY_STYLES = {"critical": "bold red", "warning": "yellow", "info": "cyan"}


def alerts_table(alerts: list[Alert], now: float) -> Table:
    """One row per active alert: severity, alert id, since when, message."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for header in ("Severity", "Alert", "Since", "Message"):
        table.add_column(header, overflow="fold")
    for a in alerts:
        table.add_row(Text(a.severity, style=SEVERITY_STYLES.get(a.severity, "")), Text(escape(a.id)),
                      Text(timestamp(a.since_dt, now)), Text(escape(a.message)))
    return table


@click.command()
@json_option
@click.pass_obj
def alerts(app: App) -> None:
    """List the active alerts with since when they fire.

    Rules live in QUEUECORE['ALERTS'] (or Worker(alerts=...)); the worker
    that holds the evaluator lease fires and resolves them.

    \b
    Examples:
      adminctl alerts
      adminctl alerts --json | jq -r '.[] | select(.severity == "critical") | .id'
    """
    active = app.inspector.alerts()
    if app.json:
        app.terminal.json([a.to_dict() for a in active])
    elif not active:
        app.terminal.info("no active alerts")
    else:
        app.terminal.print(alerts_table(active, app.now()))
