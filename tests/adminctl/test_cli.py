"""The CLI as a whole: help and examples everywhere, usage errors, connection settings, exit codes,
unreachable Redis, secrets, plain output when piped, and running without Django."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import click
import pytest

from queuecore import Client, Inspector
from queuecore.core.errors import ConfigurationError
from queuecore_adminctl.app import App, ConnectionDefaults, GlobalOptions, resolve_connection
from queuecore_adminctl.cli import cli
from queuecore_adminctl.terminal import Terminal
from tests.adminctl.conftest import ADMINCTL_SCRIPT, DEAD_URL, ROOT, clean_env
from tests.core.test_purity import BLOCK_DJANGO

ANSI = re.compile(r"\x1b\[")


def all_commands(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    out = []
    for name, command in sorted(group.commands.items()):
        out.append(((*path, name), command))
        if isinstance(command, click.Group):
            out += all_commands(command, (*path, name))
    return out


EXPECTED_COMMANDS = {
    "stats", "enqueue", "queue", "queue ls", "queue inspect", "queue history", "queue pause", "queue unpause",
    "queue limits", "queue remove", "task", "task ls", "task inspect", "task run", "task archive", "task kill",
    "task delete", "task export", "task edit",
    "task cancel", "task run-all", "task archive-all", "task delete-all", "server", "server ls", "server quiet",
    "server stop", "worker",
    "worker ls", "periodic", "periodic ls", "periodic inspect", "periodic pause", "periodic resume", "periodic run",
    "alerts", "failures", "failures ls", "failures show", "failures run", "failures archive", "failures delete",
    "type", "type ls", "type show", "bulk", "bulk ls", "bulk show", "bulk cancel",
}


def test_every_command_exists_and_its_help_has_examples(adminctl) -> None:
    names = {" ".join(path) for path, _ in all_commands(cli)}
    assert names == EXPECTED_COMMANDS
    for path, command in all_commands(cli):
        # Help never needs Redis: point it at a dead one.
        run = adminctl("--redis-url", DEAD_URL, *path, "--help", connect=False)
        assert run.code == 0, (path, run.stderr)
        assert "Example" in run.stdout, path
        assert f"adminctl {' '.join(path)}" in run.stdout or isinstance(command, click.Group), path
        assert max(len(line) for line in run.stdout.splitlines()) <= 88, path
        if not isinstance(command, click.Group):
            assert "--json" in run.stdout, path  # every command prints JSON on request


def test_root_help_and_version(adminctl) -> None:
    run = adminctl("--help", connect=False)
    assert run.code == 0
    for word in ("--redis-url", "--prefix", "--settings", "--json", "--no-color", "--debug", "QUEUECORE_REDIS_URL",
                 "Exit codes"):
        assert word in run.stdout
    version = adminctl("--version", connect=False)
    assert version.code == 0 and version.stdout.strip() == "adminctl, version 0.1.0"


@pytest.mark.parametrize("args", [
    ["nosuchcommand"],
    ["task", "ls", "default", "nosuchstate"],
    ["task", "ls", "default"],  # missing STATE
    ["task", "run", "default"],  # missing ID
    ["task", "run-all", "default", "pending"],  # pending cannot be "run"
    ["task", "archive-all", "default", "archived"],
    ["task", "delete-all", "default", "active"],
    ["task", "ls", "default", "pending", "--page", "0"],
    ["task", "ls", "default", "pending", "--size", "1001"],
    ["queue", "history", "default", "--days", "91"],
    ["stats", "--watch", "--interval", "0"],
    ["stats", "--interval", "soon"],
    ["enqueue", "t", "--process-in", "5 parsecs"],
    ["enqueue", "t", "--process-in", "1h1h"],  # a unit twice was added up (2 h)
    ["enqueue", "t", "--process-in", "30m1h"],  # units out of order
    ["enqueue", "t", "--timeout", "0"],
])
def test_usage_errors_exit_2_before_touching_redis(adminctl, args) -> None:
    run = adminctl("--redis-url", DEAD_URL, *args, connect=False)
    assert run.code == 2, run
    assert "Usage:" in run.stderr or "Error:" in run.stderr
    assert "unreachable" not in run.stderr  # refused before any connection was attempted
    assert run.stdout == ""


UNREACHABLE_COMMANDS = [
    ["stats"], ["stats", "--watch"], ["queue", "ls"], ["queue", "inspect", "q"], ["queue", "history", "q"],
    ["queue", "pause", "q"], ["queue", "unpause", "q"], ["queue", "remove", "q", "--force", "--yes"],
    ["task", "ls", "q", "pending"], ["task", "inspect", "q", "id1"], ["task", "run", "q", "id1"],
    ["task", "archive", "q", "id1"], ["task", "kill", "q", "id1"], ["task", "delete", "q", "id1"],
    ["task", "cancel", "q", "id1"], ["task", "run-all", "q", "archived", "--yes"],
    ["task", "archive-all", "q", "retry", "--yes"], ["task", "delete-all", "q", "completed", "--yes"],
    ["enqueue", "demo.noop"], ["server", "ls"], ["worker", "ls"],
    ["periodic", "ls"], ["periodic", "inspect", "e"], ["periodic", "pause", "e"], ["periodic", "resume", "e"],
    ["periodic", "run", "e"],
]


@pytest.mark.parametrize("args", UNREACHABLE_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_unreachable_redis_is_one_line_exit_2_and_hides_the_password(adminctl, args) -> None:
    url = "redis://:hunter2secret@127.0.0.1:1/0"
    for json_flag in ([], ["--json"]):
        run = adminctl("--redis-url", url, "--prefix", "qct-none", *json_flag, *args, connect=False)
        assert run.code == 2, run
        assert run.stdout == ""
        lines = run.stderr.splitlines()
        assert len(lines) == 1, run.stderr
        assert lines[0].startswith("error: Redis is unreachable")
        assert "redis://:***@127.0.0.1:1/0" in lines[0]
        assert "hunter2secret" not in run.stderr
        assert "Traceback" not in run.stderr


@pytest.mark.parametrize("args", [["queue", "ls"], ["stats"], ["task", "inspect", "q", "id1"],
                                  ["enqueue", "demo.noop"]], ids=lambda a: " ".join(a[:2]))
def test_a_server_that_does_not_speak_redis_is_unreachable_exit_2(adminctl, not_redis, args) -> None:
    """A URL whose port belongs to something else: the same one line and exit code as a Redis that is
    down, saying what answered, not redis-py's protocol error under "Redis error" (exit 1)."""
    for json_flag in ([], ["--json"]):
        run = adminctl("--redis-url", not_redis.url, "--prefix", "qct-none", *json_flag, *args, connect=False)
        assert run.code == 2, run
        assert run.stdout == "" and len(run.stderr.splitlines()) == 1, run.stderr
        assert run.stderr.startswith("error: Redis is unreachable: the server at that address does not answer in "
                                     "Redis's protocol"), run.stderr
        assert not_redis.url in run.stderr and "Traceback" not in run.stderr


