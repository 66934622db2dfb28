"""``adminctl server ls``: the live worker processes, from their heartbeats."""

from __future__ import annotations

import click

from ..app import App
from ..options import json_option
from ..render import server_table, waiting_table, worker_table


@click.group()
def server() -> None:
    """Worker processes (asynq calls them servers).

    \b
    Example:
      adminctl server ls
    """


@server.command("ls")
@json_option
@click.pass_obj
def server_ls(app: App) -> None:
    """List every live worker process and the tasks it is running.

    Each row comes from the process's heartbeat: host, pid, status
    (active, quiet, stopping), busy (handlers running / concurrency),
    ahead (tasks fetched ahead that wait for a free slot), queues with
    weights and when it started; then each running task with how long
    its handler has run, and each task fetched ahead with how long it
    has waited. Processes whose heartbeat expired are not shown. With
    --json, each also lists the task types it handles (task_types) with
    their parameter names, as it publishes them with its heartbeat.

    \b
    Examples:
      adminctl server ls
      adminctl server ls --json | jq '.[] | {host, pid, status}'
    """
    servers = app.inspector.servers(task_types=app.json)
    term = app.terminal
    if app.json:  # with the task types each handles and their parameter names
        term.json([s.to_dict() for s in servers])
        return
    if not servers:
        term.info("no worker process is running (no live heartbeat)")
        return
    now = app.now()
    term.print(server_table(servers, now))
    workers = [w for s in servers for w in s.workers]
    if workers:
        term.print("")
        term.print(worker_table(workers, now, title="Running tasks"))
    waiting = [w for s in servers for w in s.waiting]
    if waiting:
        term.print("")
        term.print(waiting_table(waiting, now, title="Fetched ahead, waiting for a free slot"))


def _control_command(command: str, summary: str, done: str) -> click.Command:
    @click.command(command)
    @click.argument("server_id", metavar="SERVER")
    @json_option
    @click.pass_obj
    def run(app: App, server_id: str) -> None:
        getattr(app.inspector, f"{command}_server")(server_id)
        if app.json:
            app.terminal.json({"server": server_id, "command": command, "requested": True})
        else:
            app.terminal.success(f"asked {server_id} to {done}; it acts at its next heartbeat")

    run.help = (f"{summary}\n\n    Sent through Redis (the process takes it with its next heartbeat) and "
                f"audited; SERVER is an id from `server ls`.\n\n    \\b\n    Examples:\n"
                f"      adminctl server {command} web-1:4242:9f3c1a2b\n"
                f"      adminctl server {command} web-1:4242:9f3c1a2b --json")
    return run


server.add_command(_control_command("quiet", "Ask one worker process to stop fetching tasks (quiet); running "
                                    "ones finish.", "go quiet"))
server.add_command(_control_command("stop", "Ask one worker process to stop, as on SIGTERM: running tasks get "
                                    "its shutdown timeout. A child of runworker --processes N is not "
                                    "started again.", "stop"))
