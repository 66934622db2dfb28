"""The dashboard's export of a task list: the tasks of a queue in a state that match the list's
filter (type, search) in its order, streamed as JSON Lines or CSV (``queuecore.core.export``)."""

from __future__ import annotations

import re

from django.http import HttpResponse, StreamingHttpResponse

from queuecore.core import export

from .forms import TaskFilterForm
from .inspector import inspector_for
from .views import HtmxHttpRequest, _error, page

CONTENT_TYPES = {"jsonl": "application/x-ndjson; charset=utf-8", "csv": "text/csv; charset=utf-8"}


@page
def export_tasks(request: HtmxHttpRequest, qname: str, state: str, fmt: str) -> HttpResponse:
    if fmt not in export.FORMATS:
        return _error(request, 404, "Not found", f"no export format {fmt!r}: {', '.join(export.FORMATS)}")
    form = TaskFilterForm(request.GET)
    type_name, search, _page = form.values()
    ins = inspector_for(request)
    ins.queue_info(qname)  # a missing queue is a 404 page now, not an error inside the stream
    tasks = ins.iter_tasks(qname, state, type=type_name, search=search, order=form.order())
    response = StreamingHttpResponse(export.lines(fmt, tasks), content_type=CONTENT_TYPES[fmt])
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", qname)  # a queue name may hold quotes, non-ASCII...
    response["Content-Disposition"] = f'attachment; filename="{safe}-{state}.{fmt}"'
    return response
