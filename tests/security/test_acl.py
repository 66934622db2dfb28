"""The functional suite under a Redis ACL user limited to our namespace and the commands we need.

A private redis-server gets a user ``qcuser`` that may touch only keys ``qct-*`` (the test prefixes)
and channels ``qct-*``, with no dangerous commands (no CONFIG, FLUSHDB, KEYS, DEBUG...), no
MEMORY and no CLIENT admin. Lua scripts run with the caller's ACL, so a script deriving a key
outside the pattern would fail here. A subprocess pytest run then executes a representative subset
of the functional tests against it, through ``QUEUECORE_TEST_REDIS_URL``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from queuecore import ConnectionConfig, Inspector

ROOT = Path(__file__).resolve().parents[2]

# What queuecore needs: reads, writes, key management, pub/sub, scripts, TIME (the recoverers'
# shared clock, every process's reference time), INFO and MEMORY USAGE (for the operator's
# figures; both optional, see below); minus what no queue needs.
QC_ACL_RULES = ["on", ">qc-acl-pw", "~qct-*", "&qct-*", "-@all", "+@read", "+@write", "+@keyspace", "+@pubsub",
                "+@scripting", "+@connection", "-@dangerous", "+time", "+info", "+memory|usage", "-script|flush",
                "-script|kill", "-function", "-fcall", "-fcall_ro"]

SUBSET = ["tests/core/test_client.py", "tests/core/test_inspector.py", "tests/core/test_worker_run.py",
          "tests/adminctl", "tests/dashboard", "tests/badinput/test_wrong_type.py"]


def acl_server(private_redis_factory, *rules: str):
    server = private_redis_factory()
    admin = redis.Redis(port=server.port)
    try:
        admin.execute_command("ACL", "SETUSER", "qcuser", "reset", *rules)
    finally:
        admin.close()
    return server


@pytest.mark.slow
@pytest.mark.timeout(660)  # ~1,900 tests in a subprocess: 75 s idle, past 120 s on a busy CI machine
def test_functional_subset_passes_under_a_namespace_acl(private_redis_factory) -> None:
    server = acl_server(private_redis_factory, *QC_ACL_RULES)
    url = f"redis://qcuser:qc-acl-pw@127.0.0.1:{server.port}/0"
    probe = redis.Redis.from_url(url)
    with pytest.raises(redis.exceptions.NoPermissionError):
        probe.set("elsewhere", "1")  # the ACL does bite
    with pytest.raises(redis.exceptions.NoPermissionError):
        probe.config_get("maxmemory-policy")
    probe.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QUEUECORE_", "PYTEST_"))}
    env["QUEUECORE_TEST_REDIS_URL"] = url
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", "-m", "not slow",
                           *SUBSET], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    tail = "\n".join(proc.stdout.splitlines()[-40:])
    print(tail)
    assert proc.returncode == 0, tail + proc.stderr[-2000:]
    server.stop()


def test_inspector_and_dashboard_data_degrade_when_info_and_memory_are_denied(private_redis_factory) -> None:
    rules = [r for r in QC_ACL_RULES if r not in ("+info", "+memory|usage")] + ["-info", "-memory"]
    server = acl_server(private_redis_factory, *rules)
    url = f"redis://qcuser:qc-acl-pw@127.0.0.1:{server.port}/0"
    conn = ConnectionConfig(redis_url=url, key_prefix="qct-deny")
    from queuecore import Client

    with Client(connection=conn) as client, Inspector(connection=conn) as inspector:
        client.enqueue("t.x", {"a": 1})
        info = inspector.redis_info()
        assert info.version is None and info.used_memory is None and info.maxmemory_policy is None
        queue = inspector.queue_info("default")
        assert queue.pending == 1 and queue.memory_bytes is None
    server.stop()
