"""The one command: ``python -m bench.run [--quick] [--libs a,b] [--scenarios x,y] [--out DIR]``.

Starts two private ``redis-server`` processes on free loopback ports (the *broker*, which every
library uses in turn and which is flushed between phases, and the *counter*, where the tasks count
completions and record latencies), runs each library's scenarios in a driver process of its own
(``bench.driver``, with the Python of the library's virtualenv: ``.venv-bench``, or
``.venv-bench-arq`` for arq), one library after the other, and writes ``results.json``,
``results.md`` and ``chart.png`` under ``--out`` (``bench/results/`` by default, git-ignored).

``bench/run.sh`` creates the virtualenvs first. The shared Redis on 6379 is never touched.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis

from bench.adapters import LIBS, spec_of
from bench.common import ENV_TREE, REPO_ROOT, PrivateRedis

SCENARIOS = ("enqueue_one", "enqueue_batch", "ceiling", "drain1", "latency_idle", "scheduled", "due_burst",
             "latency_load",
             "requests", "drain_async", "drain2", "procs2", "backlog")
DEFAULT_LIBS = tuple(LIBS)

# Settings of one run. ``drain_n`` tasks are pre-enqueued for each drain; ``*_reps`` measured
# repetitions follow a discarded warm-up (enqueue) or exclude the first ``warmup_frac`` of the
# tasks (drain). Durations are in seconds.
FULL: dict[str, Any] = {
    "concurrency": 10, "batch_size": 1000, "warmup_n": 500, "warmup_frac": 0.05, "startup_timeout": 60,
    "enqueue_n": 5000, "enqueue_reps": 3, "batch_reps": 3, "drain_n": 20_000, "drain_reps": 3, "drain_timeout": 20,
    "idle_n": 2000, "idle_interval": 0.005, "idle_max_seconds": 15,
    "load_fraction": 0.5, "load_seconds": 10,
    "sched_n": 100, "sched_delay": 1.0, "sched_gap": 0.02, "burst_n": 1000, "burst_ref_n": 10_000, "burst_reps": 5,
    "requests_n": 1000, "requests_max_seconds": 2,
    "backlog_n": 1_000_000, "backlog_window": 15,
    "driver_timeout": 3600,
}
QUICK: dict[str, Any] = FULL | {
    "warmup_n": 100, "startup_timeout": 30,
    "enqueue_n": 1000, "enqueue_reps": 2, "batch_reps": 1, "drain_n": 3000, "drain_reps": 1, "drain_timeout": 1.5,
    "idle_n": 150, "idle_max_seconds": 0.75, "load_seconds": 0.8,
    "sched_n": 10, "sched_delay": 0.5, "sched_gap": 0.02, "burst_n": 50, "burst_ref_n": 500, "burst_reps": 1,
    "requests_n": 100, "requests_max_seconds": 0.3,
    "backlog_n": 5000, "backlog_window": 0.75,
    "driver_timeout": 300,
}


def python_for(lib: str, overrides: dict[str, str] | None = None) -> str:
    """The interpreter that has ``lib``'s pinned version: its virtualenv's, else this one."""
    if overrides and lib in overrides:
        return overrides[lib]
    candidate = REPO_ROOT / spec_of(lib).venv / "bin" / "python"
    return str(candidate) if candidate.exists() else sys.executable


def machine_info(broker: redis.Redis) -> dict[str, Any]:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = 0.0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    info = broker.info("server")
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem_gib, 1),
            "redis": info.get("redis_version"), "python": platform.python_version(),
            "os": f"{platform.system()} {platform.release()}",
            "load_avg_at_start": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None}


def queuecore_commit() -> str | None:
    """The checkout's commit, ``-dirty`` when queuecore/ has uncommitted changes (they are measured too)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "queuecore"], cwd=REPO_ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}-dirty" if head and dirty else head or None


