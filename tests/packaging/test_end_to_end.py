"""A new user's path, end to end, as the README tells it: build the wheel, install it with its extras
in a fresh virtualenv, start a fresh Django project (``startproject config .`` and an app of its own
called ``dashboard``: neither clashes with queuecore), add queuecore and its dashboard, migrate, pass
``check --deploy``, serve the dashboard under /ops/queues/, log in through ``LOGIN_URL =
"admin:login"`` with a real HTTP client, run ``manage.py runworker``, enqueue through ``@task`` and
``enqueue_on_commit`` (commit and rollback) and Django's own Tasks API from ``manage.py shell``, and
see the tasks complete with their results (waited for through queuecore's result handle and read
through Django's API).

The worker and the site use the shared Redis under the test's own key prefix (deleted afterwards).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from queuecore import Inspector, TaskNotFound, TaskState
from tests.conftest import free_port, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

PASSWORD = secrets.token_urlsafe(16)

# What the README's "Add queuecore to a Django site" tells a site to add (besides QUEUECORE's values).
SETTINGS = """
# queuecore, as the README shows
INSTALLED_APPS += ["django_htmx", "queuecore", "queuecore_dashboard", "queuecore_adminctl"]
MIDDLEWARE += ["django_htmx.middleware.HtmxMiddleware"]
LOGIN_URL = "admin:login"
QUEUECORE = {{"REDIS_URL": {redis_url!r}, "KEY_PREFIX": {key_prefix!r}}}
TASKS = {{"default": {{"BACKEND": "queuecore.tasks_backend.QueuecoreBackend", "OPTIONS": {{"MAX_RETRY": 3}}}}}}
try:  # Django 5.2 takes Django's Tasks API from the django-tasks backport
    import django_tasks  # noqa: F401
    INSTALLED_APPS += ["django_tasks"]
except ImportError:
    pass

# the host's own app, named like queuecore's dashboard used to be
INSTALLED_APPS += ["dashboard"]
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1"]
STATIC_ROOT = BASE_DIR / "staticfiles"
"""

URLS = """
from django.urls import include

urlpatterns += [path("ops/queues/", include("queuecore_dashboard.urls"))]
"""

# What check --deploy asks of a production site; served over plain HTTP, the test uses the site's
# settings without them.
DEPLOY_SETTINGS = f"""
from .settings import *  # noqa: F403

SECRET_KEY = {secrets.token_urlsafe(50)!r}
SECURE_SSL_REDIRECT = True
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SECURE_HSTS_SECONDS = 31536000
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
if "MAILERS" in globals():  # Django 6.1's new project mails to the console, which check --deploy refuses
    MAILERS = {{"default": {{"BACKEND": "django.core.mail.backends.smtp.EmailBackend"}}}}
"""

TASKS = """
from queuecore import task


@task(retention=600)
def shout(text: str) -> str:
    return text.upper()


try:
    from django.tasks import task as django_task
except ImportError:  # Django 5.2: the backport
    from django_tasks import task as django_task


@django_task()
def whisper(text: str) -> str:
    return text.lower()
"""

ENQUEUE = """
import json

from django.db import transaction

from dashboard.tasks import shout
from queuecore import Inspector, enqueue_on_commit

ids = {"task": shout.enqueue("direct").id}
with transaction.atomic():
    ids["committed"] = enqueue_on_commit(shout, "committed")
    ids["committed_using"] = enqueue_on_commit(shout.using(queue="default"), text="committed using")
try:
    with transaction.atomic():
        ids["rolled_back"] = enqueue_on_commit(shout, "rolled back")
        raise RuntimeError("roll back")
except RuntimeError:
    pass
with Inspector() as inspector:  # reads QUEUECORE: the task just enqueued is found
    assert inspector.get_task("default", ids["task"]).type == "dashboard.tasks.shout"

from dashboard.tasks import whisper  # Django's own Tasks API, through queuecore's backend

ids["django_tasks"] = whisper.enqueue("QUIET PLEASE").id

