"""``adminctl`` as a Django app, only to provide ``manage.py adminctl``.

Add ``"adminctl"`` to ``INSTALLED_APPS`` to get the command. The CLI itself never needs Django;
the core app ``queuecore`` never imports this package (``tests/django/test_adminctl_app.py``).
"""

from __future__ import annotations

from django.apps import AppConfig


class AdminctlConfig(AppConfig):
    name = "adminctl"
    label = "queuecore_adminctl"  # never clashes with a site's own "adminctl" app label
    verbose_name = "queuecore operator CLI"
