"""QUEUECORE settings are read lazily, merged over defaults and re-read when settings change."""

from __future__ import annotations

import pytest

import queuecore
from queuecore.conf import DEFAULTS, get_config
from queuecore.core.client import get_default_client
from queuecore.core.errors import ConfigurationError
from queuecore.core.message import DEFAULT_MAX_RETRY, TaskMessage
from tests.tasks import autodiscovered


def test_defaults_fill_missing_keys(settings):
    settings.QUEUECORE = {"KEY_PREFIX": "qct-x"}
    config = get_config()
    assert config.connection.key_prefix == "qct-x"
    assert config.raw["CONCURRENCY"] == DEFAULTS["CONCURRENCY"]
    assert config.dashboard["PAGE_SIZE"] == DEFAULTS["DASHBOARD"]["PAGE_SIZE"]


def test_dashboard_dict_is_merged_one_level_down(settings):
    settings.QUEUECORE = {"DASHBOARD": {"POLL_INTERVAL": 9}}
    assert get_config().dashboard["POLL_INTERVAL"] == 9
    assert get_config().dashboard["PAGE_SIZE"] == DEFAULTS["DASHBOARD"]["PAGE_SIZE"]


def test_setting_change_resets_the_cache(settings):
    settings.QUEUECORE = {"KEY_PREFIX": "qct-one"}
    assert get_config().connection.key_prefix == "qct-one"
    settings.QUEUECORE = {"KEY_PREFIX": "qct-two"}
    assert get_config().connection.key_prefix == "qct-two"


def test_environment_url_used_when_settings_do_not_name_one(settings, monkeypatch):
    monkeypatch.setenv("QUEUECORE_REDIS_URL", "redis://127.0.0.1:6379/3")
    settings.QUEUECORE = {}
    assert get_config().connection.redis_url == "redis://127.0.0.1:6379/3"
    settings.QUEUECORE = {"REDIS_URL": "redis://127.0.0.1:6379/4"}
    assert get_config().connection.redis_url == "redis://127.0.0.1:6379/4"


def test_worker_config_from_settings_with_overrides(settings):
    settings.QUEUECORE = {"QUEUES": {"critical": 6, "low": 1}, "CONCURRENCY": 3, "STRICT_PRIORITY": True,
                          "RETRY_DELAY": "tests.django.test_conf.constant_delay"}
    worker_config = get_config().worker_config(concurrency=7)
    assert dict(worker_config.queues) == {"critical": 6, "low": 1}
    assert worker_config.concurrency == 7
    assert worker_config.strict_priority is True
    assert worker_config.retry_delay(3, None) == 42.0
    # The Django adapter closes stale DB connections around every task.
    assert worker_config.middleware[0] is queuecore.middleware.django_db_connections


def constant_delay(retried, error):
    return 42.0


def test_invalid_queue_weights_refused(settings):
    settings.QUEUECORE = {"QUEUES": {"default": 0}}
    with pytest.raises(ConfigurationError, match="weight"):
        get_config().worker_config()


def test_default_client_follows_settings(settings, redis_url, key_prefix):
    settings.QUEUECORE = {"REDIS_URL": redis_url, "KEY_PREFIX": key_prefix}
    info = queuecore.enqueue("tests.autodiscovered", {"value": 3})
    assert get_default_client().keys.prefix == key_prefix
    client = get_default_client()
    assert client.redis.hget(client.keys.queue("default").task(info.id), "state") == "pending"


@pytest.mark.parametrize("enqueue", [lambda: queuecore.enqueue("tests.autodiscovered", {"value": 3}),
                                     lambda: autodiscovered.enqueue(3)])
def test_a_bad_connection_setting_met_at_an_enqueue_names_its_key(settings, enqueue):
    """Through queuecore.enqueue and a task's .enqueue the error said "invalid key prefix 'a b'" without
    naming the setting, as Client() and manage.py check do."""
    settings.QUEUECORE = {"KEY_PREFIX": "a b"}
    with pytest.raises(ConfigurationError, match=r"^QUEUECORE\['KEY_PREFIX'\]: invalid key prefix 'a b'"):
        enqueue()


def test_default_max_retry_setting_applies_to_tasks_enqueued_without_one(settings, redis_url, key_prefix):
    settings.QUEUECORE = {"REDIS_URL": redis_url, "KEY_PREFIX": key_prefix, "DEFAULT_MAX_RETRY": 3}
    assert get_config().connection.default_max_retry == 3
    info = autodiscovered.enqueue(value=1)  # a @task without max_retry, on the default client
    assert info.max_retry == 3
    client = get_default_client()
    stored = client.redis.hget(client.keys.queue("default").task(info.id), "msg")
    assert TaskMessage.decode(info.id, "default", stored).max_retry == 3
    assert autodiscovered.using(max_retry=5).enqueue(value=2).max_retry == 5  # a given one still wins


def test_default_max_retry_defaults_to_the_core_constant(settings):
    settings.QUEUECORE = {}
    assert DEFAULTS["DEFAULT_MAX_RETRY"] == DEFAULT_MAX_RETRY
    assert get_config().connection.default_max_retry == DEFAULT_MAX_RETRY
    # the client reads it; no worker setting carries it
    assert not hasattr(get_config().worker_config(), "default_max_retry")


def test_invalid_default_max_retry_refused(settings):
    settings.QUEUECORE = {"DEFAULT_MAX_RETRY": "3"}
    with pytest.raises(ConfigurationError, match="default_max_retry"):
        get_config()


def test_autodiscovery_registered_app_tasks():
    assert "tests.autodiscovered" in queuecore.default_registry


def test_type_stats_setting(settings):
    assert get_config().worker_config().type_stats is True
    settings.QUEUECORE = {"TYPE_STATS": False}
    assert get_config().worker_config().type_stats is False
    settings.QUEUECORE = {"TYPE_STATS": "off"}
    with pytest.raises(ConfigurationError, match="type_stats must be True or False"):
        get_config().worker_config()
    from django.core.checks import Error

    from queuecore.checks import check_settings

    assert check_settings(None) == [
        Error("QUEUECORE['TYPE_STATS']: type_stats must be True or False, got 'off'", id="queuecore.E005")]
