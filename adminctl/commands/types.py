"""``adminctl type ls|show``: task types of a queue, with throughput, failure rate, duration
percentiles (estimates), limits and failures grouped by error."""

from __future__ import annotations

from datetime import timedelta

import click
from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from queuecore.core.typereport import WINDOWS, TypeReport

from ..app import App
from ..fmt import ago, escape, human_count, percent
from ..options import json_option

window_option = click.option("--window", type=click.Choice(list(WINDOWS)), default="1h", show_default=True,
                             help="How far back the figures go.")


def _percentiles(r: TypeReport) -> str:
    s = r.stats
    if s.p50_ms_estimate is None:
        return "-"
    return f"≈{s.p50_ms_estimate:.0f} / {s.p95_ms_estimate or 0:.0f} / {s.p99_ms_estimate or 0:.0f} ms"


def _rate(r: TypeReport) -> str:
    return "-" if r.failure_rate is None else percent(r.failure_rate)


def _limits(r: TypeReport) -> str:
    if r.limit is None:
        return "none"
    parts = [f"{r.limit.concurrency_limit} at once"] if r.limit.concurrency_limit else []
    return ", ".join(parts + ([r.limit.rate_text] if r.limit.rate_limit else [])) or "none"


@click.group("type")
def types() -> None:
    """Task types of a queue: how they run and how they fail.

    Durations are estimates from fixed buckets (p50/p95/p99); counts are exact.

    \b
    Examples:
      adminctl type ls default
      adminctl type show default emails.send --window 24h
    """


@types.command("ls")
@click.argument("queue_name", metavar="QUEUE")
@window_option
@json_option
@click.pass_obj
def list_types(app: App, queue_name: str, window: str) -> None:
    """List the task types that have run in QUEUE, over the window.

    \b
    Examples:
      adminctl type ls default
      adminctl type ls default --window 72h --json
    """
    reports = app.inspector.type_reports(queue_name, timedelta(seconds=WINDOWS[window]))
    if app.json:
        app.terminal.json({"queue": queue_name, "window": window, "types": [r.to_dict(tasks=0) for r in reports]})
        return
    if not reports:
        app.terminal.info(f"no task has run in queue {escape(queue_name)} yet")
        return
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1), collapse_padding=True)
    table.add_column("Type", overflow="fold")
    for header in ("Ended", "/min", "Failed", "Rate"):
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("p50/p95/p99 (est.)", no_wrap=True)
    table.add_column("Limits", overflow="fold")
    for r in reports:
        table.add_row(Text(escape(r.stats.type)), human_count(r.stats.processed), f"{r.per_minute:.1f}",
                      human_count(r.stats.failed), _rate(r), _percentiles(r), _limits(r))
    app.terminal.print(table)


@types.command("show")
@click.argument("queue_name", metavar="QUEUE")
@click.argument("type_name", metavar="TYPE")
@window_option
@json_option
@click.pass_obj
def show_type(app: App, queue_name: str, type_name: str, window: str) -> None:
    """Show one task type of QUEUE: figures, limits and failures by error.

    \b
    Examples:
      adminctl type show default emails.send
      adminctl type show default emails.send --window 24h --json
    """
    report = app.inspector.type_report(queue_name, type_name, timedelta(seconds=WINDOWS[window]))
    if app.json:
        app.terminal.json(report.to_dict())
        return
    app.terminal.print(type_detail(report, window, app.now()))


def type_detail(r: TypeReport, window: str, now: float) -> RenderableType:
    s = r.stats
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column(overflow="fold")
    usage = "; ".join(f"{u.key + ': ' if u.key else ''}{u.running} running, {u.waiting} waiting" for u in
                      (r.limit.usage[:3] if r.limit else []))
    for label, value in (("Type", f"{s.type} in queue {s.queue}, last {window}"),
                         ("Ended", f"{human_count(s.processed)} ({r.per_minute:.1f} per minute)"),
                         ("Failed", f"{human_count(s.failed)} ({_rate(r)}); {human_count(s.retried)} retried, "
                                    f"{human_count(s.archived)} archived, {human_count(s.recovered)} recovered"),
                         ("Duration", f"{_percentiles(r)} (p50/p95/p99, estimates)"),
                         ("Limits", _limits(r) + (f" — {usage}" if usage else ""))):
        facts.add_row(label, Text(escape(value)))
    scope = "" if r.failures.scanned_all else (f" (of the newest {human_count(r.failures.scanned)} failed tasks of "
                                               "the queue read: some lists are longer)")
    groups = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, title="Failures by error" + scope,
                   title_justify="left")
    groups.add_column("Group", no_wrap=True)
    groups.add_column("Tasks", justify="right")
    groups.add_column("Error", overflow="fold")
    groups.add_column("Last seen", no_wrap=True)
    for g in r.failures.groups[:10]:
        groups.add_row(g.key, human_count(g.count), Text(escape(f"{g.fingerprint.error_type or 'error'}: "
                                                                f"{g.fingerprint.message}")), ago(g.last_seen, now))
    return Group(facts, Text(""), groups) if r.failures.groups else facts


__all__ = ["types"]
