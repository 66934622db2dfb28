"""``manage.py demo_producer``: keep enqueueing a mix of demo tasks so the queues have life."""

from __future__ import annotations

import random
import time
from typing import Any

from django.core.management.base import BaseCommand

from queuecore import BrokerError, enqueue


class Command(BaseCommand):
    help = "Enqueue a mix of demo tasks (noop, sleep, echo, fail) every interval until stopped."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--interval", type=float, default=1.0, help="seconds between batches")
        parser.add_argument("--batch", type=int, default=5, help="tasks per batch")
        parser.add_argument("--count", type=int, default=0, help="stop after this many batches (0 = never)")

    def handle(self, *args: Any, **options: Any) -> None:
        rounds = 0
        queues = ["critical", "default", "default", "low"]
        try:
            while not options["count"] or rounds < options["count"]:
                for _ in range(options["batch"]):
                    self._one(random.choice(queues))
                rounds += 1
                time.sleep(options["interval"])
        except KeyboardInterrupt:
            pass

    def _one(self, queue: str) -> None:
        kind = random.random()
        try:
            if kind < 0.4:
                enqueue("demo.noop", queue=queue)
            elif kind < 0.7:
                enqueue("demo.sleep", {"seconds": round(random.uniform(0.1, 3.0), 2)}, queue=queue)
            elif kind < 0.85:
                enqueue("demo.echo", {"hello": "world", "n": random.randint(1, 100)}, queue=queue, retention=3600)
            elif kind < 0.95:
                enqueue("demo.fail", {"succeed_on": random.randint(1, 3)}, queue=queue)
            else:
                enqueue("demo.fail", {"message": "always fails"}, queue=queue, max_retry=1)
        except BrokerError as exc:
            self.stderr.write(f"enqueue failed: {exc}")
