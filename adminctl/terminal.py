"""Where output goes: data to stdout, messages to stderr, colours only on a terminal.

Both consoles are built with ``markup=False, emoji=False, highlight=False``: everything we print
may contain user data (payloads, errors), which must show literally — ``[bold]`` stays
``[bold]``. Styling is applied with ``rich.text.Text`` styles, never with markup.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import IO, Any

import click
from rich.console import Console, RenderableType
from rich.text import Text


def _console(*, stderr: bool, color: bool | None, file: IO[str] | None = None) -> Console:
    options: dict[str, Any] = {"markup": False, "emoji": False, "highlight": False, "stderr": stderr}
    if file is not None:
        options["file"] = file
    if color is True:
        options["force_terminal"] = True
    elif color is False:
        options["color_system"] = None
        options["no_color"] = True
    return Console(**options)


class Terminal:
    """The CLI's two streams.

    ``color``: ``None`` decides per stream (a terminal gets colours, a pipe or file plain text;
    ``NO_COLOR``/``FORCE_COLOR`` are honoured by rich), ``True``/``False`` forces.
    """

    def __init__(self, color: bool | None = None, *, out: Console | None = None, err: Console | None = None) -> None:
        self.color_option = color
        self.out = out or _console(stderr=False, color=color)
        self.err = err or _console(stderr=True, color=color)

    # -- data (stdout) -----------------------------------------------------------------------------

    @property
    def color(self) -> bool:
        """True when stdout gets colours."""
        return self.out.color_system is not None and not self.out.no_color

    @property
    def stdout_is_terminal(self) -> bool:
        """True when stdout is an interactive terminal (not a pipe, a file or a test runner)."""
        stream = self.out.file
        try:
            return bool(stream.isatty())
        except (AttributeError, ValueError):
            return False

    @property
    def stderr_is_terminal(self) -> bool:
        """True when stderr (messages, spinners, progress bars) is an interactive terminal."""
        try:
            return bool(self.err.file.isatty())
        except (AttributeError, ValueError):
            return False

    def print(self, *renderables: RenderableType) -> None:
        self.out.print(*renderables)

    def line(self, text: str = "") -> None:
        """One line of plain data on stdout, never wrapped (ids, counts)."""
        self.out.file.write(text + "\n")
        self.out.file.flush()

    def json(self, data: Any, *, compact: bool = False) -> None:
        """Machine-readable JSON on stdout, never wrapped nor styled."""
        if compact:
            text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
        else:
            text = json.dumps(data, ensure_ascii=False, indent=2, default=str)
        self.line(text)

    # -- messages (stderr) ---------------------------------------------------------------------------

    def _message(self, label: str, style: str, text: str) -> None:
        line = Text()
        if label:
            line.append(label, style=style)
            line.append(" ")
        line.append(text.replace("\n", " "))
        self.err.print(line, soft_wrap=True)

    def error(self, text: str) -> None:
        self._message("error:", "bold red", text)

    def warning(self, text: str) -> None:
        self._message("warning:", "bold yellow", text)

    def success(self, text: str) -> None:
        self.err.print(Text(text.replace("\n", " "), style="green"), soft_wrap=True)

    def info(self, text: str) -> None:
        self.err.print(Text(text.replace("\n", " ")), soft_wrap=True)

    def confirm(self, question: str) -> bool:
        """Ask on stderr; ``False`` on no, end of input or Ctrl-C."""
        try:
            return click.confirm(question, default=False, err=True)
        except click.Abort:
            self.err.file.write("\n")
            return False

    @contextlib.contextmanager
    def status(self, text: str) -> Iterator[None]:
        """A spinner on stderr while something runs, only when stderr is a terminal."""
        if not self.stderr_is_terminal:
            yield
            return
        with self.err.status(Text(text)):
            yield
