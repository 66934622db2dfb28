"""The report: ``results.json``, ``results.md`` (Markdown tables) and ``chart.png``.

Only ``chart`` needs matplotlib (installed by the ``bench`` extra); it is imported there, so the
rest of the harness runs with the project's dev dependencies alone.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

US = "queuecore"


def get(obj: Any, path: str, default: Any = None) -> Any:
    """``get(results, "scenarios.drain1.rate.median")``: a nested value, or ``default``."""
    for part in path.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return default
        obj = obj[part]
    return obj


def _num(value: Any) -> float | None:
    if value is None or isinstance(value, str):
        return None
    value = float(value)
    return None if math.isnan(value) else value


def fmt(value: Any, digits: int = 0) -> str:
    v = _num(value)
    if v is None:
        return "-"
    if digits == 0:
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:,.{digits}f}"


def fmt_ms(value: Any) -> str:
    v = _num(value)
    if v is None:
        return "-"
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def fmt_range(summary: Any) -> str:
    med, lo, hi = (_num(get(summary, k)) for k in ("median", "min", "max"))
    if med is None:
        return "-"
    if get(summary, "n", 1) > 1 and lo is not None and hi is not None and hi > lo:
        return f"{med:,.0f} [{lo:,.0f}-{hi:,.0f}]"
    return f"{med:,.0f}"


NOISY_CORES = 0.3  # CPU cores used by processes outside the benchmark that make a drain "noisy"


def _noisy(scenarios: dict[str, Any], key: str) -> str:
    other = _num(get(scenarios, f"{key}.cpu_cores.other_processes"))
    return " ≈" if other is not None and other >= NOISY_CORES else ""


# -- derived numbers ------------------------------------------------------------------------------


def lib_metrics(res: dict[str, Any]) -> dict[str, Any]:
    """The numbers the tables and targets use, for one library (None where not measured)."""
    s = res.get("scenarios", {})
    enq_cost, run_cost = get(s, "enqueue_batch.cost", {}), get(s, "drain1.cost", {})

    def total(key: str) -> float | None:
        a, b = _num(enq_cost.get(key)), _num(run_cost.get(key))
        return None if a is None or b is None else a + b

    cpu_us = total("redis_cpu_us_per_task")
    return {
        "drain1": _num(get(s, "drain1.rate.median")),
        "drain1_timed_out": any(r.get("timed_out") for r in get(s, "drain1.runs", [])),
        "drain2": _num(get(s, "drain2.rate.median")),
        "procs2": _num(get(s, "procs2.rate.median")),
        "drain_async": _num(get(s, "drain_async.rate.median")),
        "ceiling": _num(get(s, "ceiling.rate.median")),
        "enqueue_one": _num(get(s, "enqueue_one.rate.median")),
        "enqueue_batch": _num(get(s, "enqueue_batch.rate.median")),
        "idle_p50": _num(get(s, "latency_idle.p50_ms")), "idle_p99": _num(get(s, "latency_idle.p99_ms")),
        "idle_missing": get(s, "latency_idle.missing", 0),
        "load_p50": _num(get(s, "latency_load.p50_ms")), "load_p99": _num(get(s, "latency_load.p99_ms")),
        "sched_p50": _num(get(s, "scheduled.p50_late_ms")), "sched_max": _num(get(s, "scheduled.max_late_ms")),
        "sched_p99": _num(get(s, "scheduled.p99_late_ms")),
        "burst_ratio": _num(get(s, "due_burst.burst_ratio")), "burst_max": _num(get(s, "due_burst.max_late_ms")),
        "burst_rate": _num(get(s, "due_burst.burst_rate")), "burst_p50": _num(get(s, "due_burst.p50_ms")),
        "burst_drain1_ratio": _num(get(s, "due_burst.burst_ratio_drain1")),
        "commands": total("commands_per_task"), "scripts": total("scripts_per_task"),
        "enqueue_commands": _num(enq_cost.get("commands_per_task")),
        "run_commands": _num(run_cost.get("commands_per_task")),
        "cpu_us": cpu_us, "redis_ceiling": 1e6 / cpu_us if cpu_us else None,
        "net_bytes": total("net_bytes_per_task"),
        "sent": _num(get(s, "requests.sent_per_task")), "sent_lua": _num(get(s, "requests.lua_per_task")),
        "rss_mb": _num(get(s, "drain1.memory.rss_mb")), "pss_mb": _num(get(s, "drain1.memory.pss_mb")),
        "worker_user_us": _num(get(s, "drain1.worker_cpu_us.user")),
        "worker_sys_us": _num(get(s, "drain1.worker_cpu_us.system")),
        "bytes_per_task": _num(get(s, "backlog.bytes_per_task")),
        "backlog_enqueue_ratio": _num(get(s, "backlog.enqueue_ratio")),
        "backlog_dequeue_ratio": _num(get(s, "backlog.dequeue_ratio")),
        "survives_kill": bool(res.get("survives_kill")),
    }


def _user_system(m: dict[str, Any]) -> str:
    """``user + system`` µs per task, or "-" when not measured."""
    if m.get("worker_user_us") is None or m.get("worker_sys_us") is None:
        return "-"
    return f"{fmt(m['worker_user_us'])} + {fmt(m['worker_sys_us'])}"


def _best(peers: dict[str, dict[str, Any]], key: str, lowest: bool,
          only: set[str] | None = None) -> tuple[str, float] | None:
    values = [(lib, m[key]) for lib, m in peers.items() if m.get(key) is not None and (only is None or lib in only)]
    if not values:
        return None
    return (min if lowest else max)(values, key=lambda kv: kv[1])


CEILING_GOAL = 0.85  # drain with sync handlers in one process, as a share of the ceiling
ASYNC_GOAL = 3.0  # drain with async handlers, against the best async peer
PROCS2_GOAL = 1.6  # runworker --processes 2, against one process
FLAT = 0.9  # a rate with a 1M backlog, against the empty queue's: "flat" within noise


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets: queuecore's value, the best peer's (or the reference it is held
    against), the ratio, the goal, met or not."""
    libs = {lib: lib_metrics(r) for lib, r in results.get("libs", {}).items() if "error" not in r}
    us = libs.get(US)
    if us is None:
        return []
    peers = {lib: m for lib, m in libs.items() if lib != US}
    rows: list[dict[str, Any]] = []

    def row(target: str, key: str, lowest: bool, goal: str, check: Any, only: set[str] | None = None,
            ref: tuple[str, float | None] | None = None) -> None:
        """``ref``: hold queuecore's ``key`` against this (name, value) instead of the best peer."""
        value = us.get(key)
        best = _best(peers, key, lowest, only) if ref is None else (ref if ref[1] is not None else None)
        ratio = value / best[1] if value is not None and best and best[1] else None
        needs_ref = ref is not None or "peer" in goal or "lightest" in goal or "lowest" in goal
        met = check(value, ratio, best) if value is not None and (best or not needs_ref) else None
        rows.append({"target": target, "key": key, "queuecore": value, "best_peer": best[0] if best else None,
                     "best_value": best[1] if best else None, "ratio": ratio, "goal": goal, "met": met})

    def reported(v: Any, r: Any, b: Any) -> None:
        return None

    threads = get(results, "settings.concurrency", 10)
    row(f"drain, 1 process, against the ceiling ({threads} bare threads, no queue; interleaved)", "drain1",
        False, f"≥ {CEILING_GOAL:.0%} of the ceiling", lambda v, r, b: r is not None and r >= CEILING_GOAL,
        ref=("ceiling", us.get("ceiling")))
    row("drain, 1 worker process (tasks/s)", "drain1", False, "(reported)", reported)
    async_peers = {lib for lib, m in peers.items() if m.get("drain_async") is not None}
    row("drain, async handlers, 1 process (tasks/s)", "drain_async", False,
        f"≥ {ASYNC_GOAL:g}x best async peer", lambda v, r, b: r is not None and r >= ASYNC_GOAL, only=async_peers)
    row("drain, `--processes 2`, against 1 process", "procs2", False, f"≥ {PROCS2_GOAL:g}x 1 process",
        lambda v, r, b: r is not None and r >= PROCS2_GOAL, ref=("queuecore, 1 process", us.get("drain1")))
    row("drain, `--processes 2`, against each peer's multi-process mode (tasks/s)", "procs2", False,
        "ahead of every peer (ratio > 1)", lambda v, r, b: r is not None and r > 1)
    row("drain, 2 worker processes (tasks/s)", "drain2", False, "(reported)", reported)
    row("enqueue, one by one (tasks/s)", "enqueue_one", False, "≥ best peer (ratio ≥ 1)",
        lambda v, r, b: r is not None and r >= 1)
    row("enqueue, batch (tasks/s)", "enqueue_batch", False, "≥ 50,000/s", lambda v, r, b: v >= 50_000)
    row("idle latency enqueue→start p50 (ms)", "idle_p50", True, "≤ best peer (ratio ≤ 1)",
        lambda v, r, b: r is not None and r <= 1)
    row("idle latency enqueue→start p99 (ms)", "idle_p99", True, "≤ best peer (ratio ≤ 1)",
        lambda v, r, b: r is not None and r <= 1)
    row("Redis CPU µs / task", "cpu_us", True, "lowest of all (ratio ≤ 1)",
        lambda v, r, b: r is not None and r <= 1)
    row("Redis bytes / pending 100-byte task", "bytes_per_task", True, "lowest of all (ratio ≤ 1)",
        lambda v, r, b: r is not None and r <= 1)
    row("enqueue rate with a backlog / empty", "backlog_enqueue_ratio", False, f"flat (≥ {FLAT:g})",
        lambda v, r, b: v >= FLAT)
    row("dequeue rate with a backlog / empty", "backlog_dequeue_ratio", False, f"flat (≥ {FLAT:g})",
        lambda v, r, b: v >= FLAT)
    row("rate of 1,000 tasks due at one instant / the same worker's rate on ready tasks with the same body",
        "burst_ratio", False, f"flat (≥ {FLAT:g})", lambda v, r, b: v >= FLAT, ref=("a flat rate", 1.0))
    row("rate of 1,000 tasks due at one instant / its one-process drain (a lighter body: one INCR)",
        "burst_drain1_ratio", False, "(reported)", reported)
    row("1,000 tasks due at one instant: the last started after due (ms)", "burst_max", True, "(reported)",
        reported)
    row("Redis commands run / task", "commands", True, "(reported)", reported)
    row("commands sent by clients / task", "sent", True, "(reported)", reported)
    row("scheduled task: latest start after due (ms)", "sched_max", True, "< 1,000 ms",
        lambda v, r, b: v < 1000)
    return rows