print(json.dumps(ids))
"""


class Browser:
    """A minimal HTTP client with a cookie jar, that never follows redirects on its own."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.cookies: dict[str, str] = {}

    def request(self, method: str, path: str, form: dict[str, str] | None = None) -> tuple[int, Any, str]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())}
        body = None
        if form is not None:
            body = urlencode(form)
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        try:
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            text = response.read().decode()
        finally:
            conn.close()
        for header in response.headers.get_all("Set-Cookie") or []:
            for name, morsel in SimpleCookie(header).items():
                self.cookies[name] = morsel.value
        return response.status, response.headers, text

    def get(self, path: str) -> tuple[int, Any, str]:
        return self.request("GET", path)

    def post(self, path: str, form: dict[str, str]) -> tuple[int, Any, str]:
        return self.request("POST", path, form)


def clean_env(venv: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DJANGO_", "QUEUECORE_", "PYTEST_", "VIRTUAL_ENV", "PYTHON"))}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run(command: list[str], cwd: Path, env: dict[str, str], timeout: float = 240) -> str:
    proc = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(command)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    """The site's server and worker: stopped at the end (SIGTERM, then SIGKILL), whatever happened."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in started:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_a_new_site_installs_the_wheel_and_runs_tasks(wheel: Path, tmp_path: Path, redis_url: str, key_prefix: str,
                                                      processes: list[subprocess.Popen[str]]) -> None:
    started = time.monotonic()
    timings: dict[str, float] = {}

    def lap(name: str) -> None:
        timings[name] = round(time.monotonic() - started, 1)

    # A fresh virtualenv with the wheel and its extras (PyPI or the configured index).
    venv, site = tmp_path / "venv", tmp_path / "site"
    run([sys.executable, "-m", "venv", str(venv)], tmp_path, dict(os.environ))
    env = clean_env(venv)
    python = str(venv / "bin" / "python")
    backport = ["django-tasks"] if sys.version_info < (3, 12) else []  # Django 5.2: Django's Tasks API
    run([python, "-m", "pip", "install", "--disable-pip-version-check", "-q", f"{wheel}[all]", *backport], tmp_path,
        env, timeout=300)
    lap("venv and install")
    installed = run([python, "-c", "import queuecore, queuecore_dashboard, queuecore_adminctl, importlib.util as u; "
                                   "print(u.find_spec('config'), u.find_spec('demo'), u.find_spec('dashboard'))"],
                    tmp_path, env)
    assert installed.split() == ["None", "None", "None"]  # nothing of the bundled site, no generic name

    # A fresh project named the usual way, with an app of its own called dashboard.
    site.mkdir()
    run([str(venv / "bin" / "django-admin"), "startproject", "config", "."], site, env)
    run([python, "manage.py", "startapp", "dashboard"], site, env)
    with (site / "config" / "settings.py").open("a") as f:
        f.write(SETTINGS.format(redis_url=redis_url, key_prefix=key_prefix))
    with (site / "config" / "urls.py").open("a") as f:
        f.write(URLS)
    (site / "config" / "deploy.py").write_text(DEPLOY_SETTINGS)
    (site / "dashboard" / "tasks.py").write_text(TASKS)
    run([python, "manage.py", "migrate", "--noinput", "-v0"], site, env)
    run([python, "manage.py", "createsuperuser", "--noinput", "--username", "ops", "--email", "ops@example.com"],
        site, {**env, "DJANGO_SUPERUSER_PASSWORD": PASSWORD})
    checked = run([python, "manage.py", "check", "--deploy", "--fail-level", "WARNING",
                   "--settings", "config.deploy"], site, env)
    assert "System check identified no issues" in checked
    # Without LOGIN_URL (Django's default, /accounts/login/, is no page of this site) check says how to fix it.
    (site / "config" / "nologin.py").write_text("from .settings import *  # noqa: F403\n\ndel LOGIN_URL\n")
    unset = subprocess.run([python, "manage.py", "check", "--settings", "config.nologin"], cwd=site, env=env,
                           capture_output=True, text=True, timeout=60)
    assert "queuecore_dashboard.W001" in unset.stderr and 'LOGIN_URL = "admin:login"' in unset.stderr, unset.stderr
    lap("project, migrate, check --deploy")

    # Serve the site and log in through the documented path.
    port = free_port()
    server = subprocess.Popen([python, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"], cwd=site,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True)
    processes.append(server)
    browser = Browser(port)

    def serving() -> bool:
        assert server.poll() is None, server.stdout.read() if server.stdout else ""
        try:
            return browser.get("/admin/login/")[0] == 200
        except OSError:
            return False

    wait_until(serving, timeout=60, interval=0.2, message="runserver to answer")
    status, headers, _ = browser.get("/ops/queues/")
    assert status == 302 and headers["Location"] == "/admin/login/?next=/ops/queues/"
    status, _, page = browser.get(headers["Location"])
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert status == 200 and token
    status, headers, _ = browser.post("/admin/login/?next=/ops/queues/", {
        "csrfmiddlewaretoken": token.group(1), "username": "ops", "password": PASSWORD, "next": "/ops/queues/"})
    assert status == 302 and headers["Location"] == "/ops/queues/"
    status, _, page = browser.get("/ops/queues/")
    assert status == 200 and 'href="/ops/queues/servers/"' in page and "data-qc-live-toggle" in page
    assert re.search(r'action="/admin/logout/"[^>]*data-qc-logout', page)  # admin:login -> admin:logout
    lap("served and logged in")

    # A worker, and tasks enqueued from manage.py shell.
    worker = subprocess.Popen([python, "manage.py", "runworker", "--concurrency", "2"], cwd=site, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    processes.append(worker)
    with Inspector(redis_url=redis_url, key_prefix=key_prefix) as inspector:
        wait_until(lambda: inspector.servers(), timeout=60, interval=0.1, message="the worker's heartbeat")
        ids = json.loads(run([python, "manage.py", "shell", "-c", textwrap.dedent(ENQUEUE)], site, env)
                         .strip().splitlines()[-1])

        def completed(task_id: str) -> Any:
            info = inspector.get_task("default", task_id)
            return info if info.state is TaskState.COMPLETED else None

        for name in ("task", "committed", "committed_using"):
            wait_until(lambda name=name: completed(ids[name]), timeout=30, interval=0.1, message=f"{name} to complete")
        assert inspector.get_task("default", ids["task"]).result == "DIRECT"
        assert inspector.get_task("default", ids["committed"]).result == "COMMITTED"
        assert inspector.get_task("default", ids["committed_using"]).result == "COMMITTED USING"
        with pytest.raises(TaskNotFound):  # the shell has exited: the rolled back task can never come
            inspector.get_task("default", ids["rolled_back"])

        # The django.tasks result, waited for through queuecore's result handle, then read through
        # Django's API, from a new manage.py shell.
        read = textwrap.dedent(f"""
            import json
            import queuecore
            from dashboard.tasks import whisper
            waited = queuecore.result({ids["django_tasks"]!r}).get(timeout=30)
            result = whisper.get_result({ids["django_tasks"]!r})
            print(json.dumps([waited, result.status.value, result.return_value, len(result.worker_ids)]))
        """)
        got = json.loads(run([python, "manage.py", "shell", "-c", read], site, env).strip().splitlines()[-1])
        assert got == ["quiet please", "SUCCESSFUL", "quiet please", 1]

        status, _, page = browser.get("/ops/queues/default/completed/")
        assert status == 200 and all(ids[name] in page for name in ("task", "committed", "committed_using"))
        listed = json.loads(run([python, "manage.py", "adminctl", "--json", "queue", "ls"], site, env))
        assert [(q["name"], q["completed"]) for q in listed] == [("default", 4)]
    lap("tasks completed")

    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0
    print(f"end-to-end timings (seconds since start): {timings}")
