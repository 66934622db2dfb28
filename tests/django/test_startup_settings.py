"""A bad ``QUEUECORE`` value never stops Django from starting: ``manage.py check`` reports it (exit 1,
no traceback), ``runworker`` and ``queuecore_healthcheck`` refuse it with one line. Real ``manage.py``
processes, each with a settings module of its own (``tests.settings`` plus the value under test)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def manage(tmp_path, key_prefix):
    """Run ``manage.py ARGS`` with ``tests.settings`` and ``QUEUECORE`` replaced by ``queuecore`` (a
    Python expression, so that any value can be given), and the environment ``env``."""

    def run(*args: str, queuecore: str = "{}", env: dict[str, str] | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
        (tmp_path / "qc_site_settings.py").write_text(
            f"from tests.settings import *  # noqa: F403\n\nQUEUECORE = {queuecore}\n")
        environ = {k: v for k, v in os.environ.items() if not k.startswith(("QUEUECORE_", "DJANGO_"))}
        environ.update(DJANGO_SETTINGS_MODULE="qc_site_settings", PYTHONPATH=f"{ROOT}{os.pathsep}{tmp_path}",
                       **(env or {}))
        return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=environ, capture_output=True,
                              text=True, timeout=timeout)

    return run


@pytest.mark.parametrize(("queuecore", "env", "expected"), [
    ('{"REDIS_URL": 5}', {}, "queuecore.E002) QUEUECORE['REDIS_URL']: the Redis URL must be a non-empty string"),
    ('{"KEY_PREFIX": None}', {}, "queuecore.E002) QUEUECORE['KEY_PREFIX']: invalid key prefix None"),
    ('{"DEFAULT_RETENTION": -1}', {}, "queuecore.E002) QUEUECORE['DEFAULT_RETENTION']: default_retention is out"),
    ('{"MAX_PAYLOAD_BYTES": 0}', {}, "queuecore.E002) QUEUECORE['MAX_PAYLOAD_BYTES']: max_payload_bytes is out"),
    ('{"DEFAULT_MAX_RETRY": "3"}', {}, "queuecore.E002) QUEUECORE['DEFAULT_MAX_RETRY']: default_max_retry must"),
    ("{}", {"QUEUECORE_REDIS_URL": "redis://127.0.0.1:6379/0?bogus=1"},
     "queuecore.E002) QUEUECORE_REDIS_URL (environment, as QUEUECORE has no 'REDIS_URL'): invalid Redis URL "
     "'redis://127.0.0.1:6379/0?bogus=1': unknown option"),
    ("{}", {"QUEUECORE_KEY_PREFIX": "a b"}, "queuecore.E002) QUEUECORE_KEY_PREFIX (environment, as QUEUECORE "
                                            "has no 'KEY_PREFIX'): invalid key prefix 'a b'"),
    ('{"TASK_MODULES": ["no.such.module"]}', {}, "queuecore.E006) QUEUECORE['TASK_MODULES']: cannot import "
                                                 "'no.such.module'"),
    ('{"TASK_MODULES": "x"}', {}, "queuecore.E004) QUEUECORE['TASK_MODULES'] must be a list of dotted module paths"),
    ('{"QUEUES": 5}', {}, "queuecore.E003) QUEUECORE['QUEUES']: queues must be a dict"),
    ('{"ERROR_HANDLER": 5}', {}, "queuecore.E006) QUEUECORE['ERROR_HANDLER']: expected a dotted path"),
    ('{"RETRY_DELAY": 5}', {}, "queuecore.E006) QUEUECORE['RETRY_DELAY']: expected a dotted path"),
    ('{"MIDDLEWARE": [5]}', {}, "queuecore.E006) QUEUECORE['MIDDLEWARE']: expected a dotted path"),
    ('{"DASHBOARD": {"ACCESS_CALLBACK": 5}}', {}, "queuecore_dashboard.E004) QUEUECORE['DASHBOARD']"
                                                  "['ACCESS_CALLBACK']: cannot import 5"),
    ('{"DASHBOARD": ["x"]}', {}, "queuecore.E014) QUEUECORE['DASHBOARD'] must be a dict"),
    ('{"DASHBOARD": "x"}', {}, "queuecore.E014) QUEUECORE['DASHBOARD'] must be a dict"),
    ('{"CONCURENCY": 4, "LEASE_DURATION": "abc"}', {}, "queuecore.E005) QUEUECORE['LEASE_DURATION']: lease_duration"),
    ('{"STRICT_PRIORITY": "false"}', {}, "queuecore.E005) QUEUECORE['STRICT_PRIORITY']: strict_priority must be"),
    ('{"MIDDLEWARE": ["os.sep"]}', {}, "queuecore.E005) QUEUECORE['MIDDLEWARE']: middleware must be a list of"),
])
def test_check_reports_a_bad_value_naming_its_key(manage, queuecore, env, expected) -> None:
    checked = manage("check", queuecore=queuecore, env=env)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "Traceback" not in checked.stderr, checked.stderr
    assert expected in checked.stderr, checked.stderr


def test_a_key_that_is_not_a_string_is_an_unknown_key_not_a_traceback(manage) -> None:
    checked = manage("check", queuecore='{5: 1, "ZZZ": 2}')
    assert "Traceback" not in checked.stderr, checked.stderr
    assert "queuecore.W001) QUEUECORE has unknown key(s): 5, ZZZ." in checked.stderr, checked.stderr


def test_check_passes_when_nothing_is_wrong(manage) -> None:
    checked = manage("check", queuecore='{"TASK_MODULES": ["tests.helpers.proc_tasks"]}')
    assert checked.returncode == 0, checked.stderr
    assert "System check identified no issues" in checked.stdout


@pytest.mark.parametrize(("queuecore", "env", "expected"), [
    ('{"REDIS_URL": 5}', {}, "CommandError: QUEUECORE['REDIS_URL']: the Redis URL must be a non-empty string"),
    ("{}", {"QUEUECORE_KEY_PREFIX": "a b"}, "CommandError: QUEUECORE_KEY_PREFIX (environment, as QUEUECORE has "
                                            "no 'KEY_PREFIX'): invalid key prefix 'a b'"),
    ('{"TASK_MODULES": ["no.such.module"]}', {}, "CommandError: QUEUECORE['TASK_MODULES']: cannot import"),
    ('{"STRICT_PRIORITY": "false"}', {}, "CommandError: QUEUECORE['STRICT_PRIORITY']: strict_priority must be True"),
    # what --skip-checks let through: the defaults' Redis for a QUEUECORE that is not a dict, a traceback
    # for a METRICS port 'abc', metrics served on port 1 for True
    ("None", {}, "CommandError: QUEUECORE must be a dict. (queuecore.E001)"),
    ("['x']", {}, "CommandError: QUEUECORE must be a dict. (queuecore.E001)"),
    ('{"METRICS": {"PORT": "abc"}}', {}, "CommandError: QUEUECORE['METRICS']: PORT must be a port number"),
    ('{"METRICS": {"PORT": True}}', {}, "CommandError: QUEUECORE['METRICS']: PORT must be a port number"),
    ('{"LOG_FORMAT": None}', {}, "CommandError: QUEUECORE['LOG_FORMAT']"),
])
def test_runworker_refuses_a_bad_value_in_one_line(manage, queuecore, env, expected) -> None:
    # With the system checks (the default) they refuse it; without them (--skip-checks), runworker does.
    checked = manage("runworker", queuecore=queuecore, env=env)
    assert checked.returncode == 1 and "Traceback" not in checked.stderr, checked.stderr
    assert "SystemCheckError" in checked.stderr, checked.stderr
    skipped = manage("runworker", "--skip-checks", queuecore=queuecore, env=env)
    assert skipped.returncode == 1 and "Traceback" not in skipped.stderr, skipped.stderr
    assert skipped.stderr.startswith(expected) and len(skipped.stderr.strip().splitlines()) == 1, skipped.stderr


@pytest.mark.parametrize(("value", "expected"), [
    ({"REDIS_URL": "redis://127.0.0.1:6379/0?bogus=1"}, r"QUEUECORE\['REDIS_URL'\]: invalid Redis URL"),
    ({"DEFAULT_RETENTION": -1}, r"QUEUECORE\['DEFAULT_RETENTION'\]: default_retention is out of range"),
    ({"TASK_MODULES": "x"}, r"QUEUECORE\['TASK_MODULES'\] must be a list of dotted module paths"),
    ({"MIDDLEWARE": ["os.sep"]}, r"^QUEUECORE\['MIDDLEWARE'\]: middleware must be a list of callables"),
    ({"MIDDLEWARE": [5]}, r"^QUEUECORE\['MIDDLEWARE'\]: expected a dotted path \(a string\), got 5"),
    ({"MIDDLEWARE": "a.b"}, r"^QUEUECORE\['MIDDLEWARE'\] must be a list of dotted paths"),
    ({"RETRY_DELAY": "no.such.func"}, r"^QUEUECORE\['RETRY_DELAY'\]: cannot import 'no.such.func'"),
])
def test_call_command_runworker_raises_command_error(settings, value, expected) -> None:
    settings.QUEUECORE = value
    with pytest.raises(CommandError, match=expected):
        call_command("runworker")


@pytest.mark.parametrize("port", ["99999", "-1", "65536"])
def test_runworker_refuses_a_metrics_port_out_of_range(manage, redis_url, key_prefix, port) -> None:
    ran = manage("runworker", "--skip-checks", "--metrics-port", port,
                 queuecore=f'{{"REDIS_URL": {redis_url!r}, "KEY_PREFIX": {key_prefix!r}}}')
    assert ran.returncode == 1 and "Traceback" not in ran.stderr, ran.stderr
    assert f"CommandError: --metrics-port must be a port number (0-65535), got {port}" in ran.stderr


@pytest.mark.parametrize(("url", "expected"), [
    ("redis+cluster://127.0.0.1:{port}", "CommandError: the redis+cluster:// URL names a server that is not a "
                                         "Redis Cluster node"),
    ("redis+sentinel://127.0.0.1:{port}/mymaster", "CommandError: the redis+sentinel:// URL names a server that "
                                                   "is not a sentinel"),
    ("redis://127.0.0.1:{port}/99999", "CommandError: the URL's database number is beyond those this Redis has"),
])
@pytest.mark.parametrize("processes", ["1", "2"])
def test_runworker_refuses_a_url_naming_the_wrong_kind_of_server(manage, private_redis, key_prefix, url, expected,
                                                                  processes) -> None:
    """A review: a plain Redis named as a cluster ended in a WrongServer traceback; named as a sentinel,
    or with a database it lacks, the worker started and logged errors for ever (3,000 lines in 5 s)."""
    ran = manage("runworker", "--skip-checks", "--processes", processes, "--redis-url",
                 url.format(port=private_redis.port), queuecore=f'{{"KEY_PREFIX": {key_prefix!r}}}', timeout=30)
    assert ran.returncode == 1 and "Traceback" not in ran.stderr, ran.stderr
    assert ran.stderr.startswith(expected) and len(ran.stderr.strip().splitlines()) == 1, ran.stderr


@pytest.mark.parametrize("flag", ["--redis-url", "--prefix"])
def test_runworker_refuses_an_empty_flag_rather_than_taking_the_settings(settings, flag) -> None:
    """``--prefix "$P"`` with ``P`` unset ran on the settings' prefix, as adminctl once did."""
    with pytest.raises(CommandError, match=f"^{flag} was given empty$"):
        call_command("runworker", flag, " ")