# -- Markdown -------------------------------------------------------------------------------------


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def machine_line(results: dict[str, Any]) -> str:
    m = results.get("machine", {})
    return (f"{m.get('cpu', '?')}, {m.get('cores', '?')} cores, {m.get('memory_gib', '?')} GiB RAM, "
            f"{m.get('os', '?')}; Redis {m.get('redis', '?')}; Python {m.get('python', '?')}")


def _fmt_target(value: Any, key: str) -> str:
    if key.endswith("ratio"):
        return fmt(value, 2)
    if key.startswith(("idle", "sched", "burst_max")):
        return fmt_ms(value)
    if key in ("commands", "cpu_us", "sent"):
        return fmt(value, 1)
    return fmt(value)




def markdown(results: dict[str, Any]) -> str:
    cfg = results.get("settings", {})
    libs = results.get("libs", {})
    metrics = {lib: lib_metrics(r) for lib, r in libs.items() if "error" not in r}
    out: list[str] = []
    commit = f", queuecore at {results['queuecore_commit']}" if results.get("queuecore_commit") else ""
    out.append(f"Measured {results.get('started_at', '?')} ({results.get('mode', '?')} mode, "
               f"{results.get('seconds', 0):.0f} s{commit}) on: {machine_line(results)}.")
    out.append("")
    out.append(
        f"Each drain: {cfg.get('drain_n', 0):,} pre-enqueued no-op tasks, {cfg.get('drain_reps')} run(s), "
        f"{cfg.get('concurrency')} threads/async slots per worker process; enqueue: "
        f"{cfg.get('enqueue_n', 0):,} one by one ({cfg.get('enqueue_reps')} run(s)) and {cfg.get('drain_n', 0):,} in "
        f"batches of {cfg.get('batch_size', 0):,} ({cfg.get('batch_reps')} run(s)), after a warm-up; backlog "
        f"{cfg.get('backlog_n', 0):,} tasks. Medians, [min-max] when there were several runs.")
    out.append("")

    rows = targets(results)
    if rows:
        out.append("**Headline: queuecore against the best peer in the same run**")
        out.append("")
        body = []
        for r in rows:
            if r["queuecore"] is None:  # not measured in this run
                continue
            key = r["key"]
            met = {True: "yes", False: "**no**", None: ""}[r["met"]]
            if r["ratio"] is None:
                ratio = "-"
            elif "%" in r["goal"]:
                ratio = f"{r['ratio']:.0%}"
            else:
                ratio = f"{r['ratio']:.2f}x"
            best = f"{_fmt_target(r['best_value'], key)} ({r['best_peer']})" if r["best_peer"] else "-"
            body.append([r["target"], _fmt_target(r["queuecore"], key), best, ratio, r["goal"], met])
        out.append(_table(["target", "queuecore", "best peer (or reference)", "queuecore / best", "goal", "met"],
                          body))
        out.append("")
        us = metrics.get(US, {})
        if us.get("redis_ceiling"):
            out.append(f"Redis CPU per queuecore task implies a ceiling of about {us['redis_ceiling']:,.0f} tasks/s "
                       "for one Redis core (enqueue + run), whatever the number of workers.")
            out.append("")

    body = []
    for lib, r in libs.items():
        if "error" in r:
            body.append([lib, r.get("error", "failed")] + ["-"] * 9)
            continue
        m, s = metrics[lib], r.get("scenarios", {})
        d1 = fmt_range(get(s, "drain1.rate")) + (" ⏱" if m["drain1_timed_out"] else "") + _noisy(s, "drain1")
        share = f"{m['drain1'] / m['ceiling']:.0%}" if m["drain1"] and m["ceiling"] else "-"
        da = ("n/a" if "n/a" in get(s, "drain_async", {}) else
              fmt_range(get(s, "drain_async.rate")) + _noisy(s, "drain_async"))
        d2 = fmt_range(get(s, "drain2.rate")) + _noisy(s, "drain2")
        idle = f"{fmt_ms(m['idle_p50'])} / {fmt_ms(m['idle_p99'])}"
        if get(s, "latency_idle.interval_ms") and get(s, "latency_idle.interval_ms") > 5.01:
            idle += f" (every {get(s, 'latency_idle.interval_ms'):.0f} ms)"
        sched = "n/a" if "n/a" in get(s, "scheduled", {}) else f"{fmt_ms(m['sched_p50'])} / {fmt_ms(m['sched_max'])}"
        body.append([f"{lib} {r.get('version', '')}", d1, share, da, d2,
                     fmt_range(get(s, "enqueue_one.rate")), fmt_range(get(s, "enqueue_batch.rate")), idle,
                     f"{fmt_ms(m['load_p50'])} / {fmt_ms(m['load_p99'])}", sched])
    ceiling = ceiling_runs(results)
    ceiling_cpu = ceiling_worker_cpu(results)
    if ceiling:
        body.append([f"ceiling: {cfg.get('concurrency')} bare threads, no queue", fmt_range(summarize_rates(ceiling))]
                    + ["-"] * 8)
    out.append("**Throughput and latency**")
    out.append("")
    delay = cfg.get("sched_delay", 1.0)
    out.append(_table(["library", "drain, 1 process (tasks/s)", "of its ceiling", "drain, async handlers",
                       "drain, 2 processes", "enqueue one by one (/s)",
                       "enqueue batch (/s)", "idle latency p50 / p99 (ms)", "latency at ½ capacity p50 / p99 (ms)",
                       f"due in {delay:g} s: started late p50 / max (ms)"], body))
    out.append("")
    if ceiling:
        out.append(f"Ceiling: the task's body (one INCR on the counter Redis) run {cfg.get('drain_n', 0):,} times by "
                   f"{cfg.get('concurrency')} bare threads in a fresh process, no queue, measured like a drain; "
                   "one run right before each library's one-process drain, so \"of its ceiling\" compares each "
                   f"drain with the ceiling taken beside it. The row: all {len(ceiling)} ceiling runs of this run.")
        out.append("")
    notes = []
    if any(m["drain1_timed_out"] for m in metrics.values()):
        notes.append("⏱ the drain hit its time limit; the rate is over the tasks done by then.")
    if any(_noisy(r.get("scenarios", {}), k) for r in libs.values() for k in ("drain1", "drain2")):
        notes.append(f"≈ other processes on the machine used ≥ {NOISY_CORES} cores during that drain (median run); "
                     "its number is less reliable.")
    if notes:
        out.append(" ".join(notes))
        out.append("")

    body = []
    for lib, r in libs.items():
        if "error" in r:
            continue
        m = metrics[lib]
        backlog = (f"{fmt(m['backlog_enqueue_ratio'], 2)} / {fmt(m['backlog_dequeue_ratio'], 2)}"
                   if m["backlog_enqueue_ratio"] is not None else "-")
        body.append([lib, f"{fmt(m['commands'], 1)} ({fmt(m['enqueue_commands'], 1)} + {fmt(m['run_commands'], 1)})",
                     fmt(m["sent"], 1), fmt(m["cpu_us"], 1), fmt(m["redis_ceiling"]), fmt(m["net_bytes"]),
                     f"{fmt(m['rss_mb'], 1)} ({fmt(m['pss_mb'], 1)})", _user_system(m), fmt(m["bytes_per_task"]),
                     backlog])
    out.append("**Redis cost and memory**")
    out.append("")
    out.append(_table(["library", "Redis commands run / task (batch enqueue + run)", "commands sent / task",
                       "Redis CPU µs / task",
                       "ceiling: tasks/s per Redis core", "bytes on the wire / task", "worker RSS MB (PSS)",
                       "worker CPU µs / task: user + system", "Redis bytes / pending task",
                       "rate with backlog / empty: enqueue / dequeue"], body))
    out.append("")
    out.append("Commands run: INFO commandstats over the batch enqueue and the drain, counting the commands run "
               "inside Lua scripts too (Redis's work). Commands sent: what clients sent per task (one-by-one "
               "enqueue and run, EVALSHA counting as one), counted with MONITOR in a separate, untimed phase. "
               "Redis CPU: used_cpu_user + used_cpu_sys over the batch enqueue and the drain. Worker RSS is "
               "summed over the worker's process tree after the drain (PSS splits shared pages). Worker CPU: "
               "the one-process drain's worker tree, per task, in user space and in the kernel (system calls "
               "and threads waiting for each other, the GIL among them)"
               + (f"; the ceiling's bare threads: {_user_system(ceiling_cpu)}" if ceiling_cpu else "") + ".")
    out.append("")

    body = []
    for lib, r in libs.items():
        if "error" in r or "drain2" not in r.get("scenarios", {}):
            continue
        m, cores = metrics[lib], get(r, "scenarios.drain2.cpu_cores", {})
        speedup = m["drain2"] / m["drain1"] if m["drain2"] and m["drain1"] else None
        busy = sum(v for v in cores.values() if v)
        body.append([lib, fmt(m["drain2"]), f"{speedup:.2f}x" if speedup else "-",
                     fmt(cores.get("workers"), 2), fmt(cores.get("redis"), 2), fmt(cores.get("counter_redis"), 2),
                     fmt(cores.get("harness"), 2), fmt(cores.get("other_processes"), 2), fmt(busy, 2)])
    if body:
        cores_total = results.get("machine", {}).get("cores", "?")
        out.append(f"**Two worker processes: where the time goes** (CPU cores busy during the drain, of {cores_total})")
        out.append("")
        out.append(_table(["library", "tasks/s", "vs 1 process", "workers", "broker Redis", "counter Redis",
                           "harness", "other processes", "total"], body))
        out.append("")

    out += _processes_table(libs, metrics)

    body = []
    for lib, r in libs.items():
        if "error" in r:
            continue
        body.append([f"{lib} {r.get('version', '')}", "yes" if r.get("survives_kill") else "**no**",
                     r.get("on_kill", ""), r.get("config", ""), r.get("batch_api", "")])
    out.append("**When a worker is killed mid-task, and how each library was run**")
    out.append("")
    out.append(_table(["library", "task runs again?", "what happens to the running task",
                       "worker configuration", "batch API"], body))
    out.append("")
    errors = [(lib, name, err) for lib, r in libs.items() for name, err in r.get("errors", {}).items()]
    if errors:
        out.append("Failed scenarios: " + "; ".join(f"{lib} {name}: {err}" for lib, name, err in errors))
        out.append("")
    return "\n".join(out)


