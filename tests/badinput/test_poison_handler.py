"""A handler that kills its own worker process on every attempt ends archived after its retries,
with "worker lost (lease expired)", instead of looping forever. The test restarts a worker after each
death (as a process supervisor would); each restarted worker's recoverer takes the task back."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from queuecore import Client, Inspector
from tests.conftest import wait_until
from tests.core.test_processes import spawn  # noqa: F401  (the fixture)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["exit", "kill"])
def test_self_killing_handler_is_archived_after_its_retries(spawn, client: Client,  # noqa: F811
                                                           inspector: Inspector, tmp_path: Path, how: str) -> None:
    info = client.enqueue("proc.suicide", {"how": how}, max_retry=2)
    workers = []
    started = time.monotonic()

    def settled() -> bool:
        if inspector.get_task("default", info.id).state == "archived":
            return True
        if not workers or not workers[-1].alive:
            if len(workers) > 10:
                pytest.fail("the task went on killing workers past its retries")
            workers.append(spawn(lease=1.0, heartbeat=0.2, recover=0.2, concurrency=1))
        return False

    wait_until(settled, timeout=60, interval=0.05, message="the poison task to be archived")
    final = inspector.get_task("default", info.id)
    log = tmp_path / "events.jsonl"
    attempts = [e["attempt"] for e in map(json.loads, log.read_text().splitlines())
                if e.get("id") == info.id and e["event"] == "start"]
    print(f"\n{how}: archived after {len(attempts)} attempts and {len(workers)} worker processes "
          f"in {time.monotonic() - started:.1f}s")
    assert attempts == [0, 1, 2]
    assert final.retried == 2
    assert "worker lost (lease expired)" in str(final.last_error)
    dead = [w for w in workers if not w.alive]
    assert len(dead) == 3  # one per attempt; a fourth worker (if any) found nothing to run
