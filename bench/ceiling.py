"""The ceiling: the benchmark task's body run by bare threads, with no queue at all.

``python -m bench.ceiling N`` runs ``record()`` (bench/common.py, the body every library's
benchmark task runs: one INCR of the completion counter on the counter Redis) N times, spread over
``BENCH_CONCURRENCY`` threads (the worker processes' thread count, 10 by default), then exits. The
driver starts it like a worker process, right before each drain of the library it measures, and
takes its rate the same way (from the moment the first 5 % are done to the last one), so a drain
can be compared with what one CPython process with that many threads can do on the machine at
that moment. No library, no broker: the difference is the queue's own cost.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading

from bench.common import ENV_CONCURRENCY, record


def run(n: int, threads: int) -> None:
    """Run ``record()`` ``n`` times on ``threads`` threads (as a queue's handler threads would)."""
    tickets = itertools.count()  # next() on it is atomic under the GIL: each call is one task

    def loop() -> None:
        while next(tickets) < n:
            record()

    pool = [threading.Thread(target=loop, name=f"ceiling-{i}", daemon=True) for i in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m bench.ceiling N", file=sys.stderr)
        return 2
    run(int(args[0]), int(os.environ.get(ENV_CONCURRENCY, "10")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
