"""queuecore: ``Client.enqueue`` / ``Client.enqueue_many``, and ``Worker(...).run()`` per process.

Run as ``python -m bench.adapters.queuecore`` it is one worker process (the plain-Python way to
run a worker that the README documents; ``manage.py runworker`` does the same inside Django). With
``--processes N`` it is a ``Supervisor`` running N of those, which is what ``runworker --processes N``
runs (without Django's start-up in each child).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from bench.adapters.base import Adapter, Payload
from bench.common import ENV_BROKER, ENV_CONCURRENCY, QUEUE, TASK_NAME, arecord, record
from queuecore import Client, TaskRegistry, Worker, task
from queuecore.core.supervisor import Supervisor, run_worker

KEY_PREFIX = "qcbench"
ASYNC_TASK_NAME = TASK_NAME + "_async"  # the drain_async scenario's task: the same body, awaited
registry = TaskRegistry()


@task(name=TASK_NAME, registry=registry)
def bench_noop(t: float | None = None, pad: str | None = None) -> None:
    record(t)


@task(name=ASYNC_TASK_NAME, registry=registry)
async def bench_noop_async(t: float | None = None, pad: str | None = None) -> None:
    await arecord(t)


class QueuecoreAdapter(Adapter):
    name = "queuecore"
    package = "queuecore"
    survives_kill = True
    on_kill = ("runs again (at-least-once): the task stays active under its 30 s lease; once the lease expires a "
               "live worker's recoverer puts it back (within lease + recover interval, ≈ 40 s), counted as a retry")
    config = ("`Worker(concurrency=N)`: N handler threads in one process; defaults otherwise "
              "(lease 30 s, heartbeat 5 s, pub/sub wake-up)")
    supports_scheduled = True
    batch_api = "`Client.enqueue_many` (one pipeline)"
    processes_config = ("`Supervisor` (what `runworker --processes P` runs) over P `Worker(concurrency=N)` "
                        "processes: N threads each")
    async_handlers = "yes"  # drain_async: `async def` handlers on the worker's event loop, at most N at once

    @property
    def task_name(self) -> str:
        return ASYNC_TASK_NAME if self.use_async else TASK_NAME

    def setup(self) -> None:
        self.client = Client(redis_url=self.broker_url, key_prefix=KEY_PREFIX, registry=registry)

    def close(self) -> None:
        self.client.close()

    def enqueue_one(self, payload: Payload) -> None:
        self.client.enqueue(self.task_name, payload, queue=QUEUE)

    def enqueue_batch(self, payloads: list[Payload]) -> None:
        self.client.enqueue_many([(self.task_name, p) for p in payloads], queue=QUEUE)

    def enqueue_in(self, payload: Payload, delay: float) -> None:
        self.client.enqueue(self.task_name, payload, queue=QUEUE, process_in=delay)

    def worker_argv(self) -> list[str]:
        return [sys.executable, "-m", "bench.adapters.queuecore"]

    def processes_argv(self, processes: int) -> list[str]:
        return [*self.worker_argv(), "--processes", str(processes)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.adapters.queuecore")
    parser.add_argument("--processes", type=int, default=1)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.processes > 1:
        return Supervisor([sys.executable, "-m", "bench.adapters.queuecore"], args.processes).run()
    worker = Worker(redis_url=os.environ[ENV_BROKER], key_prefix=KEY_PREFIX, queues={QUEUE: 1},
                    concurrency=int(os.environ.get(ENV_CONCURRENCY, "10")), registry=registry)
    return run_worker(worker)


if __name__ == "__main__":
    sys.exit(main())