def run_lib(lib: str, cfg: dict[str, Any], python: str, work: Path, tree: str | None = None) -> dict[str, Any]:
    """Run one library's driver (in ``tree``, a directory holding another queuecore package, when
    given); its result, or an ``error`` entry if it failed."""
    cfg_path = work / f"{lib}.config.json"
    out_path = work / f"{lib}.result.json"
    cfg_path.write_text(json.dumps(cfg | {"lib": lib}))
    out_path.unlink(missing_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env.pop(ENV_TREE, None)
    if tree:
        env[ENV_TREE] = tree
    started = time.monotonic()
    try:
        proc = subprocess.run([python, "-m", "bench.driver", str(cfg_path), str(out_path)], cwd=tree or REPO_ROOT,
                              env=env,
                              timeout=cfg["driver_timeout"], stdout=subprocess.PIPE, stderr=None, text=True)
        code: int | str = proc.returncode
    except subprocess.TimeoutExpired:
        code = f"timed out after {cfg['driver_timeout']} s"
    if out_path.exists():
        return json.loads(out_path.read_text())
    return {"lib": lib, "error": f"driver failed ({code}); see the output above",
            "seconds": time.monotonic() - started, "scenarios": {}, "errors": {}}


def run_benchmark(libs: list[str] | tuple[str, ...] = DEFAULT_LIBS, scenarios: list[str] | tuple[str, ...] = SCENARIOS,
                  quick: bool = False, out: str | Path = REPO_ROOT / "bench" / "results",
                  overrides: dict[str, Any] | None = None, chart: bool = True,
                  pythons: dict[str, str] | None = None, trees: dict[str, str] | None = None) -> dict[str, Any]:
    """Run the benchmark and write its report; returns the results (the JSON file's content).

    ``trees`` (label -> directory holding a ``queuecore`` package) adds the libraries
    ``queuecore@LABEL``: queuecore's adapter with that package, to compare versions in one run."""
    trees = trees or {}
    unknown = [lib for lib in libs if lib not in LIBS and lib.removeprefix("queuecore@") not in trees]
    if unknown:
        raise ValueError(f"unknown libraries: {', '.join(unknown)} (known: {', '.join(LIBS)})")
    bad = [s for s in scenarios if s not in SCENARIOS]
    if bad:
        raise ValueError(f"unknown scenarios: {', '.join(bad)} (known: {', '.join(SCENARIOS)})")
    cfg = (QUICK if quick else FULL) | (overrides or {})
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    work = out / "logs" / stamp
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    broker = PrivateRedis("broker").start()
    counter = PrivateRedis("counter").start()
    try:
        broker_client = redis.Redis.from_url(broker.url)
        results: dict[str, Any] = {
            "started_at": stamp, "mode": "quick" if quick else "full", "machine": machine_info(broker_client),
            "queuecore_commit": queuecore_commit(),
            "settings": cfg, "scenarios": list(scenarios), "libs": {},
        }
        broker_client.close()
        for lib in libs:
            python = python_for(lib, pythons)
            print(f"==> {lib} ({python})", file=sys.stderr, flush=True)
            lib_cfg = cfg | {"broker_url": broker.url, "counter_url": counter.url, "scenarios": list(scenarios),
                             "log_dir": str(work)}
            tree = trees.get(lib.removeprefix("queuecore@")) if lib.startswith("queuecore@") else None
            res = run_lib(lib, lib_cfg, python, work, tree)
            results["libs"][lib] = res
            print(f"    {lib}: {res.get('seconds', 0):.1f} s" + (f" — {res['error']}" if "error" in res else ""),
                  file=sys.stderr, flush=True)
    finally:
        counter.stop()
        broker.stop()
    results["seconds"] = time.monotonic() - started
    from bench import report

    paths = report.write(results, out, chart=chart)
    results["files"] = {k: str(v) for k, v in paths.items()}
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts, one repetition: under two minutes")
    parser.add_argument("--libs", default=",".join(DEFAULT_LIBS), help=f"comma-separated, of: {', '.join(LIBS)}")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"comma-separated, of: {', '.join(SCENARIOS)}")
    parser.add_argument("--out", default=str(REPO_ROOT / "bench" / "results"), help="where the report goes")
    parser.add_argument("--tasks", type=int, help="tasks per drain (and per batch-enqueue run)")
    parser.add_argument("--backlog", type=int, help="tasks in the memory/backlog scenario")
    parser.add_argument("--reps", type=int, help="measured repetitions of the enqueue and drain scenarios")
    parser.add_argument("--concurrency", type=int, help="threads / async slots per worker process (default 10)")
    parser.add_argument("--no-chart", action="store_true", help="skip the PNG (no matplotlib needed)")
    parser.add_argument("--python", action="append", default=[], metavar="LIB=PATH",
                        help="the interpreter for one library (default: its virtualenv's, else this one)")
    parser.add_argument("--tree", action="append", default=[], metavar="LABEL=DIR",
                        help="a directory holding another queuecore package (e.g. `git archive REV queuecore` "
                             "unpacked there), run as the library queuecore@LABEL: compare versions in one run")
    args = parser.parse_args(argv)
    overrides: dict[str, Any] = {}
    if args.tasks:
        overrides["drain_n"] = args.tasks
    if args.backlog:
        overrides["backlog_n"] = args.backlog
    if args.reps:
        overrides["enqueue_reps"] = overrides["batch_reps"] = overrides["drain_reps"] = args.reps
    if args.concurrency:
        overrides["concurrency"] = args.concurrency
    pythons = dict(item.split("=", 1) for item in args.python)
    trees = {label: str(Path(path).resolve()) for label, path in (item.split("=", 1) for item in args.tree)}
    libs = [x.strip() for x in args.libs.split(",") if x.strip()]
    scenarios = [x.strip() for x in args.scenarios.split(",") if x.strip()]
    results = run_benchmark(libs, scenarios, quick=args.quick, out=args.out, overrides=overrides,
                            chart=not args.no_chart, pythons=pythons, trees=trees)
    print(Path(results["files"]["markdown"]).read_text())
    print(f"==> {results['seconds']:.0f} s; wrote {', '.join(results['files'].values())}", file=sys.stderr)
    failed = [lib for lib, r in results["libs"].items() if "error" in r]
    return 1 if failed and len(failed) == len(results["libs"]) else 0


if __name__ == "__main__":
    sys.exit(main())
