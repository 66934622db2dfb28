"""queuecore's operator dashboard: a reusable Django app (label ``queuecore_dashboard``).

Installed as the package ``queuecore_dashboard`` (the repository keeps it in ``dashboard/``):
``INSTALLED_APPS += ["queuecore", "queuecore_dashboard", "django_htmx"]``, add
``django_htmx.middleware.HtmxMiddleware``, and
``path("queues/", include("queuecore_dashboard.urls"))``.
Every view reads and acts through ``queuecore.Inspector``.
"""
