"""taskiq with taskiq-redis: ``task.kiq()``; ``taskiq worker``.

Two brokers: ``ListQueueBroker`` (the variant ``taskiq``: LPUSH/BRPOP, no acknowledgement) and
``RedisStreamBroker`` (``taskiq-stream``: a stream with a consumer group, acknowledged).
"""

from __future__ import annotations

import os

from taskiq_redis import ListQueueBroker, RedisStreamBroker

from bench.adapters.base import AsyncAdapter, Payload
from bench.common import ENV_BROKER, ENV_VARIANT, QUEUE, TASK_NAME, arecord

_url = os.environ.get(ENV_BROKER, "redis://127.0.0.1:6379/0")
if os.environ.get(ENV_VARIANT) == "stream":
    broker = RedisStreamBroker(_url, queue_name=QUEUE)
else:
    broker = ListQueueBroker(_url, queue_name=QUEUE)


@broker.task(task_name=TASK_NAME)
async def bench_noop(t: float | None = None, pad: str | None = None) -> None:
    await arecord(t)


class TaskiqAdapter(AsyncAdapter):
    name = "taskiq"
    package = "taskiq"
    processes_config = "`taskiq worker --workers P --max-async-tasks N`: P processes of N async slots each"
    batch_api = "`asyncio.gather(task.kiq() …)`, 100 at a time (no bulk call)"
    async_handlers = "native"

    @property
    def survives_kill(self) -> bool:  # type: ignore[override]
        return self.variant == "stream"

    @property
    def on_kill(self) -> str:  # type: ignore[override]
        if self.variant == "stream":
            return ("runs again, late: the entry stays pending in the consumer group and is reclaimed with "
                    "XAUTOCLAIM after `idle_timeout` (10 min) by a worker — which tries only right after it "
                    "has read new messages")
        return "lost: the worker takes the message with BRPOP; there is no acknowledgement"

    @property
    def config(self) -> str:  # type: ignore[override]
        which = "`RedisStreamBroker` (acks when done)" if self.variant == "stream" else "`ListQueueBroker`"
        return f"`taskiq worker --workers 1 --max-async-tasks N`, {which}, no result backend"

    async def asetup(self) -> None:
        await broker.startup()  # the stream broker creates its consumer group here, before any message

    def reset(self) -> None:
        if isinstance(broker, RedisStreamBroker):  # FLUSHDB dropped the consumer group: declare it again
            self.run(broker._declare_consumer_group())

    async def aclose(self) -> None:
        await broker.shutdown()

    async def aenqueue_one(self, payload: Payload) -> None:
        await bench_noop.kiq(**payload)

    async def aenqueue_batch(self, payloads: list[Payload]) -> None:
        await self.gather_bounded([bench_noop.kiq(**p) for p in payloads])

    def worker_argv(self, processes: int = 1) -> list[str]:
        return [self.bin("taskiq"), "worker", "bench.adapters.taskiq:broker", "--workers", str(processes),
                "--max-async-tasks", str(self.concurrency), "--log-level", "WARNING"]

    def processes_argv(self, processes: int) -> list[str]:
        return self.worker_argv(processes)
