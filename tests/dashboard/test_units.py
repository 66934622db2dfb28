"""The dashboard's pure parts: chart geometry, template filters, the shared inspector, the forms."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.http import QueryDict
from django.test import RequestFactory
from django.utils import timezone

from queuecore.conf import get_config
from queuecore.core.message import DailyStats
from queuecore_dashboard import charts
from queuecore_dashboard.forms import TaskActionForm, TaskFilterForm
from queuecore_dashboard.inspector import inspector_for, shared_inspector
from queuecore_dashboard.templatetags import queuecore_dashboard as tags


def test_sum_series_adds_queues_bucket_by_bucket() -> None:
    a = [DailyStats("a", "2026-01-01T10:00", 3, 1), DailyStats("a", "2026-01-01T10:01", 0, 0)]
    b = [DailyStats("b", "2026-01-01T10:00", 2, 0), DailyStats("b", "2026-01-01T10:01", 5, 5)]
    assert charts.sum_series([a, b]) == [("2026-01-01T10:00", 5, 1), ("2026-01-01T10:01", 5, 5)]
    assert charts.sum_series([]) == []


def test_chart_geometry_scales_bars_to_a_nice_maximum() -> None:
    buckets = [(f"2026-01-{d:02d}", p, f) for d, p, f in ((1, 0, 0), (2, 150, 30), (3, 75, 0))]
    chart = charts.build_chart(buckets, "month")
    assert (chart.processed, chart.failed, chart.error_rate) == (225, 30, 30 / 225)
    assert [label for _, label in chart.y_ticks] == ["0", "50", "100", "150", "200"]  # 150 rounds up to 200
    plot_h = charts.HEIGHT - charts.TOP - charts.BOTTOM
    empty, full, half = chart.bars
    assert empty.processed_h == 0 and empty.failed_h == 0
    assert full.processed_h == pytest.approx(plot_h * 150 / 200, abs=0.01)
    assert full.failed_h == pytest.approx(plot_h * 30 / 200, abs=0.01)
    assert full.processed_y + full.processed_h == pytest.approx(chart.baseline, abs=0.02)
    assert half.processed_h == pytest.approx(full.processed_h / 2, abs=0.02)
    assert empty.x < full.x < half.x and full.label == "Jan 02"
    assert chart.x_ticks[0][1] == "Jan 01" and chart.x_ticks[-1][1] == "Jan 03"


@pytest.mark.parametrize(("value", "top"), [(0, 4), (3, 4), (7, 10), (11, 20), (180, 200), (201, 500), (1000, 1000)])
def test_nice_axis_maximum(value: int, top: int) -> None:
    assert charts._nice_max(value) == top


@pytest.mark.parametrize(("value", "text"), [
    (None, "—"), (0.25, "250ms"), (4.25, "4.2s"), (192, "3m 12s"), (7500, "2h 05m"), (3 * 86400 + 4 * 3600, "3d 4h")])
def test_duration_filter(value: Any, text: str) -> None:
    assert tags.qc_duration(value) == text


def test_number_bytes_percent_filters() -> None:
    assert tags.qc_number(1234567) == "1,234,567" and tags.qc_number(None) == "—"
    assert [tags.qc_bytes(v) for v in (None, 512, 2048, 5 * 1024**3)] == ["—", "512 B", "2.0 KB", "5.0 GB"]
    assert [tags.qc_percent(v) for v in (0, 0.0123, 1)] == ["0%", "1.2%", "100%"]


def test_percentages_are_rounded_to_0_or_100_only_when_they_are() -> None:
    """199 failed of 200 showed "100%" (read: every attempt failed), 1 of 10,000 "0.0%"; adminctl said
    "99.5%" and "<0.1%", and 9,999 of 10,000 "100.0%". Both now use one rule."""
    from queuecore_adminctl.fmt import percent

    cases = {199 / 200: "99.5%", 1 / 10_000: "<0.1%", 9_999 / 10_000: ">99.9%", 0.995: "99.5%", 0.0: "0%", 1.0: "100%"}
    assert {ratio: tags.qc_percent(ratio) for ratio in cases} == cases
    assert {ratio: percent(ratio) for ratio in cases} == cases


def test_relative_time_filters() -> None:
    now = timezone.now()
    assert tags.qc_relative(now - timedelta(seconds=75)) == "1m 15s ago"
    assert tags.qc_relative(now + timedelta(seconds=3601)).startswith("in 1h 00m")
    assert tags.qc_since(now - timedelta(seconds=5)).startswith("5.")
    assert tags.qc_relative(None) == "—"


def test_preview_and_error_filters_return_plain_text() -> None:
    preview = tags.qc_preview({"html": "<b>" + "x" * 300 + "</b>"})
    assert len(preview) == tags.PREVIEW_CHARS and preview.endswith("…") and preview.startswith('{"html": "<b>')
    assert not hasattr(preview, "__html__")  # not marked safe: autoescaping applies
    assert tags.qc_first_line("\n  KeyError: 'x'\nTraceback ...") == "KeyError: 'x'"
    assert tags.qc_pretty({"a": [1]}) == '{\n  "a": [\n    1\n  ]\n}'
    assert tags.qc_short_id("0123456789abcdef") == "0123456789ab…" and tags.qc_short_id("short") == "short"


def test_poll_tag_builds_the_polling_attributes() -> None:
    attrs = tags.qc_poll({"poll": 5}, "/queues/_/stats/?a=1&b=2", events="x from:body")
    assert 'hx-get="/queues/_/stats/?a=1&amp;b=2"' in attrs and 'data-qc-poll="5"' in attrs
    assert 'hx-trigger="qc:poll, qc:refresh from:body, x from:body"' in attrs and 'hx-swap="outerHTML"' in attrs
    assert "hx-sync" not in attrs and "[" not in attrs  # no JavaScript condition: nothing to eval
    synced = tags.qc_poll({"poll": 5}, "/x/", sync="#area:drop")
    assert 'hx-sync="#area:drop"' in synced


def test_filter_form_defaults_for_bad_input() -> None:
    assert TaskFilterForm(QueryDict("type=a.b&search=%20x%20&page=3")).values() == ("a.b", "x", 3)
    assert TaskFilterForm(QueryDict("page=0")).values() == (None, None, 1)
    assert TaskFilterForm(QueryDict("")).values() == (None, None, 1)


def test_action_form_checks_ids_and_state() -> None:
    form = TaskActionForm(QueryDict("action=run&task_id=a&task_id=b"), state="retry")
    assert form.is_valid() and form.cleaned_data["task_ids"] == ["a", "b"]
    many = QueryDict(mutable=True)
    many.setlist("task_id", [f"t{n}" for n in range(1001)])
    many["action"] = "delete"
    assert not TaskActionForm(many, state="pending").is_valid()
    assert TaskActionForm(QueryDict("action=cancel&all=1"), state="active").is_valid()
    assert not TaskActionForm(QueryDict("action=cancel&all=1"), state="pending").is_valid()


def test_one_inspector_is_shared_and_replaced_when_settings_change(settings: Any, redis_url: str,
                                                                   key_prefix: str, django_user_model: Any,
                                                                   db: None) -> None:
    request = RequestFactory().get("/")
    request.user = django_user_model(username="olga")
    first = inspector_for(request)
    second = inspector_for(request)
    assert first.actor == "dashboard:olga"
    assert first.redis is second.redis  # one client (and connection pool) for every request
    assert shared_inspector(get_config().connection).actor == "dashboard"  # the shared one is untouched
    settings.QUEUECORE = {"REDIS_URL": redis_url, "KEY_PREFIX": key_prefix + "-other"}
    third = inspector_for(request)
    assert third.redis is not first.redis and third.keys.prefix == key_prefix + "-other"


def test_the_all_queues_chart_lines_up_every_queues_minutes(viewer: Any, client: Any, redis_client: Any,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A review: each queue's minutes were read with a clock reading of its own, so at a minute's edge one
    queue's series was a minute off the other's and the sum added unlike minutes. Here the clock moves a
    minute at every reading, the worst case."""
    from queuecore.core.keys import stats_minute

    class Ticking:
        def __init__(self, start: float) -> None:
            self.at = start

        def now(self) -> float:
            self.at += 60
            return self.at

    shared = shared_inspector(get_config().connection)
    start = shared.clock.now()
    monkeypatch.setattr(shared, "clock", Ticking(start))
    for name in ("a", "b"):
        client.enqueue("t", queue=name)
        # the oldest minute the chart shows, whichever of the first readings it ends at
        for minute in {stats_minute(start + 60 * n - 59 * 60) for n in range(1, 4)}:
            redis_client.hset(get_config().connection.keys.queue(name).stats, f"processed:{minute}", 1)
    chart = viewer.get("/queues/_/chart/?range=hour").context["chart"]
    counts = [bar.processed for bar in chart.bars]
    assert 2 in counts and set(counts) <= {0, 2}  # each minute holds both queues' counts, never one of them
