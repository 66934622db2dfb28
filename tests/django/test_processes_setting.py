"""``QUEUECORE['PROCESSES']`` and ``runworker --processes``: bounds, checks, and the children's command line.

The processes themselves are tested in ``test_runworker_processes.py``.
"""

from __future__ import annotations

import sys

import pytest
from django.core.checks import Error
from django.core.management import call_command
from django.core.management.base import CommandError

from queuecore.checks import check_settings
from queuecore.conf import get_config
from queuecore.core.errors import ConfigurationError
from queuecore.management.commands.runworker import Command

pytestmark = pytest.mark.usefixtures("no_task_types")  # the settings checks read the task registry (W002)

RANGE = "allowed: a whole number from 1 to 64 processes"


def test_the_default_is_one_process_and_the_option_wins_over_the_setting(settings) -> None:
    assert get_config().processes() == 1
    settings.QUEUECORE = {"PROCESSES": 4}
    assert get_config().processes() == 4
    assert get_config().processes(2) == 2


@pytest.mark.parametrize("value", [0, 65, -1])
def test_out_of_range_is_reported_by_check_and_refused_by_runworker(settings, value) -> None:
    settings.QUEUECORE = {"PROCESSES": value}
    message = f"QUEUECORE['PROCESSES']: processes is out of range: got {value}; {RANGE}"
    assert check_settings() == [Error(message, hint="README, 'Several worker processes per machine'",
                                      id="queuecore.E013")]
    with pytest.raises(ConfigurationError) as caught:
        get_config().processes()
    assert str(caught.value) == message
    with pytest.raises(CommandError, match=r"QUEUECORE\['PROCESSES'\]: processes is out of range"):
        call_command("runworker")


@pytest.mark.parametrize("value", ["2", 2.0, True, None])
def test_not_a_whole_number_is_refused(settings, value) -> None:
    settings.QUEUECORE = {"PROCESSES": value}
    assert [m.id for m in check_settings()] == ["queuecore.E013"]
    assert f"processes must be a whole number from 1 to 64 processes, got {value!r}" in check_settings()[0].msg


def test_the_option_out_of_range_is_refused_before_anything_starts() -> None:
    with pytest.raises(CommandError, match=f"--processes is out of range: got 65; {RANGE}"):
        call_command("runworker", processes=65)


def test_children_run_the_same_command_without_processes_and_with_a_health_file_each(monkeypatch, tmp_path) -> None:
    manage = tmp_path / "manage.py"
    manage.write_text("")
    monkeypatch.setattr(sys, "argv", [str(manage), "runworker", "--processes", "3", "-c", "4"])
    options = {"processes": 3, "concurrency": 4, "queues": "a=2,b", "strict": True, "health_file": "/tmp/h.json",
               "metrics_port": 9100, "redis_url": None, "verbosity": 1, "settings": "site.settings", "traceback": False}
    assert Command.child_argv(options, 2) == [
        sys.executable, str(manage), "runworker", "--processes", "1", "--skip-checks", "--queues", "a=2,b",
        "--concurrency", "4",
        "--settings", "site.settings", "--strict", "--health-file", "/tmp/h.json.2", "--verbosity", "1"]
    # Started some other way (call_command, python -m django): through django's own entry point.
    monkeypatch.setattr(sys, "argv", ["/x/django/__main__.py", "runworker"])
    assert Command.child_argv({"verbosity": 2}, 1) == [sys.executable, "-m", "django", "runworker", "--processes", "1",
                                                     "--skip-checks", "--verbosity", "2"]
