"""arq: ``ArqRedis.enqueue_job``; one worker process is ``run_worker(WorkerSettings)``.

arq caps redis-py below 6, so it runs from its own virtualenv (``.venv-bench-arq``). Run as
``python -m bench.adapters.arq`` this module is one worker process (arq's documented
``run_worker``, as the ``arq`` command does, with logging at WARNING like every other library).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from arq import create_pool, run_worker
from arq.connections import RedisSettings
from arq.worker import func

from bench.adapters.base import AsyncAdapter, Payload
from bench.common import ENV_BROKER, ENV_CONCURRENCY, TASK_NAME, arecord


async def bench_noop(ctx: dict[str, Any], t: float | None = None, pad: str | None = None) -> None:
    await arecord(t)


class WorkerSettings:
    functions = [func(bench_noop, name=TASK_NAME)]
    redis_settings = RedisSettings.from_dsn(os.environ.get(ENV_BROKER, "redis://127.0.0.1:6379/0"))
    max_jobs = int(os.environ.get(ENV_CONCURRENCY, "10"))


class ArqAdapter(AsyncAdapter):
    name = "arq"
    package = "arq"
    survives_kill = True
    on_kill = ("runs again (at-least-once), late: the job stays in the queue while its in-progress key lives "
               "(job timeout + 10 s = 310 s by default); then any worker runs it again, as a new try")
    config = "`run_worker(WorkerSettings)` with `max_jobs=N`, defaults otherwise (polls every 0.5 s, keeps results 1 h)"
    supports_scheduled = True
    batch_api = "`asyncio.gather(enqueue_job …)`, 100 at a time (no bulk call)"
    async_handlers = "native"

    async def asetup(self) -> None:
        self.pool = await create_pool(RedisSettings.from_dsn(self.broker_url))

    async def aclose(self) -> None:
        await self.pool.aclose() if hasattr(self.pool, "aclose") else await self.pool.close()

    async def aenqueue_one(self, payload: Payload) -> None:
        await self.pool.enqueue_job(TASK_NAME, **payload)

    async def aenqueue_batch(self, payloads: list[Payload]) -> None:
        await self.gather_bounded([self.pool.enqueue_job(TASK_NAME, **p) for p in payloads])

    async def aenqueue_in(self, payload: Payload, delay: float) -> None:
        await self.pool.enqueue_job(TASK_NAME, _defer_by=delay, **payload)

    def worker_argv(self) -> list[str]:
        return [sys.executable, "-m", "bench.adapters.arq"]


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    run_worker(WorkerSettings)  # type: ignore[arg-type]
