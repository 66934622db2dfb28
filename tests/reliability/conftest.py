"""Fixtures of the fault tests: subprocess workers (``spawn``, shared with tests/core/test_processes.py),
the handler log path, and a private redis-server per test where the fault would disturb others."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.core.test_processes import spawn  # noqa: F401  (the fixture, re-exported)

SOAK = os.environ.get("QUEUECORE_SOAK") == "1"


@pytest.fixture
def log(tmp_path: Path) -> Path:
    """The handler log the ``spawn``ed workers (and in-process proc_tasks handlers) write to."""
    return tmp_path / "events.jsonl"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Soak tests are opt-in: they run only with QUEUECORE_SOAK=1."""
    if SOAK:
        return
    skip = pytest.mark.skip(reason="soak test: set QUEUECORE_SOAK=1 to run")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)
