"""The memory estimate of a queue samples task hashes from every state in proportion to its size, so a
queue of archived tasks with big payloads is estimated near its real size (it used to sample pending
tasks only: 263.7 KB shown against 11 MB). The Inspector and the metrics scrape (queue_metrics.lua)
share the sample out the same way."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest

from queuecore import ConnectionConfig, Inspector
from queuecore.core import queue_metrics, typestats
from queuecore.core.inspector import memory_sample_plan
from queuecore.core.scripts import Scripts
from tests.helpers.state import seed_task


def true_size(r: Any, connection: ConnectionConfig, name: str) -> int:
    """Every key of the queue, measured exactly (MEMORY USAGE ... SAMPLES 0)."""
    pattern = connection.keys.queue(name).base.replace("{", "\\{").replace("}", "\\}") + "*"
    return sum(int(r.memory_usage(key, samples=0) or 0) for key in r.scan_iter(match=pattern, count=1000))


def seed(r: Any, connection: ConnectionConfig, name: str, pending: int, archived: int) -> None:
    r.sadd(connection.keys.queues, name)
    q = connection.keys.queue(name)
    now = int(time.time() * 1000)
    pipe = r.pipeline(transaction=False)
    sizes = random.Random(7)
    for n in range(pending):
        seed_task(pipe, q, f"p{n}", "pending", payload={"n": n})
    for n in range(archived):  # 1 to 9 KB each, as failures with big payloads and tracebacks
        seed_task(pipe, q, f"a{n}", "archived", score=now - n, payload={"blob": "x" * sizes.randrange(1000, 9000)},
                  error="Traceback ...\n" + "frame\n" * 40)
    pipe.execute()


@pytest.mark.parametrize("pending", [0, 200])
def test_archived_big_tasks_are_estimated_within_2x(inspector: Inspector, redis_client: Any,
                                                    connection: ConnectionConfig, pending: int) -> None:
    seed(redis_client, connection, "mem", pending=pending, archived=2000)
    real = true_size(redis_client, connection, "mem")
    shown = inspector.queue_info("mem").memory_bytes
    scraped, _ = queue_metrics.read_queues(redis_client, Scripts(redis_client, connection.keys),
                                           [connection.keys.queue("mem")], time.time())
    assert shown is not None and scraped[0].memory_bytes is not None
    print(f"pending={pending}: real {real:,} B, Inspector {shown:,} B ({shown / real:.2f}x), "
          f"metrics {scraped[0].memory_bytes:,} B ({scraped[0].memory_bytes / real:.2f}x)")
    assert real / 2 <= shown <= real * 2
    assert real / 2 <= scraped[0].memory_bytes <= real * 2


def test_small_tasks_and_the_type_statistics_are_measured_whole(inspector: Inspector, redis_client: Any,
                                                               connection: ConnectionConfig) -> None:
    """A small queue whose task hashes hold a message over 64 bytes (stored as hashtables): MEMORY USAGE
    with its default 5 samples measured them about a quarter short, and the Inspector left the
    per-type statistics out; a probe saw 0.5x of the real size. Task hashes are measured whole now."""
    redis_client.sadd(connection.keys.queues, "small")
    q = connection.keys.queue("small")
    now = int(time.time() * 1000)
    for n in range(5):
        seed_task(redis_client, q, f"p{n}", "pending", payload={"n": n, "note": "x" * 80})
    for n in range(11):
        seed_task(redis_client, q, f"a{n}", "archived", score=now - n, payload={"n": n, "note": "x" * 80},
                  error=f"RuntimeError: attempt {n} failed", retried=3, last_failed_at=now, archived_at=now,
                  started_at=now, worker="host:1234:abcdef12", lease=4,
                  attempts="\n".join(f"{i} host:1234:abcdef12 error {now} {now} RuntimeError: failed " + "y" * 200
                                      for i in range(1, 5)))
    for n in range(4):  # the types' totals (the per-minute and per-day records are not counted)
        redis_client.hset(q.type_stats, f"type.{n}", ",".join(["123456"] * typestats.VECTOR_LENGTH))
    real = true_size(redis_client, connection, "small")
    shown = inspector.queue_info("small").memory_bytes
    scraped, _ = queue_metrics.read_queues(redis_client, Scripts(redis_client, connection.keys), [q], time.time())
    print(f"real {real:,} B, Inspector {shown:,} B, metrics {scraped[0].memory_bytes:,} B")
    assert shown is not None and 0.8 * real <= shown <= 1.1 * real
    assert scraped[0].memory_bytes is not None and 0.8 * real <= scraped[0].memory_bytes <= 1.1 * real


def test_the_sample_is_shared_out_in_proportion_to_each_state() -> None:
    plan = memory_sample_plan({"pending": 100, "active": 0, "archived": 1900, "completed": 1}, 20)
    assert set(plan) == {"pending", "archived", "completed"}  # every state holding tasks, none empty
    assert (len(plan["pending"]), len(plan["archived"]), len(plan["completed"])) == (1, 19, 1)
    assert plan["archived"] == [n * 100 for n in range(19)]  # spread over the whole state
    assert memory_sample_plan({"archived": 1900}, 19, 0.5)["archived"] == [50 + n * 100 for n in range(19)]
    assert memory_sample_plan({"archived": 5}, 20, 0.99)["archived"] == [0, 1, 2, 3, 4]
    assert memory_sample_plan({"pending": 3}, 20) == {"pending": [0, 1, 2]}
    assert memory_sample_plan({"pending": 0}, 20) == {}
