"""The Django adapter's settings: one ``QUEUECORE`` dict, read into the core's dataclasses.

Read through ``get_config()``, which caches and is reset whenever settings change (tests use
``override_settings``). Nothing is read at import time.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from functools import cache
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string

from queuecore.core.config import CLIENT_DEFAULT_SETTINGS, ConnectionConfig, WorkerConfig
from queuecore.core.errors import ConfigurationError
from queuecore.core.message import DEFAULT_MAX_PAYLOAD_BYTES, DEFAULT_MAX_RETRY

DEFAULTS: dict[str, Any] = {
    "REDIS_URL": "redis://127.0.0.1:6379/0",
    "KEY_PREFIX": "qc",
    "QUEUES": {"default": 1},
    "STRICT_PRIORITY": False,
    "CONCURRENCY": 10,
    "PROCESSES": 1,  # worker processes runworker starts (a supervisor and N children when more than 1)
    "PREFETCH": None,  # tasks fetched ahead of free handlers; None = same as CONCURRENCY
    "SHUTDOWN_TIMEOUT": 25.0,
    "DEFAULT_MAX_RETRY": DEFAULT_MAX_RETRY,  # max_retry of a task enqueued without one (read by the client)
    "DEFAULT_RETENTION": 0.0,  # seconds a result is kept when a task gives no retention; 0 = not kept
    "DEFAULT_TIMEOUT": 1800.0,
    "RETRY_DELAY": None,  # dotted path to f(retried, error) -> seconds
    "ERROR_HANDLER": None,  # dotted path to f(task_context, error)
    "MIDDLEWARE": [],  # dotted paths to f(task_context, call_next)
    "TASK_MODULES": [],  # extra modules to import for @task registration, beside every app's tasks.py
    "LEASE_DURATION": 30.0,
    "HEARTBEAT_INTERVAL": 5.0,
    "RECOVER_INTERVAL": 10.0,
    "REPAIR_INTERVAL": 5.0,
    "FORWARD_INTERVAL": 0.5,
    "JANITOR_INTERVAL": 8.0,
    "MAX_ARCHIVE_SIZE": 10_000,
    "ARCHIVE_MAX_AGE": 90 * 24 * 3600.0,
    "MAX_PAYLOAD_BYTES": DEFAULT_MAX_PAYLOAD_BYTES,
    "HEALTH_FILE": None,  # runworker rewrites this file after each heartbeat (queuecore_healthcheck reads it)
    "TYPE_STATS": True,  # per-task-type statistics (README "Per-task-type statistics"); False: none written
    "LOG_FORMAT": "text",  # runworker's log lines: "text" or "json" (one JSON object per record)
    "PERIODIC": {},  # entry name -> {"task": ..., "cron": ... or "every": ..., ...}: README "Periodic tasks"
    "ALERTS": {},  # {"RULES": {name: {"kind": ..., ...}}, "SENDERS": [...], "INTERVAL": 15}: README "Alerts"
    # Prometheus metrics (the metrics extra): README "Metrics". The /metrics view admits a request with
    # "Authorization: Bearer <TOKEN>" or from a user with PERMISSION; runworker serves on ADDR:PORT.
    "METRICS": {"TOKEN": None, "PERMISSION": "queuecore.view_metrics", "PORT": None, "ADDR": "127.0.0.1",
                "NAMESPACE": "queuecore"},
    "DASHBOARD": {"POLL_INTERVAL": 3, "PAGE_SIZE": 25, "ACCESS_CALLBACK": None,
                  "LOGOUT_URL": None},  # None: the URL named like LOGIN_URL's, "logout" for "login"
}

_WORKER_KEYS = {
    "QUEUES": "queues", "STRICT_PRIORITY": "strict_priority", "CONCURRENCY": "concurrency", "PREFETCH": "prefetch",
    "SHUTDOWN_TIMEOUT": "shutdown_timeout", "DEFAULT_TIMEOUT": "default_timeout", "LEASE_DURATION": "lease_duration",
    "HEARTBEAT_INTERVAL": "heartbeat_interval", "RECOVER_INTERVAL": "recover_interval",
    "REPAIR_INTERVAL": "repair_interval",
    "FORWARD_INTERVAL": "forward_interval", "JANITOR_INTERVAL": "janitor_interval",
    "MAX_ARCHIVE_SIZE": "max_archive_size", "ARCHIVE_MAX_AGE": "archive_max_age",
    "HEALTH_FILE": "health_file", "TYPE_STATS": "type_stats",
}


_CONNECTION_KEYS = {"REDIS_URL": "redis_url", "KEY_PREFIX": "key_prefix", **CLIENT_DEFAULT_SETTINGS}
# The worker's fields the settings give through a dotted path (imported), beside those given as they are.
_IMPORTED_KEYS = {"RETRY_DELAY": "retry_delay", "ERROR_HANDLER": "error_handler", "MIDDLEWARE": "middleware"}
_SETTING_OF_FIELD = {field: key for key, field in {**_WORKER_KEYS, **_IMPORTED_KEYS, **_CONNECTION_KEYS}.items()}


def setting_message(exc: ConfigurationError) -> str:
    """The message of a configuration error raised from the settings, naming the ``QUEUECORE`` key:
    ``QUEUECORE['LEASE_DURATION']: lease_duration is out of range: got nan; allowed: ...``."""
    key = _SETTING_OF_FIELD.get(exc.field or "")
    if key in ("REDIS_URL", "KEY_PREFIX") and key not in user_settings() and os.environ.get(f"QUEUECORE_{key}"):
        return f"QUEUECORE_{key} (environment, as QUEUECORE has no {key!r}): {exc}"  # where the value came from
    return f"QUEUECORE['{key}']: {exc}" if key else f"QUEUECORE: {exc}"


@dataclass(frozen=True)
class Config:
    """The merged ``QUEUECORE`` settings."""

    raw: dict[str, Any]
    connection: ConnectionConfig

    def worker_config(self, **overrides: Any) -> WorkerConfig:
        """A ``WorkerConfig`` from the settings, with command-line ``overrides``."""
        return worker_config(self.raw, **overrides)

    def periodic_entries(self) -> tuple[Any, ...]:
        """The ``PERIODIC`` entries, validated (``ConfigurationError`` names ``QUEUECORE['PERIODIC']``)."""
        from queuecore.core.periodic import parse_entries

        try:
            return parse_entries(self.raw["PERIODIC"], self.connection.max_payload_bytes)
        except ConfigurationError as exc:
            raise ConfigurationError(f"QUEUECORE['PERIODIC']: {exc}", field="periodic") from None

    def alert_settings(self) -> Any:
        """The ``ALERTS`` rules and senders, validated (``ConfigurationError`` names ``QUEUECORE['ALERTS']``)."""
        from queuecore.alert_senders import parse_settings

        try:
            return parse_settings(self.raw["ALERTS"])
        except ConfigurationError as exc:
            raise ConfigurationError(f"QUEUECORE['ALERTS']: {exc}", field="alerts") from None

    def processes(self, override: int | None = None) -> int:
        """How many worker processes ``runworker`` starts: ``override`` (``--processes``), else
        ``PROCESSES``; ``ConfigurationError`` names the setting or the option when out of range."""
        from queuecore.core.limits import PROCESSES

        if override is not None:
            return int(PROCESSES.check(override, "--processes"))
        try:
            return int(PROCESSES.check(self.raw["PROCESSES"], "processes"))
        except ConfigurationError as exc:
            raise ConfigurationError(f"QUEUECORE['PROCESSES']: {exc}", field="processes") from None

    @property
    def dashboard(self) -> dict[str, Any]:
        return self.raw["DASHBOARD"]

    @property
    def metrics(self) -> dict[str, Any]:
        return self.raw["METRICS"]


def user_settings() -> dict[str, Any]:
    value = getattr(settings, "QUEUECORE", {})
    return value if isinstance(value, dict) else {}


def merged_settings() -> dict[str, Any]:
    """``DEFAULTS`` overlaid with ``settings.QUEUECORE`` (the DASHBOARD dict merged one level down)."""
    user = user_settings()
    merged = {**DEFAULTS, **user}
    dashboard = user.get("DASHBOARD")  # not a dict: reported by the check (queuecore.E014), the defaults meanwhile
    merged["DASHBOARD"] = {**DEFAULTS["DASHBOARD"], **(dashboard if isinstance(dashboard, dict) else {})}
    metrics = user.get("METRICS")
    merged["METRICS"] = {**DEFAULTS["METRICS"], **(metrics if isinstance(metrics, dict) else {})}
    if os.environ.get("QUEUECORE_REDIS_URL") and "REDIS_URL" not in user:
        merged["REDIS_URL"] = os.environ["QUEUECORE_REDIS_URL"]
    if os.environ.get("QUEUECORE_KEY_PREFIX") and "KEY_PREFIX" not in user:
        merged["KEY_PREFIX"] = os.environ["QUEUECORE_KEY_PREFIX"]
    return merged


@cache
def get_config() -> Config:
    """The current configuration (cached; reset on ``setting_changed``)."""
    raw = merged_settings()
    return Config(raw=raw, connection=connection_config(raw))


def worker_config(raw: dict[str, Any], **overrides: Any) -> WorkerConfig:
    """The ``WorkerConfig`` of merged settings, with command-line ``overrides`` (those not None).
    ``ConfigurationError`` (its ``field`` the worker's) when a value cannot work, a dotted path
    included: not a string, or not importable."""
    values: dict[str, Any] = {field: raw[key] for key, field in _WORKER_KEYS.items()}
    for key in ("RETRY_DELAY", "ERROR_HANDLER"):
        if raw[key] not in (None, ""):  # unset
            values[_IMPORTED_KEYS[key]] = import_setting(key, raw[key])
    paths = raw["MIDDLEWARE"]
    if not isinstance(paths, (list, tuple)):
        raise ConfigurationError(f"middleware must be a list of dotted paths, got {paths!r}", field="middleware")
    from queuecore.middleware import django_db_connections

    values["middleware"] = [django_db_connections, *(import_setting("MIDDLEWARE", path) for path in paths)]
    values.update({k: v for k, v in overrides.items() if v is not None})
    return WorkerConfig(**values)


def import_setting(key: str, path: Any) -> Any:
    """What the dotted ``path`` given in ``QUEUECORE[key]`` names; ``ConfigurationError`` (the key's
    field, named first in the message) when it is not a dotted path or cannot be imported."""
    field = _IMPORTED_KEYS.get(key, key.lower())
    try:
        return import_path(path)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{field}: {exc}", field=field) from None


def import_path(path: Any) -> Any:
    """What the dotted ``path`` names; ``ConfigurationError`` saying why when it is not a dotted path
    (a non-empty string) or cannot be imported."""
    if not isinstance(path, str) or not path:
        raise ConfigurationError(f"expected a dotted path (a string), got {path!r}")
    try:
        return import_string(path)
    except (ImportError, TypeError, ValueError) as exc:  # ValueError: "." names an empty module
        raise ConfigurationError(f"cannot import {path!r} ({exc})") from None


def task_modules(value: Any) -> list[str]:
    """``QUEUECORE['TASK_MODULES']``: a list of dotted module paths (``ConfigurationError`` naming the
    setting otherwise); None as an empty list."""
    if value is None:
        return []
    if not isinstance(value, (list, tuple)) or not all(isinstance(m, str) and m and not m.startswith(".")
                                                       for m in value):
        raise ConfigurationError(f"QUEUECORE['TASK_MODULES'] must be a list of dotted module paths, got {value!r}.",
                                 field="task_modules")
    return list(value)


def import_task_modules(value: Any) -> list[ConfigurationError]:
    """Import every ``TASK_MODULES`` module that can be; what went wrong (empty: nothing). Called by the
    app's ``ready()`` (which leaves the problems to ``manage.py check``) and by ``runworker`` (which refuses)."""
    try:
        modules = task_modules(value)
    except ConfigurationError as exc:
        return [exc]
    problems = []
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            problems.append(ConfigurationError(f"QUEUECORE['TASK_MODULES']: cannot import {module!r} ({exc}).",
                                               field="task_modules"))
    return problems


def connection_config(raw: dict[str, Any]) -> ConnectionConfig:
    """The ``ConnectionConfig`` of merged settings: where Redis is, and the client's defaults."""
    return ConnectionConfig(**{field: raw[key] for key, field in _CONNECTION_KEYS.items()})


@receiver(setting_changed)
def _reset(*, setting: str, **kwargs: Any) -> None:
    if setting == "QUEUECORE":
        get_config.cache_clear()
        from queuecore.core.client import set_default_client_factory

        set_default_client_factory(default_client_factory)


def default_connection() -> ConnectionConfig:
    """The connection of ``Client()``, ``Inspector()`` and ``Worker()`` built without one, in a process
    whose Django settings are configured: ``QUEUECORE``'s (with its environment fallbacks). An invalid
    value raises ``ConfigurationError`` naming its ``QUEUECORE`` key."""
    try:
        return get_config().connection
    except ConfigurationError as exc:
        raise ConfigurationError(setting_message(exc), field=exc.field) from None


def default_client_factory():
    """Build the process's default ``Client`` from the settings."""
    from queuecore.core.client import Client

    try:
        connection = get_config().connection
    except ConfigurationError as exc:  # as manage.py check says it: naming the setting
        raise ConfigurationError(setting_message(exc), field=exc.field) from None
    return Client(connection=connection)
