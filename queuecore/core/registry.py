"""Task types: handlers and the name -> handler registry the worker uses (``@task`` is in ``task.py``)."""

from __future__ import annotations

import inspect
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from queuecore.core.errors import ConfigurationError, InvalidPayload
from queuecore.core.flow import TaskLimits
from queuecore.core.keys import validate_type_name

ENQUEUE_OPTIONS = frozenset({"queue", "max_retry", "timeout", "deadline", "process_at", "process_in",
                             "unique_for", "task_id", "retention", "priority"})
DEFAULT_OPTIONS = ENQUEUE_OPTIONS - {"task_id", "process_at", "process_in", "deadline"}


def check_options(options: dict[str, Any], allowed: frozenset[str] = ENQUEUE_OPTIONS) -> None:
    unknown = set(options) - allowed
    if unknown:
        raise ConfigurationError(
            f"unknown option(s) {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(allowed))}")


def given(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` without those set to None: an option given as None counts as not given, so the
    level below (the batch's, the task's own, the client's default) decides it."""
    return {name: value for name, value in options.items() if value is not None}


_WHEN = frozenset({"process_at", "process_in"})  # two ways of giving one thing: when the task is due


def over(lower: dict[str, Any], higher: dict[str, Any]) -> dict[str, Any]:
    """The options of a level (``higher``: a request's own, a later ``using``) over those of the level
    below; ``process_at`` and ``process_in`` are one choice, so either given above replaces both below."""
    higher = given(higher)
    if _WHEN & higher.keys():
        lower = {name: value for name, value in lower.items() if name not in _WHEN}
    return {**lower, **higher}


@dataclass(frozen=True)
class TaskRequest:
    """A task to enqueue: a type name, its payload (argument names to values) and options."""

    type: str
    payload: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    handler: Handler | None = field(default=None, compare=False, repr=False)


class Handler:
    """A registered handler: its function, type name, default options and payload checks.

    ``TaskFunction`` (in ``task.py``) adds ``.enqueue(...)``; the registry and the worker need only this.
    """

    def __init__(self, func: Callable[..., Any], name: str, options: dict[str, Any],
                 retry_delay: Callable[[int, BaseException | None], float] | None = None,
                 limits: TaskLimits | None = None) -> None:
        self.func = func
        self.limits = limits  # global concurrency / rate limits (flow.py); None: none, no extra cost
        self.name = validate_type_name(name)
        self.options = options
        self.retry_delay = retry_delay
        self.signature = inspect.signature(func)
        self.is_async = inspect.iscoroutinefunction(func)
        for param in self.signature.parameters.values():
            if param.kind is param.POSITIONAL_ONLY:
                raise ConfigurationError(f"task {name}: positional-only parameter {param.name!r} cannot be "
                                         "given by name from a payload")
            if param.kind is param.VAR_POSITIONAL:
                raise ConfigurationError(f"task {name}: *{param.name} cannot be stored by name in a payload")
        params = self.signature.parameters.values()
        # For the fast payload check: names a payload may use, names it must use, and whether **kwargs
        # takes any other name (positional-only and *args parameters are refused above).
        self._names = frozenset(p.name for p in params if p.kind is not p.VAR_KEYWORD)
        self._required = frozenset(p.name for p in params if p.kind is not p.VAR_KEYWORD and p.default is p.empty)
        self._any_name = any(p.kind is p.VAR_KEYWORD for p in params)
        key = limits.key if limits is not None else None
        if isinstance(key, str) and key not in self._names and not self._any_name:
            raise ConfigurationError(
                f"task {name}: limit_key {key!r} is not a parameter of its function (it has "
                f"{', '.join(sorted(self._names)) or 'none'}): every task would share the one limit of a missing "
                "field", field="limit_key")
        self.__name__ = getattr(func, "__name__", name)
        self.__doc__ = func.__doc__
        self.__wrapped__ = func

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"

    def bind(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The payload for a call: positional arguments bound to their parameter names."""
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise InvalidPayload(f"task {self.name}: {exc}") from None
        payload: dict[str, Any] = {}
        for name, value in bound.arguments.items():
            if self.signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
                payload.update(value)
            else:
                payload[name] = value
        return payload

    @property
    def default_queue(self) -> str | None:
        """The queue its tasks go to when an enqueue names none (None: the client's default queue)."""
        queue = self.options.get("queue") if isinstance(self.options, dict) else None
        return queue if isinstance(queue, str) else None

    def check_payload(self, payload: dict[str, Any]) -> None:
        """Raise ``InvalidPayload`` when the handler could not be called with ``payload``."""
        keys = payload.keys()
        if self._required <= keys and (self._any_name or keys <= self._names):
            return  # fits: every required name given, no unknown one (binding would say the same)
        try:
            self.signature.bind(**payload)
        except TypeError as exc:
            raise InvalidPayload(f"payload does not fit task {self.name}: {exc}") from None

    def describe(self) -> dict[str, Any]:
        """What a worker publishes about this handler with its heartbeat, so that operator tools can
        refuse a payload no live worker could run: its parameter names, those without a default,
        and whether ``**kwargs`` takes any other name."""
        described = {"params": sorted(self._names), "required": sorted(self._required), "var_keyword": self._any_name}
        if self.limits is not None:
            described["limits"] = self.limits.describe()
        return described

    def request(self, *args: Any, **kwargs: Any) -> TaskRequest:
        """A ``TaskRequest`` for ``Client.enqueue_many``.

        The task's own defaults apply under the batch's options (the client looks them up by
        type name), so ``enqueue_many([...], queue="q")`` moves every request to ``q``.
        """
        return TaskRequest(self.name, self.bind(*args, **kwargs), handler=self)


H = TypeVar("H", bound=Handler)


class TaskRegistry:
    """Maps task type names to handlers. Thread-safe."""

    def __init__(self) -> None:
        self._tasks: dict[str, Handler] = {}
        self._lock = threading.Lock()
        self._described: str | None = None  # see describe_json

    def register(self, task: H) -> H:
        with self._lock:
            existing = self._tasks.get(task.name)
            if existing is not None and existing.func is not task.func and _origin(existing.func) != _origin(task.func):
                raise ConfigurationError(f"task type {task.name!r} is already registered by {_origin(existing.func)}")
            self._tasks[task.name] = task
            self._described = None
        return task

    def get(self, name: str) -> Handler | None:
        return self._tasks.get(name)

    def names(self) -> list[str]:
        return sorted(self._tasks)

    def describe_json(self) -> str:
        """``{"types": {name: Handler.describe()}}`` as JSON: what a worker publishes with each
        heartbeat. Encoded again only when a handler was registered since."""
        with self._lock:
            if self._described is None:
                self._described = json.dumps(
                    {"types": {name: self._tasks[name].describe() for name in sorted(self._tasks)}},
                    separators=(",", ":"), ensure_ascii=False)
            return self._described

    def __contains__(self, name: object) -> bool:
        return name in self._tasks


def _origin(func: Callable[..., Any]) -> str:
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', '?')}"


default_registry = TaskRegistry()
