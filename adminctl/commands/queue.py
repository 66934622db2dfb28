"""``adminctl queue ls|inspect|history|pause|unpause|remove|limits``."""

from __future__ import annotations

import click

from queuecore.core.errors import QueueNotEmpty, WrongKeyType
from queuecore.core.limits import MAX_DURATION
from queuecore.core.message import QueueInfo

from ..app import App
from ..fmt import escape, human_count
from ..options import Duration, json_option, yes_option
from ..render import HistoryChart, limits_table, queue_detail, queue_list_table, queue_problems


@click.group()
def queue() -> None:
    """List, inspect, pause and remove queues.

    \b
    Examples:
      adminctl queue ls
      adminctl queue inspect default
      adminctl queue history default --days 14
      adminctl queue pause low
    """


@queue.command("ls")
@json_option
@click.pass_obj
def queue_ls(app: App) -> None:
    """List every queue with its tasks per state.

    \b
    Examples:
      adminctl queue ls
      adminctl queue ls --json | jq -r '.[] | select(.paused) | .name'
    """
    infos = app.inspector.all_queue_info()
    if app.json:
        app.terminal.json([q.to_dict() for q in infos])
    elif not infos:
        app.terminal.info("no queues yet (a queue appears when its first task is enqueued)")
    else:
        app.terminal.print(queue_list_table(infos))
        for line in queue_problems(infos):
            app.terminal.error(line)


@queue.command("inspect")
@click.argument("name", metavar="QUEUE")
@json_option
@click.pass_obj
def queue_inspect(app: App, name: str) -> None:
    """Show one queue in detail, with the last hour.

    Sizes per state, latency, memory, today's and all-time counters, and a
    sparkline of tasks processed per minute.

    \b
    Examples:
      adminctl queue inspect default
      adminctl queue inspect default --json
    """
    info = app.inspector.queue_info(name)
    if app.json:
        app.terminal.json(info.to_dict())
        return
    minutes = app.inspector.minute_history(name, 60)
    app.terminal.print(queue_detail(info, minutes, color=app.terminal.color))


@queue.command("history")
@click.argument("name", metavar="QUEUE")
@click.option("--days", "-d", type=click.IntRange(1, 90), default=7, show_default=True,
              help="How many UTC days, up to 90.")
@json_option
@click.pass_obj
def queue_history(app: App, name: str, days: int) -> None:
    """Show tasks processed and failed per day, as a bar chart.

    \b
    Examples:
      adminctl queue history default
      adminctl queue history default --days 30
      adminctl queue history default --json | jq '.[-1]'
    """
    history = app.inspector.history(name, days)
    if app.json:
        app.terminal.json([d.to_dict() for d in history])
    else:
        app.terminal.print(HistoryChart(history))


@queue.command("pause")
@click.argument("name", metavar="QUEUE")
@click.option("--for", "for_", type=Duration(minimum_open=True, maximum=MAX_DURATION), metavar="S",
              help="Resume by itself after this long (e.g. 90, 30m, 2h, 1h30m).")
@json_option
@click.pass_obj
def queue_pause(app: App, name: str, for_: float | None) -> None:
    """Pause a queue (running tasks finish).

    Workers stop taking its tasks until `queue unpause`, or for a while with --for.

    \b
    Examples:
      adminctl queue pause low
      adminctl queue pause low --for 30m
    """
    resumes_at = app.inspector.pause_queue(name, for_=for_)
    until = resumes_at.isoformat() if resumes_at else None
    if app.json:
        app.terminal.json({"queue": name, "paused": True, **({"paused_until": until} if until else {})})
    elif until:
        app.terminal.success(f"paused queue {escape(name)} until {until}: workers take no new tasks from it "
                             "until then")
    else:
        app.terminal.success(f"paused queue {escape(name)}: workers take no new tasks from it")


@queue.command("limits")
@json_option
@click.pass_obj
def queue_limits(app: App) -> None:
    """Task types with a concurrency or rate limit, and their use now.

    Per type (and per limit key in use): tasks running of the limit, tasks waiting for a slot,
    and starts in the current rate window of the rate. From the limits live workers publish.

    \b
    Examples:
      adminctl queue limits
      adminctl queue limits --json | jq '.[] | select(.concurrency_limit > 0)'
    """
    limits = app.inspector.limits()
    if app.json:
        app.terminal.json([limit.to_dict() for limit in limits])
        return
    if not limits:
        app.terminal.warning("no live worker publishes a task type with limits")
        return
    app.terminal.print(limits_table(limits))


@queue.command("unpause")
@click.argument("name", metavar="QUEUE")
@json_option
@click.pass_obj
def queue_unpause(app: App, name: str) -> None:
    """Let workers take a paused queue's tasks again.

    \b
    Example:
      adminctl queue unpause low
    """
    app.inspector.unpause_queue(name)
    if app.json:
        app.terminal.json({"queue": name, "paused": False})
    else:
        app.terminal.success(f"unpaused queue {escape(name)}")


@queue.command("remove")
@click.argument("name", metavar="QUEUE")
@click.option("--force", is_flag=True,
              help="Also delete its pending, scheduled, retry and archived tasks (never running ones).")
@yes_option
@json_option
@click.pass_obj
def queue_remove(app: App, name: str, force: bool, yes: bool) -> None:
    """Forget a queue; --force also deletes its tasks.

    The queue must hold no pending, scheduled, retry or archived task, unless
    --force. Its completed tasks (and their results) are deleted with it.

    A queue with running tasks is never removed. With tasks to delete,
    asks for confirmation unless --yes.

    \b
    Examples:
      adminctl queue remove old-queue
      adminctl queue remove old-queue --force --yes
    """
    ins = app.inspector
    try:
        info = ins.queue_info(name)
    except WrongKeyType as exc:  # a corrupt queue: --force clears it away (when none of its tasks runs)
        if not force:
            raise
        if not yes and not app.terminal.confirm(f"Queue {escape(name)} has {escape(str(exc))}. Remove it and "
                                                "delete all its keys?"):
            app.terminal.error("aborted: nothing was changed")
            raise click.exceptions.Exit(1) from None
        info = QueueInfo.unreadable(name, str(exc))
    if info.stored and (force or not info.size) and not info.active and not yes:
        question = (f"Remove queue {escape(name)} and delete its {human_count(info.stored)} task(s) "
                    f"({info.pending} pending, {info.scheduled} scheduled, {info.retry} retry, "
                    f"{info.archived} archived, {info.completed} completed with their results)?")
        if not app.terminal.confirm(question):
            app.terminal.error("aborted: nothing was changed")
            raise click.exceptions.Exit(1)
    try:
        removal = ins.remove_queue(name, force=force)
    except KeyboardInterrupt:
        app.terminal.error(f"interrupted: queue {escape(name)} is partly removed (its task lists first); run the same "
                           "command again to finish")
        raise click.exceptions.Exit(130) from None
    except QueueNotEmpty:
        if info.active:
            raise
        raise QueueNotEmpty(f"queue {name!r} holds {human_count(info.size)} task(s); "
                            "add --force to delete them too") from None
    if app.json:
        app.terminal.json({"queue": name, "removed": True, "tasks_deleted": removal.tasks_deleted,
                           "keys_deleted": removal.keys_deleted})
    else:
        app.terminal.success(f"removed queue {escape(name)}" + (f" and its {human_count(removal.tasks_deleted)} "
                                                                "task(s)" if removal.tasks_deleted else ""))
