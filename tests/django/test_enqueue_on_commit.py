"""enqueue_on_commit waits for the transaction, enqueues nothing on rollback, and takes what
``task.enqueue`` takes (or, with a type name, what ``queuecore.enqueue`` takes)."""

from __future__ import annotations

import pytest
from django.db import transaction

from queuecore import Inspector, TaskInfo, TaskRegistry, task
from queuecore.conf import get_config
from queuecore.core.client import get_default_client
from queuecore.core.errors import InvalidOption, InvalidPayload, TaskNotFound
from queuecore.on_commit import enqueue_on_commit, enqueue_on_commit_using


@pytest.fixture
def qsettings(settings, redis_url, key_prefix):
    settings.QUEUECORE = {"REDIS_URL": redis_url, "KEY_PREFIX": key_prefix}
    return settings


def task_state(task_id):
    client = get_default_client()
    return client.redis.hget(client.keys.queue("default").task(task_id), "state")


@pytest.mark.django_db(transaction=True)
def test_enqueued_only_after_commit(qsettings):
    with transaction.atomic():
        task_id = enqueue_on_commit("tests.autodiscovered", {"value": 1})
        assert task_state(task_id) is None
    assert task_state(task_id) == "pending"


@pytest.mark.django_db(transaction=True)
def test_task_id_none_chooses_one_and_returns_it(qsettings):
    """A review: ``task_id=None`` (passed through by a caller) returned the string "None", and the task
    was stored under an id the caller never saw."""
    with transaction.atomic():
        task_id = enqueue_on_commit("tests.autodiscovered", {"value": 1}, task_id=None)
    outside = enqueue_on_commit("tests.autodiscovered", {"value": 2}, task_id=None)  # no transaction: at once
    assert task_id != "None" and task_state(task_id) == "pending"
    assert outside not in ("None", task_id) and task_state(outside) == "pending"


@pytest.mark.django_db(transaction=True)
def test_nothing_enqueued_on_rollback(qsettings):
    class Boom(Exception):
        pass

    with pytest.raises(Boom), transaction.atomic():
        task_id = enqueue_on_commit("tests.autodiscovered", {"value": 1})
        raise Boom
    assert task_state(task_id) is None


