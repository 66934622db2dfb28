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
        from queuecore.conf import default_client_factory, get_config
        from queuecore.core.client import set_default_client_factory

        set_default_client_factory(default_client_factory)
        autodiscover_modules("tasks")
        import importlib

        for module in get_config().raw.get("TASK_MODULES") or []:
            importlib.import_module(module)
