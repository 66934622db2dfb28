"""Processed/failed charts, drawn on the server as inline SVG geometry (no chart library).

``build_chart`` turns ``DailyStats`` series (one per queue, same buckets) into numbers the
``_chart.html`` template places in an ``<svg>``; nothing user-supplied ends up unescaped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.utils import timezone

from queuecore.core.message import DailyStats

RANGES = {"hour": "Last hour", "month": "Last 30 days"}
WIDTH, HEIGHT = 960, 220
LEFT, RIGHT, TOP, BOTTOM = 48, 12, 12, 28


@dataclass(frozen=True)
class Bar:
    x: float
    width: float
    processed_y: float
    processed_h: float
    failed_y: float
    failed_h: float
    hit_x: float
    hit_width: float
    label: str  # bucket label for the tooltip
    processed: int
    failed: int


@dataclass(frozen=True)
class Chart:
    range: str
    title: str
    bars: list[Bar]
    y_ticks: list[tuple[float, str]]
    x_ticks: list[tuple[float, str]]
    processed: int
    failed: int
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    right_edge: int = WIDTH - RIGHT
    baseline: float = HEIGHT - BOTTOM
    ranges: dict[str, str] = field(default_factory=lambda: dict(RANGES))

    @property
    def error_rate(self) -> float:
        return self.failed / self.processed if self.processed else 0.0


def sum_series(series: Sequence[Sequence[DailyStats]]) -> list[tuple[str, int, int]]:
    """Bucket-wise totals of several queues' series: ``[(stamp, processed, failed), ...]``."""
    if not series:
        return []
    out = []
    for bucket in zip(*series, strict=True):
        out.append((bucket[0].date, sum(s.processed for s in bucket), sum(s.failed for s in bucket)))
    return out


def _nice_max(value: int) -> int:
    """The axis maximum: 1, 2 or 5 times a power of ten, at least ``value`` (and at least 4)."""
    if value <= 4:
        return 4
    exp = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if step * exp >= value:
            return step * exp
    return 10 * exp  # pragma: no cover


def _bucket_time(stamp: str) -> datetime:
    fmt = "%Y-%m-%dT%H:%M" if "T" in stamp else "%Y-%m-%d"
    return datetime.strptime(stamp, fmt).replace(tzinfo=UTC)


def _label(stamp: str, range_name: str) -> str:
    if range_name == "hour":
        return timezone.localtime(_bucket_time(stamp)).strftime("%H:%M")
    return _bucket_time(stamp).strftime("%b %d")


def build_chart(buckets: list[tuple[str, int, int]], range_name: str) -> Chart:
    """Geometry for a bar chart of processed (with failed overlaid) per bucket."""
    n = max(1, len(buckets))
    plot_w = WIDTH - LEFT - RIGHT
    plot_h = HEIGHT - TOP - BOTTOM
    top = _nice_max(max((p for _, p, _ in buckets), default=0))
    slot = plot_w / n
    bar_w = max(1.0, slot * 0.72)
    bars = []
    for i, (stamp, processed, failed) in enumerate(buckets):
        x = LEFT + i * slot + (slot - bar_w) / 2
        ph = plot_h * processed / top
        fh = plot_h * min(failed, processed or failed) / top
        bars.append(Bar(x=round(x, 2), width=round(bar_w, 2), processed_y=round(TOP + plot_h - ph, 2),
                        processed_h=round(ph, 2), failed_y=round(TOP + plot_h - fh, 2), failed_h=round(fh, 2),
                        hit_x=round(LEFT + i * slot, 2), hit_width=round(slot, 2),
                        label=_label(stamp, range_name), processed=processed, failed=failed))
    y_ticks = [(round(TOP + plot_h - plot_h * f, 2), f"{int(top * f):,}") for f in (0, 0.25, 0.5, 0.75, 1)]
    every = 10 if range_name == "hour" else 5
    x_ticks = [(round(LEFT + i * slot + slot / 2, 2), bars[i].label) for i in range(0, len(bars), every)]
    if bars and (len(bars) - 1) % every:
        x_ticks.append((round(LEFT + (len(bars) - 1) * slot + slot / 2, 2), bars[-1].label))
    return Chart(range=range_name, title=RANGES.get(range_name, range_name), bars=bars, y_ticks=y_ticks,
                 x_ticks=x_ticks, processed=sum(p for _, p, _ in buckets), failed=sum(f for _, _, f in buckets))
