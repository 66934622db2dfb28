"""The root click group: global options, command registration, and the one place errors become exit codes.

Exit codes: 0 success; 1 operational error (missing queue, task or page, a task in the wrong state, a
duplicate, a bad payload, a declined confirmation, Redis full, a key of the wrong type, any other
refusal by Redis); 2 Redis unreachable, a bad option or argument
(click's usage errors) or a bad configuration. Known errors print one line on stderr; a traceback
only with ``--debug``.
"""

from __future__ import annotations

import errno
from typing import Any

import click
import redis

from queuecore.core.errors import (
    BrokerError,
    ConfigurationError,
    InvalidOption,
    QueuecoreError,
    RedisFull,
    RedisUnavailable,
    WrongServer,
)
from queuecore.core.redis_errors import is_connection_error, unreachable_message

from . import __version__
from .app import App, ConnectionDefaults, GlobalOptions
from .commands.alerts import alerts
from .commands.bulk import bulk
from .commands.enqueue import enqueue
from .commands.export import export
from .commands.failures import failures
from .commands.periodic import periodic
from .commands.queue import queue
from .commands.server import server
from .commands.stats import stats
from .commands.task import task
from .commands.task_edit import edit as task_edit
from .commands.types import types
from .commands.worker import worker
from .terminal import Terminal

EXIT_OK = 0
EXIT_ERROR = 1  # operational: missing queue/task/page, wrong state, duplicate, bad payload, declined, Redis
# full, a corrupt key, any other refusal by Redis
EXIT_UNAVAILABLE = 2  # Redis unreachable; also click's usage errors and bad configuration

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 88}


def exit_code_for(exc: BaseException) -> int | None:
    """The exit code of a known error, ``None`` for anything else (a bug)."""
    if _unreachable(exc) or isinstance(exc, WrongServer):  # WrongServer: a Redis URL to correct
        return EXIT_UNAVAILABLE
    if isinstance(exc, ConfigurationError) and not isinstance(exc, InvalidOption):  # InvalidOption: refused input
        return EXIT_UNAVAILABLE
    if isinstance(exc, (QueuecoreError, redis.RedisError)):
        return EXIT_ERROR
    return None


def _unreachable(exc: BaseException) -> bool:
    """Redis could not be reached (rather than refusing what was asked)."""
    return isinstance(exc, RedisUnavailable) or (isinstance(exc, redis.RedisError) and is_connection_error(exc))


def error_message(exc: BaseException, app: App) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, (BrokerError, redis.RedisError)):
        if not isinstance(exc, BrokerError):
            text = unreachable_message(exc) if _unreachable(exc) else f"Redis error: {text}"
        where = app.redacted_url
        if (_unreachable(exc) or isinstance(exc, WrongServer)) and where:
            text += f" (Redis at {where}; set --redis-url or QUEUECORE_REDIS_URL)"
        elif isinstance(exc, RedisFull):
            text += (" — make room: delete archived or completed tasks (`task delete-all QUEUE archived`), "
                     "shorten retention, or raise maxmemory")
    return app.scrub(text)


class AdminGroup(click.Group):
    """The root group: turns queuecore's errors into one line on stderr and an exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as exc:
            app = ctx.obj if isinstance(ctx.obj, App) else None
            broken_pipe = isinstance(exc, OSError) and exc.errno == errno.EPIPE  # ``| head``: click exits quietly
            if app is None or app.options.debug or broken_pipe:
                raise
            code = exit_code_for(exc)
            if code is None:
                app.terminal.error(app.scrub(f"unexpected {type(exc).__name__}: {exc} "
                                             "(run with --debug for the traceback)"))
                code = EXIT_ERROR
            else:
                app.terminal.error(error_message(exc, app))
            ctx.exit(code)


@click.group(cls=AdminGroup, context_settings=CONTEXT_SETTINGS)
@click.option("--redis-url", metavar="URL",
              help="Redis to use. [env: QUEUECORE_REDIS_URL; else QUEUECORE['REDIS_URL'] of the Django settings "
                   "given; else redis://127.0.0.1:6379/0]")
@click.option("--prefix", metavar="PREFIX",
              help="Key prefix of the queuecore data. [env: QUEUECORE_KEY_PREFIX; else the Django settings; "
                   "else qc]")
@click.option("--settings", metavar="MODULE",
              help="Django settings module to read QUEUECORE from when no URL or prefix is given "
                   "(Django itself is not started). [env: DJANGO_SETTINGS_MODULE]")
@click.option("--json", "json_output", is_flag=True, help="Print machine-readable JSON only (any command).")
@click.option("--color/--no-color", default=None,
              help="Force colours on or off. [default: colours only on a terminal; NO_COLOR is honoured]")
@click.option("--debug", is_flag=True, envvar="ADMINCTL_DEBUG", help="Show tracebacks of errors.")
@click.version_option(__version__, "-V", "--version", prog_name="adminctl")
@click.pass_context
def cli(ctx: click.Context, redis_url: str | None, prefix: str | None, settings: str | None, json_output: bool,
        color: bool | None, debug: bool) -> None:
    """Operate queuecore from a terminal: queues, tasks, workers and live stats.

    Every command that reads also takes --json. Redis is found from --redis-url, else
    QUEUECORE_REDIS_URL, else the Django settings (--settings or DJANGO_SETTINGS_MODULE),
    else redis://127.0.0.1:6379/0. A Redis password is never printed.

    \b
    Examples:
      adminctl stats --watch
      adminctl queue ls
      adminctl task ls default archived --search Timeout
      adminctl task run-all default archived --yes
      adminctl --redis-url redis://:secret@cache:6379/1 --prefix app server ls
      adminctl --json queue inspect default | jq .latency

    \b
    Exit codes: 0 ok, 1 operational error (no such queue or task,
    wrong state, duplicate, bad payload, declined), 2 Redis
    unreachable or a usage error.
    """
    injected = ctx.obj if isinstance(ctx.obj, ConnectionDefaults) else None
    options = GlobalOptions(redis_url=redis_url, prefix=prefix, settings=settings, json=json_output, color=color,
                            debug=debug)
    app = App(options, Terminal(color=color), injected=injected)
    ctx.obj = app
    ctx.call_on_close(app.close)


for command in (stats, queue, task, failures, types, enqueue, server, worker, periodic, alerts, bulk):
    cli.add_command(command)
task.add_command(export)
task.add_command(task_edit)


def main(argv: list[str] | None = None, *, prog_name: str = "adminctl", defaults: ConnectionDefaults | None = None,
         ) -> None:
    """The console script: run the CLI and exit with its code (click handles a closed pipe)."""
    cli.main(args=argv, prog_name=prog_name, obj=defaults)
