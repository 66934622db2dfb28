"""``manage.py adminctl`` lives with the CLI (the ``queuecore_adminctl`` app); the core app never imports the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from django.core.management import call_command, get_commands, load_command_class

from queuecore import Client

ROOT = Path(__file__).resolve().parents[2]

# A process with the CLI and its libraries unimportable, Django set up with the queuecore app only,
# then every module of the queuecore package imported (the management commands included).
WITHOUT_THE_CLI = """
import importlib
import importlib.abc
import pkgutil
import sys

BLOCKED = ("queuecore_adminctl", "adminctl", "click", "rich")


class BlockTheCli(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"the queuecore app imported {name}")
        return None


sys.meta_path.insert(0, BlockTheCli())
for name in BLOCKED:
    sys.modules[name] = None

import queuecore
import queuecore.apps
import queuecore.management.commands

from django.conf import settings

settings.configure(
    INSTALLED_APPS=["django.contrib.auth", "django.contrib.contenttypes", "queuecore"],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    USE_TZ=True,
    QUEUECORE={"REDIS_URL": "redis://127.0.0.1:1/0", "KEY_PREFIX": "qct-no-cli"},
)
import django

django.setup()

names = sorted(m.name for m in pkgutil.walk_packages(queuecore.__path__, "queuecore."))
for name in names:
    importlib.import_module(name)

from django.core.management import get_commands

