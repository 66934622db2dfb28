"""A running task's progress on the task page and the Servers page, and in adminctl."""

from __future__ import annotations

import html as htmllib

from django.test import Client as DjangoClient
from django.urls import reverse
from django.utils import translation

from tests.adminctl.conftest import adminctl, runner  # noqa: F401 - fixtures
from tests.core.test_progress import start_reporting_task


def test_progress_is_shown_everywhere_a_running_task_is(viewer: DjangoClient, adminctl, make_worker,  # noqa: F811
                                                        registry, client, inspector) -> None:
    task_id, release = start_reporting_task(make_worker, registry, client, inspector)
    try:
        page = htmllib.unescape(viewer.get(reverse("queuecore_dashboard:task", args=["default", task_id])).content
                                .decode())
        assert '<progress max="1" value="0.3">30%</progress> 30%' in page and "(3 of 10)" in page
        assert "rows of customers.csv" in page
        servers = viewer.get(reverse("queuecore_dashboard:servers")).content.decode()
        assert 'data-qc-worker-progress><progress max="1" value="0.3">' in servers
        inspect = adminctl("task", "inspect", "default", task_id)
        assert "30% (3 of 10) rows of customers.csv" in inspect.stdout
        assert "30%" in adminctl("worker", "ls").stdout
        assert adminctl("worker", "ls", "--json").json()[0]["progress"]["fraction"] == 0.3
        # A review: a site in a language with a decimal comma rendered value="0,3", which is no number
        # to a browser: the bar was drawn empty beside "30%".
        with translation.override("de"):
            page = viewer.get(reverse("queuecore_dashboard:task", args=["default", task_id])).content.decode()
            servers = viewer.get(reverse("queuecore_dashboard:servers")).content.decode()
        assert '<progress max="1" value="0.3">' in page and 'value="0,3"' not in page
        assert '<progress max="1" value="0.3">' in servers
    finally:
        release.set()
