"""No tables: one unmanaged model that only carries queuecore's own permission.

- ``queuecore.view_metrics``: read the Prometheus metrics (``/metrics``; ``QUEUECORE['METRICS']['PERMISSION']``).
"""

from django.db import models


class MetricsAccess(models.Model):
    class Meta:
        managed = False
        default_permissions = ()
        permissions = [("view_metrics", "Can read the queuecore metrics")]
        verbose_name = "metrics access"
        verbose_name_plural = "metrics access"