def test_unreachable_redis_as_a_real_process_and_debug_shows_the_traceback(adminctl_process) -> None:
    url = "redis://user:hunter2secret@127.0.0.1:1/0"
    run = adminctl_process("--redis-url", url, "queue", "ls", connect=False)
    assert run.code == 2
    assert run.stdout == "" and len(run.stderr.splitlines()) == 1 and "Traceback" not in run.stderr
    assert "hunter2secret" not in run.stderr and "user:***@127.0.0.1:1" in run.stderr
    # The same through the environment variable, and the installed console script.
    run = adminctl_process("stats", connect=False, script=True, env=clean_env(QUEUECORE_REDIS_URL=url))
    assert run.code == 2 and "hunter2secret" not in run.stderr + run.stdout and "Traceback" not in run.stderr
    debug = adminctl_process("--debug", "--redis-url", DEAD_URL, "queue", "ls", connect=False)
    assert debug.code != 0 and "Traceback" in debug.stderr and "RedisUnavailable" in debug.stderr


def test_a_bad_redis_url_is_a_usage_error_without_the_password(adminctl) -> None:
    run = adminctl("--redis-url", "http://:hunter2secret@example.com/0", "queue", "ls", connect=False)
    assert run.code == 2
    assert run.stderr.startswith("error: invalid Redis URL") and len(run.stderr.splitlines()) == 1
    assert "hunter2secret" not in run.stderr


