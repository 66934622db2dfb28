"""``manage.py queuecore_healthcheck``: exit 0 when the worker writing the health file is alive and
its Redis answers, 1 otherwise; one line either way (an orchestrator's liveness probe)."""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from queuecore.conf import get_config, setting_message
from queuecore.core.errors import ConfigurationError, RedisUnavailable
from queuecore.core.healthcheck import check_max_age
from queuecore.core.liveness import check_health


class Command(BaseCommand):
    help = ("Exit 0 when the runworker process writing the health file (--health-file or "
            "QUEUECORE['HEALTH_FILE']) heartbeated recently and its Redis answers; else print why and exit 1.")
    requires_system_checks: list[str] = []  # a probe: fast, and never failing on an unrelated check

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--health-file", help="the file runworker rewrites (default: QUEUECORE['HEALTH_FILE'])")
        parser.add_argument("--max-age", type=float,
                            help="seconds since the last heartbeat still healthy (default: 3 heartbeat intervals)")
        parser.add_argument("--redis-url", help="Redis URL (default: QUEUECORE['REDIS_URL'])")
        parser.add_argument("--timeout", type=float, default=2.0, help="seconds to wait for Redis (default 2)")

    def handle(self, *args: Any, **options: Any) -> None:
        # A setting or option that cannot work: one line on stderr ("CommandError: ...") and exit 1.
        try:
            config = get_config()
        except ConfigurationError as exc:
            raise CommandError(setting_message(exc)) from None
        try:
            max_age = check_max_age(options.get("max_age"))
        except ConfigurationError as exc:
            raise CommandError(str(exc)) from None
        path = options.get("health_file") or config.raw.get("HEALTH_FILE")
        if not path:
            raise CommandError("no health file: give --health-file or set QUEUECORE['HEALTH_FILE']")
        try:
            connection = replace(config.connection,
                                 redis_url=options.get("redis_url") or config.connection.redis_url,
                                 socket_timeout=options["timeout"], connect_timeout=options["timeout"])
        except ConfigurationError as exc:
            option = {"redis_url": "--redis-url", "socket_timeout": "--timeout", "connect_timeout": "--timeout"}
            raise CommandError(f"{option.get(exc.field or '', 'option')}: {exc}") from None
        try:
            client = connection.connect()  # a cluster client reads the slot map here
        except RedisUnavailable as exc:
            self.stderr.write(f"unhealthy: {exc}")
            sys.exit(1)
        try:
            report = check_health(path, client, max_age=max_age)
        finally:
            client.close()
        if report.ok:
            self.stdout.write(f"ok: {report.reason}")
            return
        self.stderr.write(f"unhealthy: {report.reason}")
        sys.exit(report.exit_code)
