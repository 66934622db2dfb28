"""``adminctl worker ls``: every task being processed right now."""

from __future__ import annotations

import click

from ..app import App
from ..options import json_option
from ..render import worker_table


@click.group()
def worker() -> None:
    """Tasks being processed right now, across worker processes.

    \b
    Example:
      adminctl worker ls
    """


@worker.command("ls")
@json_option
@click.pass_obj
def worker_ls(app: App) -> None:
    """List every task being processed now.

    For each: the worker process, queue, type, task id and how long it has
    been running.

    \b
    Examples:
      adminctl worker ls
      adminctl worker ls --json | jq -r '.[].task_id'
    """
    workers = app.inspector.workers()
    term = app.terminal
    if app.json:
        term.json([w.to_dict() for w in workers])
    elif not workers:
        term.info("no task is being processed right now")
    else:
        term.print(worker_table(workers, app.now()))