def test_a_password_in_a_working_url_is_never_printed(private_redis_factory, runner, key_prefix) -> None:
    # A private Redis with an ACL user, so that the URL really needs its password.
    server = private_redis_factory("--user", "default", "on", "nopass", "~*", "&*", "+@all",
                                   "--user", "admin", "on", ">pw-s3cret-xyz", "~*", "&*", "+@all")
    url = f"redis://admin:pw-s3cret-xyz@127.0.0.1:{server.port}/0"
    with Client(redis_url=url, key_prefix=key_prefix) as c:
        c.enqueue("t", {"token": "payload-is-data"}, queue="secure")
    for args in (["--json", "stats"], ["stats"], ["queue", "ls"], ["--json", "queue", "inspect", "secure"],
                 ["queue", "inspect", "nope"], ["--json", "stats", "--watch", "--count", "1"]):
        result = runner.invoke(cli, ["--redis-url", url, "--prefix", key_prefix, *args])
        assert result.exit_code in (0, 1), (args, result.stderr)
        assert "pw-s3cret-xyz" not in result.stdout + result.stderr, args
    snapshot = json.loads(runner.invoke(cli, ["--redis-url", url, "--prefix", key_prefix, "--json", "stats"]).stdout)
    assert snapshot["redis_url"] == f"redis://admin:***@127.0.0.1:{server.port}/0"
    server.stop()
    down = runner.invoke(cli, ["--redis-url", url, "--prefix", key_prefix, "stats"])
    assert down.exit_code == 2 and "pw-s3cret-xyz" not in down.stdout + down.stderr


def test_connection_precedence_flag_env_settings(adminctl, client: Client, key_prefix: str, redis_url: str,
                                                  tmp_path) -> None:
    client.enqueue("t", queue="where")
    # env only
    run = adminctl("--json", "queue", "ls", connect=False,
                   env={"QUEUECORE_REDIS_URL": redis_url, "QUEUECORE_KEY_PREFIX": key_prefix})
    assert run.code == 0 and [q["name"] for q in run.json()] == ["where"]
    # flags beat env
    run = adminctl("--redis-url", redis_url, "--prefix", key_prefix, "--json", "queue", "ls", connect=False,
                   env={"QUEUECORE_REDIS_URL": DEAD_URL, "QUEUECORE_KEY_PREFIX": "qct-elsewhere"})
    assert run.code == 0 and [q["name"] for q in run.json()] == ["where"]
    # env beats Django settings, even explicit ones
    (tmp_path / "qct_cli_settings.py").write_text(f"QUEUECORE = {{'REDIS_URL': {DEAD_URL!r}, 'KEY_PREFIX': 'x'}}\n")
    sys.path.insert(0, str(tmp_path))
    try:
        run = adminctl("--settings", "qct_cli_settings", "--json", "queue", "ls", connect=False,
                       env={"QUEUECORE_REDIS_URL": redis_url, "QUEUECORE_KEY_PREFIX": key_prefix})
        assert run.code == 0 and [q["name"] for q in run.json()] == ["where"]
        # settings are used when nothing else says where Redis is
        run = adminctl("--settings", "qct_cli_settings", "queue", "ls", connect=False)
        assert run.code == 2 and "127.0.0.1:1" in run.stderr
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("qct_cli_settings", None)


