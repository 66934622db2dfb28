"""Shared click pieces: the per-command ``--json`` flag, ``--yes``, and a human duration type."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

import click

from queuecore.core.states import STATES

from .app import App

F = TypeVar("F", bound=Callable[..., Any])


def _set_json(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        app = ctx.find_object(App)
        if app is not None:
            app.json = True


def json_option(f: F) -> F:
    """``--json`` on a command: the same as the global ``adminctl --json``."""
    return click.option("--json", "json_output", is_flag=True, expose_value=False, callback=_set_json,
                        help="Print machine-readable JSON only.")(f)


def not_empty(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Refuse an option given empty (``--type "$T"`` with T unset): it would mean no filter at all, so a
    bulk action on one type would act on every task of the state."""
    if value is not None and not value.strip():
        raise click.BadParameter("was given empty (leave the option out for no filter)")
    return value


def yes_option(f: F) -> F:
    return click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")(f)


_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


class Duration(click.ParamType):
    """Seconds as a number (``90``, ``1.5``) or with units (``90s``, ``5m``, ``2h``, ``1d``, ``1h30m``)."""

    name = "duration"

    def __init__(self, minimum: float | None = 0.0, minimum_open: bool = False, maximum: float | None = None) -> None:
        self.minimum = minimum
        self.minimum_open = minimum_open
        self.maximum = maximum  # None: the core bounds the value where it is used

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, (int, float)):
            seconds = float(value)
        else:
            text = str(value).strip().lower()
            try:
                seconds = float(text)
            except ValueError:
                parts = _PART.findall(text)
                sizes = [_UNIT_SECONDS[u] for _, u in parts]
                if not parts or "".join(n + u for n, u in parts) != text or sizes != sorted(set(sizes), reverse=True):
                    # units largest first, each once: "1h1h" or "30m1h" is a typo, not 2 h or 1 h 30 m
                    self.fail(f"{value!r} is not a duration (e.g. 30, 1.5, 90s, 5m, 2h, 1h30m)", param, ctx)
                seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)
        if seconds != seconds or seconds in (float("inf"), float("-inf")):
            self.fail(f"{value!r} is not a finite duration", param, ctx)
        if self.minimum is not None and (seconds < self.minimum or (self.minimum_open and seconds == self.minimum)):
            bound = "more than" if self.minimum_open else "at least"
            self.fail(f"{value!r} must be {bound} {self.minimum:g} seconds", param, ctx)
        if self.maximum is not None and seconds > self.maximum:
            self.fail(f"{value!r} must be at most {self.maximum:,g} seconds", param, ctx)
        return seconds


def state_argument(choices: tuple[str, ...] = STATES) -> Callable[[F], F]:
    return click.argument("state", type=click.Choice(choices), metavar="STATE")
