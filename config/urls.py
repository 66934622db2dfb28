"""URLs of the bundled site: the dashboard under /queues/, a login page, and the Django admin."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.generic import RedirectView

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="queuecore_dashboard:overview"), name="home"),
    path("queues/", include("queuecore_dashboard.urls")),
    path("queuecore/", include("queuecore.urls")),  # the readiness probe: /queuecore/ready/
    path("accounts/login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
]
