"""enqueue_on_commit waits for the transaction, and enqueues nothing on rollback."""

from __future__ import annotations

import pytest
from django.db import transaction

from queuecore.core.client import get_default_client
from queuecore.core.errors import InvalidPayload
from queuecore.on_commit import enqueue_on_commit


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
