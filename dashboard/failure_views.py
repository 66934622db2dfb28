"""The dashboard's Failures page: failed tasks (retry and archived) grouped by the fingerprint of
their last error (``queuecore.core.failures``), across queues or in one; run, archive or delete a
whole group (POST with CSRF, operators only) as a bulk job, through the Inspector."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render

from queuecore.core.errors import ConfigurationError, FailureGroupNotFound
from queuecore.core.failures import GROUP_ACTIONS, FailureGroup

from .bulk import start_job, with_job_panel
from .inspector import inspector_for
from .views import HtmxHttpRequest, P, _base, _error, _fragment, _partial, action, page

TASKS_SHOWN = 5  # of each group, newest first


def _verbs(group: FailureGroup) -> list[tuple[str, str, int]]:
    """The actions a group can take, each with how many of its tasks it acts on: a group all archived
    offers no Archive."""
    counted = ((verb, label, group.acted_on(verb)) for verb, label in (("run", "Run"), ("archive", "Archive"),
                                                                      ("delete", "Delete")))
    return [(verb, label, n) for verb, label, n in counted if n]


def _context(request: HtmxHttpRequest, qname: str | None) -> dict[str, object]:
    report = inspector_for(request).failure_groups(qname)
    return _base(request, report=report, rows=[(g, g.newest(TASKS_SHOWN), _verbs(g)) for g in report.groups],
                 qname=qname, nav="failures" if qname is None else "queues")


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
    except ConfigurationError as exc:  # nothing of the group to act on (archive a group all archived)
        if not _fragment(request):
            return _error(request, 409, "Nothing to do", f"{exc}.")
        messages.error(request, f"Nothing done: {exc}.")
    if not _fragment(request):
        if job is not None:
            return redirect("queuecore_dashboard:bulk_job", job.id)
        return redirect("queuecore_dashboard:failures") if qname is None else redirect(
            "queuecore_dashboard:queue_failures", qname)
    response = _partial(request, "partials/_failure_groups.html", _context(request, qname))
    return with_job_panel(request, response, job) if job is not None else response
