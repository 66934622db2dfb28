"""The core is pure: it imports without Django, and a plain Python program can enqueue and run tasks."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_python(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "QUEUECORE_"))}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


BLOCK_DJANGO = """
import importlib.abc
import sys

class BlockDjango(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "django" or name.startswith("django."):
            raise ImportError(f"the pure core imported {name}")
        return None

sys.meta_path.insert(0, BlockDjango())
sys.modules["django"] = None  # belt and braces: "import django" fails even if cached finders exist
"""


def test_every_core_module_imports_without_django() -> None:
    code = BLOCK_DJANGO + """
import pkgutil
import queuecore.core

names = sorted(m.name for m in pkgutil.walk_packages(queuecore.core.__path__, "queuecore.core."))
for name in names:
    importlib.import_module(name)
loaded = sorted(n for n, m in sys.modules.items() if n.split(".")[0] == "django" and m is not None)
assert not loaded, loaded
print("\\n".join(names))
"""
    proc = run_python("import importlib\n" + code)
    assert proc.returncode == 0, proc.stderr
    imported = set(proc.stdout.split())
    expected = {f"queuecore.core.{p.stem}" for p in (ROOT / "queuecore" / "core").glob("*.py")
                if p.stem != "__init__"}
    assert expected <= imported, expected - imported
    assert "queuecore.core.inspector" in imported and "queuecore.core.worker" in imported


def test_the_blocker_really_blocks_django() -> None:
    proc = run_python(BLOCK_DJANGO + "import django.conf\n")
    assert proc.returncode != 0
    assert "ImportError" in proc.stderr or "ModuleNotFoundError" in proc.stderr


PROGRAM = BLOCK_DJANGO + """
import time

from queuecore import Client, Inspector, TaskRegistry, Worker, task

redis_url, prefix = sys.argv[1], sys.argv[2]
registry = TaskRegistry()


@task(name="purity.add", registry=registry, queue="purity", retention=60)
def add(a, b):
    return a + b


client = Client(redis_url=redis_url, key_prefix=prefix, registry=registry)
info = add.using(client=client).enqueue(2, b=3)
worker = Worker(redis_url=redis_url, key_prefix=prefix, registry=registry, queues={"purity": 1}, concurrency=2,
                heartbeat_interval=0.2, lease_duration=2.0, forward_interval=0.1, fetch_poll_interval=0.1)
inspector = Inspector(redis_url=redis_url, key_prefix=prefix)
worker.start()
try:
    deadline = time.monotonic() + 30
    while True:
        done = inspector.get_task("purity", info.id)
        if done.state == "completed":
            break
        if time.monotonic() > deadline:
            print(f"task still {done.state}", file=sys.stderr)
            sys.exit(3)
        time.sleep(0.02)
finally:
    worker.shutdown(timeout=5)
print(f"result={done.result} django={'django' in sys.modules and sys.modules['django'] is not None}")
client.close()
inspector.close()
"""


@pytest.mark.slow
def test_plain_python_program_enqueues_and_runs_a_task(redis_url: str, key_prefix: str, redis_client) -> None:
    proc = run_python(PROGRAM, redis_url, key_prefix)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "result=5 django=False"
    # it really went through our Redis namespace: the completed task is there, the worker is gone
    (task_id,) = redis_client.zrange(f"{key_prefix}:{{purity}}:completed", 0, -1)
    assert redis_client.hget(f"{key_prefix}:{{purity}}:t:{task_id}", "state") == "completed"
    assert redis_client.zcard(f"{key_prefix}:servers") == 0
