"""What flow control costs a drain (issue 13): one worker process drains N pre-enqueued no-op tasks of
a type without limits, with a concurrency limit or a rate limit that never binds (so only the cost of
taking and freeing a slot shows), or with a concurrency limit of 2 under 10 handler threads; on a
private Redis, with script calls and commands per task from INFO commandstats.

    .venv/bin/python -m bench.limits_drain [--tasks 5000] [--reps 3] [--concurrency 10] [--tree DIR ...]

``--tree`` (repeatable; default: this checkout) runs the workers and the enqueue from a checkout of
queuecore (say, ``git archive`` of the commit before flow control) to compare drains across versions;
variants a tree does not know (no ``concurrency_limit``) are skipped there. Runs are interleaved
(tree by tree, variant by variant, rep by rep) so that a busy machine weighs on all of them alike.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

import redis

from bench.common import PrivateRedis, RedisSnapshot

PREFIX = "qclim"
QUEUE = "bench"
# free: no limits; limited / rated: limits that never bind (the cost of taking and freeing a slot or a
# place in the window); binding: a limit of 2 under 10 handler threads (held-back tasks park and wake).
VARIANTS = {"free": {}, "limited": {"concurrency_limit": 1000}, "rated": {"rate_limit": "100000/s"},
            "binding": {"concurrency_limit": 2}}
# Variants that change the worker's options instead of the task's (nostats: per-type statistics off).
WORKER_VARIANTS = {"nostats": {"type_stats": False}}

WORKER = r"""
import json, logging, os, sys
from queuecore import TaskRegistry, Worker, task
logging.basicConfig(level=logging.WARNING)
registry = TaskRegistry()
options = json.loads(os.environ["QC_BENCH_OPTIONS"])
task(name="bench.task", registry=registry, **options)(lambda n=0: None)
Worker(redis_url=os.environ["QC_BENCH_URL"], key_prefix=os.environ["QC_BENCH_PREFIX"],
       queues={os.environ["QC_BENCH_QUEUE"]: 1}, concurrency=int(os.environ["QC_BENCH_CONCURRENCY"]),
       registry=registry, **json.loads(os.environ["QC_BENCH_WORKER_OPTIONS"])).run()
"""

ENQUEUE = r"""
import json, os, sys
from queuecore import Client
c = Client(redis_url=os.environ["QC_BENCH_URL"], key_prefix=os.environ["QC_BENCH_PREFIX"])
n = int(sys.argv[1])
for i in range(0, n, 1000):
    c.enqueue_many([("bench.task", {"n": j}) for j in range(i, min(n, i + 1000))], queue=os.environ["QC_BENCH_QUEUE"])
"""


def drain(url: str, tree: str, variant: str, tasks: int, concurrency: int) -> dict[str, float] | None:
    r = redis.Redis.from_url(url)
    r.flushdb()  # the benchmark's private Redis, never the shared one
    env = dict(os.environ, PYTHONPATH=tree, QC_BENCH_URL=url, QC_BENCH_PREFIX=PREFIX, QC_BENCH_QUEUE=QUEUE,
               QC_BENCH_CONCURRENCY=str(concurrency), QC_BENCH_OPTIONS=json.dumps(VARIANTS.get(variant, {})),
               QC_BENCH_WORKER_OPTIONS=json.dumps(WORKER_VARIANTS.get(variant, {})))
    subprocess.run([sys.executable, "-c", ENQUEUE, str(tasks)], env=env, check=True, cwd=tree)
    pending, active = f"{PREFIX}:{{{QUEUE}}}:pending", f"{PREFIX}:{{{QUEUE}}}:active"
    scheduled = f"{PREFIX}:{{{QUEUE}}}:scheduled"

    def left() -> int:
        pipe = r.pipeline(transaction=False)
        pipe.llen(pending)
        pipe.zcard(active)
        pipe.zcard(scheduled)
        return sum(pipe.execute())

    before = RedisSnapshot.take(r)
    proc = subprocess.Popen([sys.executable, "-c", WORKER], env=env, cwd=tree, stderr=subprocess.PIPE)
    t5 = None
    deadline = time.monotonic() + 120
    try:
        while True:
            n = left()
            now = time.monotonic()
            if t5 is None and n <= tasks * 0.95:
                t5 = now
            if n == 0:
                break
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                if any(s in err for s in ("concurrency_limit", "rate_limit", "unknown option", "type_stats")):
                    return None  # this tree has no such option
                raise RuntimeError(f"worker exited {proc.returncode}: {err[-2000:]}")
            if now > deadline:
                raise RuntimeError(f"drain stuck with {n} tasks left")
            time.sleep(0.005)
        end = time.monotonic()
        after = RedisSnapshot.take(r)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    cost = before.delta(after, tasks)
    assert t5 is not None
    return {"rate": tasks * 0.95 / max(end - t5, 1e-9), "scripts_per_task": cost["scripts_per_task"],
            "commands_per_task": cost["commands_per_task"], "redis_cpu_us_per_task": cost["redis_cpu_us_per_task"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--tree", action="append", default=[], help="another queuecore checkout to compare")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"of {', '.join([*VARIANTS, *WORKER_VARIANTS])}")
    args = parser.parse_args()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = args.tree or [here]
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    server = PrivateRedis("limits").start()
    try:
        for _rep in range(args.reps):
            for tree in trees:
                for variant in args.variants.split(","):
                    got = drain(server.url, tree, variant, args.tasks, args.concurrency)
                    if got is not None:
                        results.setdefault((tree, variant), []).append(got)
                        print(f"{tree} {variant}: {got['rate']:.0f} tasks/s, "
                              f"{got['scripts_per_task']:.2f} scripts/task", file=sys.stderr)
    finally:
        server.stop()
    base = statistics.median(r["rate"] for r in results.get((trees[-1], "free"), [{"rate": float("nan")}]))
    print(f"| tree | variant | drain tasks/s (median of {args.reps}) [min-max] | vs the last tree's free | "
          "scripts / task | commands / task | Redis CPU µs / task |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for (tree, variant), runs in results.items():
        rates = [r["rate"] for r in runs]
        med = statistics.median(rates)
        label = "this checkout" if tree == here else tree
        print(f"| {label} | {variant} | {med:,.0f} [{min(rates):,.0f}-{max(rates):,.0f}] | "
              f"{med / base:.2f}x | {statistics.median(r['scripts_per_task'] for r in runs):.2f} | "
              f"{statistics.median(r['commands_per_task'] for r in runs):.2f} | "
              f"{statistics.median(r['redis_cpu_us_per_task'] for r in runs):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
