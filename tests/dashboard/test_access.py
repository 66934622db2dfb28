"""Who sees the dashboard and who may act: staff, the view and operate permissions, ACCESS_CALLBACK."""

from __future__ import annotations

from typing import Any

import pytest
from django.http import HttpRequest
from django.test import Client as DjangoClient

from queuecore import Client, Inspector
from tests.dashboard.conftest import HX

PAGES = ["/queues/", "/queues/_/stats/", "/queues/_/queues/", "/queues/_/chart/", "/queues/default/pending/",
         "/queues/default/header/", "/queues/servers/", "/queues/redis/", "/queues/audit/"]
PAGES += ["/queues/_/limits/"]  # the overview's limits panel (flow control)


def login(make_user: Any, *perms: str, **flags: Any) -> DjangoClient:
    c = DjangoClient()
    c.force_login(make_user("u-" + "-".join(perms or ("none",)) + "".join(f"-{k}" for k in flags), *perms, **flags))
    return c


@pytest.fixture(autouse=True)
def a_queue(client: Client) -> str:
    return client.enqueue("x", queue="default", process_in=60).id


def test_anonymous_users_are_sent_to_the_login_page(anon: DjangoClient, a_queue: str) -> None:
    for url in [*PAGES, f"/queues/default/tasks/{a_queue}/"]:
        r = anon.get(url)
        assert r.status_code == 302 and r.url.startswith("/accounts/login/?next=/queues/"), url
    r = anon.post("/queues/default/pause/")
    assert r.status_code == 302 and r.url.startswith("/accounts/login/")


def test_an_expired_session_during_htmx_polling_redirects_the_whole_page(anon: DjangoClient) -> None:
    r = anon.get("/queues/_/stats/", headers={**HX, "HX-Current-URL": "http://testserver/queues/default/retry/"})
    assert r.status_code == 200
    assert r.headers["HX-Redirect"] == "/accounts/login/?next=/queues/default/retry/"


@pytest.mark.parametrize(("perms", "flags", "status"), [
    ((), {}, 403),                                   # staff without the permission
    (("view", "operate"), {"staff": False}, 403),    # the permissions, but not staff
    (("view", "operate"), {"active": False}, 302),   # inactive: the session is not accepted
])
def test_users_without_access_are_refused(make_user: Any, perms: tuple[str, ...], flags: dict[str, Any],
                                          status: int, inspector: Inspector) -> None:
    c = login(make_user, *perms, **flags)
    for url in PAGES:
        r = c.get(url)
        assert r.status_code == status, url
        if status == 403:
            assert "may not see the queue dashboard" in r.content.decode()
    assert c.post("/queues/default/pause/").status_code == status
    assert not inspector.queue_info("default").paused


def test_the_read_only_role_sees_everything_and_acts_on_nothing(viewer: DjangoClient, a_queue: str,
                                                                inspector: Inspector) -> None:
    for url in [*PAGES, f"/queues/default/tasks/{a_queue}/"]:
        assert viewer.get(url).status_code == 200, url
    actions = [("/queues/default/pause/", {}), (f"/queues/default/tasks/{a_queue}/archive/", {}),
               (f"/queues/default/tasks/{a_queue}/delete/", {}),
               ("/queues/default/scheduled/actions/", {"action": "delete", "all": "1"}),
               ("/queues/default/remove/", {})]
    for url, data in actions:
        r = viewer.post(url, data)
        assert r.status_code == 403, url
        assert "not act on queues and tasks" in r.content.decode()
    assert inspector.count("default", "scheduled") == 1 and not inspector.queue_info("default").paused
    assert inspector.audit_log() == []
    body = viewer.get("/queues/").content.decode()
    assert "read-only" in body and "/pause/" not in body


def test_operate_permission_acts_and_implies_view(make_user: Any, a_queue: str, inspector: Inspector) -> None:
    c = login(make_user, "operate")
    assert c.get("/queues/").status_code == 200
    assert c.post(f"/queues/default/tasks/{a_queue}/archive/").status_code == 302
    assert inspector.get_task("default", a_queue).state == "archived"
    assert "operator" in c.get("/queues/").content.decode()


def test_superusers_have_both(make_user: Any, inspector: Inspector) -> None:
    c = login(make_user, superuser=True)
    assert c.get("/queues/").status_code == 200
    assert c.post("/queues/default/pause/").status_code == 302 and inspector.queue_info("default").paused


def only_alice_acts(request: HttpRequest, level: str) -> bool:
    """A custom ACCESS_CALLBACK: everyone logged in sees, only alice acts."""
    return level == "view" or request.user.get_username() == "alice"


def test_access_callback_setting_replaces_the_default(settings: Any, make_user: Any, inspector: Inspector) -> None:
    settings.QUEUECORE = {**settings.QUEUECORE,
                          "DASHBOARD": {"ACCESS_CALLBACK": "tests.dashboard.test_access.only_alice_acts"}}
    bob = DjangoClient()
    bob.force_login(make_user("bob", staff=False))
    alice = DjangoClient()
    alice.force_login(make_user("alice", staff=False))
    assert bob.get("/queues/").status_code == 200  # not staff, but the callback says yes
    assert bob.post("/queues/default/pause/").status_code == 403
    assert alice.post("/queues/default/pause/").status_code == 302
    assert inspector.queue_info("default").paused
    assert inspector.audit_log()[0].actor == "dashboard:alice"


def test_permissions_exist_after_migrate(db: None) -> None:
    from django.contrib.auth.models import Permission

    names = set(Permission.objects.filter(content_type__app_label="queuecore_dashboard")
                .values_list("codename", flat=True))
    assert names == {"view_dashboard", "operate_queues"}
