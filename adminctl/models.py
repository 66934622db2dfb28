"""Snapshots the CLI assembles from several Inspector calls (each with a stable ``to_dict``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from queuecore.core.alerts import Alert, PendingAlert
from queuecore.core.inspector import RedisInfo
from queuecore.core.message import QueueInfo, ServerInfo
from queuecore.core.states import STATES


@dataclass(frozen=True)
class StatsSnapshot:
    """Everything ``adminctl stats`` shows, read at ``taken_at`` (unix seconds)."""

    taken_at: float
    redis_url: str  # already redacted
    prefix: str
    queues: list[QueueInfo]
    servers: list[ServerInfo]
    redis: RedisInfo
    alerts: list[Alert] = field(default_factory=list)  # active, oldest first
    pending_alerts: list[PendingAlert] = field(default_factory=list)

    @property
    def state_counts(self) -> dict[str, int]:
        return {state: sum(getattr(q, state) for q in self.queues) for state in STATES}

    @property
    def processed_today(self) -> int:
        return sum(q.processed_today for q in self.queues)

    @property
    def failed_today(self) -> int:
        return sum(q.failed_today for q in self.queues)

    @property
    def error_rate(self) -> float:
        return self.failed_today / self.processed_today if self.processed_today else 0.0

    @property
    def busy_workers(self) -> int:
        return sum(s.active_count for s in self.servers)

    @property
    def concurrency(self) -> int:
        return sum(s.concurrency for s in self.servers)

    @property
    def waiting(self) -> int:
        """Tasks fetched ahead, waiting for a free slot (not counted as busy)."""
        return sum(s.waiting_count for s in self.servers)

    def to_dict(self) -> dict[str, Any]:
        counts = self.state_counts
        return {
            "taken_at": datetime.fromtimestamp(self.taken_at, tz=UTC).isoformat(),
            "redis_url": self.redis_url,
            "prefix": self.prefix,
            "totals": {**counts, "size": sum(v for k, v in counts.items() if k != "completed"),
                       "processed_today": self.processed_today, "failed_today": self.failed_today,
                       "error_rate": self.error_rate},
            "queues": [q.to_dict() for q in self.queues],
            "servers": {"up": len(self.servers), "busy_workers": self.busy_workers,
                        "concurrency": self.concurrency, "waiting": self.waiting},
            "redis": self.redis.to_dict(),
            "alerts": {"active": [a.to_dict() for a in self.alerts],
                       "pending": [p.to_dict() for p in self.pending_alerts]},
        }
