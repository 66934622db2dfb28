"""Neither the CLI nor the dashboard ever prints a Redis password from the URL: not on success, not
in errors (unreachable, wrong password), not in ``--json``, not with ``--debug`` tracebacks, not on the
dashboard's pages, Redis page or 503 page."""

from __future__ import annotations

import uuid

import pytest
import redis
from click.testing import CliRunner
from django.contrib.auth.models import User
from django.test import Client as DjangoClient

from queuecore import Client, ConnectionConfig
from queuecore_adminctl.cli import cli

SECRET = "s3cretPW"

CLI_COMMANDS = [
    ["stats"], ["--json", "stats"], ["stats", "--watch", "--count", "1"], ["queue", "ls"], ["--json", "queue", "ls"],
    ["queue", "inspect", "default"], ["queue", "history", "default"], ["task", "ls", "default", "pending"],
    ["--json", "task", "ls", "default", "pending"], ["task", "inspect", "default", "nope"],
    ["task", "delete", "default", "nope"], ["--json", "task", "run", "default", "nope"],
    ["enqueue", "t.x", "--payload", "{}"], ["--json", "enqueue", "t.x"], ["server", "ls"], ["worker", "ls"],
    ["queue", "pause", "default"], ["queue", "unpause", "default"], ["queue", "remove", "nope"],
    ["--debug", "queue", "ls"], ["--debug", "task", "inspect", "default", "nope"],
]


@pytest.fixture(scope="module")
def secured(private_redis_factory):
    """A private Redis where user ``qc`` has the password ``SECRET``; default user disabled."""
    server = private_redis_factory()
    admin = redis.Redis(port=server.port)
    admin.execute_command("ACL", "SETUSER", "qc", "on", f">{SECRET}", "~*", "&*", "+@all")
    admin.close()
    yield server
    server.stop()


def urls(secured) -> dict[str, str]:
    return {
        "good": f"redis://qc:{SECRET}@127.0.0.1:{secured.port}/0",
        "wrong-password": f"redis://qc:{SECRET}x@127.0.0.1:{secured.port}/0",
        "unreachable": f"redis://qc:{SECRET}@127.0.0.1:1/0",
    }


@pytest.mark.parametrize("which", ["good", "wrong-password", "unreachable"])
def test_cli_never_prints_the_password(secured, which: str) -> None:
    url = urls(secured)[which]
    prefix = f"qct-{uuid.uuid4().hex[:8]}"
    if which == "good":
        with Client(connection=ConnectionConfig(redis_url=url, key_prefix=prefix)) as c:
            c.enqueue("t.x", {"a": 1})
    runner = CliRunner(env={"QUEUECORE_REDIS_URL": None, "QUEUECORE_KEY_PREFIX": None, "COLUMNS": "200"})
    codes = set()
    for args in CLI_COMMANDS:
        for how in ("flag", "env"):
            base = ["--redis-url", url, "--prefix", prefix] if how == "flag" else ["--prefix", prefix]
            env = {"QUEUECORE_REDIS_URL": url} if how == "env" else None
            result = runner.invoke(cli, [*base, *args], env=env, input="n\n", prog_name="adminctl")
            codes.add(result.exit_code)
            out = result.stdout + result.stderr + (repr(result.exception) if result.exception else "")
            assert SECRET not in out, (args, how, out)
    if which == "good":
        assert 0 in codes
    else:
        assert codes <= {1, 2}


@pytest.mark.django_db
@pytest.mark.parametrize("which", ["good", "wrong-password", "unreachable"])
def test_dashboard_never_shows_the_password(secured, settings, which: str) -> None:
    prefix = f"qct-{uuid.uuid4().hex[:8]}"
    url = urls(secured)[which]
    settings.QUEUECORE = {"REDIS_URL": url, "KEY_PREFIX": prefix}
    if which == "good":
        with Client(connection=ConnectionConfig(redis_url=url, key_prefix=prefix)) as c:
            task = c.enqueue("t.x", {"a": 1})
    user = User.objects.create_superuser("root", password="pw-root")
    browser = DjangoClient()
    browser.force_login(user)
    pages = ["/queues/", "/queues/_/stats/", "/queues/_/queues/", "/queues/redis/", "/queues/servers/",
             "/queues/audit/", "/queues/default/pending/"]
    if which == "good":
        pages.append(f"/queues/default/tasks/{task.id}/")
    statuses = set()
    for page in pages:
        for headers in ({}, {"HTTP_HX_REQUEST": "true"}):
            response = browser.get(page, **headers)
            statuses.add(response.status_code)
            assert SECRET not in response.content.decode(), (page, headers)
    response = browser.post("/queues/default/pause/")
    assert SECRET not in response.content.decode()
    if which == "good":
        assert statuses == {200}
    else:
        assert 503 in statuses