@pytest.mark.django_db
def test_bad_payload_fails_at_the_call(qsettings, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks, pytest.raises(InvalidPayload):
        enqueue_on_commit("tests.autodiscovered", {"no_such_argument": 1})
    assert callbacks == []


# -- the arguments of task.enqueue --------------------------------------------------------------------

notes = TaskRegistry()


@task(name="tests.on_commit.note", registry=notes, max_retry=4)
def note(text: str, level: int = 1, *, task: str = "", using: str = "") -> None:
    """Its parameters include ``task`` and ``using``: they are payload, never enqueue_on_commit's own."""


def stored(task_id: str, queue: str = "default") -> TaskInfo | None:
    with Inspector(connection=get_config().connection) as inspector:
        try:
            return inspector.get_task(queue, task_id)
        except TaskNotFound:
            return None


@pytest.mark.django_db(transaction=True)
def test_takes_what_task_enqueue_takes(qsettings):
    with transaction.atomic():
        positional = enqueue_on_commit(note, "hello", 2)
        keywords = enqueue_on_commit(note, text="hi", task="t", using="u")
        assert stored(positional) is None and stored(keywords) is None
    assert stored(positional).payload == {"text": "hello", "level": 2}
    assert stored(keywords).payload == {"text": "hi", "task": "t", "using": "u"}
    assert stored(keywords).max_retry == 4  # the @task's own options


@pytest.mark.django_db(transaction=True)
def test_works_with_using(qsettings):
    with transaction.atomic():
        task_id = enqueue_on_commit(note.using(queue="mail", max_retry=1, retention=60), "x", level=3)
        chosen = enqueue_on_commit(note.using(task_id="my-own-id").using(queue="mail"), text="y")
    assert chosen == "my-own-id"
    info = stored(task_id, "mail")
    assert (info.payload, info.max_retry, info.retention) == ({"text": "x", "level": 3}, 1, 60)
    assert stored("my-own-id", "mail").payload == {"text": "y"}


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_bound_task_is_not_enqueued(qsettings):
    class Boom(Exception):
        pass

    with pytest.raises(Boom), transaction.atomic():
        task_id = enqueue_on_commit(note.using(queue="mail"), "never")
        raise Boom
    assert stored(task_id, "mail") is None


@pytest.mark.django_db
def test_arguments_that_do_not_fit_fail_at_the_call(qsettings, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        with pytest.raises(InvalidPayload):
            enqueue_on_commit(note)  # text is required
        with pytest.raises(InvalidPayload):
            enqueue_on_commit(note, "x", colour="red")
        with pytest.raises(InvalidOption):
            enqueue_on_commit(note.using(max_retry=10**9), "x")
        with pytest.raises(TypeError):
            enqueue_on_commit(print, "x")
    assert callbacks == []


@pytest.mark.django_db(transaction=True)
def test_enqueue_on_commit_using_waits_for_that_database(qsettings, django_capture_on_commit_callbacks):
    with transaction.atomic(using="default"):
        task_id = enqueue_on_commit_using("default", note, "z")
        assert stored(task_id) is None
    assert stored(task_id).payload == {"text": "z"}


@pytest.mark.django_db(transaction=True)
def test_a_payload_changed_after_the_call_enqueues_what_the_call_was_given(qsettings):
    payload = {"value": 0}
    levels = ["a", "b"]
    with transaction.atomic():
        ids = []
        for n in range(3):  # one dict reused in a loop
            payload["value"] = n
            ids.append(enqueue_on_commit("tests.autodiscovered", payload))
        bound = enqueue_on_commit(note, levels)
        levels.clear()
        levels.append(object())  # no longer JSON: it must not fail after the commit
    assert [stored(i).payload for i in ids] == [{"value": 0}, {"value": 1}, {"value": 2}]
    assert stored(bound).payload == {"text": ["a", "b"]}


@pytest.mark.django_db(transaction=True)
def test_an_enqueue_refused_after_the_commit_is_logged_and_the_other_hooks_still_run(qsettings, caplog):
    """After the commit an error can reach no caller: it must not stop the transaction's other hooks
    (other tasks, other apps) nor escape from atomic() as if the commit had failed."""
    ran = []
    with caplog.at_level("ERROR", logger="queuecore"), transaction.atomic():
        first = enqueue_on_commit("tests.autodiscovered", {"value": 1}, unique_for=60)
        second = enqueue_on_commit("tests.autodiscovered", {"value": 1}, unique_for=60)  # refused at commit
        other = enqueue_on_commit("tests.autodiscovered", {"value": 2})
        transaction.on_commit(lambda: ran.append("another app's hook"))
    assert stored(first) is not None and stored(second) is None and stored(other) is not None
    assert ran == ["another app's hook"]
    assert any(f"task {second} (tests.autodiscovered) was not enqueued after its transaction committed: "
               "DuplicateTask" in m for m in caplog.messages)


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_the_enqueue_error_is_the_callers(qsettings):
    from queuecore.core.errors import DuplicateTask

    enqueue_on_commit("tests.autodiscovered", {"value": 3}, unique_for=60)
    with pytest.raises(DuplicateTask):
        enqueue_on_commit("tests.autodiscovered", {"value": 3}, unique_for=60)


@pytest.mark.django_db(transaction=True)
def test_manual_transaction_management_is_refused_as_django_does(qsettings):
    """Under set_autocommit(False) there is no atomic block: enqueuing at once would outlive a rollback
    (it did), so the call is refused, as Django's own on_commit refuses it, and nothing is enqueued."""
    from django.contrib.auth.models import Group

    transaction.set_autocommit(False)
    try:
        Group.objects.create(name="manual")
        with pytest.raises(transaction.TransactionManagementError, match="manual transaction management"):
            enqueue_on_commit("tests.autodiscovered", {"value": 1}, task_id="manual-1")
        transaction.rollback()
    finally:
        transaction.set_autocommit(True)
    assert task_state("manual-1") is None
    assert not Group.objects.filter(name="manual").exists()


@pytest.mark.django_db(transaction=True)
def test_autocommit_still_enqueues_at_once_after_manual_mode_ends(qsettings):
    transaction.set_autocommit(False)
    transaction.set_autocommit(True)
    task_id = enqueue_on_commit("tests.autodiscovered", {"value": 1})
    assert task_state(task_id) == "pending"
