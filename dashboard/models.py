"""No tables: one unmanaged model that only carries the dashboard's two permissions.

- ``queuecore_dashboard.view_dashboard``: see queues, tasks, workers, Redis and the audit log.
- ``queuecore_dashboard.operate_queues``: act (run, archive, delete, cancel tasks; pause queues).
"""

from django.db import models


class DashboardAccess(models.Model):
    class Meta:
        managed = False
        default_permissions = ()
        permissions = [
            ("view_dashboard", "Can view the queuecore dashboard"),
            ("operate_queues", "Can act on queues and tasks in the queuecore dashboard"),
        ]
        verbose_name = "dashboard access"
        verbose_name_plural = "dashboard access"