def test_an_empty_flag_is_refused_not_taken_as_absent(adminctl, client: Client, key_prefix: str,
                                                       redis_url: str) -> None:
    """``adminctl --prefix "$P"`` with ``P`` unset must not act on another prefix's data (the
    environment's, or the default ``qc``)."""
    client.enqueue("t", queue="elsewhere")
    env = {"QUEUECORE_REDIS_URL": redis_url, "QUEUECORE_KEY_PREFIX": key_prefix}
    for flags in (["--prefix", ""], ["--prefix", " "], ["--redis-url", ""], ["--redis-url", redis_url, "--prefix", ""]):
        for json_flag in ([], ["--json"]):
            run = adminctl(*flags, *json_flag, "queue", "ls", connect=False, env=env)
            assert run.code == 2, (flags, run)
            assert run.stderr == f"error: {flags[-2]} is empty: give a value, or leave the option out\n"
            assert run.stdout == ""  # no queue list: the one under the environment's prefix was not read


def test_an_empty_setting_is_refused_not_taken_as_absent(adminctl, tmp_path) -> None:
    """``QUEUECORE['KEY_PREFIX'] = os.environ.get("APP_PREFIX", "")`` with the variable unset: the site refuses
    that setting (queuecore.E002), and adminctl acted on the default prefix ``qc`` of the default Redis."""
    (tmp_path / "qct_empty_settings.py").write_text("QUEUECORE = {'REDIS_URL': 'redis://127.0.0.1:1/0', "
                                                    "'KEY_PREFIX': ''}\n")
    sys.path.insert(0, str(tmp_path))
    try:
        run = adminctl("--settings", "qct_empty_settings", "--json", "queue", "ls", connect=False)
        assert run.code == 2 and run.stdout == ""
        assert run.stderr.startswith("error: QUEUECORE['KEY_PREFIX'] in Django settings 'qct_empty_settings' must "
                                     "be a non-empty string, got ''"), run
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("qct_empty_settings", None)
    for prefix in ("", None):  # manage.py adminctl: the site's settings as written
        with pytest.raises(ConfigurationError, match=r"QUEUECORE\['KEY_PREFIX'\] in the Django settings must be "
                                                     r"a non-empty string, got "):
            resolve_connection(GlobalOptions(), {}, ConnectionDefaults(redis_url="redis://127.0.0.1:1/0",
                                                                       prefix=prefix))


def test_the_client_defaults_come_from_the_site_s_settings_and_a_bad_one_is_named() -> None:
    """``manage.py adminctl`` (the site's settings as written) and ``adminctl --settings`` pass the site's
    MAX_PAYLOAD_BYTES, DEFAULT_MAX_RETRY and DEFAULT_RETENTION to the client, as the site's own use them."""
    site = {"MAX_PAYLOAD_BYTES": 64, "DEFAULT_MAX_RETRY": 3, "DEFAULT_RETENTION": 3600}
    config = resolve_connection(GlobalOptions(), {}, ConnectionDefaults(redis_url="redis://127.0.0.1:1/0",
                                                                        prefix="p", client=site))
    assert (config.max_payload_bytes, config.default_max_retry, config.default_retention) == (64, 3, 3600)
    with pytest.raises(ConfigurationError, match=r"^QUEUECORE\['MAX_PAYLOAD_BYTES'\] in the Django settings: "
                                                 r"max_payload_bytes is out of range"):
        resolve_connection(GlobalOptions(), {}, ConnectionDefaults(redis_url="redis://127.0.0.1:1/0", prefix="p",
                                                                   client={"MAX_PAYLOAD_BYTES": 0}))


