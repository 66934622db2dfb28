"""System checks report exact messages for bad QUEUECORE settings."""

from __future__ import annotations

import pytest

from queuecore.checks import check_redis, check_settings


def ids(messages):
    return [m.id for m in messages]


pytestmark = pytest.mark.usefixtures("no_task_types")  # W002 reads the task registry


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


@pytest.mark.parametrize("running", [False, True], ids=["no-server", "a-plain-redis"])
def test_redis_check_reports_a_cluster_url_it_cannot_use(settings, private_redis, running):
    """A review: a cluster client reads the slot map when it is made, which the check did outside its
    ``try``: ``check --deploy`` ended in a RedisUnavailable (or WrongServer) traceback."""
    port = private_redis.port if running else 1
    settings.QUEUECORE = {"REDIS_URL": f"redis+cluster://127.0.0.1:{port}"}
    messages = check_redis()
    assert ids(messages) == ["queuecore.E010"]
    assert ("not a Redis Cluster node" in messages[0].msg) is running


def test_redis_check_passes_and_warns_on_eviction_policy(settings, private_redis):
    settings.QUEUECORE = {"REDIS_URL": private_redis.url}
    assert check_redis() == []
    import redis

    r = redis.Redis.from_url(private_redis.url)
    r.config_set("maxmemory-policy", "allkeys-lru")
    r.close()
    assert ids(check_redis()) == ["queuecore.W010"]


def test_check_deploy_runs_the_redis_check(settings) -> None:
    """``manage.py check --deploy`` pings Redis: on Django 6 it did not (the check was tagged
    ``database``, which Django 6 runs only with ``--database``)."""
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    settings.QUEUECORE = {"REDIS_URL": "redis://127.0.0.1:1/0"}
    with pytest.raises(SystemCheckError, match=r"queuecore\.E010"):
        call_command("check", deploy=True)


def test_check_deploy_reports_a_bad_connection_setting_under_its_key(settings) -> None:
    """A review: the Redis check read the connection settings outside its ``try``, so any value that
    plain ``check`` reports as queuecore.E002 made ``check --deploy`` end in a traceback."""
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    settings.QUEUECORE = {"MAX_PAYLOAD_BYTES": 0}
    assert check_redis() == []
    with pytest.raises(SystemCheckError, match=r"queuecore\.E002\)? QUEUECORE\['MAX_PAYLOAD_BYTES'\]"):
        call_command("check", deploy=True)


# -- a bad value is a check error naming its key, never a traceback -------------------------------------


@pytest.mark.parametrize(("key", "value", "text"), [
    ("REDIS_URL", 5, "QUEUECORE['REDIS_URL']: the Redis URL must be a non-empty string, got 5"),
    ("REDIS_URL", "redis://127.0.0.1:6379/0?bogus=1", "QUEUECORE['REDIS_URL']: invalid Redis URL"),
    ("KEY_PREFIX", None, "QUEUECORE['KEY_PREFIX']: invalid key prefix None"),
    ("KEY_PREFIX", "a b", "QUEUECORE['KEY_PREFIX']: invalid key prefix 'a b'"),
    ("DEFAULT_RETENTION", -1, "QUEUECORE['DEFAULT_RETENTION']: default_retention is out of range"),
    ("DEFAULT_MAX_RETRY", "3", "QUEUECORE['DEFAULT_MAX_RETRY']: default_max_retry must be a whole number"),
])
def test_a_bad_connection_setting_is_e002_naming_it(settings, key, value, text):
    settings.QUEUECORE = {key: value}
    messages = check_settings()
    assert ids(messages) == ["queuecore.E002"]
    assert messages[0].msg.startswith(text), messages[0].msg


@pytest.mark.parametrize(("value", "check_id", "text"), [
    (["no.such.module"], "queuecore.E006", "QUEUECORE['TASK_MODULES']: cannot import 'no.such.module'"),
    ("x", "queuecore.E004", "QUEUECORE['TASK_MODULES'] must be a list of dotted module paths, got 'x'"),
    ([5], "queuecore.E004", "QUEUECORE['TASK_MODULES'] must be a list of dotted module paths, got [5]"),
])
def test_bad_task_modules_are_check_errors(settings, value, check_id, text):
    settings.QUEUECORE = {"TASK_MODULES": value}
    messages = check_settings()
    assert ids(messages) == [check_id]
    assert messages[0].msg.startswith(text), messages[0].msg


def test_task_modules_that_import_pass(settings):
    settings.QUEUECORE = {"TASK_MODULES": ["tests.helpers.proc_tasks"]}
    assert check_settings() == []


def test_ready_does_not_fail_on_bad_settings(settings):
    """The app starts whatever QUEUECORE says: the check reports it (Django runs ready() before any check)."""
    from django.apps import apps

    for value in ({"REDIS_URL": 5}, {"KEY_PREFIX": "a b"}, {"TASK_MODULES": ["no.such.module"]},
                  {"TASK_MODULES": "x"}, {"DASHBOARD": ["x"]}, {"MAX_PAYLOAD_BYTES": 0}):
        settings.QUEUECORE = value
        apps.get_app_config("queuecore").ready()


