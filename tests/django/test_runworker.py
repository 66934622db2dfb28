"""manage.py runworker runs the bundled site's demo tasks and stops cleanly on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from queuecore import Client, Inspector
from tests.conftest import wait_until

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def site_env(redis_url, key_prefix, tmp_path):
    env = dict(os.environ)
    env.update(DJANGO_SETTINGS_MODULE="config.settings", QUEUECORE_REDIS_URL=redis_url,
               QUEUECORE_KEY_PREFIX=key_prefix, QUEUECORE_VAR_DIR=str(tmp_path), PYTHONUNBUFFERED="1")
    return env


@pytest.fixture
def run_manage(site_env):
    procs: list[subprocess.Popen] = []

    def start(*args: str) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "manage.py", *args], cwd=ROOT, env=site_env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


@pytest.mark.slow
def test_runworker_processes_demo_tasks_and_stops_on_sigterm(run_manage, redis_url, key_prefix):
    client = Client(redis_url=redis_url, key_prefix=key_prefix)
    inspector = Inspector(redis_url=redis_url, key_prefix=key_prefix)
    echo = client.enqueue("demo.echo", {"greeting": "hi"}, retention=60)
    noop = client.enqueue("demo.noop", queue="critical", retention=60)
    flaky = client.enqueue("demo.fail", {"succeed_on": 2}, retention=60)
    doomed = client.enqueue("demo.fail", {}, max_retry=0)
    sleeper = client.enqueue("demo.sleep", {"seconds": 0.2}, queue="low", retention=60)

    proc = run_manage("runworker", "--concurrency", "4")
    wait_until(lambda: inspector.servers(), timeout=20, message="the worker's heartbeat")
    wait_until(lambda: inspector.get_task("default", echo.id).state == "completed", timeout=20)
    assert inspector.get_task("default", echo.id).result == {"greeting": "hi"}
    wait_until(lambda: inspector.get_task("critical", noop.id).state == "completed", timeout=20)
    wait_until(lambda: inspector.get_task("low", sleeper.id).state == "completed", timeout=20)
    assert inspector.get_task("low", sleeper.id).result == 0.2
    wait_until(lambda: inspector.get_task("default", doomed.id).state == "archived", timeout=20)
    assert "demo failure (attempt 1)" in inspector.get_task("default", doomed.id).last_error
    # demo.fail with succeed_on=2 failed once and is now waiting to retry (backoff >= 15 s).
    flaky_info = wait_until(lambda: (t := inspector.get_task("default", flaky.id)).state == "retry" and t,
                            timeout=20)
    assert flaky_info.retried == 1
    inspector.run_task("default", flaky.id)
    wait_until(lambda: inspector.get_task("default", flaky.id).state == "completed", timeout=20)
    assert inspector.get_task("default", flaky.id).result == 2

    server = inspector.servers()[0]
    assert server.pid == proc.pid
    assert server.queues == {"critical": 6, "default": 3, "low": 1}
    assert server.concurrency == 4

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0
    output = proc.stdout.read()
    assert "demo.echo" in output  # registered task types are listed at start
    assert inspector.servers() == []
    client.close()
    inspector.close()


@pytest.mark.parametrize(("spec", "said"), [("default=zero", "weight"), ("", "no queues given"),
                                            ("low,default=2,low", "'low' is given twice")])
def test_runworker_rejects_bad_queue_spec(run_manage, spec: str, said: str):
    """``--queues ''`` ran a worker on the settings' queues, as if the option had not been given."""
    proc = run_manage("runworker", "--queues", spec)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode != 0
    assert said in out
    assert "Traceback" not in out