def test_a_url_option_redis_py_does_not_take_is_a_configuration_error(adminctl) -> None:
    for url, why in (("redis://127.0.0.1:6379/0?bogus=1", "unknown option 'bogus'"),
                     ("redis://127.0.0.1:6379/0?protocol=9", "protocol must be 2 or 3")):
        run = adminctl("--redis-url", url, "stats", connect=False)
        assert run.code == 2 and run.stderr.startswith(f"error: invalid Redis URL '{url}': {why}"), run
        assert "unexpected" not in run.stderr and "unreachable" not in run.stderr


def test_a_refused_url_s_message_is_shown_whole_and_without_its_password(adminctl) -> None:
    """A review: with the password "a" (written with an unencoded "@" and "/"), the CLI's last-resort
    scrubber replaced every "a" of the message ("inv***lid Redis URL"), and the URL, redacted wrongly,
    still showed the password's tail."""
    run = adminctl("--redis-url", "redis://:a@b/c@127.0.0.1:6379/0", "stats", connect=False)
    assert run.code == 2 and run.stderr.startswith(
        "error: invalid Redis URL 'redis://***@127.0.0.1:6379/0': its path holds an '@'; if it has a user "
        "name or password holding"), run
    assert "b/c" not in run.stderr


def test_django_settings_module_from_flag_and_env_as_real_processes(adminctl_process, client: Client,
                                                                    redis_url: str, key_prefix: str, tmp_path) -> None:
    client.enqueue("t", queue="from-settings")
    (tmp_path / "qct_site_settings.py").write_text(
        f"QUEUECORE = {{'REDIS_URL': {redis_url!r}, 'KEY_PREFIX': {key_prefix!r}, 'CONCURRENCY': 3}}\n")
    # --settings, found in the current directory as manage.py would
    run = adminctl_process("--settings", "qct_site_settings", "--json", "queue", "ls", connect=False, cwd=tmp_path)
    assert run.code == 0, run.stderr
    assert [q["name"] for q in run.json()] == ["from-settings"]
    # DJANGO_SETTINGS_MODULE, through the console script
    run = adminctl_process("--json", "queue", "ls", connect=False, script=True, cwd=tmp_path,
                           env=clean_env(DJANGO_SETTINGS_MODULE="qct_site_settings"))
    assert run.code == 0 and [q["name"] for q in run.json()] == ["from-settings"]
    # a settings module that cannot be imported is a clear configuration error
    run = adminctl_process("--settings", "no_such_settings_module", "queue", "ls", connect=False, cwd=tmp_path)
    assert run.code == 2 and run.stderr.startswith("error: cannot load Django settings 'no_such_settings_module'")
    assert "Traceback" not in run.stderr


def test_the_cli_runs_without_django(redis_url: str, key_prefix: str, client: Client) -> None:
    client.enqueue("t", queue="nodjango")
    code = BLOCK_DJANGO + textwrap.dedent("""
        from queuecore_adminctl.cli import main
        try:
            main(sys.argv[1:])
        except SystemExit as exc:
            status = exc.code
        loaded = sorted(n for n, m in sys.modules.items() if n.split(".")[0] == "django" and m is not None)
        print("EXIT", status, "DJANGO", loaded, file=sys.stderr)
    """)
    proc = subprocess.run([sys.executable, "-c", code, "--redis-url", redis_url, "--prefix", key_prefix, "--json",
                           "queue", "ls"], capture_output=True, text=True, env=clean_env(), cwd=ROOT, timeout=60)
    assert "EXIT 0 DJANGO []" in proc.stderr, proc.stderr
    assert '"nodjango"' in proc.stdout


def test_console_script_and_python_m_agree(adminctl_process, client: Client) -> None:
    assert ADMINCTL_SCRIPT.exists(), "pip install -e '.[dev]' installs the adminctl console script"
    client.enqueue("t", {"n": 1}, queue="both")
    by_module = adminctl_process("--json", "queue", "ls")
    by_script = adminctl_process("--json", "queue", "ls", script=True)
    assert by_module.code == by_script.code == 0
    assert [q["name"] for q in by_module.json()] == [q["name"] for q in by_script.json()] == ["both"]


