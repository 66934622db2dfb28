"""``adminctl bulk ls|show|cancel``: bulk jobs (an action on a whole state, a filter or a failure group),
and ``drive``, how ``task run-all|archive-all|delete-all`` and ``failures run|archive|delete`` carry one out."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import click
from rich import box
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from queuecore.core.bulkjobs import BulkJob

from ..app import App
from ..fmt import ago, escape, human_count, human_duration
from ..options import json_option

STATUS_STYLES = {"queued": "yellow", "running": "cyan", "done": "green", "cancelled": "yellow", "failed": "red"}


def drive(app: App, job: BulkJob, *, holder: str | None) -> BulkJob:
    """Carry ``job`` out here as ``holder`` (the driver it was made for, whose lease it holds) with a
    progress bar on stderr, or, with no holder, leave it to the workers (``--background``); prints the
    outcome (``--json``: the job) and returns it. Ctrl-C asks the job to stop: the chunk Redis is on
    is finished and counted, then the job ends ``cancelled`` (exit 130). A job that failed, or that
    another operator cancelled meanwhile, exits 1."""
    ins, term = app.inspector, app.terminal
    if holder is None:
        if app.json:
            term.json(job.to_dict())
        else:
            term.success(f"queued bulk job {job.id}: {escape(job.describe())}")
            term.info(f"a worker (runworker) carries it out within a second or so; follow it with "
                      f"`adminctl bulk show {job.id} --watch`, stop it with `adminctl bulk cancel {job.id}`")
        return job
    started = time.monotonic()
    interactive = not app.json and term.stderr_is_terminal
    interrupted = CtrlC()
    with _ctrl_c_sets(interrupted), Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=app.terminal.err, disable=not interactive, transient=True) as bar:
        shown = bar.add_task(escape(job.describe()), total=job.total)

        def update(now: BulkJob) -> None:
            if now.phase == "find":
                bar.update(shown, description=f"finding ({human_count(now.scanned)} looked at)", total=None,
                           completed=0)
            else:
                bar.update(shown, description=escape(now.describe()), total=now.total,
                           completed=now.done + now.skipped)

        job = ins.run_bulk_job(job.id, holder=holder, on_progress=update, stop=interrupted)
        if interrupted.is_set() and not job.finished:  # stopped between two chunks, the lease given up
            term.warning("cancelling: it stops after the chunk it is on...")
            ins.cancel_bulk_job(job.id)
            job = ins.run_bulk_job(job.id, holder=holder, on_progress=update)  # the same driver ends it
        if not job.finished:  # another driver holds it (a worker took it up): follow it
            job = _follow(app, job, interrupted)
    if app.json:
        term.json(job.to_dict())
    elif job.status == "failed":
        term.error(job.summary())
    else:
        say = term.success if job.status == "done" else term.warning
        say(f"{job.summary()} in {human_duration(time.monotonic() - started)} (bulk job {job.id})")
    if job.status == "failed":
        raise click.exceptions.Exit(1)
    if job.status == "cancelled":  # `delete-all ... --yes && next` must not go on: 130 for our Ctrl-C,
        raise click.exceptions.Exit(130 if interrupted.is_set() else 1)  # 1 for another operator's cancel
    return job


class CtrlC(threading.Event):
    """An Event that Ctrl-C sets without taking its lock: the handler only notes the signal (a list
    append), which ``is_set`` and ``wait`` see. A handler that called ``set()`` could deadlock, the main
    thread holding the Event's lock inside ``wait`` (while following a job) or a second Ctrl-C handled
    inside the first one's ``set()``."""

    def __init__(self) -> None:
        super().__init__()
        self.noted: list[int] = []

    def is_set(self) -> bool:
        return bool(self.noted) or super().is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Poll (a handler cannot wake a waiter) every 50 ms, up to ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            step = 0.05 if deadline is None else min(0.05, deadline - time.monotonic())
            if step <= 0:
                return False
            time.sleep(step)
        return True


@contextlib.contextmanager
def _ctrl_c_sets(event: CtrlC) -> Iterator[None]:
    """While in the block, Ctrl-C (SIGINT) sets ``event`` instead of raising ``KeyboardInterrupt`` at
    any point (between Redis acting on a chunk and the job counting it, say). Only the main thread
    can take the signal: elsewhere Ctrl-C is left as it is."""
    try:
        previous = signal.signal(signal.SIGINT, lambda signum, _frame: event.noted.append(signum))
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _follow(app: App, job: BulkJob, interrupted: threading.Event | None = None, interval: float = 0.5) -> BulkJob:
    """Wait for a job another driver carries out to finish (polling its record); ``interrupted`` (Ctrl-C
    while this command started the job) asks it to stop, once."""
    interrupted = interrupted or threading.Event()
    asked = False
    with app.terminal.status(f"bulk job {job.id} is carried out by {job.holder or 'a worker'}..."):
        while not job.finished:
            if asked:
                time.sleep(interval)
            elif interrupted.wait(interval):
                app.terminal.warning("cancelling: it stops after the chunk it is on...")
                app.inspector.cancel_bulk_job(job.id)
                asked = True
            job = app.inspector.bulk_job(job.id)
    return job


