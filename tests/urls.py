"""URLs of the test suite: the dashboard under /queues/ with a login page, as the bundled site mounts it."""

from django.contrib.auth import views as auth_views
from django.urls import include, path

urlpatterns: list = [
    path("queues/", include("queuecore_dashboard.urls")),
    path("queuecore/", include("queuecore.urls")),
    path("metrics", include("queuecore.metrics_urls")),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
]
