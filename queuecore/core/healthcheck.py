"""``python -m queuecore.core.healthcheck HEALTH_FILE``: the worker health check without Django (see
``liveness.py``; ``manage.py queuecore_healthcheck`` is the Django command)."""

from __future__ import annotations

import argparse
import sys

from queuecore.core import limits
from queuecore.core.config import ConnectionConfig
from queuecore.core.errors import ConfigurationError, RedisUnavailable
from queuecore.core.liveness import check_health

# --max-age: a finite number of seconds, at least the resolution of stored times and at most three of
# the longest heartbeat intervals (the default is three heartbeat intervals).
MAX_AGE = limits.Range(limits.MIN_INTERVAL, 3 * limits.MAX_INTERVAL, note="(3 days)")


def check_max_age(value: float | None, name: str = "--max-age") -> float | None:
    """``value`` if it is None (the default) or in ``MAX_AGE``; else ``ConfigurationError`` naming
    ``name`` and the range (NaN, infinities, zero and negatives included)."""
    return None if value is None else MAX_AGE.check(value, name)


def main(argv: list[str] | None = None) -> int:
    """``python -m queuecore.core.healthcheck HEALTH_FILE [--redis-url URL] [--max-age S]``: the health
    check without Django (exit 0 or 1, one line). The Redis URL defaults to ``QUEUECORE_REDIS_URL``."""
    parser = argparse.ArgumentParser(prog="python -m queuecore.core.healthcheck", description=main.__doc__)
    parser.add_argument("health_file")
    parser.add_argument("--redis-url", default=None)
    parser.add_argument("--max-age", type=float, default=None)
    parser.add_argument("--timeout", type=float, default=2.0)
    args = parser.parse_args(argv)
    try:
        max_age = check_max_age(args.max_age)
        connection = ConnectionConfig.default(redis_url=args.redis_url)
        client = ConnectionConfig(redis_url=connection.redis_url, key_prefix=connection.key_prefix,
                                  socket_timeout=args.timeout, connect_timeout=args.timeout).connect()
    except (ConfigurationError, RedisUnavailable) as exc:  # a bad option, no cluster node answering: one line
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1
    try:
        report = check_health(args.health_file, client, max_age=max_age)
    finally:
        client.close()
    if report.ok:
        print(f"ok: {report.reason}")
    else:
        print(f"unhealthy: {report.reason}", file=sys.stderr)
    return report.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
