"""The dashboard's views: authorise, call the Inspector, render.

Pages render whole templates that ``{% include %}`` their partials; htmx requests (polls, filters,
actions) get just the partial. Actions are POSTs with CSRF: htmx gets the updated fragment and a
``qc:tasks-changed``/``qc:queues-changed`` event, other clients a redirect and a message.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HttpResponseClientRedirect, trigger_client_event
from django_htmx.middleware import HtmxDetails

from queuecore.conf import get_config
from queuecore.core.clock import to_ms
from queuecore.core.config import redact_url
from queuecore.core.errors import (
    BrokerError,
    ConfigurationError,
    InvalidPayload,
    InvalidTaskState,
    PageNotFound,
    QueuecoreError,
    QueueNotEmpty,
    QueueNotFound,
    RedisFull,
    RedisUnavailable,
    TaskNotFound,
    TooManyBulkJobs,
    WrongKeyType,
)
from queuecore.core.inspector import AUDIT_MAX_ENTRIES, FILTER_SCAN_LIMIT, Inspector, default_order
from queuecore.core.states import FINAL_STATES, STATES, actions_for

from .access import OPERATE, dashboard_access, set_error_banner
from .bulk import open_jobs, start_job, with_job_panel
from .charts import RANGES, build_chart, sum_series
from .forms import ACTION_DONE, TaskActionForm, TaskFilterForm
from .inspector import inspector_for, redis_info_for
from .settings_check import dashboard_settings
from .templatetags.queuecore_dashboard import qc_duration

P = "queuecore_dashboard/"


class HtmxHttpRequest(HttpRequest):
    """A request that went through ``HtmxMiddleware`` (for type checkers)."""

    htmx: HtmxDetails
    qc_redis_unavailable: bool  # set when the view found Redis unreachable (core_errors)


AUDIT_PAGE_SIZE = 50
QUEUE_PAGE_SIZE = 50  # queues per page of the overview's queue table
TASKS_CHANGED = "qc:tasks-changed"
QUEUES_CHANGED = "qc:queues-changed"

# The Content-Security-Policy of the dashboard's responses: everything from this origin, nothing
# inline, no eval (htmx runs with allowEval off; polling and confirmations live in dashboard.js).
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; object-src 'none'; "
       "base-uri 'self'; form-action 'self'; frame-ancestors 'self'")


# -- helpers ----------------------------------------------------------------------------------------


def _fragment(request: HtmxHttpRequest) -> bool:
    """An htmx request that wants a partial (not a history restore, which needs the whole page)."""
    htmx = getattr(request, "htmx", None)
    return htmx is not None and bool(htmx) and not htmx.history_restore_request


def _base(request: HtmxHttpRequest, **context: Any) -> dict[str, Any]:
    return {"request": request, "qc_messages": messages.get_messages(request),
            "poll": dashboard_settings().poll_interval, "can_operate": getattr(request, "qc_can_operate", False),
            "states": STATES,
            "qc_open_bulk_jobs": functools.partial(_open_bulk_jobs, request), **context}


def _open_bulk_jobs(request: HtmxHttpRequest) -> list[Any]:
    """The open bulk jobs, for the strip on every page (read only when a whole page renders); none
    when the view found Redis unreachable: reading them would wait out a second socket timeout."""
    if getattr(request, "qc_redis_unavailable", False):
        return []
    return open_jobs(inspector_for(request))


_CSRF_VALUE = re.compile(r'name="csrfmiddlewaretoken" value="[^"]*"')


def _partial(request: HtmxHttpRequest, template: str, context: dict[str, Any], *, trigger: str | None = None,
             status: int = 200) -> HttpResponse:
    """Render a fragment, with any pending messages swapped in out of band, and a client event.

    A polling fragment carries ``data-qc-hash`` (a digest of its HTML); a refresh that sends the hash
    of what it shows (``X-QC-Have``) and finds nothing changed gets ``204 No Content``, which htmx
    leaves in place: an idle dashboard re-downloads nothing."""
    html = render_to_string(P + template, context, request)
    root, end, rest = html.partition(">")  # the fragment's own start tag: text in it is escaped, no ">"
    if "data-qc-poll=" in root:  # only there: the same words in a payload or an error are the task's text
        stable = _CSRF_VALUE.sub("", html)  # the CSRF token is masked afresh in every render
        digest = hashlib.blake2b(stable.encode(), digest_size=8).hexdigest()
        if (status == 200 and not trigger and request.headers.get("X-QC-Have") == digest
                and not len(messages.get_messages(request))):
            return HttpResponse(status=204)
        html = root.replace("data-qc-poll=", f'data-qc-hash="{digest}" data-qc-poll=', 1) + end + rest
    pending = list(messages.get_messages(request))
    if pending:
        html += render_to_string(P + "partials/_messages.html", {"qc_messages": pending, "oob": True}, request)
    response = HttpResponse(html, status=status)
    if trigger:
        trigger_client_event(response, trigger)
    return response


def _error(request: HtmxHttpRequest, status: int, title: str, message: str, detail: str = "",
           banner: str = "") -> HttpResponse:
    """The error page; its ``X-Qc-Error`` header is the line dashboard.js shows in its banner when an
    htmx request (a refresh, an action) gets this page (``banner``, else the title)."""
    response = render(request, P + "error.html", _base(request, status=status, title=title, message=message,
                                                        detail=detail), status=status)
    set_error_banner(response, banner or title)
    return response


def core_errors(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Map the core's errors to pages, saying what happened: 404 for a missing queue, task, page, bulk
    job or anything else looked up; 409 when as many bulk jobs as allowed are open already, and for any
    other refusal of the core; 400 for a bad request; 503 when Redis is unreachable or full (both pass);
    500 for a key of the wrong type (corrupt data, named: it stays until someone repairs it) or another
    refusal of Redis. htmx requests get the reason in the banner."""

    @functools.wraps(view)
    def wrapper(request: HtmxHttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            return view(request, *args, **kwargs)
        except PageNotFound as exc:
            return _error(request, 404, "No such page", str(exc), banner=f"No such page: {exc}")
        except TooManyBulkJobs as exc:
            return _error(request, 409, "Too many bulk jobs", f"{exc}. Nothing was started.",
                          banner=f"Too many bulk jobs: {exc}. Nothing was started.")
        except RedisUnavailable as exc:
            request.qc_redis_unavailable = True  # the page's bulk-job strip does not wait on Redis again
            return _error(request, 503, "Redis is unreachable",
                          "The dashboard cannot reach Redis right now. Workers keep retrying on their own; "
                          "this page will work again once Redis answers.", detail=str(exc),
                          banner="Redis is unreachable. The figures below are stale; retrying...")
        except RedisFull as exc:
            return _error(request, 503, "Redis is full",
                          "Redis has reached its maxmemory limit and refuses writes, so this action did nothing. "
                          "Make room: delete archived or completed tasks you no longer need (deleting works "
                          "while Redis is full), shorten their retention, or raise maxmemory.", detail=str(exc),
                          banner="Redis is full (maxmemory): that did nothing. Make room: delete archived or "
                                 "completed tasks, shorten retention, or raise maxmemory.")
        except WrongKeyType as exc:
            what = f"the task {exc.task_id}" if exc.task_id else "this page"
            key = f" Key {exc.key} holds data of the wrong type." if exc.key else ""
            return _error(request, 500, "Corrupt data in Redis",
                          f"Redis holds data the dashboard cannot read for {what}.{key} Nothing was changed. "
                          "Look at the key with redis-cli (TYPE, DUMP); if another program wrote it, move that "
                          "program to another key prefix; if it is a damaged task, delete the key.",
                          detail=str(exc), banner=f"Corrupt data in Redis: {exc}")
        except BrokerError as exc:
            return _error(request, 500, "Redis refused the operation",
                          "Redis answered but refused what the dashboard asked (an ACL, a cluster refusal or "
                          "a limit). The detail below is Redis's own message.", detail=str(exc),
                          banner=f"Redis refused the operation: {exc}")
        except (ConfigurationError, InvalidPayload) as exc:
            return _error(request, 400, "Bad request", str(exc), banner=f"Bad request: {exc}")
        except QueuecoreError as exc:
            if isinstance(exc, LookupError):  # a queue, task, bulk job, task type ... that is not there
                return _error(request, 404, "Not found", str(exc), banner=f"Not found: {exc}")
            # what no view expected: a task whose data cannot be read, a task id taken meanwhile ...
            return _error(request, 409, "Refused", f"{exc}. Nothing was changed.",
                          banner=f"Refused: {exc}. Nothing was changed.")

    return wrapper


# Host middlewares that send a Content-Security-Policy on the way out, unless the response has one.
DJANGO_CSP_MIDDLEWARE = "django.middleware.csp.ContentSecurityPolicyMiddleware"  # Django 6; with SECURE_CSP
DJANGO_CSP_PACKAGE_MIDDLEWARE = "csp.middleware.CSPMiddleware"  # django-csp


def host_sends_a_policy() -> bool:
    """The host site sends a Content-Security-Policy of its own from a middleware (Django's, with
    ``SECURE_CSP`` set, or django-csp's). Those leave alone a response that has one, so the
    dashboard's would have replaced the host's (its ``frame-ancestors``, its nonces)."""
    middleware = getattr(settings, "MIDDLEWARE", None) or ()
    if DJANGO_CSP_PACKAGE_MIDDLEWARE in middleware:
        return True
    return DJANGO_CSP_MIDDLEWARE in middleware and bool(getattr(settings, "SECURE_CSP", None))


def content_security_policy(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Send ``CSP`` with the view's response, unless the response already has a policy (a host's view
    decorator set one: it stays) or the host's own middleware sends one (``host_sends_a_policy``); the
    dashboard works under ``default-src 'self'`` (no inline code, no string evaluation)."""

    @functools.wraps(view)
    def wrapper(request: HtmxHttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response = view(request, *args, **kwargs)
        if "Content-Security-Policy" not in response and not host_sends_a_policy():
            response["Content-Security-Policy"] = CSP
        return response

    return wrapper


def page(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """A read-only dashboard view: never cached, varies on HX-Request, viewers only."""
    return content_security_policy(never_cache(vary_on_headers("HX-Request")(dashboard_access()(core_errors(view)))))


def action(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """An operator action: POST only (CSRF-checked by the middleware), operators only."""
    return content_security_policy(require_POST(never_cache(dashboard_access(OPERATE)(core_errors(view)))))


def _totals(queues: list[Any]) -> dict[str, Any]:
    totals = {state: sum(getattr(q, state) for q in queues) for state in STATES}
    processed = sum(q.processed_today for q in queues)
    failed = sum(q.failed_today for q in queues)
    return {"by_state": totals, "processed_today": processed, "failed_today": failed,
            "error_rate": failed / processed if processed else 0.0, "size": sum(q.size for q in queues),
            "paused": sum(1 for q in queues if q.paused)}


def _capacity(servers: list[Any]) -> dict[str, Any]:
    """Busy slots (handlers running, never more than each server's concurrency) of all slots, and the
    tasks fetched ahead that wait for a slot, counted apart."""
    busy, capacity = sum(s.active_count for s in servers), sum(s.concurrency for s in servers)
    return {"servers": servers, "busy": busy, "capacity": capacity, "utilisation": busy / capacity if capacity else 0,
            "waiting": sum(s.waiting_count for s in servers)}


def _chart(ins: Inspector, range_name: str, queue: str | None = None) -> dict[str, Any]:
    """The chart of processed/failed for one queue (or all summed), with its URLs for htmx."""
    if queue:
        series = [_history(ins, queue, range_name, ins.clock.now())]
    else:  # every queue: one removed since they were listed is left out, not a 404 for the whole chart
        series = []
        until = ins.clock.now()  # one reading for every queue: at a minute's edge their buckets still line up
        for name in ins.queues():
            try:
                series.append(_history(ins, name, range_name, until))
            except QueueNotFound:
                continue
    base = reverse("queuecore_dashboard:chart")

    def url(key: str) -> str:
        return f"{base}?{urlencode({'range': key, **({'queue': queue} if queue else {})})}"

    return {"chart": build_chart(sum_series(series), range_name), "chart_url": url(range_name),
            "chart_ranges": [(key, label, url(key), key == range_name) for key, label in RANGES.items()]}


def _history(ins: Inspector, queue: str, range_name: str, until: float) -> Any:
    if range_name == "month":
        return ins.history(queue, days=30, until=until)
    return ins.minute_history(queue, minutes=60, until=until)


def _state_url(qname: str, state: str, **query: Any) -> str:
    url = reverse("queuecore_dashboard:queue_state", args=[qname, state])
    query = {k: v for k, v in query.items() if v not in (None, "", 1)}
    return f"{url}?{urlencode(query)}" if query else url


def _task_list(request: HtmxHttpRequest, ins: Inspector, qname: str, state: str, data: Any, *,
               strict: bool = False) -> dict[str, Any]:
    """One page of a queue's tasks in ``state``, filtered by ``data`` (``type``, ``search``, ``page``).

    ``strict`` (a page opened by its URL): a page that is not a number or lies past the end is a 404
    ("no such page"). Otherwise (polls, actions: the list shrank under an open page) a page past the
    end renders the table's "past the end" notice."""
    form = TaskFilterForm(data)
    type_name, search, number = form.values()
    sort = form.order()
    if strict:
        number = form.checked_page()
    counted_at = ins.clock.now()  # before the count the "All" button's confirmation shows (bulk jobs)
    tasks = ins.list_tasks(qname, state, number, dashboard_settings().page_size, type=type_name,
                           search=search, order=sort)
    if strict and number > tasks.pages:
        raise PageNotFound(f"no such page: page {number:,} is past the end ({tasks.pages:,} page(s))")

    def url(page_number: int | None) -> str | None:
        return _state_url(qname, state, type=type_name, search=search, sort=sort,
                          page=page_number) if page_number else None

    other = "oldest" if tasks.order == "newest" else "newest"
    filtered = bool(type_name or search)
    every = tasks.matched if filtered else tasks.total  # what "all" acts on (found again when it acts)
    at_least = filtered and not tasks.scanned_all  # the scan stopped at its limit: more may match
    all_label = (f"All matches (at least {every or 0:,})" if at_least else
                 f"All {every or 0:,} match{'es' if every != 1 else ''}" if filtered else f"All {every:,}")
    return _base(request, qname=qname, state=state, tasks=tasks, type_filter=type_name or "", search=search or "",
                 sort=sort or "", order=tasks.order, default_order=default_order(state),
                 sort_toggle_url=_state_url(qname, state, type=type_name, search=search,
                                            sort=None if other == default_order(state) else other),
                 sort_toggle_to=other, unsearched=tasks.total - (tasks.scanned or 0),
                 filtered=filtered, actions=actions_for(state), scan_limit=FILTER_SCAN_LIMIT, all_label=all_label,
                 counted=every or 0, counted_at_ms=to_ms(counted_at),
                 bulk_buttons=_bulk_buttons(qname, state, every or 0, type_name, search, at_least,
                                            _archive_room(ins, qname, state)),
                 table_url=url(number), first_url=url(1), last_url=url(tasks.pages),
                 prev_url=url(number - 1 if number > 1 else None),
                 next_url=url(number + 1 if number < tasks.pages else None),
                 first_url_unfiltered=_state_url(qname, state, sort=sort),
                 export_query=urlencode({k: v for k, v in (("type", type_name), ("search", search), ("sort", sort))
                                         if v}),
                 filter_terms=_filter_terms(tasks.tasks))


def _filter_terms(tasks: list[Any], limit: int = 50) -> list[str]:
    """What the filter box suggests from the tasks shown: ``type:<type>`` of each, and ``payload.<path>:``
    of their payload keys (and of nested objects' keys, one level down)."""
    types = {f"type:{info.type}" for info in tasks}
    keys: set[str] = set()
    for info in tasks:
        for key, value in info.payload.items():
            keys.add(f"payload.{key}:")
            if isinstance(value, dict):
                keys.update(f"payload.{key}.{inner}:" for inner in value)
    return sorted(types)[:limit] + sorted(keys)[:limit]


def _archive_room(ins: Inspector, qname: str, state: str) -> tuple[int, int]:
    """(tasks archived in ``qname``, how many its workers keep: the smallest ``MAX_ARCHIVE_SIZE`` their
    heartbeats give, else the site's) when the list offers to archive, else (0, 0)."""
    if "archive" not in actions_for(state):
        return 0, 0
    keep = ins.archive_kept(qname)
    if keep is None:
        try:
            keep = get_config().worker_config().max_archive_size
        except ConfigurationError:  # a bad setting is the checks' to report; say nothing here
            return 0, 0
    return ins.count(qname, "archived"), keep


BULK_LABELS = {"run": "Run now", "archive": "Archive", "delete": "Delete", "cancel": "Cancel"}
BULK_TITLES = {"archive": "Archive (kill): the tasks will not run until someone runs them again",
               "cancel": "Stop the running tasks; they are archived as cancelled"}


def _bulk_buttons(qname: str, state: str, every: int, type_name: str | None,
                  search: str | None, at_least: bool = False, archive: tuple[int, int] = (0, 0)
                  ) -> list[dict[str, Any]]:
    """The bulk action buttons of a task list, each with the questions dashboard.js asks before it
    acts: for "all" (with the count the page shows, "at least" when the filter's scan stopped at its
    limit, and the filter; the server finds the tasks again when it acts) and for the ticked tasks
    (``{n}``: how many). Running ticked tasks is not asked. ``archive``: (tasks archived in the queue
    now, how many the workers keep), to say when archiving all would pass that size."""
    matching = []
    if type_name:
        matching.append(f"of type “{type_name}”")
    if search:
        matching.append(f"containing “{search}”")
    scope = f" {' and '.join(matching)}" if matching else ""
    buttons = []
    for verb in actions_for(state):
        word = "Run" if verb == "run" else BULK_LABELS[verb]
        noun = "task" if every == 1 else "tasks"
        archived, keep = archive
        over = archived + every - keep if verb == "archive" and keep else 0
        oldest = "oldest archived task" if over == 1 else f"oldest {over:,} archived tasks"
        beyond = (f" The archive keeps {keep:,} tasks (MAX_ARCHIVE_SIZE): the workers will then delete the "
                  f"{oldest} for good." if over > 0 else "")
        buttons.append({
            "verb": verb, "label": BULK_LABELS[verb], "title": BULK_TITLES.get(verb, ""),
            "confirm_all": (f"{word} all {state} tasks{scope} in queue {qname}: at least {every:,}, maybe more "
                            f"(only the first {FILTER_SCAN_LIMIT:,} were searched for this count)?{beyond}"
                            if at_least else f"{word} all {every:,} {state} {noun}{scope} in queue {qname}?{beyond}"),
            "confirm_some": "" if verb == "run" else f"{word} {{n}} selected {state} task(s) in queue {qname}?",
        })
    return buttons


# -- overview ---------------------------------------------------------------------------------------


@page
def overview(request: HtmxHttpRequest) -> HttpResponse:
    ins = inspector_for(request)
    queues = ins.all_queue_info()
    return render(request, P + "overview.html", _base(
        request, queues=queues, totals=_totals(queues), **_queue_page(request, queues, request.GET),
        **_capacity(ins.servers()),
        **_chart(ins, _range(request)), audit=ins.audit_log(limit=6), limits=ins.limits(), **_alerts(ins),
        nav="overview"))


def _alerts(ins: Inspector) -> dict[str, Any]:
    active, pending = ins.alerts_and_pending()
    return {"alerts": active, "pending_alerts": pending}


def _queue_page(request: HtmxHttpRequest, queues: list[Any], data: Any) -> dict[str, Any]:
    """One page (``QUEUE_PAGE_SIZE``) of the overview's queue table, filtered by name (``q``: a part of
    the name, any case) and paged by ``qpage``: with hundreds of queues the page and each of its
    refreshes carry 50 rows, not all of them."""
    name = str(data.get("q", "")).strip()[:200]
    try:
        number = max(1, int(data.get("qpage", 1)))
    except (TypeError, ValueError):
        number = 1
    shown = [q for q in queues if name.lower() in q.name.lower()] if name else queues
    pages = max(1, -(-len(shown) // QUEUE_PAGE_SIZE))
    number = min(number, pages)
    base = reverse("queuecore_dashboard:overview_queues")
    overview_url = reverse("queuecore_dashboard:overview")

    def query(page_number: int) -> str:
        params = {k: v for k, v in (("q", name), ("qpage", page_number)) if v and v != 1}
        return f"?{urlencode(params)}" if params else ""

    def links(page_number: int | None) -> tuple[str, str] | None:
        return (overview_url + query(page_number), base + query(page_number)) if page_number else None

    return {"queue_rows": shown[(number - 1) * QUEUE_PAGE_SIZE: number * QUEUE_PAGE_SIZE], "queue_filter": name,
            "queue_matches": len(shown), "queue_page": number, "queue_pages": pages,
            "queues_url": base + query(number), "queues_here_url": overview_url + query(number),
            "queue_prev": links(number - 1 if number > 1 else None),
            "queue_next": links(number + 1 if number < pages else None)}


@page
def overview_stats(request: HtmxHttpRequest) -> HttpResponse:
    ins = inspector_for(request)
    queues = ins.all_queue_info()
    return _partial(request, "partials/_stats_cards.html",
                    _base(request, queues=queues, totals=_totals(queues), **_capacity(ins.servers())))


@page
def overview_queues(request: HtmxHttpRequest) -> HttpResponse:
    queues = inspector_for(request).all_queue_info()
    shown = _queue_page(request, queues, request.GET)
    response = _partial(request, "partials/_queue_table.html", _base(request, queues=queues, **shown))
    if request.htmx.trigger != "qc-queue-table":  # the filter, its Clear link or a pager link, not a refresh:
        response["HX-Push-Url"] = shown["queues_here_url"]  # the address says what is shown (reload, Back)
    return response


@page
def overview_limits(request: HtmxHttpRequest) -> HttpResponse:
    return _partial(request, "partials/_limits_table.html", _base(request, limits=inspector_for(request).limits()))


@page
def overview_alerts(request: HtmxHttpRequest) -> HttpResponse:
    return _partial(request, "partials/_alerts.html", _base(request, **_alerts(inspector_for(request))))


@page
def overview_activity(request: HtmxHttpRequest) -> HttpResponse:
    """Recent operator actions: refreshed after every action (the qc:*-changed events) and by polling."""
    return _partial(request, "partials/_activity.html", _base(request, audit=inspector_for(request).audit_log(limit=6)))


@page
def chart(request: HtmxHttpRequest) -> HttpResponse:
    queue = request.GET.get("queue") or None
    context = _chart(inspector_for(request), _range(request), queue)
    return _partial(request, "partials/_chart.html", _base(request, **context))


def _range(request: HtmxHttpRequest) -> str:
    return request.GET["range"] if request.GET.get("range") in RANGES else "hour"


# -- queues -----------------------------------------------------------------------------------------


@page
def queue_redirect(request: HtmxHttpRequest, qname: str) -> HttpResponse:
    inspector_for(request).queue_info(qname)  # 404 for an unknown queue
    return redirect("queuecore_dashboard:queue_state", qname, "pending")


@page
def queue_state(request: HtmxHttpRequest, qname: str, state: str) -> HttpResponse:
    ins = inspector_for(request)
    context = _task_list(request, ins, qname, state, request.GET, strict=not _fragment(request))  # 404s
    if _fragment(request):
        return _partial(request, "partials/_task_table.html", context)
    context.update(info=ins.queue_info(qname), **_chart(ins, _range(request), qname), nav="queues",
                   known_types=sorted(_known_types()))
    return render(request, P + "queue.html", context)


@page
def queue_header(request: HtmxHttpRequest, qname: str) -> HttpResponse:
    state = request.GET.get("state") if request.GET.get("state") in STATES else "pending"
    return _partial(request, "partials/_queue_header.html",
                    _base(request, info=inspector_for(request).queue_info(qname), state=state, qname=qname))


# A timed pause's choices (the form's "for" field, seconds): it resumes by itself after that long.
PAUSE_CHOICES = {"": None, "300": 300, "900": 900, "1800": 1800, "3600": 3600, "14400": 14400, "86400": 86400}


@action
def queue_pause(request: HtmxHttpRequest, qname: str) -> HttpResponse:
    ins = inspector_for(request)
    choice = request.POST.get("for", "")
    if choice not in PAUSE_CHOICES:
        raise ConfigurationError(f"pause for {choice!r}: choose one of the offered durations")
    for_ = PAUSE_CHOICES[choice]
    ins.pause_queue(qname, for_=for_)
    until = f" for {qc_duration(for_)}, then it resumes by itself" if for_ else ""
    messages.success(request, f"Queue {qname} paused{until}: workers stop taking its tasks; running ones finish.",
                     _queue_subject(qname))
    return _queue_changed(request, ins, qname)


@action
def queue_unpause(request: HtmxHttpRequest, qname: str) -> HttpResponse:
    ins = inspector_for(request)
    ins.unpause_queue(qname)
    messages.success(request, f"Queue {qname} unpaused: workers take its tasks again.", _queue_subject(qname))
    return _queue_changed(request, ins, qname)


@action
def queue_remove(request: HtmxHttpRequest, qname: str) -> HttpResponse:
    ins = inspector_for(request)
    try:
        ins.remove_queue(qname)
    except QueueNotEmpty as exc:
        messages.error(request, f"{exc}.", _queue_subject(qname))
        return _queue_changed(request, ins, qname)
    messages.success(request, f"Queue {qname} removed.", _queue_subject(qname))
    target = reverse("queuecore_dashboard:overview")
    return HttpResponseClientRedirect(target) if _fragment(request) else redirect(target)


def _queue_subject(qname: str) -> str:
    """The subject of a queue's messages: a newer one replaces the older ones on the page (dashboard.js)."""
    return f"qc-subject-queue-{qname}"


def _queue_changed(request: HtmxHttpRequest, ins: Inspector, qname: str) -> HttpResponse:
    """After a queue action: the fragment the form targets (the queue page's header or the overview's
    queue table) for htmx, else a redirect back."""
    if not _fragment(request):  # a URL, never a view name: "overview" was reversed (a 500 after the action)
        return HttpResponseRedirect(_local_url(request, request.POST.get("next"))
                                    or reverse("queuecore_dashboard:overview"))
    if request.htmx.target == "qc-queue-header":
        state = request.POST.get("state") if request.POST.get("state") in STATES else "pending"
        return _partial(request, "partials/_queue_header.html",
                        _base(request, info=ins.queue_info(qname), state=state, qname=qname), trigger=QUEUES_CHANGED)
    queues = ins.all_queue_info()
    return _partial(request, "partials/_queue_table.html", _base(request, queues=queues,
                                                                 **_queue_page(request, queues, request.POST)),
                    trigger=QUEUES_CHANGED)


@action
def tasks_action(request: HtmxHttpRequest, qname: str, state: str) -> HttpResponse:
    ins = inspector_for(request)
    form = TaskActionForm(request.POST, state=state)
    type_name, search, _ = TaskFilterForm(request.POST).values()
    job = None
    subject = f"qc-subject-tasks-{qname}-{state}"  # a newer message on this list replaces the older ones
    if not form.is_valid():
        messages.error(request, " ".join(form.non_field_errors()) or (
            "Choose an action." if "action" in form.errors else "This page is out of date: reload it."), subject)
    elif form.cleaned_data["all"]:  # a bulk job: the whole state, or exactly what the filter finds, on the server
        job = start_job(ins, form.cleaned_data["action"], queue=qname, state=state, type=type_name or None,
                        search=search or None, confirmed=form.confirmed(qname))
    else:
        verb = form.cleaned_data["action"]
        batch = ins.act_on_tasks(qname, verb, form.cleaned_data["task_ids"], from_state=state)
        if batch.done or not batch.failed:
            messages.success(request, f"{len(batch.done):,} task(s) {ACTION_DONE[verb]}.", subject)
        if batch.failed:
            reason = next(iter(batch.failed.values()))
            messages.warning(request, f"{len(batch.failed):,} task(s) left as they were ({reason}).", subject)
    if not _fragment(request):
        posted = TaskFilterForm(request.POST)
        type_name, search, page_number = posted.values()
        if page_number > 1:  # back to the same page, or the last one when the action emptied it
            page_number = min(page_number, ins.list_tasks(qname, state, page_number, dashboard_settings().page_size,
                                                          type=type_name, search=search, order=posted.order()).pages)
        if job is not None:
            return redirect("queuecore_dashboard:bulk_job", job.id)
        return redirect(_state_url(qname, state, type=type_name, search=search, sort=posted.order(),
                                   page=page_number))
    response = _partial(request, "partials/_task_table.html", _task_list(request, ins, qname, state, request.POST),
                        trigger=TASKS_CHANGED)
    if job is not None:
        return with_job_panel(request, response, job)
    return response


# -- tasks ------------------------------------------------------------------------------------------


@page
def task_detail(request: HtmxHttpRequest, qname: str, task_id: str) -> HttpResponse:
    ins = inspector_for(request)
    try:
        task = ins.get_task(qname, task_id)
    except TaskNotFound:
        return _task_gone(request, qname, task_id)
    context = _task_context(request, qname, task)
    if _fragment(request):
        return _partial(request, "partials/_task_detail.html", context)
    return render(request, P + "task.html", context)


def _task_gone(request: HtmxHttpRequest, qname: str, task_id: str) -> HttpResponse:
    """The page (404) or panel of a task that is not stored: deleted, or completed without a retention
    (often already, when the page of a quick task opens after an enqueue or a run). A panel stops
    polling; any message of an action that came before shows with it."""
    context = _base(request, qname=qname, task_id=task_id)
    if _fragment(request):
        return _partial(request, "partials/_task_gone.html", context)
    return render(request, P + "task_gone.html", context, status=404)


@action
def task_action(request: HtmxHttpRequest, qname: str, task_id: str, verb: str) -> HttpResponse:
    ins = inspector_for(request)
    try:
        getattr(ins, f"{verb}_task")(qname, task_id)
    except InvalidTaskState as exc:
        messages.error(request, f"{exc}.", f"qc-subject-task-{task_id}")
    except TaskNotFound as exc:  # deleted meanwhile (by another operator, or it completed)
        messages.error(request, f"Nothing done: {exc}.", f"qc-subject-task-{task_id}")
        return _task_gone(request, qname, task_id)
    else:
        messages.success(request, f"Task {task_id} {ACTION_DONE[verb]}.", f"qc-subject-task-{task_id}")
        if verb == "delete":  # back to the list of this queue the operator came from (a checked local URL)
            target = _back_url(request, qname) or reverse("queuecore_dashboard:queue_state", args=[qname, "pending"])
            return HttpResponseClientRedirect(target) if _fragment(request) else redirect(target)
    if not _fragment(request):
        return redirect("queuecore_dashboard:task", qname, task_id)
    try:
        task = ins.get_task(qname, task_id)
    except TaskNotFound:  # run now, and already completed by a worker (not kept without a retention)
        return _task_gone(request, qname, task_id)
    return _partial(request, "partials/_task_detail.html", _task_context(request, qname, task), trigger=TASKS_CHANGED)


def _task_context(request: HtmxHttpRequest, qname: str, task: Any) -> dict[str, Any]:
    ran = (task.completed_at - task.started_at).total_seconds() if task.completed_at and task.started_at else None
    back = _back_url(request, qname) or reverse("queuecore_dashboard:queue_state", args=[qname, task.state])
    task_url = reverse("queuecore_dashboard:task", args=[qname, task.id])
    return _base(request, task=task, qname=qname, terminal=task.state in FINAL_STATES, duration=ran,
                 task_actions=actions_for(task.state), nav="queues", back_url=back,
                 task_poll_url=f"{task_url}?{urlencode({'next': back})}")


def _local_url(request: HtmxHttpRequest, url: str | None) -> str | None:
    """``url`` as a path (with its query) when it is a page of this dashboard on this host, else None."""
    from urllib.parse import unquote, urlsplit

    from django.utils.http import url_has_allowed_host_and_scheme

    if not url or not url_has_allowed_host_and_scheme(url, allowed_hosts={request.get_host()},
                                                      require_https=request.is_secure()):
        return None
    parts = urlsplit(url)
    if not parts.path.startswith(reverse("queuecore_dashboard:overview")) or "\\" in parts.path:
        return None
    # "/queues/../accounts/logout/" or "/queues/..//host/" starts with the prefix and leaves it once the
    # browser resolves it: no page of the dashboard has a dot segment or an empty one
    if any(unquote(segment) in ("", ".", "..") for segment in parts.path.split("/")[1:-1]):
        return None
    return parts.path + (f"?{parts.query}" if parts.query else "")


def _back_url(request: HtmxHttpRequest, qname: str) -> str | None:
    """The list of ``qname`` the operator opened the task from (``?next=``, an action form's ``next``,
    else the Referer), so that deleting the task returns there; None when unknown (the task's own state
    list is used). Only a state list of the queue counts: ``<queue>/`` alone may be another page (a
    queue named ``servers``)."""
    lists = {reverse("queuecore_dashboard:queue_state", args=[qname, state]) for state in STATES}
    for candidate in (request.GET.get("next"), request.POST.get("next"), request.headers.get("Referer")):
        url = _local_url(request, candidate)
        if url and url.split("?")[0] in lists:
            return url
    return None


# -- servers, Redis, audit --------------------------------------------------------------------------


@page
def servers(request: HtmxHttpRequest) -> HttpResponse:
    context = _base(request, **_capacity(inspector_for(request).servers()), nav="servers")
    if _fragment(request):
        return _partial(request, "partials/_server_table.html", context)
    return render(request, P + "servers.html", context)


@page
def redis_page(request: HtmxHttpRequest) -> HttpResponse:
    connection = get_config().connection
    # No key count on a plain visit (it SCANs the whole database): only the "Count keys" button counts
    # (?count=1); other visits show the last count and its age.
    info, counted = redis_info_for(request, count_keys=request.GET.get("count") == "1")
    context = _base(request, info=info, key_count=counted, queues=inspector_for(request).all_queue_info(),
                    key_prefix=connection.key_prefix, redis_url=redact_url(connection.redis_url), nav="redis")
    if _fragment(request):
        return _partial(request, "partials/_redis_info.html", context)
    return render(request, P + "redis.html", context)


@page
def audit(request: HtmxHttpRequest) -> HttpResponse:
    page_number = TaskFilterForm(request.GET).checked_page()
    offset = (page_number - 1) * AUDIT_PAGE_SIZE
    if offset >= AUDIT_MAX_ENTRIES:  # the log keeps no more than that: no such page, as past its end
        raise PageNotFound(f"no such page: page {page_number:,} is past the end of the audit log (at most "
                           f"{AUDIT_MAX_ENTRIES // AUDIT_PAGE_SIZE:,} pages)")
    entries = inspector_for(request).audit_log(limit=AUDIT_PAGE_SIZE + 1, offset=offset)
    if page_number > 1 and not entries:
        raise PageNotFound(f"no such page: page {page_number:,} is past the end of the audit log")
    context = _base(request, entries=entries[:AUDIT_PAGE_SIZE], page_number=page_number, nav="audit",
                    prev_page=page_number - 1 if page_number > 1 else None,
                    next_page=page_number + 1 if len(entries) > AUDIT_PAGE_SIZE else None)
    if _fragment(request):
        return _partial(request, "partials/_audit_table.html", context)
    return render(request, P + "audit.html", context)


def _known_types() -> set[str]:
    """Task types registered in this process (suggestions for the type filter)."""
    from queuecore.core.registry import default_registry

    return set(default_registry.names())
