"""Huey with ``RedisHuey`` (blocking BRPOP): ``task()`` / ``task.map()``; ``huey_consumer -k thread``."""

from __future__ import annotations

import os

from huey import RedisHuey

from bench.adapters.base import Adapter, Payload
from bench.common import ENV_BROKER, QUEUE, TASK_NAME, record

huey = RedisHuey(QUEUE, url=os.environ.get(ENV_BROKER, "redis://127.0.0.1:6379/0"))


@huey.task(name=TASK_NAME)
def bench_noop(t: float | None = None, pad: str | None = None) -> None:
    record(t)


class HueyAdapter(Adapter):
    name = "huey"
    package = "huey"
    survives_kill = False
    on_kill = "lost: the consumer takes the message with BRPOP and keeps no copy; there is no acknowledgement"
    config = "`huey_consumer -w N -k thread -q`: `RedisHuey` (blocking BRPOP), results and scheduler at defaults"
    supports_scheduled = True
    batch_api = "`task.map(args)` (one LPUSH per task)"
    processes_config = "`huey_consumer -w P -k process -q`: P worker processes, one task at a time each"

    def enqueue_one(self, payload: Payload) -> None:
        bench_noop(**payload)

    def enqueue_batch(self, payloads: list[Payload]) -> None:
        bench_noop.map([(p.get("t"), p.get("pad")) for p in payloads])

    def enqueue_in(self, payload: Payload, delay: float) -> None:
        bench_noop.schedule(kwargs=payload, delay=delay)

    def worker_argv(self) -> list[str]:
        return [self.bin("huey_consumer"), "bench.adapters.huey.huey", "-w", str(self.concurrency),
                "-k", "thread", "-q"]

    def processes_argv(self, processes: int) -> list[str]:
        return [self.bin("huey_consumer"), "bench.adapters.huey.huey", "-w", str(processes), "-k", "process", "-q"]
