"""queuecore's operator dashboard: a reusable Django app (label ``queuecore_dashboard``).

``INSTALLED_APPS += ["queuecore", "dashboard", "django_htmx"]``, add
``django_htmx.middleware.HtmxMiddleware``, and ``path("queues/", include("dashboard.urls"))``.
Every view reads and acts through ``queuecore.Inspector``.
"""
