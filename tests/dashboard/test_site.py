"""The bundled site's pieces the dashboard relies on: the login page and the first operator account."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from django.contrib.auth import authenticate
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client as DjangoClient

from demo.management.commands.ensure_operator import Command as EnsureOperator

ROOT = Path(__file__).resolve().parents[2]


def test_ensure_operator_creates_the_first_operator_once(db: None) -> None:
    out = io.StringIO()
    call_command(EnsureOperator(), stdout=out)
    password = re.search(r"password: (\S+)", out.getvalue()).group(1)
    user = User.objects.get()
    assert (user.username, user.is_superuser, user.is_staff) == ("operator", True, True)
    assert len(password) >= 16
    assert authenticate(username="operator", password=password) == user
    assert password not in user.password  # only the hash is stored
    again = io.StringIO()
    call_command(EnsureOperator(), stdout=again)
    assert again.getvalue() == "" and User.objects.count() == 1


def test_ensure_operator_does_nothing_when_a_user_exists(db: None) -> None:
    User.objects.create_user("someone")
    out = io.StringIO()
    call_command(EnsureOperator(), stdout=out)
    assert out.getvalue() == "" and not User.objects.filter(username="operator").exists()


def test_login_page_looks_like_the_dashboard_and_logs_in(make_user: Any) -> None:
    make_user("olga", "view")
    c = DjangoClient()
    page = c.get("/accounts/login/?next=/queues/")
    body = page.content.decode()
    assert page.status_code == 200 and "queuecore_dashboard/css/dashboard.css" in body and "Log in" in body
    assert 'href="/queues/servers/"' not in body  # no dashboard navigation before logging in
    bad = c.post("/accounts/login/", {"username": "olga", "password": "nope", "next": "/queues/"})
    assert "correct username and password" in bad.content.decode()
    good = c.post("/accounts/login/", {"username": "olga", "password": "pw-olga", "next": "/queues/"})
    assert good.status_code == 302 and good.url == "/queues/"
    assert c.get("/queues/").status_code == 200
    logout = c.post("/accounts/logout/")
    assert logout.status_code == 302 and logout.url == "/accounts/login/"
    assert c.get("/queues/").status_code == 302


SITE_SMOKE = """
import io, re, sys
import django
django.setup()
from django.core.management import call_command
from django.test import Client
from django.test.utils import setup_test_environment
setup_test_environment()
call_command("migrate", verbosity=0)
out = io.StringIO()
call_command("ensure_operator", stdout=out)
password = re.search(r"password: (\\S+)", out.getvalue()).group(1)
c = Client()
home = c.get("/")
login = c.get(home.url, follow=True)
c.post("/accounts/login/", {"username": "operator", "password": password})
page = c.get("/queues/")
print(home.status_code, home.url, login.redirect_chain[-1][0], page.status_code)
print("Servers" in page.content.decode(), "qc-queue-table" in page.content.decode())
"""


def test_the_bundled_site_serves_the_dashboard_behind_its_login(tmp_path: Any, redis_url: str,
                                                                key_prefix: str) -> None:
    """config.settings in a process of its own: / -> dashboard -> login -> the printed operator login works."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "QUEUECORE_VAR_DIR": str(tmp_path),
           "QUEUECORE_REDIS_URL": redis_url, "QUEUECORE_KEY_PREFIX": key_prefix, "PYTHONPATH": str(ROOT)}
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    done = subprocess.run([sys.executable, "-c", SITE_SMOKE], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["302", "/queues/", "/accounts/login/?next=/queues/", "200", "True", "True"]
