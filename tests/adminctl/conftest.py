"""Fixtures for the adminctl tests: the real CLI, in-process (click's runner) and as a subprocess.

Every run is pointed at the test's own key prefix on the shared Redis with ``--redis-url`` and
``--prefix``. Subprocess runs get an environment without ``DJANGO_*``/``QUEUECORE_*`` variables, a
fixed 80-column width and no colour forcing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from queuecore_adminctl.cli import cli

ROOT = Path(__file__).resolve().parents[2]
ADMINCTL_SCRIPT = Path(sys.executable).parent / "adminctl"
DEAD_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1


def clean_env(**extra: str) -> dict[str, str]:
    """The environment for a subprocess: no Django or queuecore settings, 80 columns, no forced colour."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DJANGO_", "QUEUECORE_", "PYTEST_")) and k not in (
               "COLUMNS", "LINES", "FORCE_COLOR", "NO_COLOR", "CLICOLOR_FORCE", "TERM")}
    env.update(PYTHONPATH=str(ROOT), COLUMNS="80", TERM="xterm-256color", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


@dataclass
class Run:
    """What a CLI run left behind."""

    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        assert self.stdout.strip(), f"no JSON on stdout; stderr: {self.stderr}"
        return json.loads(self.stdout)


@pytest.fixture
def runner() -> CliRunner:
    # click >= 8.2 keeps stdout and stderr apart on every result (``mix_stderr`` is gone).
    return CliRunner(env={"COLUMNS": "80", "NO_COLOR": None, "FORCE_COLOR": None, "DJANGO_SETTINGS_MODULE": None,
                          "QUEUECORE_REDIS_URL": None, "QUEUECORE_KEY_PREFIX": None})


@pytest.fixture
def adminctl(runner: CliRunner, redis_url: str, key_prefix: str) -> Callable[..., Run]:
    """Run ``adminctl --redis-url <test redis> --prefix <test prefix> ARGS`` in-process."""

    def run(*args: str, input: str | None = None, env: dict[str, str | None] | None = None,
            connect: bool = True) -> Run:
        base = ["--redis-url", redis_url, "--prefix", key_prefix] if connect else []
        result: Result = runner.invoke(cli, [*base, *args], input=input, env=env, catch_exceptions=False,
                                       prog_name="adminctl")
        return Run(result.exit_code, result.stdout, result.stderr)

    return run


@pytest.fixture
def adminctl_process(redis_url: str, key_prefix: str) -> Callable[..., Run]:
    """Run ``python -m queuecore_adminctl ARGS`` (or the console script with ``script=True``) as a subprocess."""

    def run(*args: str, script: bool = False, connect: bool = True, input: str | None = None,
            env: dict[str, str] | None = None, cwd: Path = ROOT) -> Run:
        base = ["--redis-url", redis_url, "--prefix", key_prefix] if connect else []
        command = [str(ADMINCTL_SCRIPT)] if script else [sys.executable, "-m", "queuecore_adminctl"]
        proc = subprocess.run([*command, *base, *args], capture_output=True, text=True, timeout=60, input=input,
                              env=env or clean_env(), cwd=cwd)
        return Run(proc.returncode, proc.stdout, proc.stderr)

    return run


def widest_line(text: str) -> int:
    return max((len(line) for line in text.splitlines()), default=0)
