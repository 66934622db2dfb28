"""System checks report exact messages for bad QUEUECORE settings."""

from __future__ import annotations

from queuecore.checks import check_redis, check_settings


def ids(messages):
    return [m.id for m in messages]


def test_valid_settings_have_no_messages(settings, redis_url):
    settings.QUEUECORE = {"REDIS_URL": redis_url, "QUEUES": {"critical": 6, "default": 3}}
    assert check_settings() == []


def test_not_a_dict(settings):
    settings.QUEUECORE = ["nope"]
    assert ids(check_settings()) == ["queuecore.E001"]


def test_unknown_key_warns(settings):
    settings.QUEUECORE = {"CONCURENCY": 4}
    messages = check_settings()
    assert ids(messages) == ["queuecore.W001"]
    assert "CONCURENCY" in messages[0].msg


def test_bad_url_and_prefix(settings):
    settings.QUEUECORE = {"REDIS_URL": "http://example"}
    assert ids(check_settings()) == ["queuecore.E002"]
    settings.QUEUECORE = {"KEY_PREFIX": "a{b}"}
    assert ids(check_settings()) == ["queuecore.E002"]


def test_bad_queue_names_and_weights(settings):
    settings.QUEUECORE = {"QUEUES": {"bad name": 1}}
    assert ids(check_settings()) == ["queuecore.E003"]
    settings.QUEUECORE = {"QUEUES": {"default": -1}}
    assert ids(check_settings()) == ["queuecore.E003"]


def test_unimportable_dotted_paths(settings):
    settings.QUEUECORE = {"RETRY_DELAY": "no.such.module.func", "MIDDLEWARE": ["nope.nothing"]}
    messages = check_settings()
    assert ids(messages) == ["queuecore.E006", "queuecore.E006"]
    assert "no.such.module.func" in messages[0].msg


def test_middleware_must_be_a_list(settings):
    settings.QUEUECORE = {"MIDDLEWARE": "a.b"}
    assert ids(check_settings()) == ["queuecore.E004"]


def test_redis_check_reports_unreachable_server_without_password(settings):
    settings.QUEUECORE = {"REDIS_URL": "redis://:hunter2@127.0.0.1:1/0"}
    messages = check_redis()
    assert ids(messages) == ["queuecore.E010"]
    assert "hunter2" not in messages[0].msg
    assert "***" in messages[0].msg


def test_redis_check_passes_and_warns_on_eviction_policy(settings, private_redis):
    settings.QUEUECORE = {"REDIS_URL": private_redis.url}
    assert check_redis() == []
    import redis

    r = redis.Redis.from_url(private_redis.url)
    r.config_set("maxmemory-policy", "allkeys-lru")
    r.close()
    assert ids(check_redis()) == ["queuecore.W010"]
