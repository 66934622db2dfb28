"""``adminctl stats`` labels the memory column an estimate."""

from __future__ import annotations

from typing import Any

from queuecore import Client


def test_stats_labels_memory_an_estimate(adminctl: Any, client: Client) -> None:
    client.enqueue("t.x")
    run = adminctl("stats")
    header = next(line for line in run.stdout.splitlines() if "latency" in line)
    assert run.code == 0 and "memory est." in header
