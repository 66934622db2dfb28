"""``adminctl task edit``: give a scheduled, retry or archived task a new payload and run it."""

from __future__ import annotations

import click

from ..app import App
from ..fmt import escape
from ..options import json_option
from .enqueue import parse_payload


@click.command("edit")
@click.argument("queue_name", metavar="QUEUE")
@click.argument("task_id", metavar="ID")
@click.option("--payload", "-p", metavar="JSON", required=True,
              help="The new payload, a JSON object; @FILE reads a file, - reads stdin.")
@click.option("--force", is_flag=True, help="Run it even if no live worker's handler takes this payload.")
@json_option
@click.pass_obj
def edit(app: App, queue_name: str, task_id: str, payload: str, force: bool) -> None:
    """Give a scheduled, retry or archived task a new payload and run it now.

    The payload is checked as at enqueue, and against the handlers live
    workers publish (unless --force). The edit (when, who, the payload it
    replaced) is kept with the task (see `task inspect`) and in the audit log.

    \b
    Examples:
      adminctl task edit default 5f13a5b8e611 --payload '{"user_id": 7, "amount": 5}'
      adminctl task edit default 5f13a5b8e611 --payload @fixed.json --json
    """
    body = parse_payload(payload, app.connection.max_payload_bytes) or {}
    info = app.inspector.edit_and_run(queue_name, task_id, body, force=force)
    if app.json:
        app.terminal.json(info.to_dict())
    else:
        app.terminal.success(f"task {task_id} of queue {escape(queue_name)} edited and moved to pending")
