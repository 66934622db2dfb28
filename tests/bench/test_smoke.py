"""A smoke run of the benchmark harness, so that it cannot rot: queuecore only, tiny counts.

It needs none of the peers (their adapters are imported only in their own driver processes)
and no matplotlib: it runs in the test environment. It starts its own private redis-servers.
"""

from __future__ import annotations

import json
import math
import statistics
import sys

import pytest

from bench.common import REPO_ROOT
from bench.driver import BACKLOG_ENQUEUE_RUNS
from bench.run import SCENARIOS, run_benchmark

TINY = {
    "warmup_n": 20, "enqueue_n": 200, "enqueue_reps": 2, "batch_reps": 2, "batch_size": 100,
    "drain_n": 1000, "drain_reps": 1, "drain_timeout": 10,
    "idle_n": 20, "idle_max_seconds": 0.5, "load_seconds": 0.3,
    "sched_n": 3, "sched_delay": 0.3, "sched_gap": 0.01, "burst_n": 40, "burst_ref_n": 1000,
    "backlog_n": 300, "backlog_window": 5, "driver_timeout": 120, "concurrency": 4,
}
TINY_CONCURRENCY = TINY["concurrency"]


@pytest.mark.slow
def test_harness_runs_queuecore_and_reports(tmp_path):
    results = run_benchmark(["queuecore"], SCENARIOS, quick=True, out=tmp_path, overrides=TINY, chart=False,
                            pythons={"queuecore": sys.executable})

    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["libs"].keys() == {"queuecore"}
    qc = saved["libs"]["queuecore"]
    assert "error" not in qc, qc
    assert qc["errors"] == {}
    assert qc["survives_kill"] is True and qc["on_kill"]
    s = qc["scenarios"]
    assert set(s) == set(SCENARIOS)
    for key in ("enqueue_one", "enqueue_batch", "drain1", "drain2", "procs2"):
        assert s[key]["rate"]["median"] > 0, key
        assert s[key]["rate"]["min"] <= s[key]["rate"]["median"] <= s[key]["rate"]["max"]
    assert len(s["enqueue_one"]["runs"]) == 2
    assert s["drain1"]["cost"]["commands_per_task"] > 0
    assert s["drain1"]["cost"]["redis_cpu_us_per_task"] >= 0
    assert s["drain1"]["memory"]["rss_mb"] > 0
    # The worker's CPU per task, split into user space and the kernel (the median run's). The kernel
    # counts it in clock ticks (10 ms): 1,000 tasks (about 60 ms of user CPU) always show; 200 rounded to
    # none once on a fast machine. The ceiling's bare INCRs may still round to none.
    assert s["drain1"]["worker_cpu_us"]["user"] > 0
    for key in ("drain1", "ceiling"):
        cpu = s[key]["worker_cpu_us"]
        assert cpu.keys() == {"user", "system"} and cpu["user"] >= 0 and cpu["system"] >= 0, key
        assert cpu == min(s[key]["runs"], key=lambda run: run["rate"])["worker_cpu_us"], key  # one run
    assert s["drain2"]["workers"] == 2
    assert s["procs2"]["workers"] == 1 and s["procs2"]["processes"] == 2  # one supervisor, two children
    # The ceiling: one bare-thread run right before each drain1 run, measured like a drain.
    ceiling = s["ceiling"]
    assert ceiling["interleaved_with"] == "drain1" and ceiling["threads"] == TINY_CONCURRENCY
    assert len(ceiling["runs"]) == len(s["drain1"]["runs"]) == 1
    assert ceiling["rate"]["median"] > 0 and ceiling["runs"][0]["tasks"] > 0
    assert "cost" not in ceiling["runs"][0]  # no broker traffic to count
    # async def handlers, on the worker's event loop.
    assert s["drain_async"]["handlers"] == "yes" and s["drain_async"]["rate"]["median"] > 0
    for key in ("latency_idle", "latency_load"):
        assert s[key]["n"] > 0 and s[key]["missing"] == 0
        assert 0 <= s[key]["p50_ms"] <= s[key]["p99_ms"]
    assert s["scheduled"]["n"] == 3 and s["scheduled"]["max_late_ms"] > -50
    # 40 tasks due at one instant, scheduled ahead of it: all ran, none before it was due.
    burst = s["due_burst"]
    assert burst["n"] == 40 and burst["missing"] == 0 and burst["enqueued_ahead_s"] > 0
    assert burst["p50_ms"] >= -50 and burst["burst_rate"] > 0 and burst["burst_ratio_drain1"] > 0
    # Its ratio is held against ready tasks with the same body, run by the same worker.
    assert burst["same_body_rate"] > 0 and len(burst["runs"]) == 1
    assert burst["burst_ratio"] == pytest.approx(burst["burst_rate"] / burst["same_body_rate"])
    assert s["requests"]["sent_per_task"] > 0 and s["requests"]["sent"]
    assert s["backlog"]["bytes_per_task"] > 0
    backlog = s["backlog"]
    assert backlog["enqueue_rate"] > 0 and backlog["dequeue_rate"] > 0
    # Each rate with the backlog is held against the same measurement on the emptied queue beside it.
    for what in ("enqueue", "dequeue"):
        assert backlog[f"{what}_rate_empty"] > 0, what
        assert backlog[f"{what}_ratio"] == pytest.approx(backlog[f"{what}_rate"] / backlog[f"{what}_rate_empty"])
    # The enqueue sides are medians of several one-by-one runs each, every run kept.
    for side in ("", "_empty"):
        runs = backlog[f"enqueue_rates{side}"]
        assert len(runs) == BACKLOG_ENQUEUE_RUNS and min(runs) > 0
        assert backlog[f"enqueue_rate{side}"] == statistics.median(runs)
    assert backlog["enqueue_rate_run"] == s["enqueue_one"]["rate"]["median"]
    assert backlog["dequeue_rate_run"] == s["drain1"]["rate"]["median"]
    assert saved["machine"]["cores"] >= 1 and saved["machine"]["redis"]
    targets = {t["target"]: t for t in saved["targets"]}
    assert targets["enqueue, batch (tasks/s)"]["queuecore"] > 0
    by_key = {(t["key"], t["best_peer"]): t for t in saved["targets"]}
    # Held against references of queuecore's own (the ceiling beside its drain, its one process):
    assert by_key[("drain1", "ceiling")]["ratio"] > 0
    assert by_key[("procs2", "queuecore, 1 process")]["ratio"] > 0
    referenced = {("drain1", "ceiling"), ("procs2", "queuecore, 1 process"), ("burst_ratio", "a flat rate")}
    assert all(t["best_peer"] is None for t in saved["targets"]
               if (t["key"], t["best_peer"]) not in referenced)  # no peer ran
    assert {t["key"] for t in saved["targets"]} >= {"drain_async", "procs2", "cpu_us", "bytes_per_task",
                                                     "burst_ratio", "burst_drain1_ratio", "burst_max"}

    md = (tmp_path / "results.md").read_text()
    assert "| queuecore 0.1.0 |" in md or "| queuecore " in md
    assert "When a worker is killed" in md
    assert "| ceiling: " in md and "of its ceiling" in md
    cpu = s["drain1"]["worker_cpu_us"]
    assert "worker CPU µs / task: user + system" in md
    assert f"{cpu['user']:,.0f} + {cpu['system']:,.0f}" in md
    assert "the ceiling's bare threads: " in md
    assert not (tmp_path / "chart.png").exists()
    assert results["files"]["json"].endswith("results.json")
    assert not math.isnan(s["latency_idle"]["p99_ms"])


@pytest.mark.slow
def test_a_tree_of_queuecore_runs_as_its_own_library(tmp_path):
    """``--tree LABEL=DIR``: the library ``queuecore@LABEL`` runs its driver and workers in DIR, whose
    ``queuecore`` package is the one imported there."""
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "queuecore").symlink_to(REPO_ROOT / "queuecore", target_is_directory=True)
    results = run_benchmark(["queuecore@other"], ["enqueue_one", "drain1"], quick=True, out=tmp_path / "out",
                            overrides=TINY, chart=False, pythons={"queuecore@other": sys.executable},
                            trees={"other": str(tree)})
    lib = results["libs"]["queuecore@other"]
    assert "error" not in lib and lib["errors"] == {}, lib
    assert lib["work_dir"] == str(tree)
    assert lib["scenarios"]["drain1"]["rate"]["median"] > 0
    with pytest.raises(ValueError, match="unknown libraries"):
        run_benchmark(["queuecore@nowhere"], ["enqueue_one"], out=tmp_path / "none", trees={"other": str(tree)})
