"""Runs every scenario for ONE library, in a process of its own, and writes its results as JSON.

``python -m bench.driver CONFIG.json RESULT.json`` — started by ``bench.run`` with the Python of
the library's virtualenv. The broker Redis and the counter Redis are the benchmark's private
servers, so this process may FLUSHDB them between phases.

Phases, in order (each selected scenario; the drain's worker is reused for the latency ones):

1. ``enqueue_one``: warm-up, then ``reps`` x ``enqueue_n`` tasks one by one.
2. ``enqueue_batch``: warm-up, then ``reps`` x ``drain_n`` tasks with the bulk API, in chunks of
   ``batch_size``; the last batch is the first drain's backlog.
3. ``drain1``: start one worker process on the backlog; the rate is taken between the moment the
   first ``warmup_frac`` of the tasks are done (worker start-up and warm-up excluded) and the last
   one, or ``drain_timeout``. Redis commands, Redis CPU and the worker's CPU are taken over that
   window; RSS at its end. With ``ceiling``, each drain is preceded by a ceiling run: the task's
   body run ``drain_n`` times by ``concurrency`` bare threads in a fresh process, no queue
   (``bench.ceiling``), measured the same way, so each drain has a ceiling taken under the
   machine's conditions of that moment.
4. ``latency_idle``, ``scheduled``, ``latency_load`` on that worker, now idle; then ``requests``:
   commands sent per task, counted with MONITOR (so never while anything is timed).
5. ``drain_async``: the one-process drain with ``async def`` handlers (queuecore's async task
   type; the only kind for taskiq and arq; n/a for libraries without async handlers).
   ``drain2``: the same drain with two worker processes; ``procs2``: with the library's own
   multi-process mode set to two processes (one command: queuecore's supervisor, Celery's prefork
   pool, ``dramatiq --processes 2``, ...), where it has one.
6. ``backlog``: ``backlog_n`` tasks with a 100-byte payload (bytes of Redis memory per task), then
   enqueue and dequeue rates with that backlog.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import redis

from bench.common import (
    DONE_KEY,
    ENV_BROKER,
    ENV_CONCURRENCY,
    ENV_COUNTER,
    ENV_VARIANT,
    LAT_KEY,
    CommandCounter,
    RedisSnapshot,
    machine_busy,
    pad_payload,
    percentile,
    summarize,
    tree_cpu_times,
    tree_memory,
    work_dir,
)

POLL = 0.002  # seconds between reads of the completion counter
SERVER_CALL_TIMEOUT = 300.0  # seconds the harness waits for a reply from its private servers
BACKLOG_ENQUEUE_RUNS = 3  # one-by-one enqueue runs on each side of the backlog's ratio (~1 s each): the median


def log(msg: str) -> None:
    print(f"    {msg}", file=sys.stderr, flush=True)


class Driver:
    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        # Adapter modules read these at import time (the worker processes get them too).
        os.environ[ENV_BROKER] = cfg["broker_url"]
        os.environ[ENV_COUNTER] = cfg["counter_url"]
        os.environ[ENV_CONCURRENCY] = str(cfg["concurrency"])
        from bench.adapters import load, spec_of

        os.environ[ENV_VARIANT] = spec_of(cfg["lib"]).variant
        self.adapter = load(cfg["lib"], cfg["broker_url"], cfg["counter_url"], cfg["concurrency"])
        # The harness's own calls wait as long as its servers take: redis-py 8 gives up on a reply after
        # 5 s by default, and a FLUSHDB of a 1,000,000-task backlog takes longer on a slow machine.
        self.broker = redis.Redis.from_url(cfg["broker_url"], socket_timeout=SERVER_CALL_TIMEOUT)
        self.counter = redis.Redis.from_url(cfg["counter_url"], socket_timeout=SERVER_CALL_TIMEOUT)
        self.log_dir = Path(cfg["log_dir"])
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.results: dict[str, Any] = {}
        self.errors: dict[str, str] = {}
        self.procs: list[Any] = []
        self.backlog_ready = 0  # tasks waiting in the broker for the next drain

    # -- helpers -----------------------------------------------------------------------------------

    def flush(self) -> None:
        """Empty both private servers (never the shared Redis) and let the library re-declare."""
        self.broker.flushdb()
        self.counter.flushdb()
        self.adapter.reset()
        self.backlog_ready = 0

    def done(self) -> int:
        return int(self.counter.get(DONE_KEY) or 0)

    def fill(self, n: int, payload: dict[str, Any] | None = None) -> float:
        """Enqueue ``n`` tasks with the bulk API; returns the elapsed seconds."""
        size = self.cfg["batch_size"]
        payloads = [dict(payload or {}) for _ in range(min(n, size))]
        start = time.perf_counter()
        left = n
        while left > 0:
            chunk = payloads[:min(left, size)]
            self.adapter.enqueue_batch(chunk)
            left -= len(chunk)
        return time.perf_counter() - start

    def start_workers(self, n: int, phase: str, processes: int | None = None) -> list[Any]:
        self.procs = self.adapter.start_workers(n, str(self.log_dir / f"{self.adapter.name}-{phase}.log"),
                                                processes=processes)
        return self.procs

    def stop_workers(self) -> None:
        self.adapter.stop_workers(self.procs)
        self.procs = []

    def check_alive(self, phase: str) -> None:
        for i, p in enumerate(self.procs):
            if p.poll() is not None:
                tail = ""
                path = self.log_dir / f"{self.adapter.name}-{phase}.log.{i}"
                if path.exists():
                    tail = path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"worker exited with {p.returncode}: {tail}")

    def wait_done(self, target: int, timeout: float, phase: str) -> tuple[int, float]:
        """Poll the counter until it reaches ``target`` or ``timeout``; returns (count, monotonic time)."""
        deadline = time.monotonic() + timeout
        next_check = time.monotonic() + 1
        while True:
            count = self.done()
            now = time.monotonic()
            if count >= target or now >= deadline:
                return count, now
            if now >= next_check:
                self.check_alive(phase)
                next_check = now + 1
            time.sleep(POLL)

    def latencies(self) -> list[float]:
        return [float(x) for x in self.counter.lrange(LAT_KEY, 0, -1)]

    @staticmethod
    def lat_summary(values: list[float], expected: int) -> dict[str, Any]:
        ms = [v * 1000 for v in values]
        return {"n": len(ms), "missing": max(expected - len(ms), 0),
                "p50_ms": percentile(ms, 50), "p90_ms": percentile(ms, 90), "p99_ms": percentile(ms, 99),
                "max_ms": max(ms) if ms else math.nan, "mean_ms": sum(ms) / len(ms) if ms else math.nan}

    # -- scenarios ---------------------------------------------------------------------------------

    def enqueue_one(self) -> None:
        n, reps = self.cfg["enqueue_n"], self.cfg["enqueue_reps"]
        self.flush()
        self.adapter.run_sequence(self.cfg["warmup_n"], lambda i: {})
        self.flush()
        runs = []
        for _ in range(reps):
            before = RedisSnapshot.take(self.broker)
            seconds = self.adapter.run_sequence(n, lambda i: {})
            cost = before.delta(RedisSnapshot.take(self.broker), n)
            runs.append({"rate": n / seconds, "seconds": seconds, "cost": cost})
            self.flush()
        self.results["enqueue_one"] = _with_summary(runs, n)

    def enqueue_batch(self, keep_backlog: bool) -> None:
        n, reps = self.cfg["drain_n"], self.cfg["batch_reps"]
        self.flush()
        self.fill(min(self.cfg["batch_size"], n))  # warm-up
        self.flush()
        runs = []
        for rep in range(reps):
            before = RedisSnapshot.take(self.broker)
            seconds = self.fill(n)
            cost = before.delta(RedisSnapshot.take(self.broker), n)
            runs.append({"rate": n / seconds, "seconds": seconds, "cost": cost})
            if keep_backlog and rep == reps - 1:
                self.backlog_ready = n
            else:
                self.flush()
        self.results["enqueue_batch"] = _with_summary(runs, n) | {"batch_size": self.cfg["batch_size"]}

    def drain_run(self, workers: int, phase: str, n: int, keep: bool = False,
                  processes: int | None = None) -> dict[str, Any]:
        """One drain of ``n`` pre-enqueued tasks by ``workers`` fresh worker processes (with
        ``processes``: ``workers`` runs of the library's command for that many processes)."""
        if self.backlog_ready != n:
            self.flush()
            self.fill(n)
        self.backlog_ready = 0
        self.counter.set(DONE_KEY, 0)
        spawned = time.monotonic()
        self.start_workers(workers, phase, processes)
        run = self.measure(n, phase, spawned)
        if not keep:
            self.stop_workers()
            self.flush()
        elif run["timed_out"]:  # tasks are left: the latency phases need an empty queue and a warm, idle worker
            self.restart_idle(workers, phase)
        return run

    def restart_idle(self, workers: int, phase: str) -> None:
        """Drop the tasks left in the broker and start ``workers`` fresh ones, warm (ten tasks run) and idle."""
        self.stop_workers()
        self.flush()
        self.start_workers(workers, phase + "-idle")
        self.counter.set(DONE_KEY, 0)
        self.adapter.run_sequence(10, lambda i: {})
        self.wait_done(10, self.cfg["startup_timeout"], phase + "-idle")

    def measure(self, n: int, phase: str, spawned: float) -> dict[str, Any]:
        """Time the processes in ``self.procs`` (started at ``spawned``) as they complete ``n`` tasks:
        from the first ``warmup_frac`` of them to the last one, or ``drain_timeout``. Redis commands
        and CPU of both servers, the processes' CPU, the machine's other load; RSS at the end."""
        c0, t0, startup = self.warm_up(n, phase, spawned)
        pids = [p.pid for p in self.procs]
        b0, k0, (user0, sys0) = RedisSnapshot.take(self.broker), RedisSnapshot.take(self.counter), tree_cpu_times(pids)
        m0, me0 = machine_busy()[0], time.process_time()
        c1, t1 = self.wait_done(n, self.cfg["drain_timeout"], phase)
        m1, me1 = machine_busy()[0], time.process_time()
        b1, k1, (user1, sys1) = RedisSnapshot.take(self.broker), RedisSnapshot.take(self.counter), tree_cpu_times(pids)
        cpu0, cpu1 = user0 + sys0, user1 + sys1
        seconds = max(t1 - t0, 1e-9)
        done = max(c1 - c0, 1)
        ours = (cpu1 - cpu0) + (b1.cpu - b0.cpu) + (k1.cpu - k0.cpu) + (me1 - me0)
        return {
            "rate": (c1 - c0) / seconds, "tasks": c1 - c0, "warmup_tasks": c0, "seconds": seconds,
            "timed_out": c1 < n, "startup_s": startup,
            "cost": b0.delta(b1, c1 - c0),
            "cpu_cores": {"workers": (cpu1 - cpu0) / seconds, "redis": (b1.cpu - b0.cpu) / seconds,
                          "counter_redis": (k1.cpu - k0.cpu) / seconds, "harness": (me1 - me0) / seconds,
                          "other_processes": max((m1 - m0) - ours, 0.0) / seconds},
            "memory": tree_memory(pids),
            # The worker processes' CPU per task, in user space and in the kernel (system calls, and
            # threads waiting for each other: the GIL passing between them).
            "worker_cpu_us": {"user": (user1 - user0) / done * 1e6, "system": (sys1 - sys0) / done * 1e6},
        }

    def ceiling_run(self, n: int) -> dict[str, Any]:
        """The task body alone: ``n`` runs of it on ``concurrency`` bare threads in a fresh process
        (``bench.ceiling``, this library's interpreter), no queue; measured as a drain is. The
        broker is left alone (a backlog waiting for the next drain stays)."""
        self.counter.set(DONE_KEY, 0)
        spawned = time.monotonic()
        out = open(self.log_dir / f"{self.adapter.name}-ceiling.log.0", "ab")  # noqa: SIM115
        try:
            self.procs = [subprocess.Popen([sys.executable, "-m", "bench.ceiling", str(n)],
                                           env=self.adapter.worker_env(), cwd=work_dir(), stdout=out,
                                           stderr=subprocess.STDOUT, start_new_session=True)]
        finally:
            out.close()
        try:
            run = self.measure(n, "ceiling", spawned)
            run.pop("cost")  # no broker traffic
        finally:
            self.stop_workers()
        self.counter.set(DONE_KEY, 0)
        return run

    def ceiling(self, runs: list[dict[str, Any]], interleaved_with: str | None) -> None:
        n = self.cfg["drain_n"]
        result = {"n": n, "rate": summarize([r["rate"] for r in runs]), "runs": runs,
                  "threads": self.cfg["concurrency"], "interleaved_with": interleaved_with}
        mid = _median_run(runs)
        result["cpu_cores"] = mid["cpu_cores"]
        result["worker_cpu_us"] = mid["worker_cpu_us"]
        result["memory"] = runs[-1]["memory"]
        self.results["ceiling"] = result

    def ceiling_alone(self) -> None:
        """The ceiling on its own (no drain1 in this run): ``drain_reps`` runs in a row."""
        runs = []
        for rep in range(self.cfg["drain_reps"]):
            runs.append(self.ceiling_run(self.cfg["drain_n"]))
            log(f"ceiling rep {rep + 1}/{self.cfg['drain_reps']}: {runs[-1]['rate']:,.0f} tasks/s")
        self.ceiling(runs, None)

    def warm_up(self, n: int, phase: str, spawned: float) -> tuple[int, float, float]:
        """Wait for the first completion, then for the first ``warmup_frac`` of ``n`` (at most 1 s).

        Returns the count and time where the measurement starts, and the start-up time.
        """
        c, t = self.wait_done(1, self.cfg["startup_timeout"], phase)
        if c < 1:
            self.stop_workers()
            raise RuntimeError(f"no task done {self.cfg['startup_timeout']} s after the workers started")
        startup = t - spawned
        c, t = self.wait_done(max(1, int(n * self.cfg["warmup_frac"])), 1.0, phase)
        return c, t, startup

    def drain(self, workers: int, keep_last: bool, processes: int | None = None, key: str | None = None,
              with_ceiling: bool = False) -> None:
        """``drain_reps`` drains; with ``with_ceiling``, a ceiling run right before each of them, so
        that each pair shares the machine's conditions (the ``ceiling`` scenario)."""
        key = key or (f"drain{workers}" if processes is None else f"procs{processes}")
        if processes is not None and self.adapter.processes_argv(processes) is None:
            self.results[key] = {"n/a": "no multi-process mode"}
            return
        n, reps = self.cfg["drain_n"], self.cfg["drain_reps"]
        runs, ceilings = [], []
        for rep in range(reps):
            keep = keep_last and rep == reps - 1
            if with_ceiling:
                try:
                    ceilings.append(self.ceiling_run(n))
                    log(f"ceiling rep {rep + 1}/{reps}: {ceilings[-1]['rate']:,.0f} tasks/s")
                except Exception as exc:  # the drain is measured anyway
                    self.errors["ceiling"] = f"{type(exc).__name__}: {exc}"
                    log(f"ceiling: FAILED {self.errors['ceiling']}")
            runs.append(self.drain_run(workers, key, n, keep=keep, processes=processes))
            log(f"{key} rep {rep + 1}/{reps}: {runs[-1]['rate']:,.0f} tasks/s"
                + (" (timed out)" if runs[-1]["timed_out"] else ""))
        if ceilings:
            self.ceiling(ceilings, key)
        result = _with_summary(runs, n)
        result["workers"] = workers
        if processes is not None:
            result["processes"] = processes
            result["config"] = self.adapter.processes_config
        mid = _median_run(runs)
        result["cpu_cores"] = mid["cpu_cores"]
        result["worker_cpu_us"] = mid["worker_cpu_us"]
        result["memory"] = runs[-1]["memory"]
        self.results[key] = result

    def drain_async(self) -> None:
        """The one-process drain with ``async def`` handlers (``drain_async``): the library's async
        task type where it has both kinds, its only one where all its handlers are coroutines."""
        if not self.adapter.async_handlers:
            self.results["drain_async"] = {"n/a": "no async handlers"}
            return
        self.adapter.use_async = True
        try:
            self.drain(1, False, key="drain_async")
        finally:
            self.adapter.use_async = False
        self.results["drain_async"]["handlers"] = self.adapter.async_handlers

    def latency_idle(self) -> None:
        capacity = self.results.get("drain1", {}).get("rate", {}).get("median", math.inf)
        interval = self.cfg["idle_interval"]
        if capacity * interval < 4:  # a slow worker is kept idle: tasks arrive at most at 1/4 of its capacity
            interval = 4 / capacity
        n = max(min(self.cfg["idle_n"], int(self.cfg["idle_max_seconds"] / interval)), 20)
        self.results["latency_idle"] = self._paced(n, interval, "latency_idle") | {"interval_ms": interval * 1000}

    def latency_load(self) -> None:
        capacity = self.results["drain1"]["rate"]["median"]
        rate = capacity * self.cfg["load_fraction"]
        n = max(int(rate * self.cfg["load_seconds"]), 20)
        res = self._paced(n, 1 / rate, "latency_load")
        res["target_rate"] = rate
        self.results["latency_load"] = res

    def _paced(self, n: int, interval: float, phase: str) -> dict[str, Any]:
        time.sleep(0.3)  # let the worker settle into its idle wait
        self.counter.delete(LAT_KEY)
        base = self.done()
        t0 = time.monotonic() + 0.01
        seconds = self.adapter.run_sequence(n, lambda i: {"t": time.time()}, at=lambda i: t0 + i * interval)
        self.wait_done(base + n, 10 + n * interval * 2, phase)
        return self.lat_summary(self.latencies(), n) | {"achieved_rate": n / seconds}

    def requests(self) -> None:
        """Commands sent per task (enqueue one by one + run), counted apart from those inside Lua."""
        capacity = self.results.get("drain1", {}).get("rate", {}).get("median") or 100
        n = max(min(self.cfg["requests_n"], int(capacity * self.cfg["requests_max_seconds"])), 20)
        time.sleep(0.2)
        base = self.done()
        with CommandCounter(self.cfg["broker_url"]) as cc:
            self.adapter.run_sequence(n, lambda i: {})
            self.wait_done(base + n, 30, "requests")
            time.sleep(0.1)  # acknowledgements sent after the task's INCR
        sent = sum(cc.sent.values())
        self.results["requests"] = {
            "n": n, "sent_per_task": sent / n, "lua_per_task": cc.lua / n,
            "sent": {k: round(v / n, 3) for k, v in sorted(cc.sent.items(), key=lambda kv: -kv[1])},
            "in_lua": {k: round(v / n, 3) for k, v in sorted(cc.in_lua.items(), key=lambda kv: -kv[1])},
        }

    def scheduled(self) -> None:
        if not self.adapter.supports_scheduled:
            self.results["scheduled"] = {"n/a": "no built-in delayed enqueue in the worker as configured"}
            return
        n, delay, gap = self.cfg["sched_n"], self.cfg["sched_delay"], self.cfg["sched_gap"]
        time.sleep(0.2)
        self.counter.delete(LAT_KEY)
        base = self.done()
        t0 = time.monotonic() + 0.01
        self.adapter.run_sequence(n, lambda i: {"t": time.time() + delay}, at=lambda i: t0 + i * gap, delay=delay)
        self.wait_done(base + n, delay + 15, "scheduled")
        res = self.lat_summary(self.latencies(), n)
        self.results["scheduled"] = {"delay_s": delay, **{k.replace("_ms", "_late_ms") if k.endswith("_ms") else k: v
                                                         for k, v in res.items()}}

    def due_burst(self) -> None:
        """``burst_reps`` bursts of ``burst_n`` tasks all due at one instant (each scheduled beforehand,
        one by one, to that instant), on the idle worker: how late they start, and the rate at which the
        burst ran (from the first start to the last) against the same worker's rate, right after it, on
        ready tasks with the same body (``same_body_rate``); and, as before, against the library's
        one-process drain. The summary is the burst with the median ratio; every burst is in ``runs``."""
        if not self.adapter.supports_scheduled:
            self.results["due_burst"] = {"n/a": "no built-in delayed enqueue in the worker as configured"}
            return
        runs = [self.burst_run() for _ in range(self.cfg["burst_reps"])]
        for i, run in enumerate(runs):
            log(f"due_burst rep {i + 1}/{len(runs)}: {run['burst_rate'] or 0:,.0f} tasks/s, the same body ready "
                f"{run['same_body_rate'] or 0:,.0f}/s")
        rated = sorted((r for r in runs if r["burst_ratio"] is not None), key=lambda r: r["burst_ratio"])
        mid = rated[(len(rated) - 1) // 2] if rated else runs[0]
        self.results["due_burst"] = mid | {"runs": runs}

    def burst_run(self) -> dict[str, Any]:
        """One due burst and the same-body reference taken right after it."""
        n = self.cfg["burst_n"]
        enqueue_rate = self.results.get("enqueue_one", {}).get("rate", {}).get("median") or 1000
        lead = 2 * n / enqueue_rate + 0.5  # time to schedule them all before the instant comes
        time.sleep(0.2)
        self.counter.delete(LAT_KEY)
        base = self.done()
        due = time.time() + lead
        for _ in range(n):
            self.adapter.enqueue_in({"t": due}, max(0.0, due - time.time()))
        ahead = due - time.time()
        self.wait_done(base + n, lead + 30, "due_burst")
        late = sorted(self.latencies())
        res = self.lat_summary(late, n) | {"enqueued_ahead_s": ahead}
        spread = late[-1] - late[0] if len(late) > 1 else 0.0
        res["burst_rate"] = (len(late) - 1) / spread if spread > 0 else None
        drain = self.results.get("drain1", {}).get("rate", {}).get("median")
        res["burst_ratio_drain1"] = res["burst_rate"] / drain if res["burst_rate"] and drain else None
        res["same_body_rate"] = same = self.same_body_rate(self.cfg["burst_ref_n"], "due_burst")
        res["burst_ratio"] = res["burst_rate"] / same if res["burst_rate"] and same else None
        return res

    def same_body_rate(self, n: int, phase: str) -> float | None:
        """The idle worker's rate on ``n`` tasks with the due burst's body, enqueued ready with the batch
        API: from the first start after the enqueuing ended to the last start (within ``drain_timeout``).

        A task that records its start (the burst's, the latency scenarios') runs an RPUSH beside the
        INCR, in one pipeline; a drain's task runs the INCR alone, which bare threads run about 1.2x as
        fast. The burst's ratio is taken against this rate, so that both sides run the same body.
        """
        self.counter.delete(LAT_KEY)
        base = self.done()
        origin = time.time()
        self.fill(n, {"t": origin})
        filled = time.time()
        count, _ = self.wait_done(base + n, self.cfg["drain_timeout"], phase)
        starts = sorted(s for s in (origin + v for v in self.latencies()) if s >= filled)
        if count < base + n:  # it timed out: the tasks left would hold up the scenarios that follow
            self.restart_idle(1, phase)
        if len(starts) < min(n // 2, 100) or starts[-1] <= starts[0]:
            return None
        return (len(starts) - 1) / (starts[-1] - starts[0])

    def backlog(self) -> None:
        """Memory per pending task with ``backlog_n`` tasks waiting, then the enqueue and dequeue
        rates with that backlog against the same two measurements on the empty queue right after
        (the backlog flushed), so that both sides of each ratio share the machine's conditions."""
        n = self.cfg["backlog_n"]
        self.flush()
        time.sleep(0.2)
        m0 = int(self.broker.info("memory")["used_memory"])
        fill_seconds = self.fill(n, pad_payload())
        time.sleep(0.2)
        m1 = int(self.broker.info("memory")["used_memory"])
        res: dict[str, Any] = {"tasks": n, "payload_bytes": len(json.dumps(pad_payload(), separators=(",", ":"))),
                               "bytes_per_task": (m1 - m0) / n, "fill_rate": n / fill_seconds}
        log(f"backlog: {n:,} tasks, {res['bytes_per_task']:.0f} B/task, filled at {res['fill_rate']:,.0f}/s")
        res["enqueue_rates"], res["dequeue_rate"] = self._enqueue_then_dequeue_rates("backlog")
        res["enqueue_rate"] = statistics.median(res["enqueue_rates"])
        self.results["backlog"] = res  # measured: kept even if what follows fails
        self.flush()
        res["enqueue_rates_empty"], res["dequeue_rate_empty"] = self._enqueue_then_dequeue_rates(
            "backlog-empty", top_up=self.cfg["drain_n"])
        res["enqueue_rate_empty"] = statistics.median(res["enqueue_rates_empty"])
        for what in ("enqueue", "dequeue"):
            res[f"{what}_ratio"] = res[f"{what}_rate"] / res[f"{what}_rate_empty"]
        # The one-by-one enqueue and one-process drain scenarios' rates, measured earlier in the run.
        res["enqueue_rate_run"] = self.results.get("enqueue_one", {}).get("rate", {}).get("median")
        res["dequeue_rate_run"] = self.results.get("drain1", {}).get("rate", {}).get("median")
        log(f"backlog: rates with it / empty: enqueue {res['enqueue_ratio']:.2f}, dequeue {res['dequeue_ratio']:.2f}")
        self.flush()

    def _enqueue_then_dequeue_rates(self, phase: str, top_up: int = 0) -> tuple[list[float], float]:
        """The rates of ``BACKLOG_ENQUEUE_RUNS`` runs of ``enqueue_n`` tasks enqueued one by one
        (tasks/s); then, after ``top_up`` more with the batch API (untimed), one fresh worker's dequeue
        rate over up to ``drain_n`` of the tasks waiting, from the moment ``warmup_frac`` of them are
        done."""
        k = self.cfg["enqueue_n"]
        enqueue_rates = [k / self.adapter.run_sequence(k, lambda i: {}) for _ in range(BACKLOG_ENQUEUE_RUNS)]
        if top_up:
            self.fill(top_up)
        self.counter.set(DONE_KEY, 0)
        spawned = time.monotonic()
        self.start_workers(1, phase)
        m = self.cfg["drain_n"]
        c0, t0, _ = self.warm_up(m, phase, spawned)
        c1, t1 = self.wait_done(m, self.cfg["backlog_window"], phase)
        self.stop_workers()
        return enqueue_rates, (c1 - c0) / max(t1 - t0, 1e-9)

    # -- the whole run -----------------------------------------------------------------------------

    def step(self, name: str, fn: Any, *args: Any) -> bool:
        start = time.monotonic()
        try:
            fn(*args)
            log(f"{name}: done in {time.monotonic() - start:.1f} s")
            return True
        except Exception as exc:
            self.errors[name] = f"{type(exc).__name__}: {exc}"
            log(f"{name}: FAILED {self.errors[name]}")
            traceback.print_exc(file=sys.stderr)
            try:
                self.stop_workers()
                self.flush()
            except Exception:  # pragma: no cover - best effort
                pass
            return False

    def run(self) -> dict[str, Any]:
        scenarios = set(self.cfg["scenarios"])
        a = self.adapter
        started = time.monotonic()
        self.load_avg = round(os.getloadavg()[0], 2)
        a.setup()
        self.flush()
        try:
            if "enqueue_one" in scenarios:
                self.step("enqueue_one", self.enqueue_one)
            need_drain1 = bool(scenarios & {"drain1", "latency_idle", "latency_load", "scheduled", "requests",
                                            "due_burst"})
            if "enqueue_batch" in scenarios:
                self.step("enqueue_batch", self.enqueue_batch, need_drain1)
            follow = bool(scenarios & {"latency_idle", "latency_load", "scheduled", "requests", "due_burst"})
            with_ceiling = "ceiling" in scenarios
            if with_ceiling and not need_drain1:
                self.step("ceiling", self.ceiling_alone)
            if need_drain1 and self.step("drain1", self.drain, 1, follow, None, None, with_ceiling) and follow:
                try:
                    if "latency_idle" in scenarios:
                        self.step("latency_idle", self.latency_idle)
                    if "scheduled" in scenarios:
                        self.step("scheduled", self.scheduled)
                    if "due_burst" in scenarios:
                        self.step("due_burst", self.due_burst)
                    if "latency_load" in scenarios:
                        self.step("latency_load", self.latency_load)
                    if "requests" in scenarios:
                        self.step("requests", self.requests)
                finally:
                    self.stop_workers()
                    self.flush()
            if "drain_async" in scenarios:
                self.step("drain_async", self.drain_async)
            if "drain2" in scenarios:
                self.step("drain2", self.drain, 2, False)
            if "procs2" in scenarios:
                self.step("procs2", self.drain, 1, False, 2)
            if "backlog" in scenarios:
                self.step("backlog", self.backlog)
        finally:
            self.stop_workers()
            a.close()
        return {
            "lib": a.name, "package": a.package, "version": a.version(), "variant": a.variant, "work_dir": work_dir(),
            "load_avg_at_start": self.load_avg,
            "python": sys.version.split()[0], "config": a.config, "on_kill": a.on_kill,
            "survives_kill": a.survives_kill, "batch_api": a.batch_api,
            "concurrency": self.cfg["concurrency"], "seconds": time.monotonic() - started,
            "scenarios": self.results, "errors": self.errors,
        }


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ordered = sorted(runs, key=lambda r: r["rate"])
    return ordered[(len(ordered) - 1) // 2]


def _with_summary(runs: list[dict[str, Any]], n: int) -> dict[str, Any]:
    return {"n": n, "rate": summarize([r["rate"] for r in runs]), "cost": _median_run(runs)["cost"], "runs": runs}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    cfg = json.loads(Path(argv[0]).read_text())
    result = Driver(cfg).run()
    Path(argv[1]).write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
