"""``manage.py ensure_operator``: on a site without users, create the first operator and print its login once."""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = ("When no user exists yet, create the superuser 'operator' with a random password and print the "
            "login once. Does nothing when any user exists.")

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--username", default="operator")

    def handle(self, *args: Any, **options: Any) -> None:
        User = get_user_model()
        if User.objects.exists():
            return
        password = secrets.token_urlsafe(12)
        User.objects.create_superuser(username=options["username"], email="", password=password)
        # The password is stored only as Django's hash; this is the one time it is shown.
        self.stdout.write(
            f"Created the first dashboard operator. Log in with:\n"
            f"    username: {options['username']}\n"
            f"    password: {password}\n"
            f"This password is shown only now; change it at /admin/password_change/."
        )