def _processes_table(libs: dict[str, Any], metrics: dict[str, Any]) -> list[str]:
    """The ``procs2`` drain: each library's own multi-process mode with 2 processes, against its one
    process (``drain1``) and against queuecore's ``procs2``."""
    ours = metrics.get(US, {}).get("procs2")
    body = []
    for lib, r in libs.items():
        s = r.get("scenarios", {}) if "error" not in r else {}
        if "procs2" not in s:
            continue
        if "n/a" in s["procs2"]:
            body.append([f"{lib} {r.get('version', '')}", "n/a: " + s["procs2"]["n/a"], "-", "-", "-", "-"])
            continue
        m = metrics[lib]
        speedup = m["procs2"] / m["drain1"] if m["procs2"] and m["drain1"] else None
        cores = get(s, "procs2.cpu_cores.workers")
        body.append([f"{lib} {r.get('version', '')}", get(s, "procs2.config", ""),
                     fmt_range(get(s, "procs2.rate")) + _noisy(s, "procs2"), f"{speedup:.2f}x" if speedup else "-",
                     f"{ours / m['procs2']:.2f}x" if ours and m["procs2"] else "-", fmt(cores, 2)])
    if not body:
        return []
    return ["**Each library's own multi-process mode, 2 processes** (one command; `procs2`)", "",
            _table(["library", "how it runs", "drain (tasks/s)", "vs its 1 process", "queuecore / this",
                    "worker CPU cores"], body), ""]


