"""One vocabulary: ``queuecore.core.states`` says which action fits which state, and the Inspector's
scripts, the dashboard's forms and buttons, and adminctl's choices all agree with it."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from django.http import QueryDict
from django.test import Client as DjangoClient

from queuecore import ConfigurationError, Inspector
from queuecore.core.clock import to_ms
from queuecore.core.states import (
    ACTION_STATES,
    BULK_ACTION_STATES,
    LIST_STATES,
    STATES,
    TASK_ACTIONS,
    ZSET_STATES,
    TaskState,
    actions_for,
    bulk_actions_for,
)
from queuecore_adminctl.commands.task import ACTIONS, BULK_ACTIONS
from queuecore_dashboard.forms import ACTION_DONE, ACTION_LABELS, TaskActionForm
from tests.helpers.state import seed_task

# What the admin_* Lua scripts accept, written out by hand: the table in states.py must match it.
EXPECTED = {
    "pending": {"archive", "delete"},
    "active": {"cancel"},
    "scheduled": {"run", "archive", "delete"},
    "retry": {"run", "archive", "delete"},
    "archived": {"run", "delete"},
    "completed": {"delete"},
}


def test_the_tables_hold_every_state_and_action_once() -> None:
    assert STATES == tuple(s.value for s in TaskState) == tuple(EXPECTED)
    assert set(LIST_STATES) | set(ZSET_STATES) == set(STATES) and not set(LIST_STATES) & set(ZSET_STATES)
    assert set(ACTION_STATES) == set(BULK_ACTION_STATES) == set(TASK_ACTIONS)
    for state in STATES:
        assert set(actions_for(state)) == EXPECTED[state] == set(bulk_actions_for(state))
    assert actions_for("bogus") == ()
    # the adapters' words cover every action, and nothing else
    assert set(ACTION_LABELS) == set(ACTION_DONE) == set(ACTIONS) == set(TASK_ACTIONS)
    assert {b.verb for b in BULK_ACTIONS} | {"cancel"} == set(TASK_ACTIONS)
    assert all(b.states == BULK_ACTION_STATES[b.verb] for b in BULK_ACTIONS)


def _seed(redis_client: Any, connection: Any, task_id: str, state: str) -> None:
    q = connection.keys.queue("default")
    redis_client.sadd(connection.keys.queues, "default")
    fields = {"lease": 1} if state == "active" else {}
    # an archived task's score is when it was archived (a whole-state job acts on those archived before it)
    at = time.time() - 60 if state == "archived" else time.time() + 60
    seed_task(redis_client, q, task_id, state, score=None if state == "pending" else to_ms(at), **fields)


@pytest.mark.parametrize("state", STATES)
def test_the_inspector_does_exactly_the_actions_that_fit(state: str, inspector: Inspector, redis_client: Any,
                                                         connection: Any) -> None:
    for action in TASK_ACTIONS:
        task_id = f"{state}-{action}"
        _seed(redis_client, connection, task_id, state)
        result = inspector.act_on_tasks("default", action, [task_id])
        assert (result.done == [task_id]) is (action in actions_for(state)), (state, action, result)


@pytest.mark.parametrize("state", STATES)
def test_the_inspector_acts_on_all_only_where_it_fits(state: str, inspector: Inspector, redis_client: Any,
                                                      connection: Any) -> None:
    for action in TASK_ACTIONS:
        _seed(redis_client, connection, f"{state}-{action}", state)
        if action in bulk_actions_for(state):
            assert inspector.act_on_all("default", action, state).count >= 1
        else:
            with pytest.raises(ConfigurationError):
                inspector.act_on_all("default", action, state)


@pytest.mark.parametrize("state", STATES)
def test_the_dashboard_form_accepts_exactly_the_actions_that_fit(state: str) -> None:
    for action in TASK_ACTIONS:
        for every in (False, True):
            data = QueryDict(mutable=True)
            data.update({"action": action, **({"all": "1"} if every else {"task_id": "a"})})
            assert TaskActionForm(data, state=state).is_valid() is (action in actions_for(state)), (state, action)


def test_the_dashboard_offers_the_actions_that_fit(operator: DjangoClient, redis_client: Any,
                                                   connection: Any) -> None:
    for state in STATES:
        _seed(redis_client, connection, f"t-{state}", state)
    for state in STATES:
        listing = operator.get(f"/queues/default/{state}/").content.decode()
        assert set(re.findall(r'name="action" value="(\w+)"', listing)) == set(actions_for(state)), state
        detail = operator.get(f"/queues/default/tasks/t-{state}/").content.decode()
        offered = set(re.findall(r'/tasks/[^/]+/(\w+)/"', detail))
        assert offered - {"edit"} == set(actions_for(state)), state
        # "edit the payload and run it" goes with run, on the states a task can be run from
        assert ("edit" in offered) == (state in ("scheduled", "retry", "archived")), state
