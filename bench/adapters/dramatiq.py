"""Dramatiq with its Redis broker (defaults): ``actor.send`` / ``group(...).run()``; ``dramatiq``."""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from bench.adapters.base import Adapter, Payload
from bench.common import ENV_BROKER, QUEUE, TASK_NAME, record

broker = RedisBroker(url=os.environ.get(ENV_BROKER, "redis://127.0.0.1:6379/0"))
dramatiq.set_broker(broker)


@dramatiq.actor(actor_name=TASK_NAME, queue_name=QUEUE)
def bench_noop(t: float | None = None, pad: str | None = None) -> None:
    record(t)


class DramatiqAdapter(Adapter):
    name = "dramatiq"
    package = "dramatiq"
    survives_kill = True
    on_kill = ("runs again (at-least-once): fetched messages sit in the worker's ack set; once its heartbeat is "
               "60 s old, queue maintenance (run on 0.1 % of broker calls) puts them back on the queue")
    config = "`dramatiq --processes 1 --threads N`: the Redis broker and middleware at their defaults"
    supports_scheduled = True
    batch_api = "none: `send()` in a loop (one enqueue script per message)"
    processes_config = "`dramatiq --processes P --threads N`: P processes of N threads each"

    def close(self) -> None:
        broker.close()

    def enqueue_one(self, payload: Payload) -> None:
        bench_noop.send(**payload)

    def enqueue_batch(self, payloads: list[Payload]) -> None:
        # No bulk call: `group(...).run()` enqueues one by one too, and was slower here than a loop.
        for p in payloads:
            bench_noop.send(**p)

    def enqueue_in(self, payload: Payload, delay: float) -> None:
        bench_noop.send_with_options(kwargs=payload, delay=int(delay * 1000))

    def worker_argv(self, processes: int = 1) -> list[str]:
        return [self.bin("dramatiq"), "bench.adapters.dramatiq", "--processes", str(processes),
                "--threads", str(self.concurrency), "--queues", QUEUE]

    def processes_argv(self, processes: int) -> list[str]:
        return self.worker_argv(processes)