def ceiling_runs(results: dict[str, Any]) -> list[float]:
    """Every ceiling run's rate in this run, whichever library's drain it was measured beside."""
    return [float(run["rate"]) for r in results.get("libs", {}).values() if "error" not in r
            for run in get(r, "scenarios.ceiling.runs", []) if _num(run.get("rate")) is not None]


def ceiling_worker_cpu(results: dict[str, Any]) -> dict[str, float] | None:
    """The ceiling process's CPU per task (user, system; µs), medians over the libraries' ceilings."""
    cpu = [get(r, "scenarios.ceiling.worker_cpu_us", {}) for r in results.get("libs", {}).values() if "error" not in r]
    pairs: list[tuple[float, float]] = []
    for c in cpu:
        user, system = _num(c.get("user")), _num(c.get("system"))
        if user is not None and system is not None:
            pairs.append((user, system))
    if not pairs:
        return None
    return {"worker_user_us": summarize_rates([u for u, _ in pairs])["median"],
            "worker_sys_us": summarize_rates([s for _, s in pairs])["median"]}


def summarize_rates(values: list[float]) -> dict[str, Any]:
    ordered = sorted(values)
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    return {"median": median, "min": ordered[0], "max": ordered[-1], "n": len(ordered)}


# -- chart ----------------------------------------------------------------------------------------


