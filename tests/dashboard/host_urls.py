"""A host site's URLs for the embedding tests: the dashboard under /ops/queues/, and the host's own
login and logout views under a namespace and names the dashboard cannot guess (``accounts:login``,
``accounts:logout``), at paths that are not Django's defaults."""

from django.contrib.auth import views as auth_views
from django.urls import include, path

accounts = ([
    path("signin/", auth_views.LoginView.as_view(template_name="host_login.html"), name="login"),
    path("signout/", auth_views.LogoutView.as_view(), name="logout"),
    path("missing-template/", auth_views.LoginView.as_view(template_name="host_missing.html"), name="bare_login"),
], "accounts")

urlpatterns = [
    path("ops/queues/", include("queuecore_dashboard.urls")),
    path("accounts/", include(accounts)),
]
