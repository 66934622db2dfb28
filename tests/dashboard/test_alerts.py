"""Active alerts on the dashboard overview: severity, id, since when and message, escaped; the
partial polls; no inline script or style (the strict CSP)."""

from __future__ import annotations

import re

from django.test import Client as DjangoClient
from django.urls import reverse

from queuecore.core.alerts import Alert, PendingAlert
from tests.adminctl.test_alerts import fire, pend
from tests.dashboard.conftest import HX

OVERVIEW = reverse("queuecore_dashboard:overview")
PARTIAL = reverse("queuecore_dashboard:overview_alerts")

NASTY = Alert(id="big/<q>", rule="big", kind="backlog", subject="<q>", severity="critical",
              message='queue <q>: 12 pending tasks <script>alert("x")</script>', value=12.0, threshold=10.0,
              since=1_800_000_000.0)


def test_the_overview_shows_no_alert_then_the_active_ones(viewer: DjangoClient, scripts) -> None:
    html = viewer.get(OVERVIEW).content.decode()
    assert 'id="qc-alerts"' in html and "No active alert." in html
    fire(scripts, NASTY)
    html = viewer.get(OVERVIEW).content.decode()
    assert "No active alert." not in html
    assert 'data-qc-alert="big/&lt;q&gt;"' in html and "<code class=\"qc-mono\">big/&lt;q&gt;</code>" in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html and '<script>alert("x")' not in html
    assert '<time datetime="2027-01-15T08:00:00+00:00"' in html and "qc-badge-bad" in html
    section = html[html.index('id="qc-alerts"'):]
    section = section[:section.index("</section>")]
    assert not re.search(r"<script|<style|\son[a-z]+=|style=", section)  # CSP: nothing inline


def test_the_alerts_partial_polls_and_renders_alone(viewer: DjangoClient, scripts) -> None:
    fire(scripts, NASTY)
    fragment = viewer.get(PARTIAL, headers=HX).content.decode()
    assert fragment.lstrip().startswith('<section id="qc-alerts"') and "<html" not in fragment
    assert f'hx-get="{PARTIAL}"' in fragment and "hx-trigger" in fragment
    assert "big/&lt;q&gt;" in fragment


def test_anonymous_users_see_no_alerts(anon: DjangoClient, scripts) -> None:
    fire(scripts, NASTY)
    response = anon.get(PARTIAL, headers=HX)
    assert "big/" not in response.content.decode()  # htmx is told to go to the login page
    assert response.headers.get("HX-Redirect", "").startswith("/accounts/login/")


def test_pending_alerts_show_below_the_active_ones_escaped(viewer: DjangoClient, scripts) -> None:
    pending = PendingAlert(Alert(id="slow/<q>", rule="slow", kind="latency", subject="<q>", severity="warning",
                                 message="queue <q>: waited <b>95s</b>", value=95.0, threshold=60.0,
                                 since=1_800_000_120.0), hold_for=300.0)
    html = viewer.get(PARTIAL, headers=HX).content.decode()
    assert "Pending" not in html
    pend(scripts, pending)
    html = viewer.get(PARTIAL, headers=HX).content.decode()
    assert "No active alert." in html and 'data-qc-pending-alert="slow/&lt;q&gt;"' in html
    assert "queue &lt;q&gt;: waited &lt;b&gt;95s&lt;/b&gt;" in html and "<b>95s" not in html
    assert '<time datetime="2027-01-15T08:02:00+00:00"' in html  # holding since
    assert '<time datetime="2027-01-15T08:07:00+00:00"' in html  # fires, if it still holds
    assert not re.search(r"<script|<style|\son[a-z]+=|style=", html)
    fire(scripts, NASTY)
    html = viewer.get(OVERVIEW).content.decode()
    assert html.index('data-qc-alert="big/&lt;q&gt;"') < html.index('data-qc-pending-alert="slow/&lt;q&gt;"')
