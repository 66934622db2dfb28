"""The Django app around the core: settings, checks, task autodiscovery and the default client."""

from __future__ import annotations

from django.apps import AppConfig


class QueuecoreConfig(AppConfig):
    name = "queuecore"
    label = "queuecore"
    verbose_name = "queuecore task queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.utils.module_loading import autodiscover_modules

        from queuecore import checks  # noqa: F401  (registers the system checks)
        from queuecore.conf import default_client_factory, import_task_modules, merged_settings
        from queuecore.core.client import set_default_client_factory

        set_default_client_factory(default_client_factory)
        autodiscover_modules("tasks")
        # Nothing here validates the settings: a bad value must reach manage.py check (which reports it,
        # TASK_MODULES included) and runworker (which refuses it), not stop Django from starting.
        import_task_modules(merged_settings()["TASK_MODULES"])
