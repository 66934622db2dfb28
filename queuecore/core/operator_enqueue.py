"""An operator enqueues a task (``adminctl enqueue``, the dashboard's "Enqueue a task"): the input is
checked first (as ``Client.check``), then the task is held against what the live workers publish
(``Inspector.require_runnable``) and refused when none would run it, unless forced."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from queuecore.core.client import Client
from queuecore.core.errors import InvalidPayload, NoWorkerForTask
from queuecore.core.inspector import Inspector
from queuecore.core.results import TaskHandle


@dataclass(frozen=True)
class OperatorEnqueue:
    """What happened: the task, the checks' warnings, and why it was enqueued although no live worker
    would run it (``forced``; None when it would)."""

    task: TaskHandle
    warnings: list[str] = field(default_factory=list)
    forced: str | None = None


def enqueue_checked(client: Client, inspector: Inspector, type_name: str, payload: dict[str, Any] | None, *,
                    force: bool = False, refused_hint: str = "", **options: Any) -> OperatorEnqueue:
    """Enqueue ``type_name`` with ``payload`` and ``options`` as an operator does (see the module);
    a refusal (``NoWorkerForTask``, or ``InvalidPayload`` when only the payload fits no handler) says
    that nothing was enqueued, then ``refused_hint``."""
    client.check(type_name, payload, **options)  # bad input first: refused before Redis is asked anything
    try:
        check = inspector.require_runnable(type_name, payload, options.get("queue", "default"))
    except (NoWorkerForTask, InvalidPayload) as exc:
        if not force:
            raise type(exc)(f"{exc}; nothing was enqueued{refused_hint}") from None
        return OperatorEnqueue(client.enqueue(type_name, payload, **options), forced=str(exc))
    return OperatorEnqueue(client.enqueue(type_name, payload, **options), list(check.warnings))
