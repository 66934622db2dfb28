"""The dashboard's periodic tasks page: each entry live workers declare, with its schedule in words,
next and last fire, the last fire's outcome and the recent fires; pause, resume and run now (POST with
CSRF, operators only), each through the Inspector."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render

from queuecore.core.errors import PeriodicEntryNotFound

from .inspector import inspector_for
from .views import HtmxHttpRequest, P, _base, _error, _fragment, _partial, action, page

PERIODIC_CHANGED = "qc:periodic-changed"
VERBS = ("pause", "resume", "run")


def _context(request: HtmxHttpRequest) -> dict[str, object]:
    return _base(request, entries=inspector_for(request).periodic_entries(), nav="periodic")


@page
def periodic(request: HtmxHttpRequest) -> HttpResponse:
    context = _context(request)
    if _fragment(request):
        return _partial(request, "partials/_periodic_table.html", context)
    return render(request, P + "periodic.html", context)


@action
def periodic_action(request: HtmxHttpRequest, name: str, verb: str) -> HttpResponse:
    ins = inspector_for(request)
    try:
        if verb == "pause":
            ins.pause_periodic(name)
            messages.success(request, f"Periodic task {name} paused: its fires are skipped until it is resumed.")
        elif verb == "resume":
            ins.resume_periodic(name)
            messages.success(request, f"Periodic task {name} resumed from its next fire.")
        elif verb == "run":
            task_id = ins.run_periodic(name)
            messages.success(request, f"Periodic task {name} enqueued now as {task_id}.")
        else:
            return _error(request, 404, "Not found", f"no periodic action {verb!r}")
    except PeriodicEntryNotFound as exc:
        if not _fragment(request):
            return _error(request, 404, "Not found", str(exc))
        messages.error(request, f"{exc}.")
    if not _fragment(request):
        return redirect("queuecore_dashboard:periodic")
    return _partial(request, "partials/_periodic_table.html", _context(request), trigger=PERIODIC_CHANGED)
