"""``adminctl task ls|inspect|run|archive|kill|delete|cancel|run-all|archive-all|delete-all``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import click

from queuecore.core.bulkjobs import new_holder
from queuecore.core.config import DEFAULT_MAX_ARCHIVE_SIZE
from queuecore.core.errors import BrokerError, ConfigurationError, InvalidTaskState, PageNotFound, TaskNotFound
from queuecore.core.inspector import FILTER_SCAN_LIMIT, ORDERS
from queuecore.core.keys import validate_queue_name
from queuecore.core.message import TaskInfo
from queuecore.core.states import ACTION_STATES, BULK_ACTION_STATES, STATES, TaskAction

from ..app import App
from ..fmt import escape, human_count
from ..options import json_option, not_empty, yes_option
from ..render import page_footer, task_detail, task_table
from .bulk import drive


@click.group()
def task() -> None:
    """List, inspect and act on tasks.

    Task ids are positional after the queue: `task inspect QUEUE ID`.
    Several ids may be given to act on each; the command then exits 1 if
    any of them failed. Bulk actions (run-all, archive-all, delete-all) show
    how many tasks they will touch and ask first unless --yes.

    \b
    Examples:
      adminctl task ls default pending
      adminctl task inspect default 3f2a9c...
      adminctl task run default ID1 ID2
      adminctl task archive-all low retry --yes
    """


@task.command("ls")
@click.argument("queue_name", metavar="QUEUE")
@click.argument("state", type=click.Choice(STATES), metavar="STATE")
@click.option("--page", "-p", type=click.IntRange(min=1), default=1, show_default=True, help="Page number.")
@click.option("--size", "-s", type=click.IntRange(1, 1000), default=20, show_default=True, help="Tasks per page.")
@click.option("--type", "-t", "type_name", metavar="TYPE", callback=not_empty, help="Only tasks of this type.")
@click.option("--search", metavar="TEXT", callback=not_empty,
              help="Only tasks whose id, payload or last error contains TEXT (case-insensitive).")
@click.option("--filter", "filter_text", metavar="FILTER", callback=not_empty,
              help="The filter language: type:NAME (* wildcards) error:TEXT id:PREFIX payload.PATH:VALUE, words, "
                   "-term to exclude; quote values with spaces.")
@click.option("--sort", "order", type=click.Choice(ORDERS), default=None,
              help="newest or oldest first. [default: newest for retry, archived and completed; oldest "
                   "(the next to run, the soonest due) for the others]")
@json_option
@click.pass_obj
def task_ls(app: App, queue_name: str, state: str, page: int, size: int, type_name: str | None,
            search: str | None, filter_text: str | None, order: str | None) -> None:
    """List the tasks of QUEUE in STATE, a page at a time.

    Newest first for retry, archived and completed (the latest failures
    and results on page 1); oldest first for the others: pending in the
    order workers take them, scheduled and active soonest due first.
    --sort turns the order around.

    STATE is one of {states}.
    Payloads and errors are shown escaped and truncated; use `task inspect`
    for the whole of them.

    \b
    Examples:
      adminctl task ls default pending
      adminctl task ls default archived --page 2 --size 50
      adminctl task ls default archived --sort oldest
      adminctl task ls default retry --type emails.send --search SMTPError
      adminctl task ls default archived --filter 'type:emails.* payload.plan:pro'
      adminctl task ls default scheduled --json | jq -r '.tasks[].id'
    """
    result = app.inspector.list_tasks(queue_name, state, page, size, type=type_name, search=search, order=order,
                                      filter=filter_text)
    term = app.terminal
    if page > 1 and page > result.pages:  # with --json too: the same exit code for the same request
        raise PageNotFound(f"no such page: page {page:,} is past the end: {result.pages:,} page(s) of {size}")
    if app.json:
        term.json(result.to_dict())
        return
    if not result.tasks:
        if result.matched is not None and not result.scanned_all:
            other = "oldest" if result.order == "newest" else "newest"
            term.info(f"no match among the {result.order} {human_count(result.scanned or 0)} of "
                      f"{human_count(result.total)} {state} tasks in queue {escape(queue_name)} searched "
                      f"(a filter looks at {human_count(FILTER_SCAN_LIMIT)} at most); narrow with --type, "
                      f"or search the {other} with --sort {other}")
        elif result.matched is not None:
            term.info(f"no {state} task in queue {escape(queue_name)} matches "
                      f"(all {human_count(result.total)} searched)")
        else:
            term.info(f"no {state} tasks in queue {escape(queue_name)}")
        return
    term.print(task_table(result.tasks, state, app.now()))
    term.print(page_footer(result, queue_name, state))


task_ls.help = (task_ls.help or "").replace("{states}", ", ".join(STATES))


@task.command("inspect")
@click.argument("queue_name", metavar="QUEUE")
@click.argument("task_ids", metavar="ID...", nargs=-1, required=True)
@json_option
@click.pass_obj
def task_inspect(app: App, queue_name: str, task_ids: tuple[str, ...]) -> None:
    """Show every field of tasks, payloads and errors whole.

    The whole payload, last error (with its traceback) and result.

    With --json: one object for one id, a list for several.

    \b
    Examples:
      adminctl task inspect default 3f2a9c41d0e84b7f9d2c1b0a5e6f7d8c
      adminctl task inspect default ID1 ID2 --json
    """
    validate_queue_name(queue_name)  # a bad name is a usage error (exit 2), not a failure per id
    found: list[TaskInfo] = []
    failed = 0
    for task_id in task_ids:
        try:
            found.append(app.inspector.get_task(queue_name, task_id))
        except (TaskNotFound, ConfigurationError) as exc:
            app.terminal.error(str(exc))
            failed += 1
    if app.json:
        if len(task_ids) == 1:
            if found:
                app.terminal.json(found[0].to_dict())
        else:
            app.terminal.json([t.to_dict() for t in found])
    else:
        now = app.now()
        for i, info in enumerate(found):
            if i:
                app.terminal.print("")
            app.terminal.print(task_detail(info, now))
    if failed:
        raise click.exceptions.Exit(1)


def _states_phrase(states: tuple[str, ...]) -> str:
    """``("scheduled", "retry", "archived")`` -> ``"scheduled, retry or archived"``; all states but
    one -> ``"any state but active"``."""
    left_out = [s for s in STATES if s not in states]
    if len(left_out) == 1 and len(states) > 2:
        return f"any state but {left_out[0]}"
    return states[0] if len(states) == 1 else f"{', '.join(states[:-1])} or {states[-1]}"


@dataclass(frozen=True)
class Action:
    name: str
    method: str
    done: str  # what to print after the id
    summary: str

    @property
    def states(self) -> str:
        """The states it applies to, in words (from ``queuecore.core.states``)."""
        return _states_phrase(ACTION_STATES[self.name])


ACTIONS = {action.name: action for action in (
    Action(TaskAction.RUN.value, "run_task", "moved to pending", "Run tasks now: move them to pending."),
    Action(TaskAction.ARCHIVE.value, "archive_task", "archived", "Archive tasks: they stay, and are not run."),
    Action(TaskAction.DELETE.value, "delete_task", "deleted", "Delete tasks for good."),
    Action(TaskAction.CANCEL.value, "cancel_task", "cancel requested (the worker stops it and archives it)",
           "Cancel running tasks (they are archived).\n\n"
           "    Each is stopped and archived as \"cancelled by operator\"."),
)}


def _action_command(action: Action, name: str | None = None) -> click.Command:
    command_name = name or action.name
    alias = f"\n\n    An alias of `task {action.name}`." if command_name != action.name else ""

    @click.command(command_name)
    @click.argument("queue_name", metavar="QUEUE")
    @click.argument("task_ids", metavar="ID...", nargs=-1, required=True)
    @json_option
    @click.pass_obj
    def command(app: App, queue_name: str, task_ids: tuple[str, ...]) -> None:
        method: Callable[[str, str], None] = getattr(app.inspector, action.method)
        validate_queue_name(queue_name)  # a bad name is a usage error (exit 2), not a failure per id
        results = []
        stopped: BaseException | None = None  # Ctrl-C or Redis failing: what was done is still reported
        for task_id in task_ids:
            try:
                method(queue_name, task_id)
            except (TaskNotFound, InvalidTaskState, ConfigurationError) as exc:
                results.append({"id": task_id, "ok": False, "error": str(exc), "error_type": type(exc).__name__})
                if not app.json:
                    app.terminal.error(f"{escape(task_id)}: {exc}")
                continue
            except (KeyboardInterrupt, BrokerError) as exc:
                stopped = exc
                break
            results.append({"id": task_id, "ok": True, "error": None, "error_type": None})
            if not app.json:
                app.terminal.success(f"{task_id}: {action.done}")
        if isinstance(stopped, BrokerError) and not results:  # nothing was done: the error says it all
            raise stopped
        failed = sum(1 for r in results if not r["ok"])
        report: dict[str, object] = {"queue": queue_name, "action": action.name, "results": results}
        if stopped is not None:
            at, *untried = task_ids[len(results):]
            interrupted = isinstance(stopped, KeyboardInterrupt)
            reason = "interrupted" if interrupted else app.scrub(f"{type(stopped).__name__}: {stopped}")
            report["stopped"] = {"reason": reason, "at": at, "not_tried": untried}
            if not app.json:  # Redis's error follows on a line of its own
                app.terminal.error(f"stopped at {escape(at)}{' (interrupted)' if interrupted else ''}: it may or "
                                   f"may not be {action.done}; {len(untried)} more not tried")
        if app.json:
            app.terminal.json(report)
        elif len(task_ids) > 1:
            app.terminal.info(f"{len(results) - failed} of {len(task_ids)} done, {failed} failed")
        if isinstance(stopped, KeyboardInterrupt):
            raise click.exceptions.Exit(130)
        if stopped is not None:
            raise stopped
        if failed:
            raise click.exceptions.Exit(1)

    command.help = (f"{action.summary}{alias}\n\n    Applies to {action.states} tasks; each ID is reported, and the "
                    f"exit code is 1 if any failed.\n\n    \b\n    Examples:\n      adminctl task {command_name} "
                    f"default 3f2a9c41d0e84b7f9d2c1b0a5e6f7d8c\n      adminctl task {command_name} default ID1 ID2 ID3"
                    f" --json")
    if command_name != action.name:
        command.short_help = f"An alias of `task {action.name}`."
    return command


for _action in ACTIONS.values():
    task.add_command(_action_command(_action))
task.add_command(_action_command(ACTIONS["archive"], "kill"))


@dataclass(frozen=True)
class BulkAction:
    verb: str  # the task action: "archive"
    done: str  # "archived {count} {state} task(s) of queue {queue}"
    summary: str

    @property
    def name(self) -> str:
        return f"{self.verb}-all"

    @property
    def states(self) -> tuple[str, ...]:
        """The states it takes (from ``queuecore.core.states``)."""
        return BULK_ACTION_STATES[self.verb]


BULK_ACTIONS = (
    BulkAction(TaskAction.RUN.value, "moved {count} {state} task(s) of queue {queue} to pending",
               "Run every task of QUEUE in STATE now (move them to pending)."),
    BulkAction(TaskAction.ARCHIVE.value, "archived {count} {state} task(s) of queue {queue}",
               "Archive every task of QUEUE in STATE."),
    BulkAction(TaskAction.DELETE.value, "deleted {count} {state} task(s) of queue {queue}",
               "Delete every task of QUEUE in STATE, for good."),
)


def archive_size_warning(app: App, queue_name: str, count: int) -> None:
    """Before archiving ``count`` tasks: say so when the queue's archive would pass what its workers
    keep (their ``MAX_ARCHIVE_SIZE``, from their heartbeats; the default when no live worker says),
    since the workers then delete the oldest archived tasks for good."""
    archived = app.inspector.count(queue_name, "archived")
    kept = app.inspector.archive_kept(queue_name)
    limit, whose = (kept, "its workers keep at most") if kept else (
        DEFAULT_MAX_ARCHIVE_SIZE, "no live worker serves it to say how many it keeps; by default workers keep")
    if archived + count > limit:
        app.terminal.info(f"Queue {escape(queue_name)} would hold {human_count(archived + count)} archived task(s): "
                          f"{whose} {limit:,} (MAX_ARCHIVE_SIZE) and delete the oldest beyond it for good.")


def _bulk_command(bulk: BulkAction) -> click.Command:
    @click.command(bulk.name)
    @click.argument("queue_name", metavar="QUEUE")
    @click.argument("state", type=click.Choice(bulk.states), metavar="STATE")
    @click.option("--filter", "filter_text", metavar="FILTER", callback=not_empty,
                  help="Only the tasks matching this filter (as `task ls --filter`); found first, then acted on.")
    @click.option("--type", "type_name", metavar="TYPE", callback=not_empty, help="Only tasks of this type.")
    @click.option("--search", metavar="TEXT", callback=not_empty,
                  help="Only tasks whose id, payload or last error contains TEXT.")
    @click.option("--background", is_flag=True, help="Queue it as a bulk job for the workers and return at once.")
    @yes_option
    @json_option
    @click.pass_obj
    def command(app: App, queue_name: str, state: str, filter_text: str | None, type_name: str | None,
                search: str | None, background: bool, yes: bool) -> None:
        ins = app.inspector
        term = app.terminal
        filtered = bool(filter_text or type_name or search)
        ins.check_filter(type_name, search, filter_text)  # a usage error (exit 2), even with nothing to act on
        counted = ins.state_count(queue_name, state)
        count = counted.size
        if count == 0:
            if app.json:  # a finished job's fields, as a job that found nothing would have them
                term.json({"queue": queue_name, "state": state, "action": bulk.verb, "count": 0, "done": 0,
                           "skipped": 0, "status": "done"})
            else:
                term.info(f"no {state} tasks in queue {escape(queue_name)}: nothing to do")
            return
        if not yes:
            which = (f"every {state} task of queue {escape(queue_name)} that matches (among {human_count(count)})"
                     if filtered else f"{human_count(count)} {state} task(s) of queue {escape(queue_name)}")
            term.info(f"This will {bulk.verb} {which}.")
            if bulk.verb == "archive":
                archive_size_warning(app, queue_name, count)
            if not term.confirm("Continue?"):
                term.error("aborted: nothing was changed")
                raise click.exceptions.Exit(1)
        holder = None if background else new_holder()
        job = ins.start_bulk_job(bulk.verb, queue=queue_name, state=state, type=type_name, search=search,
                                 filter=filter_text, confirmed=counted, holder=holder)
        drive(app, job, holder=holder)

    allowed = ", ".join(bulk.states)
    command.help = (f"{bulk.summary}\n\n    STATE is one of: {allowed}. Shows how many tasks it will touch and asks "
                    f"first unless --yes. Runs as a bulk job: 500 tasks per Redis call, so even a million never "
                    f"block Redis, with a progress bar (Ctrl-C stops it after the chunk it is on), or with "
                    f"--background left to the workers (`adminctl bulk`). With --filter, --type or --search, "
                    f"it first finds the matching tasks, then acts on exactly those."
                    f"\n\n    \b\n    Examples:\n      adminctl task {bulk.name} default {bulk.states[-1]}"
                    f"\n      adminctl task {bulk.name} default {bulk.states[0]} --filter 'type:emails.send' --yes"
                    f"\n      adminctl task {bulk.name} default {bulk.states[0]} --yes --background --json")
    return command


for _bulk in BULK_ACTIONS:
    task.add_command(_bulk_command(_bulk))


__all__ = ["ACTIONS", "BULK_ACTIONS", "task"]
