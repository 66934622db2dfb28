"""The dashboard's "Edit the payload and run it" on a task page (POST with CSRF, operators only),
through ``Inspector.edit_and_run``."""

from __future__ import annotations

import json

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect

from queuecore.core.errors import InvalidPayload, InvalidTaskState, NoWorkerForTask

from .forms import PAYLOAD_TEXT_MAX
from .inspector import inspector_for
from .views import HtmxHttpRequest, action


@action
def task_edit(request: HtmxHttpRequest, qname: str, task_id: str) -> HttpResponse:
    text = request.POST.get("payload", "")
    try:
        if len(text) > PAYLOAD_TEXT_MAX:
            raise InvalidPayload(f"the payload text is over {PAYLOAD_TEXT_MAX:,} characters")
        try:
            payload = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise InvalidPayload(f"the payload is not valid JSON: {exc}") from None
        inspector_for(request).edit_and_run(qname, task_id, payload, force=request.POST.get("force") == "1")
    except (InvalidPayload, NoWorkerForTask, InvalidTaskState) as exc:
        messages.error(request, f"Nothing changed: {exc}")
    else:
        messages.success(request, f"Task {task_id} has its new payload and waits in pending.")
    return redirect("queuecore_dashboard:task", qname, task_id)
