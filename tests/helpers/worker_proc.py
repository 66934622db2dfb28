"""Run a queuecore worker as a plain Python program (no Django) for the process-level tests.

    python -m tests.helpers.worker_proc --redis-url URL --prefix P --log FILE \
        [--concurrency N] [--prefetch N] [--lease S] [--heartbeat S] [--recover S] [--shutdown-timeout S]
        [--forward S] [--fetch-poll S] [--socket-timeout S] [--queues SPEC] [--periodic JSON] [--alerts JSON]

It registers the handlers of ``tests.helpers.proc_tasks`` (default registry), writes one ``boot``
line to the log, then calls ``Worker(...).run()`` (which installs the SIGTERM/SIGINT/SIGTSTP
handlers) and exits with its return code. Worker logs go to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time

from queuecore import ConnectionConfig, Worker, default_registry
from tests.helpers import proc_tasks


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.helpers.worker_proc", description=__doc__.split("\n")[0])
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--log", required=True, help="file the handlers append JSON event lines to")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--lease", type=float, default=2.0, help="lease duration, seconds")
    parser.add_argument("--heartbeat", type=float, default=0.2, help="heartbeat interval, seconds")
    parser.add_argument("--recover", type=float, default=0.3, help="recover interval, seconds")
    parser.add_argument("--shutdown-timeout", type=float, default=5.0, help="seconds")
    parser.add_argument("--queues", default="default", help="e.g. critical=6,default=3,low")
    parser.add_argument("--prefetch", type=int, default=None, help="tasks held beyond concurrency")
    parser.add_argument("--forward", type=float, default=0.1, help="forward interval, seconds")
    parser.add_argument("--fetch-poll", type=float, default=0.2, help="fetch poll interval, seconds")
    parser.add_argument("--socket-timeout", type=float, default=None, help="Redis socket timeout, seconds")
    parser.add_argument("--periodic", default=None, help="periodic entries, JSON: {name: {task, every|cron, ...}}")
    parser.add_argument("--alerts", default=None, help="alerts, JSON: {RULES: ..., SENDERS: ..., INTERVAL: ...}")
    parser.add_argument("--supervised", type=int, default=0, help="1: run as a supervisor's child would")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")
    proc_tasks.configure(args.log)
    options = {} if args.socket_timeout is None else {"socket_timeout": args.socket_timeout}
    connection = ConnectionConfig(redis_url=args.redis_url, key_prefix=args.prefix, **options)
    worker = Worker(
        connection=connection, registry=default_registry,
        queues=args.queues, concurrency=args.concurrency, prefetch=args.prefetch, lease_duration=args.lease,
        heartbeat_interval=args.heartbeat, recover_interval=args.recover, shutdown_timeout=args.shutdown_timeout,
        forward_interval=args.forward, janitor_interval=0.5, fetch_poll_interval=args.fetch_poll,
        periodic=json.loads(args.periodic) if args.periodic else None,
        alerts=json.loads(args.alerts) if args.alerts else None,
    )
    boot = {"event": "boot", "pid": os.getpid(), "t": time.time(), "server_id": worker.server_id,
            "django_imported": "django" in sys.modules, "tasks": default_registry.names()}
    with open(args.log, "a", encoding="utf-8") as f:
        f.write(json.dumps(boot) + "\n")
        f.flush()
    return worker.run(supervised=bool(args.supervised))


if __name__ == "__main__":
    sys.exit(main())
