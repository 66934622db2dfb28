"""In a Django process, ``Client()``, ``Inspector()``, ``Worker()`` and ``queuecore.enqueue`` built
without a connection use the ``QUEUECORE`` setting's; without Django settings, the environment's."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import queuecore
from queuecore import Client, ConfigurationError, Inspector, Worker
from tests.tasks import autodiscovered

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def qsettings(settings: Any, redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.delenv("QUEUECORE_KEY_PREFIX", raising=False)
    monkeypatch.setenv("QUEUECORE_REDIS_URL", "redis://127.0.0.1:1/0")  # QUEUECORE must win over it
    settings.QUEUECORE = {"REDIS_URL": redis_url, "KEY_PREFIX": key_prefix, "MAX_PAYLOAD_BYTES": 4096,
                          "DEFAULT_MAX_RETRY": 3}
    return settings


def test_client_inspector_and_worker_read_queuecore(qsettings: Any, redis_url: str, key_prefix: str) -> None:
    for made in (Client(), Inspector(), Worker(queues={"default": 1})):
        try:
            connection = made.connection
            assert (connection.redis_url, connection.key_prefix) == (redis_url, key_prefix)
            assert (connection.max_payload_bytes, connection.default_max_retry) == (4096, 3)
        finally:
            made.redis.close()


def test_a_task_enqueued_through_task_is_found_by_inspector(qsettings: Any) -> None:
    info = autodiscovered.enqueue(value=5)
    by_module = queuecore.enqueue("tests.autodiscovered", {"value": 6})
    with Inspector() as inspector, Client() as client:
        assert inspector.get_task("default", info.id).payload == {"value": 5}
        assert inspector.get_task("default", by_module.id).max_retry == 3  # QUEUECORE's DEFAULT_MAX_RETRY
        assert client.enqueue("tests.autodiscovered", {"value": 7}).id in {
            t.id for t in inspector.list_tasks("default", "pending").tasks}


def test_arguments_override_queuecore_one_by_one(qsettings: Any, redis_url: str) -> None:
    with Client(key_prefix="qct-other") as client:
        assert (client.connection.redis_url, client.keys.prefix) == (redis_url, "qct-other")
        assert client.connection.max_payload_bytes == 4096
    with Inspector(redis_url="redis://127.0.0.1:2/0") as inspector:
        assert inspector.connection.redis_url == "redis://127.0.0.1:2/0"


def test_setting_changes_are_seen(qsettings: Any, redis_url: str) -> None:
    qsettings.QUEUECORE = {"REDIS_URL": redis_url, "KEY_PREFIX": "qct-changed"}
    with Client() as client:
        assert client.keys.prefix == "qct-changed"
    assert queuecore.get_default_client().keys.prefix == "qct-changed"


def test_an_invalid_setting_names_its_key(qsettings: Any) -> None:
    qsettings.QUEUECORE = {"MAX_PAYLOAD_BYTES": 0}
    with pytest.raises(ConfigurationError, match=r"^QUEUECORE\['MAX_PAYLOAD_BYTES'\]: max_payload_bytes is out of"):
        Client()


def test_without_django_settings_the_environment_is_read(redis_url: str) -> None:
    code = textwrap.dedent("""
        import django.conf  # imported, never configured
        import queuecore
        for made in (queuecore.Client(), queuecore.Inspector()):
            print(made.connection.redis_url, made.keys.prefix)
        print(queuecore.Client(key_prefix="qct-given").keys.prefix)
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "QUEUECORE_", "PYTEST_"))}
    env.update(PYTHONPATH=str(ROOT), QUEUECORE_REDIS_URL="redis://127.0.0.1:3/0", QUEUECORE_KEY_PREFIX="qct-env")
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["redis://127.0.0.1:3/0 qct-env"] * 2 + ["qct-given"]
