"""The Servers page: each process's memory, and Quiet / Stop for operators (POST + CSRF + operate),
through Redis and audited."""

from __future__ import annotations

import re
import threading

from django.test import Client as DjangoClient
from django.urls import reverse

from queuecore import Worker
from tests.conftest import FAST, wait_until
from tests.dashboard.conftest import HX
from tests.helpers.heartbeats import seed_heartbeat

URL = reverse("queuecore_dashboard:servers")


def test_memory_and_quiet_then_stop(operator: DjangoClient, viewer: DjangoClient, connection, registry,
                                    inspector) -> None:
    worker = Worker(connection=connection, registry=registry, **FAST)  # type: ignore[arg-type]
    runner = threading.Thread(target=worker.run, daemon=True)
    runner.start()
    try:
        wait_until(lambda: inspector.servers(), 10, message="the heartbeat")
        seen = viewer.get(URL).content.decode()
        assert re.search(r"data-qc-server-memory>[\d.,]+ ?[KMG]i?B<", seen), seen[seen.find("Memory"):][:200]
        assert "data-qc-server-action" not in seen  # a viewer sees no actions
        page = operator.get(URL).content.decode()
        assert 'data-qc-server-action="quiet"' in page and 'data-qc-server-action="stop"' in page
        quiet = reverse("queuecore_dashboard:server_action", args=[worker.server_id, "quiet"])
        assert viewer.post(quiet).status_code == 403
        done = operator.post(quiet, headers=HX)
        assert done.status_code == 200 and f"Asked {worker.server_id} to go quiet" in done.content.decode()
        wait_until(lambda: inspector.servers()[0].status == "quiet", 10, message="quiet")
        assert 'data-qc-server-action="quiet"' not in operator.get(URL).content.decode()  # quiet already
        stop = reverse("queuecore_dashboard:server_action", args=[worker.server_id, "stop"])
        assert operator.post(stop).status_code == 302
        runner.join(15)
        assert not runner.is_alive()
        assert [e.action for e in inspector.audit_log()[:2]] == ["server.stop", "server.quiet"]
        assert operator.post(stop).status_code == 404  # gone
        assert operator.post(reverse("queuecore_dashboard:server_action", args=["x:1:y", "reboot"])).status_code == 404
    finally:
        worker.request_shutdown()
        runner.join(15)


def test_quiet_and_stop_reach_a_server_whose_host_name_holds_a_slash(operator: DjangoClient, redis_client,
                                                                      connection, inspector) -> None:
    """A review: a server id holding "/" (its host name's) did not fit the action URL, so its Quiet and
    Stop forms posted to "" (the Servers page) and nothing happened, with nothing said."""
    server_id = seed_heartbeat(redis_client, connection.keys, server_id="rack/7:42:beef0001")
    page = operator.get(URL).content.decode()
    quiet = reverse("queuecore_dashboard:server_action", args=[server_id, "quiet"])
    assert f'action="{quiet}"' in page and 'action=""' not in page
    done = operator.post(quiet, headers=HX)
    assert done.status_code == 200 and f"Asked {server_id} to go quiet" in done.content.decode()
    assert inspector.audit_log()[0].action == "server.quiet"
