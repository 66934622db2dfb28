"""What an operator sees of one task type in one queue: its statistics over a window (throughput,
failure rate, duration percentiles, which are estimates), its limits and their use now, and its
recent failures grouped by error. The Inspector builds it (``Inspector.type_report``) for the
dashboard's task-type page and ``adminctl type show``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from queuecore.core.failures import FailureReport
from queuecore.core.flow import LimitInfo
from queuecore.core.typestats import TypeStats

WINDOWS = {"1h": 3600.0, "24h": 86_400.0, "72h": 259_200.0}  # the windows the pages offer


@dataclass(frozen=True)
class TypeReport:
    """One task type in one queue (see the module)."""

    stats: TypeStats
    limit: LimitInfo | None  # None: no live worker publishes a limit for the type
    failures: FailureReport  # its failed tasks (retry and archived) grouped by error

    @property
    def per_minute(self) -> float:
        """Attempts that ended per minute over the time counted (the window, or past 72 h the whole
        days that cover it: ``TypeStats.counted_from``), on average."""
        s = self.stats
        span = s.counted_until - s.counted_from if s.counted_until > s.counted_from else s.window.total_seconds()
        return s.processed / max(1.0, span / 60)

    @property
    def failure_rate(self) -> float | None:
        """Failed attempts over ended attempts in the window; None when none ended."""
        return self.stats.failed / self.stats.processed if self.stats.processed else None

    def to_dict(self, tasks: int = 5) -> dict[str, Any]:
        s = self.stats
        return {"queue": s.queue, "type": s.type, "window_seconds": s.window.total_seconds(),
                "resolution": s.resolution, "processed": s.processed, "failed": s.failed, "retried": s.retried,
                "archived": s.archived, "recovered": s.recovered, "per_minute": self.per_minute,
                "failure_rate": self.failure_rate, "mean_ms": s.mean_ms, "p50_ms_estimate": s.p50_ms_estimate,
                "p95_ms_estimate": s.p95_ms_estimate, "p99_ms_estimate": s.p99_ms_estimate,
                "limit": self.limit.to_dict() if self.limit else None,
                "failures": {"groups": [g.to_dict(tasks=tasks) for g in self.failures.groups],
                             "scanned": self.failures.scanned, "scanned_all": self.failures.scanned_all}}


def window_seconds(name: str) -> float:
    """Seconds of a window named ``1h``, ``24h`` or ``72h``; ``ValueError`` for another name."""
    try:
        return WINDOWS[name]
    except KeyError:
        raise ValueError(f"window must be one of {', '.join(WINDOWS)}, not {name!r}") from None


__all__ = ["WINDOWS", "TypeReport", "window_seconds"]
