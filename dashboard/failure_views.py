"""The dashboard's Failures page: failed tasks (retry and archived) grouped by the fingerprint of
their last error (``queuecore.core.failures``), across queues or in one; run, archive or delete a
whole group (POST with CSRF, operators only) as a bulk job, through the Inspector."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render

from queuecore.core.errors import FailureGroupNotFound
from queuecore.core.failures import GROUP_ACTIONS

from .bulk import start_job, with_job_panel
from .inspector import inspector_for
from .views import HtmxHttpRequest, P, _base, _error, _fragment, _partial, action, page

TASKS_SHOWN = 5  # of each group, newest first


def _context(request: HtmxHttpRequest, qname: str | None) -> dict[str, object]:
    report = inspector_for(request).failure_groups(qname)
    return _base(request, report=report, rows=[(g, g.newest(TASKS_SHOWN)) for g in report.groups], qname=qname,
                 group_verbs=[("run", "Run"), ("archive", "Archive"), ("delete", "Delete")],
                 nav="failures" if qname is None else "queues")


@page
def failures(request: HtmxHttpRequest, qname: str | None = None) -> HttpResponse:
    context = _context(request, qname)
    if _fragment(request):
        return _partial(request, "partials/_failure_groups.html", context)
    return render(request, P + "failures.html", context)


@action
def failure_action(request: HtmxHttpRequest, key: str, verb: str, qname: str | None = None) -> HttpResponse:
    if verb not in GROUP_ACTIONS:
        return _error(request, 404, "Not found", f"no failure group action {verb!r}")
    job = None
    try:
        job = start_job(inspector_for(request), verb, queue=qname, group=key)
    except FailureGroupNotFound as exc:
        if not _fragment(request):
            return _error(request, 404, "Not found", f"{exc}: it may have been acted on already.")
        messages.error(request, f"{exc}: it may have been acted on already.")
    if not _fragment(request):
        if job is not None:
            return redirect("queuecore_dashboard:bulk_job", job.id)
        return redirect("queuecore_dashboard:failures") if qname is None else redirect(
            "queuecore_dashboard:queue_failures", qname)
    response = _partial(request, "partials/_failure_groups.html", _context(request, qname))
    return with_job_panel(request, response, job) if job is not None else response
