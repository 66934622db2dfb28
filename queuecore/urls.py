"""``path("queuecore/", include("queuecore.urls"))``: the readiness probe at ``queuecore/ready/``."""

from django.urls import path

from queuecore.health import readiness

app_name = "queuecore"
urlpatterns = [path("ready/", readiness, name="ready")]
