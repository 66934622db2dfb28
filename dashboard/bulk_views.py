"""The dashboard's bulk jobs (``queuecore.core.bulkjobs``): an action on every task of a state, a
filter or a failure group runs as a job, driven by a thread of this process (a worker takes it up if
this process goes away); its panel shows the progress, live, with a Cancel button. The Bulk jobs page
lists the recent ones."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import redirect, render
from django_htmx.http import trigger_client_event

from .bulk import JOBS_LISTED
from .inspector import inspector_for
from .views import QUEUES_CHANGED, TASKS_CHANGED, HtmxHttpRequest, P, _base, _fragment, _partial, action, page


@page
def bulk_jobs(request: HtmxHttpRequest) -> HttpResponse:
    jobs = inspector_for(request).bulk_jobs(limit=JOBS_LISTED)
    return render(request, P + "bulk.html", _base(request, jobs=jobs, nav="bulk", listed=JOBS_LISTED))


@page
def bulk_job(request: HtmxHttpRequest, job_id: str) -> HttpResponse:
    job = inspector_for(request).bulk_job(job_id)  # BulkJobNotFound: a 404 (core_errors)
    if _fragment(request):  # its panel's refresh: when it has just finished, the lists refresh too
        response = _partial(request, "partials/_bulk_job.html", _base(request, job=job,
                                                                       strip=request.GET.get("strip") == "1"),
                            trigger=TASKS_CHANGED if job.finished else None)
        if job.finished:  # and every panel that refreshes itself (the failures, the queue's counts)
            trigger_client_event(response, QUEUES_CHANGED)
            trigger_client_event(response, "qc:refresh")
        return response
    return render(request, P + "bulk.html", _base(request, jobs=[job], nav="bulk", one=True))


@action
def bulk_cancel(request: HtmxHttpRequest, job_id: str) -> HttpResponse:
    job = inspector_for(request).cancel_bulk_job(job_id)
    if not _fragment(request):
        return redirect("queuecore_dashboard:bulk_job", job.id)
    return _partial(request, "partials/_bulk_job.html", _base(request, job=job, strip=request.GET.get("strip") == "1"))
