from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "queuecore_dashboard"  # the installed package (the repository's dashboard/ folder)
    label = "queuecore_dashboard"
    verbose_name = "queuecore dashboard"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the system checks, and the reset of the shared inspector when settings change.
        from . import checks, inspector  # noqa: F401
