"""The dashboard's export of a task list: the tasks of a queue in a state that match the list's
filter (type, search) in its order, streamed as JSON Lines or CSV (``queuecore.core.export``)."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator

from django.http import HttpResponse, StreamingHttpResponse

from queuecore.core import export
from queuecore.core.errors import QueuecoreError

from .forms import TaskFilterForm
from .inspector import inspector_for
from .views import HtmxHttpRequest, _error, page

CONTENT_TYPES = {"jsonl": "application/x-ndjson; charset=utf-8", "csv": "text/csv; charset=utf-8"}
logger = logging.getLogger("queuecore.dashboard")


def _ended(fmt: str, lines: Iterator[str], qname: str, state: str) -> Iterator[str]:
    """``lines``, then, should Redis fail once the response has begun (too late for an error page),
    a last line saying the export is incomplete; the error is then raised again, so that a server
    that can (chunked transfer) ends the download as failed."""
    try:
        yield from lines
    except QueuecoreError as exc:
        logger.error("export of queue %s (%s) cut short: %s", qname, state, exc)
        yield export.incomplete_line(fmt, exc)
        raise

@page
def export_tasks(request: HtmxHttpRequest, qname: str, state: str, fmt: str) -> HttpResponse:
    if fmt not in export.FORMATS:
        return _error(request, 404, "Not found", f"no export format {fmt!r}: {', '.join(export.FORMATS)}")
    form = TaskFilterForm(request.GET)
    type_name, search, _page = form.values()
    ins = inspector_for(request)
    ins.queue_info(qname)  # a missing queue is a 404 page now, not an error inside the stream
    tasks = ins.iter_tasks(qname, state, type=type_name, search=search, order=form.order())
    response = StreamingHttpResponse(_ended(fmt, export.lines(fmt, tasks), qname, state),
                                     content_type=CONTENT_TYPES[fmt])
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", qname)  # a queue name may hold quotes, non-ASCII...
    response["Content-Disposition"] = f'attachment; filename="{safe}-{state}.{fmt}"'
    return response