commands = get_commands()
assert "runworker" in commands, sorted(commands)
assert "adminctl" not in commands, commands.get("adminctl")
loaded = sorted(n for n, m in sys.modules.items() if n.split(".")[0] in BLOCKED and m is not None)
assert not loaded, loaded
print("\\n".join(names))
"""


def test_the_queuecore_app_never_imports_the_cli() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "QUEUECORE_", "PYTEST_"))}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(WITHOUT_THE_CLI)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    imported = set(proc.stdout.split())
    assert {"queuecore.apps", "queuecore.management.commands.runworker", "queuecore.checks",
            "queuecore.core.inspector"} <= imported
    assert not any(name.endswith(".adminctl") for name in imported), imported


@pytest.mark.parametrize("module", ["queuecore_adminctl.cli", "queuecore_adminctl.management.commands.adminctl",
                                    "click", "rich.console"])
def test_the_blocker_really_blocks_the_cli(module: str) -> None:
    code = WITHOUT_THE_CLI.split("import queuecore\n")[0] + f"import {module}\n"
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode != 0
    assert "ImportError" in proc.stderr or "ModuleNotFoundError" in proc.stderr, proc.stderr


def test_manage_py_adminctl_comes_from_the_adminctl_app() -> None:
    assert get_commands()["adminctl"] == "queuecore_adminctl"
    command = load_command_class("queuecore_adminctl", "adminctl")
    assert type(command).__module__ == "queuecore_adminctl.management.commands.adminctl"
    from django.apps import apps

    config = apps.get_app_config("queuecore_adminctl")
    assert (config.name, config.label) == ("queuecore_adminctl", "queuecore_adminctl")


def test_call_command_adminctl_stats_json(settings, client: Client, redis_url: str, key_prefix: str,
                                          capsys) -> None:
    settings.QUEUECORE = {"REDIS_URL": redis_url, "KEY_PREFIX": key_prefix}
    client.enqueue("t", queue="from-the-app")
    capsys.readouterr()
    call_command("adminctl", "stats", "--json")
    snapshot = json.loads(capsys.readouterr().out)
    assert snapshot["prefix"] == key_prefix
    assert [q["name"] for q in snapshot["queues"]] == ["from-the-app"]
    assert snapshot["totals"]["pending"] == 1


def test_manage_py_adminctl_enqueue_follows_the_site_s_client_defaults(settings, inspector, redis_url: str,
                                                                        key_prefix: str, capsys) -> None:
    """A review: ``manage.py adminctl enqueue`` took only REDIS_URL and KEY_PREFIX from QUEUECORE, so an
    operator's task got max_retry 25 and no retention instead of the site's defaults, and a payload over
    the site's MAX_PAYLOAD_BYTES was stored; the dashboard's enqueue form followed them."""
    settings.QUEUECORE = {"REDIS_URL": redis_url, "KEY_PREFIX": key_prefix, "DEFAULT_MAX_RETRY": 3,
                          "DEFAULT_RETENTION": 3600, "MAX_PAYLOAD_BYTES": 64}
    command = load_command_class("queuecore_adminctl", "adminctl")
    with pytest.raises(SystemExit) as exited:
        command.run_from_argv(["manage.py", "adminctl", "--json", "enqueue", "demo.echo", "--force",
                               "--queue", "ops", "--payload", '{"text": "x"}'])
    out = capsys.readouterr().out
    assert exited.value.code == 0, out
    info = inspector.get_task("ops", json.loads(out)["id"])
    assert (info.max_retry, info.retention) == (3, 3600)
    with pytest.raises(SystemExit) as exited:
        command.run_from_argv(["manage.py", "adminctl", "enqueue", "demo.echo", "--force", "--queue", "ops",
                               "--payload", json.dumps({"text": "x" * 200})])
    err = capsys.readouterr().err
    assert exited.value.code != 0 and "over the limit of 64 bytes" in err and "Traceback" not in err, err
    assert inspector.queue_info("ops").pending == 1


@pytest.mark.parametrize(("queuecore", "said"), [
    ({"REDIS_URL": "redis://127.0.0.1:1/0", "KEY_PREFIX": "pro be"}, "error: invalid key prefix 'pro be'"),
    ({"REDIS_URL": "http://127.0.0.1:1/0"}, "error: "),
    ("redis://127.0.0.1:1/0", "error: QUEUECORE in the Django settings must be a dict, not str"),
])
@pytest.mark.parametrize("argv", [["queue", "ls"], ["--json", "stats"]])
def test_manage_py_adminctl_refuses_bad_connection_settings_in_one_line(settings, capsys, queuecore, said,
                                                                        argv) -> None:
    """``manage.py adminctl`` with a bad ``KEY_PREFIX`` or ``REDIS_URL`` printed a traceback (exit 1) even
    for ``--help``; given ``QUEUECORE`` as a string, it used the default Redis (exit 0)."""
    settings.QUEUECORE = queuecore
    command = load_command_class("queuecore_adminctl", "adminctl")
    with pytest.raises(SystemExit) as exited:
        command.run_from_argv(["manage.py", "adminctl", *argv])
    err = capsys.readouterr().err
    assert exited.value.code == 2, err
    assert said in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    with pytest.raises(SystemExit) as exited:
        command.run_from_argv(["manage.py", "adminctl", "--help"])
    assert exited.value.code == 0
    assert "Operate queuecore from a terminal" in capsys.readouterr().out


@pytest.mark.parametrize("how", ["manage.py", "call_command"])
def test_manage_py_adminctl_without_the_cli_extra_says_so_in_one_line(how: str) -> None:
    """A new user's walk through the README: with ``queuecore_adminctl`` installed as an app but click
    missing (the cli extra not installed), ``manage.py adminctl stats`` printed a traceback; and
    ``call_command("adminctl", ...)`` raised ModuleNotFoundError, where a command's refusal is a
    ``CommandError`` (which manage.py prints in one line)."""
    run_it = ('execute_from_command_line(["manage.py", "adminctl", "stats"])' if how == "manage.py" else
              'django.setup(); call_command("adminctl", "stats")')
    code = textwrap.dedent("""
        import sys
        sys.modules["click"] = None  # the cli extra is not installed
        from django.conf import settings
        settings.configure(
            INSTALLED_APPS=["django.contrib.auth", "django.contrib.contenttypes", "queuecore", "queuecore_adminctl"],
            DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
            USE_TZ=True, QUEUECORE={"REDIS_URL": "redis://127.0.0.1:1/0", "KEY_PREFIX": "qct-no-click"})
        import django
        from django.core.management import CommandError, call_command, execute_from_command_line
        try:
            RUN_IT
        except CommandError as exc:
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(exc.returncode)
    """).replace("RUN_IT", run_it)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT,
                         env={**os.environ, "DJANGO_SETTINGS_MODULE": ""})
    assert run.returncode == 2, run
    assert run.stderr.strip() == ("error: adminctl needs the cli extra: pip install 'queuecore[cli]' "
                                  "(import of click halted; None in sys.modules)"), run.stderr


@pytest.mark.parametrize("tail", [["--settings", "tests.settings"], ["--settings=tests.settings"],
                                  ["--pythonpath", ".", "--settings", "tests.settings"]])
def test_manage_py_adminctl_takes_django_s_options_after_the_command(settings, client: Client, redis_url: str,
                                                                     key_prefix: str, capsys, tail) -> None:
    """A new user's walk through the README: ``manage.py adminctl queue ls --settings mysite.settings``
    (Django's options last, by habit) was refused, "No such option '--settings'", though Django had
    already read them (it reads --settings and --pythonpath wherever they stand)."""
    settings.QUEUECORE = {"REDIS_URL": redis_url, "KEY_PREFIX": key_prefix}
    client.enqueue("t", queue="settings-last")
    capsys.readouterr()
    command = load_command_class("queuecore_adminctl", "adminctl")
    with pytest.raises(SystemExit) as exited:
        command.run_from_argv(["manage.py", "adminctl", "--json", "queue", "ls", *tail])
    out, err = capsys.readouterr()
    assert exited.value.code in (0, None), err
    assert [q["name"] for q in json.loads(out)] == ["settings-last"]


def test_manage_py_adminctl_keeps_what_django_could_not_read() -> None:
    """A review: ``--settings`` with no value (manage.py's own reading fails and applies nothing) was
    dropped with the argument after it, so ``task ls ... --search --settings`` lost the search's value."""
    from queuecore_adminctl.management.commands.adminctl import _without_django_options

    args = ["task", "ls", "default", "archived", "--search", "--settings", "--format", "csv"]
    assert _without_django_options(args) == args
    assert _without_django_options(["task", "ls", "--", "--settings", "x"]) == ["task", "ls", "--", "--settings", "x"]
    assert _without_django_options(["queue", "ls", "--settings", "s", "--pythonpath=."]) == ["queue", "ls"]
