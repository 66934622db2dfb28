"""Celery with the Redis broker: ``task.delay`` / ``group(...).apply_async()``; ``celery worker``.

The worker runs the ``threads`` pool (one process, N threads) so that "one worker process" means
one process as for the other libraries; the prefetch multiplier is raised as Celery's
"Optimizing" guide advises for many short tasks, and results are ignored (no result backend).
"""

from __future__ import annotations

import os

from celery import Celery

from bench.adapters.base import Adapter, Payload
from bench.common import ENV_BROKER, QUEUE, TASK_NAME, record

PREFETCH_MULTIPLIER = 64

app = Celery("bench", broker=os.environ.get(ENV_BROKER, "redis://127.0.0.1:6379/0"))
app.conf.update(
    task_default_queue=QUEUE,
    task_ignore_result=True,
    worker_prefetch_multiplier=PREFETCH_MULTIPLIER,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


@app.task(name=TASK_NAME)
def bench_noop(t: float | None = None, pad: str | None = None) -> None:
    record(t)


class CeleryAdapter(Adapter):
    name = "celery"
    package = "celery"
    survives_kill = False
    on_kill = ("lost by default: the message is acknowledged as the task starts (`task_acks_late=False`); "
               "prefetched, not yet started messages come back after the visibility timeout (1 h). With "
               "`task_acks_late=True` the running task comes back after that timeout too")
    batch_api = "none: `apply_async(producer=…)` in a loop with one producer"

    @property
    def config(self) -> str:  # type: ignore[override]
        return (f"`celery worker -P threads -c N --prefetch-multiplier {PREFETCH_MULTIPLIER} --without-gossip "
                "--without-mingle --without-heartbeat`, `task_ignore_result=True`, acks early (default)")

    supports_scheduled = True
    processes_config = ("`celery worker -P prefork -c P` (P pool processes, one task at a time each; Celery's "
                        "default pool and concurrency, one process per core), the same flags")

    def setup(self) -> None:
        app.conf.broker_url = self.broker_url

    def close(self) -> None:
        app.close()

    def reset(self) -> None:
        # kombu keeps a queue's bindings in Redis (and caches that it declared them): after FLUSHDB,
        # declare the queue again, or the next messages would be routed nowhere.
        with app.connection_for_write() as conn:
            app.amqp.queues[QUEUE].bind(conn.default_channel).declare()

    def enqueue_one(self, payload: Payload) -> None:
        bench_noop.delay(**payload)

    def enqueue_batch(self, payloads: list[Payload]) -> None:
        # Celery has no bulk publish (a group sends one message per task too, and was slower here):
        # one producer for the whole batch, as its docs advise for sending many tasks.
        with app.producer_or_acquire() as producer:
            for p in payloads:
                bench_noop.apply_async(kwargs=p, producer=producer)

    def enqueue_in(self, payload: Payload, delay: float) -> None:
        bench_noop.apply_async(kwargs=payload, countdown=delay)

    def worker_argv(self, pool: str = "threads", concurrency: int | None = None) -> list[str]:
        return [self.bin("celery"), "-A", "bench.adapters.celery", "worker", "-P", pool,
                "-c", str(concurrency or self.concurrency), "-Q", QUEUE,
                "--prefetch-multiplier", str(PREFETCH_MULTIPLIER),
                "--without-gossip", "--without-mingle", "--without-heartbeat", "--loglevel", "WARNING"]

    def processes_argv(self, processes: int) -> list[str]:
        return self.worker_argv("prefork", processes)
