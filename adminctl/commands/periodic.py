"""``adminctl periodic ls|inspect|pause|resume|run``: the periodic entries live workers declare."""

from __future__ import annotations

import click
from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from queuecore.core.periodic_admin import PeriodicEntryInfo

from ..app import App
from ..fmt import ago, compact_json, escape, timestamp
from ..options import json_option

OUTCOME_STYLES = {"done": "green", "completed": "green", "pending": "cyan", "active": "green", "retry": "yellow",
                  "scheduled": "blue", "archived": "red", "skipped": "yellow"}


def _outcome(outcome: str | None) -> Text:
    return Text(outcome or "-", style=OUTCOME_STYLES.get(outcome or "", ""))


def periodic_table(entries: list[PeriodicEntryInfo], now: float) -> Table:
    """One row per entry: name, schedule in words, task and queue, next and last fire, last outcome."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for header in ("Entry", "Schedule", "Task", "Queue", "Next fire", "Last fire", "Outcome"):
        table.add_column(header, overflow="fold")
    for e in entries:
        name = Text(escape(e.name))
        if e.paused:
            name.append(" (paused)", style="yellow")
        table.add_row(name, Text(escape(e.description)), Text(escape(e.task)), Text(escape(e.queue)),
                      Text("paused" if e.paused else ago(e.next_fire_at, now)), Text(ago(e.last_fire_at, now)),
                      _outcome(e.last_outcome))
    return table


def periodic_detail(e: PeriodicEntryInfo, now: float) -> RenderableType:
    """One entry: its definition, state and recent fires."""
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column(overflow="fold")
    rows = [("Entry", e.name), ("Task", e.task), ("Queue", e.queue),
            ("Schedule", f"{e.description}  [{e.schedule}]"), ("Time zone", e.timezone),
            ("Missed fires", "run once late" if e.missed == "once" else "skipped"),
            ("Payload", compact_json(e.payload)), ("Options", compact_json(e.options) if e.options else "-"),
            ("State", f"paused by {e.paused_by or '?'} {ago(e.paused_at, now)}" if e.paused else "active"),
            ("Next fire", timestamp(e.next_fire_at, now)), ("Last fire", timestamp(e.last_fire_at, now)),
            ("Last task", f"{e.last_task_id or '-'} ({e.last_outcome or '-'})")]
    for label, value in rows:
        facts.add_row(label, Text(escape(value)))
    fires = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, title="Recent fires", title_justify="left")
    for header in ("Fire time", "Claimed", "How", "Task", "Outcome"):
        fires.add_column(header, overflow="fold")
    for f in e.recent:
        fires.add_row(timestamp(f.fire_at, now), ago(f.claimed_at, now), f.kind, Text(escape(f.task_id or "-")),
                      _outcome(f.outcome))
    return Group(facts, Text(""), fires) if e.recent else facts


@click.group()
def periodic() -> None:
    """List, pause, resume and run periodic tasks.

    The entries are those live workers declare (QUEUECORE['PERIODIC'] or
    Worker(periodic=...)); an entry no live worker declares leaves the list
    within three heartbeat intervals.

    \b
    Examples:
      adminctl periodic ls
      adminctl periodic pause nightly-report
      adminctl periodic run nightly-report
    """


@periodic.command("ls")
@json_option
@click.pass_obj
def periodic_ls(app: App) -> None:
    """List the periodic entries: schedule, next and last fire, last outcome.

    \b
    Examples:
      adminctl periodic ls
      adminctl periodic ls --json | jq -r '.[] | select(.paused) | .name'
    """
    entries = app.inspector.periodic_entries()
    if app.json:
        app.terminal.json([e.to_dict() for e in entries])
    elif not entries:
        app.terminal.info("no periodic entries (none declared by a live worker)")
    else:
        app.terminal.print(periodic_table(entries, app.now()))


@periodic.command("inspect")
@click.argument("name", metavar="ENTRY")
@json_option
@click.pass_obj
def periodic_inspect(app: App, name: str) -> None:
    """Show one periodic entry with its recent fires.

    \b
    Example:
      adminctl periodic inspect nightly-report
    """
    entry = app.inspector.periodic_entry(name)
    if app.json:
        app.terminal.json(entry.to_dict())
    else:
        app.terminal.print(periodic_detail(entry, app.now()))


@periodic.command("pause")
@click.argument("name", metavar="ENTRY")
@json_option
@click.pass_obj
def periodic_pause(app: App, name: str) -> None:
    """Pause an entry: its fires are skipped until `periodic resume`.

    \b
    Example:
      adminctl periodic pause nightly-report
    """
    changed = app.inspector.pause_periodic(name)
    if app.json:
        app.terminal.json({"name": name, "paused": True, "changed": changed})
    else:
        app.terminal.success(f"paused periodic entry {escape(name)}" + ("" if changed else " (it was already)"))


@periodic.command("resume")
@click.argument("name", metavar="ENTRY")
@json_option
@click.pass_obj
def periodic_resume(app: App, name: str) -> None:
    """Resume a paused entry from its next fire (fires during the pause are not run).

    \b
    Example:
      adminctl periodic resume nightly-report
    """
    changed = app.inspector.resume_periodic(name)
    if app.json:
        app.terminal.json({"name": name, "paused": False, "changed": changed})
    else:
        app.terminal.success(f"resumed periodic entry {escape(name)}" + ("" if changed else " (it was not paused)"))


@periodic.command("run")
@click.argument("name", metavar="ENTRY")
@json_option
@click.pass_obj
def periodic_run(app: App, name: str) -> None:
    """Enqueue an entry's task now, outside its schedule (the schedule is unchanged).

    \b
    Example:
      adminctl periodic run nightly-report
    """
    task_id = app.inspector.run_periodic(name)
    if app.json:
        app.terminal.json({"name": name, "task_id": task_id})
    else:
        app.terminal.success(f"enqueued periodic entry {escape(name)} now as task {escape(task_id)}")
