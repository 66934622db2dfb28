"""The dashboard's URLs: ``path("queues/", include("queuecore_dashboard.urls"))``.

Links to a queue always name its state (``<queue>/pending/``), so a queue called like a page
(``servers``) stays reachable; ``<queue>/`` alone redirects there.

A queue name is one path segment: the converter takes exactly the names the core accepts
(``queuecore.core.keys.is_valid_name``), which hold no ``/`` and are never ``.`` or ``..``, so
neither Django nor a browser normalising the URL can turn one queue's URL into another's.
"""

from django.urls import path, register_converter

from queuecore.core.keys import NAME_CHARACTER_CLASS, NAME_MAX_LENGTH, is_valid_name
from queuecore.core.states import STATES, TASK_ACTIONS

from . import (
    bulk_views,
    enqueue_views,
    export_views,
    failure_views,
    periodic_views,
    server_views,
    task_edit_views,
    type_views,
    views,
)

_NOT_A_DOT_SEGMENT = r"(?!\.\.?/)"  # "./" and "../" would be a path step, not a name


class QueueNameConverter:
    """Exactly the valid queue names: the regex takes the alphabet (without "/"), and ``to_python``
    and ``to_url`` refuse the rest (``.``, ``..``, and any format character newer than the regex)."""

    regex = f"{_NOT_A_DOT_SEGMENT}{NAME_CHARACTER_CLASS}{{1,{NAME_MAX_LENGTH}}}"

    def to_python(self, value: str) -> str:
        if not is_valid_name(value):
            raise ValueError(f"not a queue name: {value!r}")  # no match: the URL is a 404
        return value

    def to_url(self, value: str) -> str:
        if not is_valid_name(value):
            raise ValueError(f"not a queue name: {value!r}")  # reverse() raises NoReverseMatch
        return value


class StateConverter:
    regex = "|".join(STATES)

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


class TaskIdConverter:
    """Task ids (letters, digits, ``_ . : -``); never ``.`` or ``..``."""

    regex = _NOT_A_DOT_SEGMENT + r"[A-Za-z0-9_.:\-]{1,200}"

    def to_python(self, value: str) -> str:
        if value in (".", ".."):
            raise ValueError("not a task id")
        return value

    def to_url(self, value: str) -> str:
        if value in (".", ".."):
            raise ValueError("not a task id")
        return value


class TaskVerbConverter:
    regex = "|".join(TASK_ACTIONS)

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(QueueNameConverter, "qc_queue")
register_converter(StateConverter, "qc_state")
register_converter(TaskIdConverter, "qc_task_id")
register_converter(TaskVerbConverter, "qc_task_verb")

app_name = "queuecore_dashboard"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("_/stats/", views.overview_stats, name="overview_stats"),
    path("_/queues/", views.overview_queues, name="overview_queues"),
    path("_/limits/", views.overview_limits, name="overview_limits"),
    path("_/alerts/", views.overview_alerts, name="overview_alerts"),
    path("_/activity/", views.overview_activity, name="overview_activity"),
    path("_/chart/", views.chart, name="chart"),
    path("servers/", views.servers, name="servers"),
    # path: a server id holds its host name, which may hold "/"
    path("servers/_/<path:server_id>/<slug:verb>/", server_views.server_action, name="server_action"),
    path("redis/", views.redis_page, name="redis"),
    path("audit/", views.audit, name="audit"),
    path("bulk/", bulk_views.bulk_jobs, name="bulk_jobs"),
    path("bulk/_/<slug:job_id>/", bulk_views.bulk_job, name="bulk_job"),
    path("bulk/_/<slug:job_id>/cancel/", bulk_views.bulk_cancel, name="bulk_cancel"),
    path("periodic/", periodic_views.periodic, name="periodic"),
    path("periodic/_/<str:name>/<str:verb>/", periodic_views.periodic_action, name="periodic_action"),
    path("enqueue/", enqueue_views.enqueue_form, name="enqueue"),
    path("enqueue/_/", enqueue_views.enqueue_task, name="enqueue_task"),
    path("failures/", failure_views.failures, name="failures"),
    path("failures/_/<slug:key>/<slug:verb>/", failure_views.failure_action, name="failure_action"),
    path("<qc_queue:qname>/failures/", failure_views.failures, name="queue_failures"),
    path("<qc_queue:qname>/types/", type_views.task_types, name="task_types"),
    path("<qc_queue:qname>/types/<qc_queue:type_name>/", type_views.task_type, name="task_type"),
    path("<qc_queue:qname>/failures/_/<slug:key>/<slug:verb>/", failure_views.failure_action,
         name="queue_failure_action"),
    path("<qc_queue:qname>/tasks/<qc_task_id:task_id>/", views.task_detail, name="task"),
    path("<qc_queue:qname>/tasks/<qc_task_id:task_id>/edit/", task_edit_views.task_edit, name="task_edit"),
    path("<qc_queue:qname>/tasks/<qc_task_id:task_id>/<qc_task_verb:verb>/", views.task_action, name="task_action"),
    path("<qc_queue:qname>/<qc_state:state>/", views.queue_state, name="queue_state"),
    path("<qc_queue:qname>/<qc_state:state>/actions/", views.tasks_action, name="tasks_action"),
    path("<qc_queue:qname>/<qc_state:state>/export.<slug:fmt>", export_views.export_tasks, name="tasks_export"),
    path("<qc_queue:qname>/header/", views.queue_header, name="queue_header"),
    path("<qc_queue:qname>/pause/", views.queue_pause, name="queue_pause"),
    path("<qc_queue:qname>/unpause/", views.queue_unpause, name="queue_unpause"),
    path("<qc_queue:qname>/remove/", views.queue_remove, name="queue_remove"),
    path("<qc_queue:qname>/", views.queue_redirect, name="queue_redirect"),
]
