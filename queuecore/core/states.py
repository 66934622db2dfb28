"""The one vocabulary of task states and operator actions, and which action fits which state.

Like asynq's ``base.TaskState``, this is the only list of them: the ``Inspector`` checks its
arguments against it, the dashboard builds its tabs, URL converters, forms and buttons from it,
and ``adminctl`` its click choices and help. The ``admin_*`` Lua scripts enforce the same rules
atomically; ``tests/dashboard/test_vocabulary.py`` checks that they all agree.

Pure: imports nothing but the standard library.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType


class TaskState(enum.StrEnum):
    """The six states a task moves through, in the order lists and tables show them."""

    PENDING = "pending"
    ACTIVE = "active"
    SCHEDULED = "scheduled"
    RETRY = "retry"
    ARCHIVED = "archived"
    COMPLETED = "completed"

    def __str__(self) -> str:
        return self.value


STATES: tuple[str, ...] = tuple(s.value for s in TaskState)
"""Every state, in display order. The tables below hold plain strings, so they serve as click
choices, URL patterns and template values as they are (a ``TaskState`` compares equal to its string)."""

LIST_STATES: tuple[str, ...] = (TaskState.PENDING.value,)
"""States held in a Redis LIST (pushed left, popped right)."""

ZSET_STATES: tuple[str, ...] = tuple(s for s in STATES if s not in LIST_STATES)
"""States held in a Redis ZSET (scored by lease expiry, due time, or when the task got there)."""

DUE_STATES: tuple[str, ...] = (TaskState.SCHEDULED.value, TaskState.RETRY.value)
"""States whose tasks wait for a time (their score) to be moved to pending."""

FINAL_STATES: tuple[str, ...] = (TaskState.ARCHIVED.value, TaskState.COMPLETED.value)
"""States a task leaves only by an operator's action or by expiring."""


class TaskAction(enum.StrEnum):
    """What an operator can do to a task."""

    RUN = "run"  # move it to pending now
    ARCHIVE = "archive"  # keep it, never run it (asynq's "kill")
    DELETE = "delete"  # remove it for good
    CANCEL = "cancel"  # stop it while it runs; it is archived as "cancelled by operator"

    def __str__(self) -> str:
        return self.value


TASK_ACTIONS: tuple[str, ...] = tuple(a.value for a in TaskAction)

ACTION_STATES: Mapping[str, tuple[str, ...]] = MappingProxyType({
    TaskAction.RUN.value: (TaskState.SCHEDULED.value, TaskState.RETRY.value, TaskState.ARCHIVED.value),
    TaskAction.ARCHIVE.value: (TaskState.PENDING.value, TaskState.SCHEDULED.value, TaskState.RETRY.value),
    TaskAction.DELETE.value: tuple(s for s in STATES if s != TaskState.ACTIVE),
    TaskAction.CANCEL.value: (TaskState.ACTIVE.value,),
})
"""Action -> the states of one task it applies to (in display order)."""

BULK_ACTION_STATES: Mapping[str, tuple[str, ...]] = ACTION_STATES
"""Action -> the states whose every task it applies to at once ("all in state"): the same as for one
task (cancelling all is cancelling every active task)."""


class QueueAction(enum.StrEnum):
    """What an operator can do to a queue. Resuming a paused queue is called "unpause" everywhere."""

    PAUSE = "pause"
    UNPAUSE = "unpause"
    REMOVE = "remove"

    def __str__(self) -> str:
        return self.value


QUEUE_ACTIONS: tuple[str, ...] = tuple(a.value for a in QueueAction)


def actions_for(state: str) -> tuple[str, ...]:
    """The actions that apply to a task in ``state``, in ``TASK_ACTIONS`` order; () for an unknown state."""
    return tuple(a for a in TASK_ACTIONS if state in ACTION_STATES[a])


def bulk_actions_for(state: str) -> tuple[str, ...]:
    """The actions that apply to every task in ``state`` at once, in ``TASK_ACTIONS`` order."""
    return tuple(a for a in TASK_ACTIONS if state in BULK_ACTION_STATES[a])


__all__ = [
    "ACTION_STATES",
    "BULK_ACTION_STATES",
    "DUE_STATES",
    "FINAL_STATES",
    "LIST_STATES",
    "QUEUE_ACTIONS",
    "STATES",
    "TASK_ACTIONS",
    "ZSET_STATES",
    "QueueAction",
    "TaskAction",
    "TaskState",
    "actions_for",
    "bulk_actions_for",
]
