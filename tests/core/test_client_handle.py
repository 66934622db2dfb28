"""The handle ``enqueue`` returns is built without the dataclass ``__init__`` (client._new_handle): it
must be the very ``TaskHandle`` the constructor builds."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from queuecore.core.client import _new_handle
from queuecore.core.results import TaskHandle
from queuecore.core.states import TaskState


def test_new_handle_equals_the_constructor_and_shares_no_default() -> None:
    when = datetime(2026, 11, 23, 8, 0, tzinfo=UTC)
    values = {"id": "t1", "queue": "default", "type": "t.x", "state": TaskState.SCHEDULED, "payload": {"n": 1},
              "max_retry": 3, "timeout": 2.5, "next_process_at": when, "enqueued_at": when, "deadline": None,
              "retention": 60.0, "unique_key": "k", "priority": 1}
    fast, built = _new_handle(**values), TaskHandle(**values)
    assert type(fast) is TaskHandle
    assert fast == built
    assert {f.name: getattr(fast, f.name) for f in dataclasses.fields(TaskHandle)} == \
        {f.name: getattr(built, f.name) for f in dataclasses.fields(TaskHandle)}
    assert fast._results is None
    other = _new_handle(**values)
    assert fast.attempts == [] and fast.attempts is not other.attempts  # default_factory: one list each
    assert fast.edits == [] and fast.edits is not other.edits
    bound = _new_handle(**values, _results="results")
    assert bound._results == "results" and bound == built


def test_enqueue_returns_the_handle_the_constructor_would(client) -> None:
    for options in ({}, {"process_in": 60, "retention": 30, "priority": 2}):
        handle = client.enqueue("t.x", {"n": 1}, **options)
        fields = {f.name: getattr(handle, f.name) for f in dataclasses.fields(TaskHandle)}
        assert handle == TaskHandle(**fields)
        assert handle.state is (TaskState.SCHEDULED if options else TaskState.PENDING)
        assert handle.payload == {"n": 1} and handle.retried == 0 and handle.attempts == []
        assert handle._results is not None and handle.result_id.endswith("/" + handle.id)
