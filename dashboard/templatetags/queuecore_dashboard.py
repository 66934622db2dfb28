"""Formatting filters and the polling tag of the dashboard's templates.

Every filter returns plain text; autoescaping does the rest (nothing here is marked safe except
``qc_poll``, which builds its attributes with ``format_html``).
"""

from __future__ import annotations

import functools
import json
from datetime import datetime
from typing import Any

from django import template
from django.templatetags.static import static
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from queuecore.core.clock import format_duration
from queuecore.core.text import percent_text

from ..forms import PAYLOAD_TEXT_MAX
from ..inspector import redis_now

register = template.Library()


@functools.cache
def _htmx_path() -> str:
    """django-htmx's htmx 2 (named ``htmx-2.min.js`` since 1.27, ``htmx.min.js`` before)."""
    from django.contrib.staticfiles import finders

    return next((p for p in ("django_htmx/htmx-2.min.js", "django_htmx/htmx.min.js") if finders.find(p)),
                "django_htmx/htmx.min.js")


@register.simple_tag(takes_context=True)
def qc_htmx_script(context: template.Context) -> SafeString:
    """htmx, from django-htmx's static files, without django-htmx's debug script: with ``DEBUG`` on,
    ``{% htmx_script %}`` adds one that replaces the whole page with an error response and runs its
    inline scripts as strings, which the dashboard's Content-Security-Policy forbids and its own
    banners do better."""
    nonce = context.get("csp_nonce")
    if nonce is not None:
        return format_html('<script src="{}" defer nonce="{}"></script>', static(_htmx_path()), nonce)
    return format_html('<script src="{}" defer></script>', static(_htmx_path()))


@register.simple_tag
def qc_logout_url() -> str:
    """The host's logout URL (``access.logout_url``), or ``""`` when it has none."""
    from ..access import logout_url

    return logout_url() or ""

PREVIEW_CHARS = 120


@register.simple_tag(takes_context=True)
def qc_poll(context: template.Context, url: str, *, every: Any = None, events: str = "", sync: str = "",
            extra: str = "") -> SafeString:
    """``hx-get``/``hx-trigger``/``hx-swap`` of a polling partial.

    No JavaScript expression in the trigger (that needs string evaluation, which a strict Content-Security-Policy
    forbids): ``dashboard.js`` fires ``qc:poll`` on every ``[data-qc-poll]`` element each ``POLL_INTERVAL``
    seconds while the tab is visible, live refresh is on and the element holds no selection or chosen
    pause duration or typed filter. ``events`` adds more triggers; ``sync`` an ``hx-sync`` (``"#area:drop"``:
    no refresh while another request on that area runs). ``extra`` is accepted for old templates and ignored.
    """
    seconds = every if every is not None else context.get("poll", 3)
    trigger = "qc:poll, qc:refresh from:body"
    if events:
        trigger += f", {events}"
    attrs = format_html('hx-get="{}" hx-trigger="{}" hx-swap="outerHTML" data-qc-poll="{}"', url, trigger, seconds)
    return format_html('{} hx-sync="{}"', attrs, sync) if sync else attrs


@register.filter
def qc_number(value: Any) -> str:
    """``12345`` -> ``12,345``."""
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return "—" if value is None else str(value)


@register.filter
def qc_bytes(value: Any) -> str:
    """Bytes in B, KB, MB, GB (1024-based), or a dash when unknown."""
    if value is None:
        return "—"
    size = float(value)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1024 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return ""  # pragma: no cover


@register.filter
def qc_duration(seconds: Any) -> str:
    """Seconds as ``850ms``, ``4.2s``, ``3m 12s``, ``2h 05m``, ``3d 4h``."""
    if seconds is None or seconds == "":
        return "—"
    s = float(seconds)
    if s < 1:
        return f"{s * 1000:.0f}ms"
    return format_duration(s)


def _seconds_from_now(value: datetime) -> float:
    return (value - redis_now()).total_seconds()


@register.filter
def qc_relative(value: datetime | None) -> str:
    """``12s ago`` or ``in 4m 10s`` (relative to now)."""
    if not value:
        return "—"
    delta = _seconds_from_now(value)
    if abs(delta) < 1:
        return "now"
    return f"in {qc_duration(delta)}" if delta > 0 else f"{qc_duration(-delta)} ago"


@register.filter
def qc_since(value: datetime | None) -> str:
    """How long ago ``value`` was, as a duration (``3m 12s``)."""
    if not value:
        return "—"
    return qc_duration(max(0.0, -_seconds_from_now(value)))


@register.filter
def qc_time(value: datetime | None) -> str:
    """A full local timestamp."""
    if not value:
        return "—"
    return timezone.localtime(value).strftime("%Y-%m-%d %H:%M:%S %Z")


@register.filter
def qc_percent(value: Any) -> str:
    try:
        ratio = float(value)
    except (TypeError, ValueError):
        return "—"
    return percent_text(ratio)


@register.filter
def qc_preview(value: Any, limit: int = PREVIEW_CHARS) -> str:
    """Compact JSON of a payload or result, cut to ``limit`` characters."""
    if value is None:
        return ""
    text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@register.filter
def qc_pretty(value: Any) -> str:
    """Indented JSON for a ``<pre>`` block."""
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=False, default=str)


@register.filter
def qc_editable_payload(value: Any) -> str:
    """A payload as a form's text: indented, or compact when indented it would not fit the form
    (``PAYLOAD_TEXT_MAX``: 400 KB of ``[0, 0, ...]`` is 1.4 MB indented, and could not be saved back)."""
    text = qc_pretty(value)
    if len(text) <= PAYLOAD_TEXT_MAX:
        return text
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


@register.filter
def qc_first_line(value: str | None, limit: int = 140) -> str:
    """The first non-empty line of an error, cut to ``limit`` characters."""
    if not value:
        return ""
    line = next((part.strip() for part in str(value).splitlines() if part.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


@register.filter
def qc_short_id(value: str, keep: int = 12) -> str:
    text = str(value)
    return text if len(text) <= keep + 1 else text[:keep] + "…"


@register.filter
def qc_state_count(info: Any, state: str) -> int:
    """How many tasks of a ``QueueInfo`` are in ``state``."""
    return int(getattr(info, str(state), 0) or 0)
