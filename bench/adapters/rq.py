"""RQ: ``Queue.enqueue`` / ``Queue.enqueue_many``; ``rq worker`` (forking ``Worker`` or ``SimpleWorker``)."""

from __future__ import annotations

from redis import Redis
from rq import Queue

from bench.adapters.base import Adapter, Payload
from bench.common import QUEUE, record


def bench_noop(t: float | None = None, pad: str | None = None) -> None:
    record(t)


class RQAdapter(Adapter):
    name = "rq"
    package = "rq"
    survives_kill = False
    on_kill = ("not run again by default: the job stays in StartedJobRegistry until its heartbeat TTL (30 s + 60 s) "
               "lapses and the registry is next cleaned (a worker's maintenance pass, every 10 min), which moves it "
               "to FailedJobRegistry (AbandonedJobError); it is re-queued instead only if enqueued with `Retry`")
    batch_api = "`Queue.enqueue_many` with `Queue.prepare_data` (one pipeline)"

    @property
    def config(self) -> str:  # type: ignore[override]
        if self.variant == "simple":
            return "`rq worker -w rq.worker.SimpleWorker --quiet`: runs each job in the worker process (no fork)"
        return "`rq worker --quiet`: the default `Worker`, which forks a work-horse per job"

    def setup(self) -> None:
        self.redis = Redis.from_url(self.broker_url)
        self.queue = Queue(QUEUE, connection=self.redis)

    def close(self) -> None:
        self.redis.close()

    def enqueue_one(self, payload: Payload) -> None:
        self.queue.enqueue(bench_noop, **payload)

    def enqueue_batch(self, payloads: list[Payload]) -> None:
        self.queue.enqueue_many([Queue.prepare_data(bench_noop, kwargs=p) for p in payloads])

    def worker_argv(self) -> list[str]:
        argv = [self.bin("rq"), "worker", "--url", self.broker_url, "--quiet"]
        if self.variant == "simple":
            argv += ["--worker-class", "rq.worker.SimpleWorker"]
        return [*argv, QUEUE]
