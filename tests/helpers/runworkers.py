"""``manage.py runworker`` processes for tests of the Django tasks backend: each started on the test's
prefix and running (its heartbeat published) when ``start`` returns; all killed at the end, their
output printed when a test failed or one exited badly."""

from __future__ import annotations

import importlib
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from queuecore import Inspector
from tests.conftest import wait_until

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def runworkers(request: pytest.FixtureRequest, inspector: Inspector, env: dict[str, str],
               tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """``start(*args)`` runs ``manage.py runworker --concurrency 2 *args`` with ``env``."""
    started: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(*args: str) -> subprocess.Popen[bytes]:
        out = tmp_path / f"runworker-{len(started)}.log"
        with open(out, "wb") as f:
            proc = subprocess.Popen([sys.executable, "manage.py", "runworker", "--concurrency", "2", *args], cwd=ROOT,
                                    env=env, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT)
        started.append((proc, out))

        def running() -> bool:
            if proc.poll() is not None:
                pytest.fail(f"runworker exited ({proc.returncode}):\n{out.read_text(errors='replace')}")
            return any(s.pid == proc.pid for s in inspector.servers())

        wait_until(running, timeout=60, interval=0.05, message="runworker's heartbeat")
        return proc

    failed = request.session.testsfailed
    try:
        yield start
    finally:
        for proc, out in started:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)
            if request.session.testsfailed > failed or proc.returncode not in (0, -signal.SIGKILL):
                print(f"--- runworker {proc.pid} ({proc.returncode})\n{out.read_text(errors='replace')[-4000:]}")


BACKEND = "queuecore.tasks_backend.QueuecoreBackend"


def use_backend(settings: Any, redis_url: str, key_prefix: str, tasks_module: str) -> Any:
    """Django's TASKS on queuecore and QUEUECORE on the test's prefix; returns ``tasks_module``, imported."""
    settings.QUEUECORE = {"REDIS_URL": redis_url, "KEY_PREFIX": key_prefix, "QUEUES": {"default": 1, "low": 1}}
    settings.TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": ["default", "low"]}}
    return importlib.import_module(tasks_module)
