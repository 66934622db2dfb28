"""The operator CLI as a Django app, only to provide ``manage.py adminctl``.

Installed as the package ``queuecore_adminctl`` (the repository's ``adminctl/`` folder): add
``"queuecore_adminctl"`` to ``INSTALLED_APPS`` to get the command. The CLI itself never needs Django;
the core app ``queuecore`` never imports this package (``tests/django/test_adminctl_app.py``).
"""

from __future__ import annotations

from django.apps import AppConfig


class AdminctlConfig(AppConfig):
    name = "queuecore_adminctl"  # the installed package (the repository's adminctl/ folder)
    label = "queuecore_adminctl"  # never clashes with a site's own "adminctl" app
    verbose_name = "queuecore operator CLI"