def jobs_table(jobs: list[BulkJob], now: float) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1), collapse_padding=True)
    table.add_column("Job", no_wrap=True)
    table.add_column("Status", no_wrap=True)
    table.add_column("What", overflow="fold", min_width=30)
    table.add_column("Progress", overflow="fold")
    table.add_column("By", overflow="fold")
    table.add_column("Started", no_wrap=True)
    for job in jobs:
        table.add_row(job.id, Text(job.status, style=STATUS_STYLES.get(job.status, "")), Text(escape(job.describe())),
                      job.progress_text() if not job.finished else job.summary(), Text(escape(job.actor)),
                      ago(job.created_at, now))
    return table


@click.group()
def bulk() -> None:
    """Bulk jobs: run, archive, delete or cancel every task of a state, a filter or a failure group.

    `adminctl task delete-all QUEUE STATE [--filter ...]` and `adminctl failures delete GROUP`
    start one and carry it out with a progress bar (Ctrl-C stops it), or with --background
    leave it to the workers; the dashboard's "all" actions start one too. Each job's progress
    is in Redis; one audit entry records its final count.

    \b
    Examples:
      adminctl bulk ls
      adminctl bulk show 3fa2c1d09e7b4a11 --watch
      adminctl bulk cancel 3fa2c1d09e7b4a11
    """


@bulk.command("ls")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True, help="Jobs to list.")
@json_option
@click.pass_obj
def bulk_ls(app: App, limit: int) -> None:
    """The recent bulk jobs, newest first (finished ones are kept a week).

    \b
    Examples:
      adminctl bulk ls
      adminctl bulk ls --limit 10 --json
    """
    jobs = app.inspector.bulk_jobs(limit)
    if app.json:
        app.terminal.json([job.to_dict() for job in jobs])
    elif not jobs:
        app.terminal.info("no bulk jobs in the last week")
    else:
        app.terminal.print(jobs_table(jobs, app.now()))


@bulk.command("show")
@click.argument("job_id", metavar="JOB")
@click.option("--watch", is_flag=True, help="Follow it until it finishes.")
@json_option
@click.pass_obj
def bulk_show(app: App, job_id: str, watch: bool) -> None:
    """One bulk job: what it does, who started it, how far it is.

    \b
    Examples:
      adminctl bulk show 3fa2c1d09e7b4a11
      adminctl bulk show 3fa2c1d09e7b4a11 --watch --json
    """
    job = app.inspector.bulk_job(job_id)
    if watch and not job.finished:
        job = _follow(app, job)
    if app.json:
        app.terminal.json(job.to_dict())
        return
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column(overflow="fold")
    now = app.now()
    rows: list[tuple[str, Any]] = [
        ("Job", job.id), ("What", job.describe()), ("Status", job.status), ("Progress", job.progress_text()),
        ("Done", human_count(job.done)), ("Skipped", human_count(job.skipped)), ("By", job.actor),
        ("Created", ago(job.created_at, now)),
        ("Finished", ago(job.finished_at, now) if job.finished_at else "-"),
    ]
    if job.error:
        rows.append(("Error", job.error))
    if job.cancel_requested and not job.finished:
        rows.append(("Cancel", "requested: it stops after the chunk it is on"))
    for label, value in rows:
        facts.add_row(label, Text(escape(str(value))))
    app.terminal.print(facts)


@bulk.command("cancel")
@click.argument("job_id", metavar="JOB")
@json_option
@click.pass_obj
def bulk_cancel(app: App, job_id: str) -> None:
    """Stop a bulk job after the chunk it is on; what it did stays done.

    \b
    Examples:
      adminctl bulk cancel 3fa2c1d09e7b4a11
      adminctl bulk cancel 3fa2c1d09e7b4a11 --json
    """
    job = app.inspector.cancel_bulk_job(job_id)
    if app.json:
        app.terminal.json(job.to_dict())
    elif job.finished and not job.cancel_requested:
        app.terminal.info(f"bulk job {job.id} had already finished: {job.summary()}")
    elif job.finished:
        app.terminal.success(f"bulk job {job.id} cancelled: {job.summary()}")
    else:
        app.terminal.success(f"asked bulk job {job.id} to stop; it ends after the chunk it is on")


__all__ = ["bulk", "drive"]
