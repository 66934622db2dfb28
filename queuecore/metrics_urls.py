"""``path("metrics", include("queuecore.metrics_urls"))``: Prometheus metrics (see metrics_views)."""

from django.urls import path

from queuecore import metrics_views

app_name = "queuecore_metrics"
urlpatterns = [path("", metrics_views.metrics, name="metrics")]
