"""The dashboard's task-type pages: a queue's task types with their last hour, and one type's
throughput, failure rate and duration percentiles (estimates) over 1 h, 24 h or 72 h, its limits and
their use, and its failures grouped by error; each through the Inspector."""

from __future__ import annotations

from datetime import timedelta

from django.http import HttpResponse
from django.shortcuts import render

from queuecore.core.errors import TaskTypeNotFound
from queuecore.core.typereport import WINDOWS

from .inspector import inspector_for
from .views import HtmxHttpRequest, P, _base, _error, _fragment, _partial, page


def _window(request: HtmxHttpRequest) -> str:
    name = request.GET.get("window", "1h")
    return name if name in WINDOWS else "1h"


@page
def task_types(request: HtmxHttpRequest, qname: str) -> HttpResponse:
    ins = inspector_for(request)
    window = _window(request)
    rows = ins.type_reports(qname, timedelta(seconds=WINDOWS[window]))
    context = _base(request, qname=qname, rows=rows, window=window, windows=list(WINDOWS), nav="queues")
    if _fragment(request):
        return _partial(request, "partials/_task_types.html", context)
    return render(request, P + "task_types.html", context)


@page
def task_type(request: HtmxHttpRequest, qname: str, type_name: str) -> HttpResponse:
    ins = inspector_for(request)
    window = _window(request)
    try:
        report = ins.type_report(qname, type_name, timedelta(seconds=WINDOWS[window]))
    except TaskTypeNotFound as exc:
        return _error(request, 404, "Not found", str(exc))
    context = _base(request, qname=qname, type_name=type_name, report=report, window=window,
                    windows=list(WINDOWS), groups=[(g, g.newest(5)) for g in report.failures.groups[:10]],
                    nav="queues")
    if _fragment(request):
        return _partial(request, "partials/_task_type.html", context)
    return render(request, P + "task_type.html", context)