def draw_chart(results: dict[str, Any], path: Path) -> Path | None:
    """A 2x2 PNG: drain rates, enqueue rates, idle latency, Redis cost; queuecore highlighted."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    libs = [lib for lib, r in results.get("libs", {}).items() if "error" not in r]
    if not libs:
        return None
    metrics = {lib: lib_metrics(results["libs"][lib]) for lib in libs}
    colors = ["#d62728" if lib == US else "#7f7f7f" for lib in libs]
    fig, axes = plt.subplots(2, 2, figsize=(14, 9))
    x = range(len(libs))

    def bars(ax: Any, keys: list[tuple[str, str]], title: str, ylabel: str, log: bool = False,
             extra: tuple[Any, ...] = ()) -> None:
        """Grouped bars of ``keys`` per library; ``extra`` handles (a reference line) join the legend."""
        width = 0.8 / len(keys)
        shades = [1.0, 0.6, 0.35]
        for i, (key, label) in enumerate(keys):
            values = [metrics[lib][key] or 0 for lib in libs]
            pos = [xi + (i - (len(keys) - 1) / 2) * width for xi in x]
            drawn = ax.bar(pos, values, width, color=colors, alpha=shades[i % 3], label=label,
                           edgecolor="black", linewidth=0.5)
            for rect, v in zip(drawn, values, strict=True):
                if v:
                    text = f"{v:,.0f}" if v >= 10 else f"{v:.1f}" if v >= 1 else f"{v:.2f}"
                    ax.annotate(text, (rect.get_x() + rect.get_width() / 2, rect.get_height()),
                                ha="center", va="bottom", fontsize=6 if len(keys) > 2 else 7,
                                rotation=90 if len(keys) > 1 else 0,
                                xytext=(0, 2), textcoords="offset points")
        ax.set_xticks(list(x))
        ax.set_xticklabels(libs, rotation=30, ha="right", fontsize=9)
        ax.set_title(title, fontsize=11)
        ax.set_ylabel(ylabel)
        if log:
            ax.set_yscale("log")
        ax.margins(y=0.2)
        if len(keys) > 1 or extra:
            from matplotlib.patches import Patch

            handles = [Patch(facecolor="#7f7f7f", alpha=shades[i % 3], edgecolor="black", label=label)
                       for i, (_key, label) in enumerate(keys)] + list(extra)
            if log:  # room above the tallest bar and its label for the legend, which then covers no bar
                low, high = ax.get_ylim()
                ax.set_ylim(low, high * 10 ** (0.5 * ((len(handles) + 1) // 2)))
            ax.legend(handles=handles, fontsize=8, loc="upper center", ncol=2)
        ax.grid(axis="y", alpha=0.3)

    drains = [("drain1", "1 worker process")]
    if any(m.get("drain_async") for m in metrics.values()):
        drains.append(("drain_async", "1 process, async handlers"))
    drains.append(("drain2", "2 worker processes"))
    ceiling = ceiling_runs(results)
    lines = ()
    if ceiling:  # a line across the panel, named in the legend (a label on the line sat on the bars)
        level = summarize_rates(ceiling)["median"]
        lines = (axes[0][0].axhline(level, color="#1f77b4", linestyle="--", linewidth=1,
                                    label=f"ceiling: bare threads, no queue ({level:,.0f})"),)
    bars(axes[0][0], drains, "Drain throughput (no-op tasks/s, higher is better)", "tasks/s", log=True, extra=lines)
    bars(axes[0][1], [("enqueue_one", "one by one"), ("enqueue_batch", "batch API")],
         "Enqueue throughput (tasks/s, higher is better)", "tasks/s", log=True)
    bars(axes[1][0], [("idle_p50", "p50"), ("idle_p99", "p99")],
         "Latency enqueue→start, idle worker (ms, lower is better)", "ms", log=True)
    cost = [("commands", "commands run / task (INFO)")]
    if any(m.get("sent") for m in metrics.values()):
        cost.append(("sent", "commands sent / task (MONITOR)"))
    cost.append(("cpu_us", "Redis CPU µs / task"))
    bars(axes[1][1], cost,
         "Redis cost per task, enqueue + run (lower is better)", "per task", log=True)
    fig.suptitle(f"queuecore vs peers — {results.get('mode', '')} run {results.get('started_at', '')}\n"
                 f"{machine_line(results)}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write(results: dict[str, Any], out: Path, chart: bool = True) -> dict[str, Path]:
    """Write ``results.json``, ``results.md`` and (when asked and matplotlib is there) ``chart.png``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "results.json", "markdown": out / "results.md"}
    results = dict(results)
    results["targets"] = targets(results)
    paths["json"].write_text(json.dumps(results, indent=1, default=str))
    paths["markdown"].write_text(markdown(results) + "\n")
    if chart:
        png = draw_chart(results, out / "chart.png")
        if png is not None:
            paths["chart"] = png
    return paths


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.report RESULTS.json [OUT_DIR]``: render a saved run's report again."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if not args:
        print("usage: python -m bench.report RESULTS.json [OUT_DIR]", file=sys.stderr)
        return 2
    source = Path(args[0])
    results = json.loads(source.read_text())
    paths = write(results, Path(args[1]) if len(args) > 1 else source.parent)
    print(", ".join(str(p) for p in paths.values()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
