"""System checks for the ``QUEUECORE`` setting (``manage.py check``)."""

from __future__ import annotations

from typing import Any

from django.core.checks import Error, Tags, Warning, register

from queuecore.conf import DEFAULTS
from queuecore.core.config import parse_queues
from queuecore.core.errors import ConfigurationError
from queuecore.core.limits import MAX_PAYLOAD_BYTES, PROCESSES
from queuecore.core.message import DEFAULT_MAX_PAYLOAD_BYTES

KNOWN_KEYS = frozenset(DEFAULTS)
DASHBOARD_KEYS = frozenset(DEFAULTS["DASHBOARD"])


@register(Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """Validate the ``QUEUECORE`` setting without touching the network."""
    from django.conf import settings

    from queuecore.conf import (
        connection_config,
        import_task_modules,
        merged_settings,
        setting_message,
        task_modules,
        worker_config,
    )

    raw_user = getattr(settings, "QUEUECORE", {})
    if not isinstance(raw_user, dict):
        return [Error("QUEUECORE must be a dict.", hint="QUEUECORE = {'REDIS_URL': 'redis://...'}",
                      id="queuecore.E001")]
    messages: list[Any] = []
    unknown = sorted(repr(key) if not isinstance(key, str) else key for key in set(raw_user) - KNOWN_KEYS)
    if unknown:
        messages.append(Warning(f"QUEUECORE has unknown key(s): {', '.join(unknown)}.",
                                hint=f"Known keys: {', '.join(sorted(KNOWN_KEYS))}.", id="queuecore.W001"))
    merged = merged_settings()
    # Worker settings reported by a check of their own: the worker's check (E005) takes their defaults,
    # so that one mistake is reported once and does not hide another.
    reported: set[str] = set()
    try:
        connection_config(merged)
    except ConfigurationError as exc:
        messages.append(Error(setting_message(exc), id="queuecore.E002"))
    except TypeError as exc:
        messages.append(Error(f"QUEUECORE: {exc}", id="queuecore.E002"))
    served: dict[str, int] = {}
    try:
        served = parse_queues(merged["QUEUES"])
    except ConfigurationError as exc:
        messages.append(Error(f"QUEUECORE['QUEUES']: {exc}", hint="e.g. {'critical': 6, 'default': 3, 'low': 1}",
                              id="queuecore.E003"))
        reported.add("QUEUES")
    for key in ("RETRY_DELAY", "ERROR_HANDLER"):
        problems = _check_import(key, [] if merged[key] in (None, "") else [merged[key]])
        messages += problems
        if problems:
            reported.add(key)
    middleware = merged["MIDDLEWARE"]
    if not isinstance(middleware, (list, tuple)):
        messages.append(Error("QUEUECORE['MIDDLEWARE'] must be a list of dotted paths.", id="queuecore.E004"))
        reported.add("MIDDLEWARE")
    elif problems := _check_import("MIDDLEWARE", list(middleware)):
        messages += problems
        reported.add("MIDDLEWARE")
    try:
        modules = task_modules(merged["TASK_MODULES"])
    except ConfigurationError as exc:
        messages.append(Error(str(exc), id="queuecore.E004"))
    else:
        messages += [Error(str(exc), id="queuecore.E006") for exc in import_task_modules(modules)]
    if served:
        messages += _task_queues_not_served(served)
    dashboard = raw_user.get("DASHBOARD")
    if dashboard is not None and not isinstance(dashboard, dict):
        messages.append(Error(f"QUEUECORE['DASHBOARD'] must be a dict, got {dashboard!r}.",
                              hint="e.g. {'POLL_INTERVAL': 3, 'PAGE_SIZE': 25}; README, 'The dashboard'",
                              id="queuecore.E014"))
    elif dashboard is not None and (unknown_dashboard := sorted(str(k) for k in set(dashboard) - DASHBOARD_KEYS)):
        messages.append(Error(f"QUEUECORE['DASHBOARD'] has unknown key(s): {', '.join(unknown_dashboard)}.",
                              hint=f"Known keys: {', '.join(sorted(DASHBOARD_KEYS))}; README, 'The dashboard'",
                              id="queuecore.E014"))
    try:
        from queuecore.core.periodic import parse_entries

        parse_entries(merged["PERIODIC"], _payload_limit(merged["MAX_PAYLOAD_BYTES"]))
    except ConfigurationError as exc:
        messages.append(Error(f"QUEUECORE['PERIODIC']: {exc}", hint="README, 'Periodic tasks'", id="queuecore.E007"))
    try:
        from queuecore.alert_senders import parse_settings

        parse_settings(merged["ALERTS"])
    except ConfigurationError as exc:
        messages.append(Error(f"QUEUECORE['ALERTS']: {exc}", hint="README, 'Alerts'", id="queuecore.E011"))
    from queuecore.metrics_conf import metrics_setting_errors

    for problem in metrics_setting_errors(raw_user.get("METRICS")):
        messages.append(Error(f"QUEUECORE['METRICS']: {problem}.", hint="README, 'Metrics (Prometheus)'",
                              id="queuecore.E020"))
    if merged["LOG_FORMAT"] not in ("text", "json"):
        messages.append(Error(f"QUEUECORE['LOG_FORMAT'] must be 'text' or 'json', got {merged['LOG_FORMAT']!r}.",
                              id="queuecore.E012"))
    try:
        PROCESSES.check(merged["PROCESSES"], "processes")
    except ConfigurationError as exc:
        messages.append(Error(f"QUEUECORE['PROCESSES']: {exc}", hint="README, 'Several worker processes per machine'",
                              id="queuecore.E013"))
    try:
        worker_config({**merged, **{key: DEFAULTS[key] for key in reported}})
    except ConfigurationError as exc:
        messages.append(Error(setting_message(exc), id="queuecore.E005"))
    except (TypeError, ImportError) as exc:
        messages.append(Error(f"QUEUECORE: {exc}", id="queuecore.E005"))
    return messages


def _task_queues_not_served(served: dict[str, int]) -> list[Any]:
    """A W002 for each queue that registered task types enqueue to by default and ``QUEUECORE['QUEUES']``
    (what runworker serves unless started with --queues) does not list: their tasks would wait for good."""
    from queuecore.core.config import DEFAULT_QUEUE
    from queuecore.core.registry import default_registry

    unserved: dict[str, list[str]] = {}
    for name in default_registry.names():
        handler = default_registry.get(name)
        queue = (handler.default_queue if handler is not None else None) or DEFAULT_QUEUE
        if queue not in served:
            unserved.setdefault(queue, []).append(name)
    return [Warning(f"task type(s) {', '.join(names[:5])}{' and more' if len(names) > 5 else ''} enqueue to queue "
                    f"{queue!r} by default, which QUEUECORE['QUEUES'] does not list: runworker does not serve it "
                    "unless started with --queues, and their tasks wait.",
                    hint=f"Add {queue!r} to QUEUECORE['QUEUES'] (a dict of queue: weight), or start a worker with "
                         "--queues naming it and add queuecore.W002 to SILENCED_SYSTEM_CHECKS.",
                    id="queuecore.W002")
            for queue, names in sorted(unserved.items())]


def _check_import(key: str, paths: list[Any]) -> list[Any]:
    """An E006 for each of ``paths`` (given in ``QUEUECORE[key]``) that the worker could not import."""
    from queuecore.conf import import_path

    out = []
    for path in paths:
        try:
            import_path(path)
        except ConfigurationError as exc:
            out.append(Error(f"QUEUECORE['{key}']: {exc}.", id="queuecore.E006"))
    return out


@register("redis", deploy=True)  # not Tags.database: Django 6 runs those only with --database
def check_redis(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """With ``check --deploy``: Redis answers, and its eviction policy cannot drop tasks."""
    from queuecore.conf import get_config
    from queuecore.core.config import redact_url
    from queuecore.core.topology import eviction_policy

    try:
        connection = get_config().connection
    except ConfigurationError:  # check_settings reports it (queuecore.E002), under its key
        return []
    client = None
    try:
        client = connection.connect()  # a cluster client reads the slot map here
        client.ping()
        policy = eviction_policy(client)  # on a cluster: any master's that may evict
    except Exception as exc:
        return [Error(f"Redis at {redact_url(connection.redis_url)} does not answer: {exc}", id="queuecore.E010")]
    finally:
        if client is not None:
            client.close()
    if policy and policy != "noeviction":
        return [Warning(f"Redis maxmemory-policy is {policy!r}: Redis may evict task data when full.",
                        hint="Set maxmemory-policy noeviction on the Redis that holds queues.", id="queuecore.W010")]
    return []


def _payload_limit(value: Any) -> int:
    """``MAX_PAYLOAD_BYTES`` as the client takes it; the default when it is invalid (its own error)."""
    try:
        return int(MAX_PAYLOAD_BYTES.check(value, "max_payload_bytes"))
    except ConfigurationError:
        return DEFAULT_MAX_PAYLOAD_BYTES
