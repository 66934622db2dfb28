"""queuecore.middleware.django_db_connections closes stale database connections around each task:
around an async handler's run too, in the thread its ORM calls use (sync_to_async's), not only
around the creation of its coroutine."""

from __future__ import annotations

import threading

import pytest
from asgiref.sync import sync_to_async

from queuecore import task
from queuecore.middleware import django_db_connections
from tests.conftest import wait_until


@pytest.fixture
def closes(monkeypatch) -> list[tuple[str, int]]:
    """Each call of Django's close_old_connections, as (what had happened by then, its thread): a spy
    around the real function."""
    import django.db

    real = django.db.close_old_connections
    seen: list[tuple[str, int]] = []

    def spy(**kwargs: object) -> None:
        seen.append((" ".join(events), threading.get_ident()))
        real(**kwargs)

    monkeypatch.setattr(django.db, "close_old_connections", spy)
    return seen


events: list[str] = []


def test_an_async_handlers_run_is_closed_around_in_its_orm_thread(make_worker, registry, client, inspector,
                                                                  closes) -> None:
    events.clear()
    orm_thread: list[int] = []

    @task(name="t.async_db", registry=registry, max_retry=0, retention=60)
    async def async_db() -> None:
        orm_thread.append(await sync_to_async(threading.get_ident)())  # where its ORM calls would run
        events.append("ran")

    handle = client.enqueue("t.async_db", {})
    make_worker(middleware=[django_db_connections])
    wait_until(lambda: inspector.get_task("default", handle.id).state.value == "completed", 15,
               message="the async task completed")
    after = [thread for done, thread in closes if done == "ran"]
    # Before: both closes came before the handler ran (they wrapped the coroutine's creation only).
    assert after, closes
    assert orm_thread[0] in after


def test_a_sync_handler_is_still_closed_around(make_worker, registry, client, inspector, closes) -> None:
    events.clear()

    @task(name="t.sync_db", registry=registry, max_retry=0, retention=60)
    def sync_db() -> None:
        events.append("ran")

    handle = client.enqueue("t.sync_db", {})
    make_worker(middleware=[django_db_connections])
    wait_until(lambda: inspector.get_task("default", handle.id).state.value == "completed", 15,
               message="the sync task completed")
    assert [done for done, _ in closes] == ["", "ran"]
