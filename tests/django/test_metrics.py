"""Prometheus metrics: the /metrics view (bearer token or permission) and runworker --metrics-port,
parsed with prometheus_client's own parser; exact values after a known workload; the cost of a
scrape with 1,000 queues (printed, no timing assertion)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client as DjangoClient
from prometheus_client.parser import text_string_to_metric_families

from queuecore import Client, TaskState, task
from queuecore.core.clock import FakeClock
from queuecore.core.inspector import Inspector
from queuecore.metrics import make_registry, render
from tests.conftest import free_port, wait_until
from tests.core.worker_support import wait_state

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "s3cret-token-for-tests"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition, keyed by (name, sorted labels)."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(got: dict, name: str, **labels: str) -> float:
    return got[(name, tuple(sorted(labels.items())))]


@pytest.fixture
def workload(make_worker, client: Client, connection, registry):
    """5 successes of m.ok, 2 tasks of m.bad failing twice each (then archived), in queue "work";
    3 tasks left pending in the paused queue "held"."""

    @task(name="m.ok", registry=registry)
    def ok(n: int) -> int:
        return n

    @task(name="m.bad", registry=registry, max_retry=1, retry_delay=lambda n, e: 0.01)
    def bad(n: int) -> None:
        raise ValueError(n)

    inspector = Inspector(connection=connection)
    held = [client.enqueue(ok, {"n": i}, queue="held") for i in range(3)]
    inspector.pause_queue("held")
    oks = [client.enqueue(ok, {"n": i}, queue="work", retention=600) for i in range(5)]
    bads = [client.enqueue(bad, {"n": i}, queue="work") for i in range(2)]
    worker = make_worker(queues={"work": 1, "held": 1}, concurrency=3)
    for info in oks:
        wait_state(inspector, "work", info.id, TaskState.COMPLETED)
    for info in bads:
        wait_state(inspector, "work", info.id, TaskState.ARCHIVED)
    yield inspector, worker, held
    inspector.close()


def check_workload(got: dict, ns: str = "queuecore") -> None:
    assert value(got, f"{ns}_up") == 1
    for state, n in {"pending": 0, "active": 0, "scheduled": 0, "retry": 0, "archived": 2, "completed": 5}.items():
        assert value(got, f"{ns}_queue_size", queue="work", state=state) == n
    assert value(got, f"{ns}_queue_size", queue="held", state="pending") == 3
    assert value(got, f"{ns}_queue_paused_total", queue="held") == 1
    assert value(got, f"{ns}_queue_paused_total", queue="work") == 0
    assert value(got, f"{ns}_queue_latency_seconds", queue="work") == 0
    assert value(got, f"{ns}_queue_latency_seconds", queue="held") > 0
    assert value(got, f"{ns}_queue_memory_usage_approx_bytes", queue="work") > 0
    assert value(got, f"{ns}_queue_processed_total", queue="work") == 9
    assert value(got, f"{ns}_queue_failed_total", queue="work") == 4
    expected = {"m.ok": (5, 0, 0, 0, 0), "m.bad": (4, 4, 2, 2, 0)}
    for type_name, (processed, failed, retried, archived, recovered) in expected.items():
        labels = {"queue": "work", "type": type_name}
        assert value(got, f"{ns}_tasks_processed_total", **labels) == processed
        assert value(got, f"{ns}_tasks_failed_total", **labels) == failed
        assert value(got, f"{ns}_tasks_retried_total", **labels) == retried
        assert value(got, f"{ns}_tasks_archived_total", **labels) == archived
        assert value(got, f"{ns}_leases_recovered_total", **labels) == recovered
        assert value(got, f"{ns}_task_duration_seconds_count", **labels) == processed
        assert value(got, f"{ns}_task_duration_seconds_bucket", le="+Inf", **labels) == processed
        assert value(got, f"{ns}_task_duration_seconds_bucket", le="3600.0", **labels) == processed
    assert value(got, f"{ns}_workers_up") == 1
    assert value(got, f"{ns}_workers_concurrency") == 3
    assert value(got, f"{ns}_workers_busy") == 0
    assert value(got, f"{ns}_queues_unreadable") == 0


@pytest.mark.django_db
def test_view_reports_a_known_workload_exactly(workload, settings, redis_url, key_prefix):
    settings.QUEUECORE = {"REDIS_URL": redis_url, "KEY_PREFIX": key_prefix, "METRICS": {"TOKEN": TOKEN}}
    response = DjangoClient().get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    assert "no-cache" in response["Cache-Control"]
    check_workload(samples(response.content.decode()))


@pytest.mark.django_db
def test_view_honours_name_filters_and_a_malformed_type_value(settings, redis_url, key_prefix, connection,
                                                              redis_client):
    """?name[]= keeps those samples only; a per-type value that is not a packed vector is left out and its
    queue counted as unreadable (it once made every scrape a 500)."""
    settings.QUEUECORE = {"REDIS_URL": redis_url, "KEY_PREFIX": key_prefix, "METRICS": {"TOKEN": TOKEN}}
    q = connection.keys.queue("bad")
    redis_client.sadd(connection.keys.queues, "bad")
    redis_client.hset(q.type_stats, mapping={"t.ok": "2", "t.bad": "garbage,x,,"})
    web = DjangoClient(headers={"Authorization": f"Bearer {TOKEN}"})
    full = web.get("/metrics")
    assert full.status_code == 200
    got = samples(full.content.decode())
    assert value(got, "queuecore_tasks_processed_total", queue="bad", type="t.ok") == 2
    assert not [key for key in got if ("type", "t.bad") in key[1]]
    assert value(got, "queuecore_queues_unreadable") == 1
    only = web.get("/metrics?name[]=queuecore_up&name[]=queuecore_queues_unreadable")
    assert only.status_code == 200
    assert samples(only.content.decode()) == {("queuecore_up", ()): 1.0, ("queuecore_queues_unreadable", ()): 1.0}


@pytest.mark.django_db
def test_view_admits_the_token_or_the_permission_only(settings, redis_url, key_prefix):
    settings.QUEUECORE = {"REDIS_URL": redis_url, "KEY_PREFIX": key_prefix, "METRICS": {"TOKEN": TOKEN}}
    web = DjangoClient()
    missing = web.get("/metrics")
    assert missing.status_code == 401 and missing["WWW-Authenticate"].startswith("Bearer")
    assert web.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 403
    assert web.get("/metrics", headers={"Authorization": f"Basic {TOKEN}"}).status_code == 403
    assert web.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}x"}).status_code == 403
    assert web.post("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 405
    user = User.objects.create_user("viewer", password="pw")
    web.force_login(user)
    assert web.get("/metrics").status_code == 403  # logged in, without the permission
    admin = User.objects.create_superuser("admin", password="pw")
    web.force_login(admin)
    assert web.get("/metrics").status_code == 200
    # without a TOKEN setting no bearer token is accepted, not even an empty one
    settings.QUEUECORE = {"REDIS_URL": redis_url, "KEY_PREFIX": key_prefix}
    anonymous = DjangoClient()
    assert anonymous.get("/metrics", headers={"Authorization": "Bearer "}).status_code == 403
    assert anonymous.get("/metrics", headers={"Authorization": "Bearer None"}).status_code == 403


@pytest.mark.django_db
def test_the_default_permission_exists_and_a_group_can_give_it(settings, redis_url, key_prefix):
    """``queuecore.view_metrics`` is a permission of the database (after migrate), so a group can hold it."""
    from django.contrib.auth.models import Group, Permission

    settings.QUEUECORE = {"REDIS_URL": redis_url, "KEY_PREFIX": key_prefix}
    permission = Permission.objects.get(content_type__app_label="queuecore", codename="view_metrics")
    scrapers = Group.objects.create(name="scrapers")
    scrapers.permissions.add(permission)
    user = User.objects.create_user("grafana", password="pw")
    web = DjangoClient()
    web.force_login(user)
    assert web.get("/metrics").status_code == 403
    user.groups.add(scrapers)
    web.force_login(User.objects.get(pk=user.pk))  # a fresh user object: no cached permissions
    assert web.get("/metrics").status_code == 200


def test_latency_is_the_age_of_the_oldest_pending_task(client: Client, connection, registry):
    @task(name="m.wait", registry=registry)
    def wait() -> None:
        pass

    first = client.enqueue(wait, queue="lat")
    client.enqueue(wait, queue="lat")
    inspector = Inspector(connection=connection)
    enqueued = inspector.get_task("lat", first.id).enqueued_at.timestamp()
    at = Inspector(connection=connection, clock=FakeClock(enqueued + 12.5))
    got = samples(render(make_registry(at, namespace="qc")).decode())
    assert value(got, "qc_queue_latency_seconds", queue="lat") == pytest.approx(12.5, abs=0.002)
    assert value(got, "qc_queue_size", queue="lat", state="pending") == 2
    at.close()
    inspector.close()


def test_scrape_when_redis_is_away_says_so(private_redis, key_prefix):
    inspector = Inspector(redis_url=private_redis.url, key_prefix=key_prefix)
    private_redis.stop()
    got = samples(render(make_registry(inspector)).decode())
    assert got == {("queuecore_up", ()): 0.0}
    inspector.close()


def test_runworker_serves_metrics_on_its_port(redis_url, key_prefix, connection, tmp_path):
    port = free_port()
    env = dict(os.environ)
    env.update(DJANGO_SETTINGS_MODULE="config.settings", QUEUECORE_REDIS_URL=redis_url,
               QUEUECORE_KEY_PREFIX=key_prefix, QUEUECORE_VAR_DIR=str(tmp_path), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "manage.py", "runworker", "--concurrency", "2", "--metrics-port",
                             str(port)], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        with Client(connection=connection) as client:
            infos = [client.enqueue("demo.noop", retention=600) for _ in range(4)]
        inspector = Inspector(connection=connection)
        for info in infos:
            wait_state(inspector, "default", info.id, TaskState.COMPLETED, timeout=60)

        def scrape() -> str | None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    return r.read().decode()
            except OSError:
                return None

        text = wait_until(scrape, timeout=30)
        got = samples(text)
        labels = {"queue": "default", "type": "demo.noop"}
        assert value(got, "queuecore_tasks_processed_total", **labels) == 4
        assert value(got, "queuecore_task_duration_seconds_count", **labels) == 4
        assert value(got, "queuecore_queue_size", queue="default", state="completed") == 4
        assert value(got, "queuecore_workers_up") == 1
        assert value(got, "queuecore_workers_concurrency") == 2
        inspector.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert f"metrics on http://127.0.0.1:{port}/metrics" in out.decode()


def test_scrape_cost_with_1000_queues(connection, redis_client):
    """Cost grows with queues, not tasks: 1,000 queues with 1 pending task each, then with 50 each."""
    keys = connection.keys
    inspector = Inspector(connection=connection)
    timings = {}
    for per_queue in (1, 50):
        pipe = redis_client.pipeline(transaction=False)
        for i in range(1000):
            q = keys.queue(f"q{i:04d}")
            pipe.sadd(keys.queues, q.queue)
            for j in range(per_queue):
                task_id = f"t{j}"
                pipe.hset(q.task(task_id), mapping={"msg": '{"type":"x","payload":{},"enqueued_at":1.0}',
                                                    "state": "pending"})
                pipe.lpush(q.pending, task_id)
        pipe.execute()
        registry = make_registry(inspector)
        render(registry)  # scripts loaded
        runs = []
        for _ in range(3):
            started = time.perf_counter()
            text = render(registry)
            runs.append(time.perf_counter() - started)
        got = samples(text.decode())
        assert value(got, "queuecore_queue_size", queue="q0999", state="pending") == (1 if per_queue == 1 else 51)
        timings[per_queue] = min(runs)
    print(f"\nscrape of 1,000 queues: {timings[1] * 1000:.0f} ms (1 task each), "
          f"{timings[50] * 1000:.0f} ms (51 tasks each); best of 3, render included")
    inspector.close()


def test_limit_waits_are_reported(make_worker, client: Client, connection, registry):
    release = threading.Event()

    @task(name="m.limited", registry=registry, concurrency_limit=1)
    def limited() -> None:
        release.wait(30)

    infos = [client.enqueue(limited, queue="lim", retention=60) for _ in range(3)]
    make_worker(queues={"lim": 1}, concurrency=3)
    inspector = Inspector(connection=connection)
    try:
        def held_back() -> bool:
            usage = [u for info in inspector.limits() if info.type == "m.limited" for u in info.usage]
            return bool(usage) and (usage[0].running, usage[0].waiting) == (1, 2)

        wait_until(held_back, timeout=30)
        got = samples(render(make_registry(inspector)).decode())
        assert value(got, "queuecore_limit_concurrency", type="m.limited") == 1
        assert value(got, "queuecore_limit_running_tasks", type="m.limited", key="") == 1
        assert value(got, "queuecore_limit_waiting_tasks", type="m.limited", key="") == 2
    finally:
        release.set()
    for info in infos:
        wait_state(inspector, "lim", info.id, TaskState.COMPLETED, timeout=30)
    inspector.close()


def test_the_grafana_dashboard_uses_only_exported_metrics():
    import json
    import re

    from prometheus_client import CollectorRegistry
    from prometheus_client.registry import Collector

    from queuecore.core.flow import LimitInfo, LimitUsage
    from queuecore.core.queue_metrics import MetricsSnapshot, QueueMetrics, WorkerMetrics
    from queuecore.core.typestats import VECTOR_LENGTH
    from queuecore.metrics import families, limit_families

    snapshot = MetricsSnapshot([QueueMetrics("q", {"pending": 1}, False, 0.0, 10, 1, 0,
                                             {"t": [1] * VECTOR_LENGTH})], WorkerMetrics(1, 0, 1))

    class Fixed(Collector):
        def collect(self):
            yield from families(snapshot)
            yield from limit_families([LimitInfo("t", 1, 0, 0.0, None, [LimitUsage("", 1, 0, 0)])])

    registry = CollectorRegistry()
    registry.register(Fixed())
    exported = {name for name, _ in samples(render(registry).decode())} | {"queuecore_up"}
    dashboard = json.loads((ROOT / "docs" / "grafana-queuecore.json").read_text())
    used = {name for panel in dashboard["panels"] for target in panel["targets"]
            for name in re.findall(r"\bqueuecore_[a-z_]+", target["expr"])}
    assert used and used <= exported, used - exported


@pytest.mark.usefixtures("no_task_types")  # the settings checks read the task registry (W002)
def test_metrics_settings_are_checked(settings):
    from queuecore.checks import check_settings

    settings.QUEUECORE = {"METRICS": {"TOKEN": "t" * 32, "PORT": 9108, "ADDR": "0.0.0.0", "NAMESPACE": "qc"}}
    assert check_settings() == []
    settings.QUEUECORE = {"METRICS": "on"}
    assert [(m.id, m.msg) for m in check_settings()] == [
        ("queuecore.E020", "QUEUECORE['METRICS']: must be a dict (TOKEN, PERMISSION, PORT, ADDR, NAMESPACE).")]
    settings.QUEUECORE = {"METRICS": {"TOKEN": "", "PORT": True, "NAMESPACE": "9x", "PERMISION": "a.b",
                                      "PERMISSION": "nodot", "ADDR": ""}}
    assert [m.msg for m in check_settings()] == [
        "QUEUECORE['METRICS']: unknown key(s): PERMISION.",
        "QUEUECORE['METRICS']: TOKEN must be a non-empty string or None.",
        "QUEUECORE['METRICS']: PERMISSION must be '<app_label>.<codename>' or None.",
        "QUEUECORE['METRICS']: PORT must be a port number (0-65535) or None.",
        "QUEUECORE['METRICS']: ADDR must be an address to listen on, e.g. '127.0.0.1' or '0.0.0.0'.",
        "QUEUECORE['METRICS']: NAMESPACE must be a Prometheus name: letters, digits and _, not starting with a digit.",
    ]
    for token in ("s3cret\n", " s3cret"):  # read from a secret file: a header can never carry it (a 403 for ever)
        settings.QUEUECORE = {"METRICS": {"TOKEN": token}}
        [message] = check_settings()
        assert message.id == "queuecore.E020" and "TOKEN has white space around it" in message.msg
