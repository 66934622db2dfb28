"""The dashboard's "Enqueue a task" (operators only): a task of a type live workers handle, checked as
``adminctl enqueue`` checks it (``queuecore.core.operator_enqueue``), POST with CSRF."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache

from queuecore.conf import get_config
from queuecore.core.errors import ConfigurationError, DuplicateTask, InvalidPayload, NoWorkerForTask, TaskIdConflict
from queuecore.core.operator_enqueue import enqueue_checked

from .access import OPERATE, dashboard_access
from .forms import PAYLOAD_TEXT_MAX
from .inspector import inspector_for, shared_client
from .views import HtmxHttpRequest, P, _base, action, content_security_policy, core_errors


def _live_types(request: HtmxHttpRequest) -> list[str]:
    types: set[str] = set()
    for server in inspector_for(request).servers(task_types=True):
        types.update(server.task_types or {})
    return sorted(types)


@content_security_policy
@never_cache  # as every other page: it holds the session's CSRF token
@dashboard_access(OPERATE)
@core_errors
def enqueue_form(request: HtmxHttpRequest) -> HttpResponse:
    """The form (GET), for operators."""
    values = {"type": request.GET.get("type", ""), "queue": request.GET.get("queue", "default"), "payload": "{}",
              "process_in": ""}
    return render(request, P + "enqueue.html", _base(request, values=values, live_types=_live_types(request),
                                                       nav="queues"))


@action
def enqueue_task(request: HtmxHttpRequest) -> HttpResponse:
    post = request.POST
    values: dict[str, Any] = {k: post.get(k, "") for k in ("type", "queue", "payload", "process_in")}
    options: dict[str, Any] = {"queue": values["queue"].strip() or "default"}
    try:
        if len(values["payload"]) > PAYLOAD_TEXT_MAX:
            raise InvalidPayload(f"the payload text is over {PAYLOAD_TEXT_MAX:,} characters")
        try:
            payload = json.loads(values["payload"] or "{}")
        except (ValueError, RecursionError) as exc:
            raise InvalidPayload(f"the payload is not valid JSON: {exc}") from None
        if not isinstance(payload, dict):
            raise InvalidPayload("the payload must be a JSON object of argument names")
        if values["process_in"].strip():
            try:
                options["process_in"] = float(values["process_in"])
            except ValueError:
                raise ConfigurationError(f"process in {values['process_in']!r} is not a number of seconds") from None
        done = enqueue_checked(shared_client(get_config().connection), inspector_for(request),
                               values["type"].strip(), payload, force=post.get("force") == "1",
                               refused_hint=" (tick \u201cEnqueue it even so\u201d to enqueue it anyway)", **options)
    except (ConfigurationError, InvalidPayload, NoWorkerForTask, DuplicateTask, TaskIdConflict) as exc:
        messages.error(request, f"Nothing was enqueued: {exc}")
        return render(request, P + "enqueue.html", _base(request, values=values, live_types=_live_types(request),
                                                           nav="queues"), status=400)
    note = f" Warning: {done.forced}." if done.forced else "".join(f" Warning: {w}." for w in done.warnings)
    messages.success(request, f"Enqueued {done.task.type} in queue {done.task.queue} as {done.task.id}.{note}")
    return redirect("queuecore_dashboard:task", done.task.queue, done.task.id)