@pytest.mark.parametrize(("value", "check_ids", "text"), [
    ({"QUEUES": 5}, ["queuecore.E003"], "QUEUECORE['QUEUES']: queues must be a dict of queue name -> weight"),
    ({"ERROR_HANDLER": 5}, ["queuecore.E006"], "QUEUECORE['ERROR_HANDLER']: expected a dotted path (a string), "
                                               "got 5."),
    ({"RETRY_DELAY": 5}, ["queuecore.E006"], "QUEUECORE['RETRY_DELAY']: expected a dotted path"),
    ({"MIDDLEWARE": [5]}, ["queuecore.E006"], "QUEUECORE['MIDDLEWARE']: expected a dotted path"),
    ({"DASHBOARD": ["x"]}, ["queuecore.E014"], "QUEUECORE['DASHBOARD'] must be a dict, got ['x']."),
    ({"DASHBOARD": "x"}, ["queuecore.E014"], "QUEUECORE['DASHBOARD'] must be a dict, got 'x'."),
    ({"DASHBOARD": {"POLL_INTERVALL": 9}}, ["queuecore.E014"],
     "QUEUECORE['DASHBOARD'] has unknown key(s): POLL_INTERVALL."),
    ({"STRICT_PRIORITY": "false"}, ["queuecore.E005"], "QUEUECORE['STRICT_PRIORITY']: strict_priority must be "
                                                       "True or False, got 'false'"),
    ({"MIDDLEWARE": ["os.sep"]}, ["queuecore.E005"], "QUEUECORE['MIDDLEWARE']: middleware must be a list of "
                                                     "callables"),
    ({"RETRY_DELAY": "os.sep"}, ["queuecore.E005"], "QUEUECORE['RETRY_DELAY']: retry_delay must be None or a "
                                                    "callable"),
    ({"ERROR_HANDLER": "os.sep"}, ["queuecore.E005"], "QUEUECORE['ERROR_HANDLER']: error_handler must be None"),
])
def test_a_value_of_the_wrong_type_is_a_check_error_naming_its_key(settings, value, check_ids, text):
    settings.QUEUECORE = value
    messages = check_settings()
    assert ids(messages) == check_ids
    assert messages[0].msg.startswith(text), messages[0].msg


def test_a_dashboard_access_callback_of_the_wrong_type_is_a_check_error(settings):
    from queuecore_dashboard.checks import check_dashboard

    settings.QUEUECORE = {"DASHBOARD": {"ACCESS_CALLBACK": 5}}
    assert "queuecore_dashboard.E004" in ids(check_dashboard())


def test_a_warning_never_hides_an_error(settings):
    settings.QUEUECORE = {"CONCURENCY": 4, "LEASE_DURATION": "abc"}
    messages = check_settings()
    assert ids(messages) == ["queuecore.W001", "queuecore.E005"]
    assert messages[1].msg.startswith("QUEUECORE['LEASE_DURATION']: lease_duration"), messages[1].msg


def test_one_error_does_not_hide_another_nor_is_reported_twice(settings):
    settings.QUEUECORE = {"QUEUES": {"bad name": 1}, "RETRY_DELAY": "no.such.func", "LEASE_DURATION": "abc"}
    assert ids(check_settings()) == ["queuecore.E003", "queuecore.E006", "queuecore.E005"]


def test_a_task_type_whose_queue_no_worker_serves_by_default_is_a_warning(settings, monkeypatch, redis_url):
    """A new user's walk through the README: ``@task(queue="low")`` with QUEUES left at its default
    ({"default": 1}) waited for good, and nothing said why (runworker served only 'default')."""
    from queuecore.core.registry import Handler, default_registry

    def build_report(report_id: int) -> None: ...

    for name, queue in (("checks.low_one", "low"), ("checks.low_two", "low"), ("checks.served", "default")):
        default_registry.register(Handler(build_report, name, {"queue": queue}))
    settings.QUEUECORE = {"REDIS_URL": redis_url}
    messages = check_settings()
    assert ids(messages) == ["queuecore.W002"]
    assert "checks.low_one, checks.low_two enqueue to queue 'low'" in messages[0].msg
    assert "checks.served" not in messages[0].msg and "'low'" in messages[0].hint
    settings.QUEUECORE = {"REDIS_URL": redis_url, "QUEUES": {"default": 3, "low": 1}}
    assert check_settings() == []


def test_w002_takes_a_django_task_s_queue_name(settings, redis_url):
    """A review of W002: a Django task (``@task(queue_name="low")``, which queuecore's registry holds with
    no options) was taken for one on 'default'."""
    from queuecore.core.registry import Handler, default_registry
    from queuecore.tasks_backend import _TaskHandler

    class DjangoTask:  # what _TaskHandler reads of a django.tasks Task
        func = staticmethod(lambda: None)
        module_path = "checks.django_low"
        queue_name = "low"

    default_registry.register(_TaskHandler(DjangoTask()))  # type: ignore[arg-type]
    default_registry.register(Handler(lambda: None, "checks.no_options", None))  # type: ignore[arg-type]
    settings.QUEUECORE = {"REDIS_URL": redis_url, "QUEUES": {"low": 1}}
    messages = check_settings()
    assert ids(messages) == ["queuecore.W002"]
    assert "checks.no_options enqueue to queue 'default'" in messages[0].msg  # and no crash on options None
    settings.QUEUECORE = {"REDIS_URL": redis_url, "QUEUES": {"default": 1}}
    messages = check_settings()
    assert ids(messages) == ["queuecore.W002"] and "checks.django_low enqueue to queue 'low'" in messages[0].msg
