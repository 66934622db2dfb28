"""The dashboard's actions on one worker process: Quiet and Stop, sent through Redis (the process
takes the command with its next heartbeat; ``Inspector.quiet_server``/``stop_server``), audited."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect

from queuecore.core.errors import ServerNotFound

from .inspector import inspector_for
from .views import HtmxHttpRequest, _base, _capacity, _error, _fragment, _partial, action

DONE = {"quiet": "go quiet", "stop": "stop"}


@action
def server_action(request: HtmxHttpRequest, server_id: str, verb: str) -> HttpResponse:
    if verb not in DONE:
        return _error(request, 404, "Not found", f"no server action {verb!r}")
    ins = inspector_for(request)
    try:
        if verb == "quiet":
            ins.quiet_server(server_id)
        else:
            ins.stop_server(server_id)
    except ServerNotFound as exc:
        if not _fragment(request):
            return _error(request, 404, "Not found", str(exc))
        messages.error(request, f"{exc}.")
    else:
        messages.success(request, f"Asked {server_id} to {DONE[verb]}; it acts at its next heartbeat.")
    if not _fragment(request):
        return redirect("queuecore_dashboard:servers")
    return _partial(request, "partials/_server_table.html", _base(request, **_capacity(ins.servers()), nav="servers"))
