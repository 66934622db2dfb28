"""How late tasks scheduled a little ahead start (issue 17): an idle in-process worker with the default
intervals (``FORWARD_INTERVAL`` 0.5 s); a client schedules N tasks one at a time, each due 50-300 ms
ahead, 20-120 ms apart (the same random sequence in every run), so most fall due before the
forwarder's next round would come. Lateness = handler start - due time. With ``--tree LABEL=DIR``
(repeatable) versions of queuecore run interleaved, each run in a fresh process importing that tree.

    .venv/bin/python -m bench.scheduled_soon [--tasks 120] [--reps 2] [--tree old=/tmp/wt] [--redis-url URL]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

RUN = r"""
import json, random, sys, time, uuid
tree, url, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, tree)
from queuecore import Client, TaskRegistry, Worker, task
from queuecore.core.config import ConnectionConfig

connection = ConnectionConfig(redis_url=url, key_prefix=f"qcbench-soon-{uuid.uuid4().hex[:6]}")
registry = TaskRegistry()
started = {}

@task(name="bench.soon", registry=registry)
def soon(i):
    started[i] = time.time()

worker = Worker(connection=connection, registry=registry)
client = Client(connection=connection, registry=registry)
worker.start()
try:
    time.sleep(1.0)  # the worker's first rounds are over: it idles
    rng, due = random.Random(7), {}
    for i in range(n):
        handle = client.enqueue(soon, {"i": i}, process_in=rng.uniform(0.05, 0.3))
        due[i] = handle.next_process_at.timestamp()
        time.sleep(rng.uniform(0.02, 0.12))
    deadline = time.time() + 10
    while len(started) < n and time.time() < deadline:
        time.sleep(0.05)
    print(json.dumps(sorted((started[i] - due[i]) * 1000 for i in started)))
finally:
    worker.shutdown(timeout=5)
    client.close()
    r = connection.connect()
    keys = list(r.scan_iter(match=connection.key_prefix + ":*", count=1000))
    for k in range(0, len(keys), 500):
        r.unlink(*keys[k:k + 500])
"""


def summary(late: list[float], n: int) -> dict[str, float]:
    """Percentiles of the lateness (ms) of the tasks that ran; ``ran`` counts them."""
    return {"ran": len(late), "of": n, "p50": statistics.median(late), "p90": late[int(0.9 * (len(late) - 1))],
            "max": late[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=120)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--tree", action="append", default=[], help="LABEL=DIR of a queuecore checkout")
    args = parser.parse_args()
    trees = [tuple(t.split("=", 1)) for t in args.tree] or [("current", str(Path(__file__).resolve().parents[1]))]
    results: dict[str, list[dict[str, float]]] = {label: [] for label, _ in trees}
    for _ in range(args.reps):
        for label, tree in trees:
            out = subprocess.run([sys.executable, "-c", RUN, tree, args.redis_url, str(args.tasks)],
                                 capture_output=True, text=True, check=True)
            results[label].append(summary(json.loads(out.stdout.strip().splitlines()[-1]), args.tasks))
    print("| version | run | ran | late p50 (ms) | p90 | max |\n| --- | --- | --- | --- | --- | --- |")
    for label, runs in results.items():
        for k, res in enumerate(runs, 1):
            ran = f"{res['ran']}/{res['of']}"
            print(f"| {label} | {k} | {ran} | {res['p50']:.1f} | {res['p90']:.1f} | {res['max']:.1f} |")


if __name__ == "__main__":
    main()