def test_call_command_runworker_refuses_a_metrics_port_out_of_range(settings) -> None:
    with pytest.raises(CommandError, match=r"--metrics-port must be a port number \(0-65535\), got 99999"):
        call_command("runworker", metrics_port=99999)


@pytest.mark.parametrize(("args", "expected"), [
    (["--timeout", "0"], "CommandError: --timeout: socket_timeout is out of range: got 0.0"),
    (["--timeout", "nan"], "CommandError: --timeout: socket_timeout is out of range: got nan"),
    (["--redis-url", "foo://x"], "CommandError: --redis-url: invalid Redis URL 'foo://x'"),
])
def test_healthcheck_refuses_a_bad_option_in_one_line(manage, tmp_path, args, expected) -> None:
    ran = manage("queuecore_healthcheck", "--health-file", str(tmp_path / "h.json"), *args)
    assert ran.returncode == 1, ran.stderr  # the documented code of "not healthy"
    assert ran.stderr.strip().splitlines() == [ran.stderr.strip()], ran.stderr
    assert ran.stderr.startswith(expected), ran.stderr
    assert ran.stdout == ""


def test_healthcheck_refuses_a_bad_setting_in_one_line(manage, tmp_path) -> None:
    ran = manage("queuecore_healthcheck", "--health-file", str(tmp_path / "h.json"),
                 env={"QUEUECORE_REDIS_URL": "redis://127.0.0.1:6379/0?bogus=1"})
    assert ran.returncode == 1
    assert ran.stderr.startswith("CommandError: QUEUECORE_REDIS_URL (environment, as QUEUECORE has no 'REDIS_URL'): "
                                 "invalid Redis URL"), ran.stderr
    assert len(ran.stderr.strip().splitlines()) == 1, ran.stderr
