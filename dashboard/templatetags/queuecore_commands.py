"""``{% load queuecore_commands %}``: the adminctl command lines a page offers to copy."""

from __future__ import annotations

import shlex
from typing import Any

from django import template

from queuecore.core.message import dumps, seconds_to_datetime

register = template.Library()


@register.filter
def qc_enqueue_command(task: Any) -> str:
    """``adminctl enqueue`` of a task like this one (its type, queue, payload, max_retry), shell-quoted."""
    argv = ["adminctl", "enqueue", task.type, "--queue", task.queue, "--payload", dumps(task.payload)]
    return shlex.join(argv)


@register.filter
def qc_edit_command(task: Any) -> str:
    """``adminctl task edit`` of this task with its payload now, shell-quoted (change the payload, run it)."""
    return shlex.join(["adminctl", "task", "edit", task.queue, task.id, "--payload", dumps(task.payload)])


@register.filter
def qc_epoch(value: Any) -> Any:
    """Unix seconds as an aware datetime (for ``qc_time``/``qc_relative``); anything else as it is."""
    return seconds_to_datetime(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value
