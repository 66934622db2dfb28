"""Work that falls due, on one in-process worker with the default intervals (issue 17); queuecore only.

``--scenario soon``: how late tasks scheduled a little ahead start. A client schedules N tasks one at a
time on the idle worker, each due 50-300 ms ahead, 20-120 ms apart (the same random sequence in every
run), so most fall due before the forwarder's next round would come (``FORWARD_INTERVAL`` 0.5 s).
Lateness = handler start - due time.

``--scenario retry-burst``: N tasks fail their first attempt with a retry delay that makes every retry
fall due at one instant; how late the retries start, and the rate at which they ran (first start to
last) against the same worker's drain of N pre-enqueued tasks (the target: a flat rate, >= 0.9).

With ``--tree LABEL=DIR`` (repeatable) versions of queuecore run interleaved, each run in a fresh
process importing that tree.

    .venv/bin/python -m bench.due_work [--scenario soon|retry-burst] [--tasks N] [--reps 2] [--tree old=/tmp/wt]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

RUN = r"""
import json, logging, random, sys, threading, time, uuid
scenario, tree, url, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
sys.path.insert(0, tree)
from queuecore import Client, TaskRegistry, Worker, task
from queuecore.core.config import ConnectionConfig

logging.getLogger("queuecore").setLevel(logging.ERROR)  # a WARNING line per failed attempt otherwise
connection = ConnectionConfig(redis_url=url, key_prefix=f"qcbench-due-{uuid.uuid4().hex[:6]}")
registry = TaskRegistry()
started, attempts, lock, instant = {}, {}, threading.Lock(), [0.0]


def wait_for(count, timeout):
    deadline = time.time() + timeout
    while len(started) < count and time.time() < deadline:
        time.sleep(0.01)


@task(name="bench.soon", registry=registry)
def soon(i):
    started[i] = time.time()


@task(name="bench.once", registry=registry, retry_delay=lambda k, e: max(0.0, instant[0] - time.time()))
def once(i):
    with lock:
        attempts[i] = attempts.get(i, 0) + 1
        first = attempts[i] == 1
    if first:
        raise RuntimeError("first attempt")
    started[i] = time.time()


worker = Worker(connection=connection, registry=registry)
client = Client(connection=connection, registry=registry)
worker.start()
out = {}
try:
    time.sleep(1.0)  # the worker's first rounds are over: it idles
    if scenario == "soon":
        rng, due = random.Random(7), {}
        for i in range(n):
            handle = client.enqueue(soon, {"i": i}, process_in=rng.uniform(0.05, 0.3))
            due[i] = handle.next_process_at.timestamp()
            time.sleep(rng.uniform(0.02, 0.12))
        wait_for(n, 10)
        out["late_ms"] = sorted((started[i] - due[i]) * 1000 for i in started)
    else:
        client.enqueue_many([soon.request(i) for i in range(n)])  # the drain, for the ratio
        wait_for(n, 60)
        drained = sorted(started.values())
        out["drain_rate"] = (len(drained) - 1) / (drained[-1] - drained[0])
        started.clear()
        instant[0] = time.time() + 2 + 2 * n / out["drain_rate"]  # after every first attempt has failed
        client.enqueue_many([once.request(i) for i in range(n)])
        wait_for(n, instant[0] - time.time() + 60)
        starts = sorted(started.values())
        out["late_ms"] = [(t - instant[0]) * 1000 for t in starts]
        out["burst_rate"] = (len(starts) - 1) / (starts[-1] - starts[0])
    out["of"] = n
    print(json.dumps(out))
finally:
    worker.shutdown(timeout=5)
    client.close()
    r = connection.connect()
    keys = list(r.scan_iter(match=connection.key_prefix + ":*", count=1000))
    for k in range(0, len(keys), 500):
        r.unlink(*keys[k:k + 500])
"""


def summary(out: dict[str, object]) -> str:
    """One table row's figures: how many ran, lateness percentiles (ms), and the burst's rates."""
    late = sorted(out["late_ms"])  # type: ignore[call-overload]
    cells = [f"{len(late)}/{out['of']}", f"{statistics.median(late):.1f}", f"{late[int(0.9 * (len(late) - 1))]:.1f}",
             f"{late[-1]:.1f}"]
    if "burst_rate" in out:
        burst, drain = float(out["burst_rate"]), float(out["drain_rate"])  # type: ignore[arg-type]
        cells += [f"{burst:,.0f}", f"{drain:,.0f}", f"{burst / drain:.2f}"]
    return " | ".join(cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--scenario", choices=("soon", "retry-burst"), default="soon")
    parser.add_argument("--tasks", type=int, default=None, help="120 for soon, 1,000 for retry-burst")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--tree", action="append", default=[], help="LABEL=DIR of a queuecore checkout")
    args = parser.parse_args()
    tasks = args.tasks or (120 if args.scenario == "soon" else 1000)
    trees = [tuple(t.split("=", 1)) for t in args.tree] or [("current", str(Path(__file__).resolve().parents[1]))]
    rows: list[str] = []
    for rep in range(1, args.reps + 1):
        for label, tree in trees:
            done = subprocess.run([sys.executable, "-c", RUN, args.scenario, tree, args.redis_url, str(tasks)],
                                  capture_output=True, text=True, check=True)
            rows.append(f"| {label} | {rep} | {summary(json.loads(done.stdout.strip().splitlines()[-1]))} |")
    extra = " burst rate (/s) | drain rate (/s) | burst / drain |" if args.scenario == "retry-burst" else ""
    print(f"| version | run | ran | late p50 (ms) | p90 | max |{extra}")
    print("| --- " * (6 + (3 if extra else 0)) + "|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
