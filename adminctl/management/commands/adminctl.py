"""``manage.py adminctl ...``: the operator CLI, connected from the project's ``QUEUECORE`` settings.

Available once ``"queuecore_adminctl"`` is in ``INSTALLED_APPS`` (the app ``queuecore`` never imports the
CLI). It runs the same click group as the ``adminctl`` console script; only the connection
defaults come from ``QUEUECORE`` (``queuecore.conf.merged_settings()``, so ``QUEUECORE['REDIS_URL']`` and
``KEY_PREFIX``, with their environment fallbacks), and so do the client's (``MAX_PAYLOAD_BYTES``,
``DEFAULT_MAX_RETRY``, ``DEFAULT_RETENTION``: a task enqueued here follows them as the site's own do).
``--redis-url``/``--prefix`` on the command line still win. Every argument after ``adminctl`` goes to
the CLI: ``manage.py adminctl task ls default archived``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from queuecore.conf import merged_settings
from queuecore.core.config import CLIENT_DEFAULT_SETTINGS


def _defaults() -> Any:
    """The connection settings of ``QUEUECORE`` as written: the CLI checks them (one line and exit 2
    for a bad one, as ``adminctl --settings`` gives), so that even ``--help`` runs with bad settings."""
    from django.conf import settings

    from ...app import ConnectionDefaults

    value = getattr(settings, "QUEUECORE", {})
    if not isinstance(value, dict):  # the app's check (queuecore.E001) refuses it; so does the CLI
        kind = type(value).__name__
        return ConnectionDefaults(problem=f"QUEUECORE in the Django settings must be a dict, not {kind}")
    raw = merged_settings()
    return ConnectionDefaults(redis_url=raw["REDIS_URL"], prefix=raw["KEY_PREFIX"],
                              client={key: raw[key] for key in CLIENT_DEFAULT_SETTINGS})


_DJANGO_OPTIONS = ("--settings", "--pythonpath")  # manage.py reads them wherever they stand, before any command


def _without_django_options(args: list[str]) -> list[str]:
    """``args`` without Django's own ``--settings`` and ``--pythonpath`` (and their values), which
    manage.py has already applied: so ``manage.py adminctl queue ls --settings x`` works as Django users
    write it (the CLI's own ``--settings`` is for the console script). When manage.py could not read
    them (``--settings`` without a value), it applied none, and every argument stays; so does one after
    ``--``."""
    parser = CommandParser(add_help=False, allow_abbrev=False)  # as manage.py reads them
    for option in _DJANGO_OPTIONS:
        parser.add_argument(option)
    parser.add_argument("args", nargs="*")
    try:
        parser.parse_known_args(args)
    except CommandError:
        return args
    kept: list[str] = []
    rest = iter(args)
    for arg in rest:
        if arg == "--":
            kept += [arg, *rest]
        elif arg in _DJANGO_OPTIONS:
            next(rest, None)
        elif not arg.startswith(tuple(f"{option}=" for option in _DJANGO_OPTIONS)):
            kept.append(arg)
    return kept


def _the_cli() -> Any:
    """The CLI's module; a ``CommandError`` (exit 2) naming the extra when click or rich is missing."""
    try:
        from ... import cli
    except ImportError as exc:
        raise CommandError(f"adminctl needs the cli extra: pip install 'queuecore[cli]' ({exc})",
                           returncode=2) from None
    return cli


class Command(BaseCommand):
    help = ("The operator CLI (adminctl) with the connection from QUEUECORE: stats [--watch], queue, task, "
            "enqueue, server, worker. Run `manage.py adminctl --help` for its commands.")

    def run_from_argv(self, argv: list[str]) -> None:
        # Bypass argparse: click parses everything after the command name, including --help.
        try:
            cli = _the_cli()
        except CommandError as exc:  # one line, as every error of the CLI
            self.stderr.write(f"error: {exc}")
            sys.exit(exc.returncode)
        cli.main(_without_django_options(argv[2:]), prog_name=f"{os.path.basename(argv[0])} {argv[1]}",
             defaults=_defaults())

    def add_arguments(self, parser: Any) -> None:
        # REMAINDER: call_command("adminctl", "stats", "--json") hands "--json" to the CLI too.
        parser.add_argument("args", nargs=argparse.REMAINDER,
                            help="arguments for adminctl (see `manage.py adminctl --help`)")

    def handle(self, *args: str, **options: Any) -> None:
        """``call_command("adminctl", "queue", "ls")``: run the CLI; a non-zero exit is a ``CommandError``."""
        try:
            _the_cli().cli.main(args=list(args), prog_name="manage.py adminctl", obj=_defaults(), standalone_mode=True)
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise CommandError(f"adminctl exited with code {exc.code}", returncode=int(exc.code)) from None
