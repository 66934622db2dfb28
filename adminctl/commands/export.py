"""``adminctl task export``: a task list as JSON Lines or CSV on stdout, streamed."""

from __future__ import annotations

import sys

import click

from queuecore.core import export as exports
from queuecore.core.inspector import ORDERS
from queuecore.core.states import STATES

from ..app import App
from ..options import json_option, not_empty


@click.command("export")
@click.argument("queue_name", metavar="QUEUE")
@click.argument("state", type=click.Choice(STATES), metavar="STATE")
@click.option("--format", "fmt", type=click.Choice(exports.FORMATS), default="jsonl", show_default=True,
              help="jsonl: every field of each task; csv: a row per task for a spreadsheet.")
@click.option("--type", "type_name", metavar="TYPE", callback=not_empty, help="Only tasks of this type.")
@click.option("--search", metavar="TEXT", callback=not_empty,
              help="Only tasks whose id, payload or last error contains TEXT.")
@click.option("--filter", "filter_text", metavar="FILTER", callback=not_empty,
              help="The filter language (see `task ls --help`).")
@click.option("--sort", type=click.Choice(ORDERS), help="newest or oldest first (default: the state's order).")
@click.option("--limit", type=click.IntRange(min=1), metavar="N", help="At most N tasks.")
@json_option
@click.pass_obj
def export(app: App, queue_name: str, state: str, fmt: str, type_name: str | None, search: str | None,
           filter_text: str | None, sort: str | None, limit: int | None) -> None:
    """Write the tasks of QUEUE in STATE to stdout, as JSON Lines or CSV.

    Streams any number of tasks, read 500 at a time; with --type or --search
    only the matching ones (every task is looked at, not only the first
    20,000). The tasks in STATE when it starts are read, each once, as they
    are when read (a copy of their ids is taken first; with Redis full, the
    state itself is read, and a task that moves meanwhile can be missed or
    come twice). In CSV, a cell a spreadsheet
    would run as a formula starts with a quote. --json is --format jsonl.

    \b
    Examples:
      adminctl task export default archived > archived.jsonl
      adminctl task export default retry --format csv --type emails.send > retry.csv
    """
    if app.json:  # --json: JSON Lines, whatever --format says
        fmt = "jsonl"
    ins = app.inspector
    ins.queue_info(queue_name)  # a missing queue is a clear error before anything is written
    out = sys.stdout
    for line in exports.lines(fmt, ins.iter_tasks(queue_name, state, type=type_name, search=search, order=sort,
                                                  limit=limit, filter=filter_text)):
        out.write(line)
    out.flush()