def test_piped_output_is_plain_and_color_can_be_forced(adminctl_process, client: Client) -> None:
    client.enqueue("t", queue="colours")
    plain = adminctl_process("queue", "ls")
    assert plain.code == 0 and "colours" in plain.stdout
    assert not ANSI.search(plain.stdout)
    forced = adminctl_process("--color", "queue", "ls")
    assert ANSI.search(forced.stdout)
    no_color = adminctl_process("--no-color", "queue", "ls", env=clean_env(FORCE_COLOR="1"))
    assert not ANSI.search(no_color.stdout)


def test_manage_py_adminctl_takes_the_connection_from_settings(client: Client, redis_url: str, key_prefix: str,
                                                               tmp_path) -> None:
    client.enqueue("t", queue="managed")
    env = clean_env(DJANGO_SETTINGS_MODULE="config.settings", QUEUECORE_REDIS_URL=redis_url,
                    QUEUECORE_KEY_PREFIX=key_prefix, QUEUECORE_VAR_DIR=str(tmp_path))
    proc = subprocess.run([sys.executable, "manage.py", "adminctl", "--json", "queue", "ls"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert [q["name"] for q in json.loads(proc.stdout)] == ["managed"]
    proc = subprocess.run([sys.executable, "manage.py", "adminctl", "task", "inspect", "managed", "nope"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and proc.stderr.strip() == "error: no task 'nope' in queue 'managed'"


def test_actions_are_audited_as_the_cli_user(adminctl, client: Client, inspector: Inspector) -> None:
    info = client.enqueue("t", process_in=3600)
    assert adminctl("task", "run", "default", info.id).code == 0
    (entry,) = inspector.audit_log()
    assert entry.action == "task.run" and entry.task_ids == [info.id]
    assert re.fullmatch(r"cli:[^@\s]+@\S+", entry.actor), entry.actor


def test_call_command_runs_the_cli_with_the_settings_connection(settings, client: Client, redis_url: str,
                                                                key_prefix: str, capsys) -> None:
    from django.core.management import CommandError, call_command

    settings.QUEUECORE = {"REDIS_URL": redis_url, "KEY_PREFIX": key_prefix}
    client.enqueue("t", queue="called")
    call_command("adminctl", "queue", "ls")
    assert "called" in capsys.readouterr().out
    with pytest.raises(CommandError) as failed:
        call_command("adminctl", "queue", "inspect", "nope")
    assert failed.value.returncode == 1
    assert "no queue named 'nope'" in capsys.readouterr().err


def test_a_settings_module_whose_queuecore_is_not_a_dict_is_refused(adminctl, tmp_path) -> None:
    """``QUEUECORE = "redis://..."`` (a URL where the dict belongs) was ignored: adminctl went on to the
    default Redis, as if the settings said nothing. It is refused, as the Django app's check refuses it."""
    (tmp_path / "qct_bad_settings.py").write_text("QUEUECORE = 'redis://10.0.0.9:6379/0'\n")
    sys.path.insert(0, str(tmp_path))
    try:
        run = adminctl("--settings", "qct_bad_settings", "queue", "ls", connect=False)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("qct_bad_settings", None)
    assert run.code == 2 and "QUEUECORE in Django settings 'qct_bad_settings' must be a dict, not str" in run.stderr


def test_the_scrubber_knows_every_password_option() -> None:
    """A review: ``ssl_password`` (redis-py's TLS key passphrase) was not among the secrets never printed."""
    url = "rediss://h:6379/0?ssl_password=Sekr1t&client_name=me"
    environ = {"QUEUECORE_REDIS_URL": "redis+sentinel://s:26379/m?sentinel_pass%77ord=Other"}
    found = App(GlobalOptions(redis_url=url), Terminal(), environ=environ).secrets()
    assert "Sekr1t" in found and "Other" in found and "me" not in found
