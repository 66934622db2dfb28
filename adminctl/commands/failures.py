"""``adminctl failures ls|show|run|archive|delete``: failed tasks grouped by what went wrong."""

from __future__ import annotations

import click
from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from queuecore.core.bulkjobs import new_holder
from queuecore.core.failures import GROUP_ACTIONS, FailureGroup, FailureReport

from ..app import App
from ..fmt import ago, escape, human_count
from ..options import json_option, yes_option
from .bulk import drive


def groups_table(report: FailureReport, now: float) -> Table:
    """One row per group: its key, how many, the error shape and where it happens, queues, last seen
    (``failures show`` has the rest)."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1), collapse_padding=True)
    table.add_column("Group", no_wrap=True, min_width=12)  # the key to act with: never folded
    table.add_column("Tasks", justify="right", no_wrap=True)
    table.add_column("Error, and where", overflow="fold", min_width=30)
    table.add_column("Queues", overflow="fold", min_width=8)
    table.add_column("Last seen", min_width=9)
    for g in report.groups:
        error = Text(escape(g.fingerprint.error_type or "error"), style="red")
        error.append(f": {escape(g.fingerprint.message)}" if g.fingerprint.message else "")
        if g.fingerprint.frame:
            error.append(f"\nin {escape(g.fingerprint.frame)}", style="dim")
        table.add_row(g.key, human_count(g.count), error, Text(escape(", ".join(g.queues))), ago(g.last_seen, now))
    return table


def group_detail(g: FailureGroup, now: float, tasks: int) -> RenderableType:
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column(overflow="fold")
    states = ", ".join(f"{n} {s}" for s, n in sorted(g.by_state().items()))
    for label, value in (("Group", g.key), ("Error type", g.fingerprint.error_type or "-"),
                         ("Message", g.fingerprint.message or "-"), ("Where", g.fingerprint.frame or "-"),
                         ("Example", g.example), ("Tasks", f"{human_count(g.count)} ({states})"),
                         ("Queues", ", ".join(g.queues)), ("Task types", ", ".join(g.types)),
                         ("First seen", ago(g.first_seen, now)), ("Last seen", ago(g.last_seen, now))):
        facts.add_row(label, Text(escape(value)))
    listed = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                   title=f"Newest {min(tasks, g.count)} of {human_count(g.count)}", title_justify="left")
    for header in ("Queue", "State", "Task", "Type", "Failed"):
        listed.add_column(header, overflow="fold")
    for t in g.newest(tasks):
        listed.add_row(Text(escape(t.queue)), t.state, t.id, Text(escape(t.type)), ago(t.failed_at, now))
    return Group(facts, Text(""), listed)


def _scope_note(report: FailureReport) -> str:
    if report.scanned_all:
        return f"{human_count(report.scanned)} failed task(s) read"
    return (f"the newest {human_count(report.scanned)} failed tasks read (some lists are longer: counts are of "
            f"those only)")


@click.group()
def failures() -> None:
    """Failed tasks (retry and archived) grouped by what went wrong.

    A group is the tasks whose last errors share a fingerprint: the error
    type, the message with what varies taken out (numbers, ids, addresses,
    quoted values), and the handler's frame. Each group has a short key;
    run, archive or delete a whole group by it.

    \b
    Examples:
      adminctl failures ls
      adminctl failures ls --queue emails --json
      adminctl failures show 3fa2c1d09e7b
      adminctl failures run 3fa2c1d09e7b
    """


@failures.command("ls")
@click.option("--queue", "queue_name", metavar="QUEUE", help="Only this queue's failures (default: every queue).")
@json_option
@click.pass_obj
def list_groups(app: App, queue_name: str | None) -> None:
    """List the failure groups, the biggest first.

    Reads the newest 10,000 tasks of each retry and archived list, and says
    so when a list is longer.

    \b
    Examples:
      adminctl failures ls
      adminctl failures ls --queue emails --json
    """
    report = app.inspector.failure_groups(queue_name)
    if app.json:
        app.terminal.json({"groups": [g.to_dict() for g in report.groups], "scanned": report.scanned,
                           "scanned_all": report.scanned_all})
        return
    if not report.groups:
        app.terminal.info("no failed tasks" + (f" in queue {escape(queue_name)}" if queue_name else ""))
        return
    app.terminal.print(groups_table(report, app.now()))
    app.terminal.info(_scope_note(report))


@failures.command("show")
@click.argument("key", metavar="GROUP")
@click.option("--queue", "queue_name", metavar="QUEUE", help="Look in this queue only.")
@click.option("--tasks", "tasks", type=click.IntRange(0, 1000), default=20, show_default=True,
              help="How many of its tasks to list (newest first).")
@json_option
@click.pass_obj
def show_group(app: App, key: str, queue_name: str | None, tasks: int) -> None:
    """Show one group: its error, where it happens, its tasks.

    \b
    Examples:
      adminctl failures show 3fa2c1d09e7b
      adminctl failures show 3fa2c1d09e7b --tasks 100 --json
    """
    group = app.inspector.failure_groups(queue_name).group(key)
    if group is None:
        app.terminal.error(f"no failure group {escape(key)} (see `adminctl failures ls`)")
        raise click.exceptions.Exit(1)
    if app.json:
        app.terminal.json(group.to_dict(tasks=tasks))
    else:
        app.terminal.print(group_detail(group, app.now(), tasks))


def _action_command(action: str) -> click.Command:
    @click.command(action)
    @click.argument("key", metavar="GROUP")
    @click.option("--queue", "queue_name", metavar="QUEUE", help="Only the group's tasks in this queue.")
    @click.option("--background", is_flag=True, help="Queue it as a bulk job for the workers and return at once.")
    @yes_option
    @json_option
    @click.pass_obj
    def command(app: App, key: str, queue_name: str | None, background: bool, yes: bool) -> None:
        ins, term = app.inspector, app.terminal
        report = ins.failure_groups(queue_name)
        group = report.group(key)
        if group is None:
            term.error(f"no failure group {escape(key)} (see `adminctl failures ls`)")
            raise click.exceptions.Exit(1)
        if not yes:  # with --json too, as every action that deletes or moves many tasks
            term.info(f"This will {action} {human_count(group.acted_on(action))} task(s) failing with "
                      f"{escape(group.example)} in {escape(', '.join(group.queues))}."
                      + ("" if report.scanned_all else
                         f" Only the newest {human_count(report.scanned)} failed tasks were read: older ones "
                         "failing the same way are left alone."))
            if not term.confirm("Continue?"):
                term.error("aborted: nothing was changed")
                raise click.exceptions.Exit(1)
        holder = None if background else new_holder()
        drive(app, ins.start_bulk_job(action, queue=queue_name, group=key, holder=holder), holder=holder)

    command.help = (f"{action.capitalize()} every task of a failure group.\n\n    Asks first unless --yes "
                    "(with --json too). Runs as a bulk job with a progress bar (Ctrl-C stops it), or with --background "
                    "left to the workers; one audit entry records its count.\n\n    \b\n    Examples:\n"
                    f"      adminctl failures {action} 3fa2c1d09e7b\n"
                    f"      adminctl failures {action} 3fa2c1d09e7b --queue emails --yes --json")
    return command


for _action in GROUP_ACTIONS:
    failures.add_command(_action_command(_action))


__all__ = ["failures"]
