"""Starting a bulk job from the dashboard and showing it: the job is driven by a thread of this
process (a worker takes it up if this process goes away); its panel shows its progress."""

from __future__ import annotations

import logging
import threading

from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string

from queuecore.core.bulkjobs import BulkJob, StateCount, new_holder
from queuecore.core.errors import BulkJobNotFound
from queuecore.core.inspector import Inspector

log = logging.getLogger("queuecore.dashboard")

JOBS_LISTED = 50
PANEL = "queuecore_dashboard/partials/_bulk_job.html"


def start_job(ins: Inspector, action: str, *, confirmed: StateCount | None = None, **scope: str | None) -> BulkJob:
    """Queue a bulk job (``Inspector.start_bulk_job``) and drive it from a thread of this process;
    returns it as queued."""
    holder = new_holder()  # holds the lease from the start: no worker takes the job up before the thread runs
    job = ins.start_bulk_job(action, confirmed=confirmed, holder=holder, **scope)

    def drive() -> None:
        try:
            ins.run_bulk_job(job.id, holder=holder)
        except Exception as exc:  # Redis away or full: the job stays open and a worker goes on with it
            log.warning("bulk job %s paused: %s; a worker takes it up once Redis answers", job.id, exc)

    threading.Thread(target=drive, name=f"queuecore-bulk-{job.id}", daemon=True).start()
    return job


def with_job_panel(request: HttpRequest, response: HttpResponse, job: BulkJob) -> HttpResponse:
    """``response`` with the job's panel put at the top of the page's bulk-job strip (out of band)."""
    panel = render_to_string(PANEL, {"job": job, "strip": True,
                                    "can_operate": getattr(request, "qc_can_operate", False)}, request)
    response.content += f'<div id="qc-bulk-jobs" hx-swap-oob="afterbegin">{panel}</div>'.encode()
    return response


def open_jobs(ins: Inspector) -> list[BulkJob]:
    """The queued and running jobs, for the strip at the top of every page: one read of the open set,
    empty nearly always (none when Redis fails: the page itself says what is wrong)."""
    jobs = []
    try:
        for job_id in ins.open_bulk_job_ids():
            try:
                jobs.append(ins.bulk_job(job_id))
            except BulkJobNotFound:  # finished and gone meanwhile
                continue
    except Exception:
        return []
    return jobs
