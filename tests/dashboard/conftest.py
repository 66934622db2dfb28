"""Fixtures of the dashboard tests: the dashboard pointed at the test's Redis namespace, and users."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client as DjangoClient

HX = {"HX-Request": "true"}


@pytest.fixture(autouse=True)
def dashboard_settings(settings: Any, redis_url: str, key_prefix: str) -> Any:
    """Every dashboard test reads the test's own key prefix on the shared Redis."""
    settings.QUEUECORE = {"REDIS_URL": redis_url, "KEY_PREFIX": key_prefix,
                          "DASHBOARD": {"POLL_INTERVAL": 2, "PAGE_SIZE": 25}}
    return settings


@pytest.fixture
def make_user(db: None) -> Callable[..., User]:
    """``make_user("name", "view", "operate", staff=True, superuser=False)``."""

    def factory(username: str, *perms: str, staff: bool = True, superuser: bool = False,
                active: bool = True) -> User:
        user = User.objects.create_user(username, password="pw-" + username, is_staff=staff,
                                        is_superuser=superuser, is_active=active)
        codenames = {"view": "view_dashboard", "operate": "operate_queues"}
        user.user_permissions.set(Permission.objects.filter(content_type__app_label="queuecore_dashboard",
                                                            codename__in=[codenames[p] for p in perms]))
        return user

    return factory


def _logged_in(user: User) -> DjangoClient:
    c = DjangoClient()
    c.force_login(user)
    return c


@pytest.fixture
def operator(make_user: Callable[..., User]) -> DjangoClient:
    """A staff user with the view and operate permissions (not a superuser)."""
    return _logged_in(make_user("olga", "view", "operate"))


@pytest.fixture
def viewer(make_user: Callable[..., User]) -> DjangoClient:
    """A staff user with the view permission only: the read-only role."""
    return _logged_in(make_user("victor", "view"))


@pytest.fixture
def anon() -> DjangoClient:
    return DjangoClient()
