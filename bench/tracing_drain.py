"""What tracing costs (issue 14, item 4): one in-process worker drains N pre-enqueued no-op tasks with
opentelemetry absent (as without the ``otel`` extra), installed with no tracer provider (the API's
proxy), and with the SDK (a batch span processor to an exporter that drops the spans); the enqueue
(``enqueue_many`` in batches of 500) is timed too, and the worker process's CPU time per task (less
sensitive than wall time to other load on the machine). Runs are interleaved, each in a fresh process.

    .venv/bin/python -m bench.tracing_drain [--tasks 5000] [--reps 3] [--redis-url URL]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import uuid

RUN = r"""
import json, sys, time
mode, url, prefix, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
if mode == "absent":
    sys.modules["opentelemetry"] = None
import redis
from queuecore import Client, Inspector, TaskRegistry, Worker, task
from queuecore.core import tracing
if mode == "sdk":
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    class Drop(SpanExporter):
        def export(self, spans):
            return SpanExportResult.SUCCESS
    provider = TracerProvider(); provider.add_span_processor(BatchSpanProcessor(Drop()))
    tracing.use(provider)
reg = TaskRegistry()
@task(name="b.noop", registry=reg)
def noop():
    return None
client = Client(redis_url=url, key_prefix=prefix, registry=reg)
t0 = time.perf_counter()
for i in range(0, n, 500):
    client.enqueue_many([("b.noop", None)] * min(500, n - i), queue="b")
enq = time.perf_counter() - t0
r = redis.Redis.from_url(url)
worker = Worker(redis_url=url, key_prefix=prefix, registry=reg, queues={"b": 1}, concurrency=10)
t0, c0 = time.perf_counter(), time.process_time()
worker.start()
pending = f"{prefix}:{{b}}:pending"
while r.llen(pending) or worker.held.snapshot():  # held: leased by the worker, until acknowledged
    time.sleep(0.005)
drain, cpu = time.perf_counter() - t0, time.process_time() - c0
worker.shutdown()
keys = list(r.scan_iter(match=f"{prefix}:*", count=1000))
for i in range(0, len(keys), 500):
    r.unlink(*keys[i:i + 500])
print(json.dumps({"enqueue": enq, "drain": drain, "cpu": cpu}))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    modes = ("absent", "noop", "sdk")
    runs: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    for _ in range(args.reps):
        for mode in modes:
            out = subprocess.run([sys.executable, "-c", RUN, mode, args.redis_url, f"qcbt-{uuid.uuid4().hex[:8]}",
                                  str(args.tasks)], capture_output=True, text=True)
            if out.returncode:
                sys.exit(f"{mode} run failed:\n{out.stderr}")
            runs[mode].append(json.loads(out.stdout))
    base = statistics.median(r["drain"] for r in runs["absent"])
    for mode in modes:
        drain = statistics.median(r["drain"] for r in runs[mode])
        enq = statistics.median(r["enqueue"] for r in runs[mode])
        cpu = statistics.median(r["cpu"] for r in runs[mode])
        print(f"{mode:7s} drain {args.tasks / drain:8.0f} tasks/s (time {(drain / base - 1) * 100:+6.1f}% vs absent)  "
              f"enqueue {args.tasks / enq:8.0f} tasks/s  worker CPU {cpu / args.tasks * 1e6:6.1f} µs/task")


if __name__ == "__main__":
    main()
