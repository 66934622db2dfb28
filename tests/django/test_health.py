"""Health: runworker's health file read by manage.py queuecore_healthcheck against a live worker, a
SIGSTOPped one and a dead one; the readiness view (Redis reachable, with latency; 200/503)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from django.test import Client as DjangoClient

from queuecore.core.errors import ConfigurationError
from queuecore.core.healthcheck import check_max_age
from queuecore.core.liveness import check_health
from tests.conftest import free_port, wait_until

ROOT = Path(__file__).resolve().parents[2]
HEARTBEAT = 0.2  # seconds: the file goes stale after three of them


@pytest.fixture
def site_env(redis_url, key_prefix, tmp_path):
    env = dict(os.environ)
    env.update(DJANGO_SETTINGS_MODULE="config.settings", QUEUECORE_REDIS_URL=redis_url,
               QUEUECORE_KEY_PREFIX=key_prefix, QUEUECORE_VAR_DIR=str(tmp_path), PYTHONUNBUFFERED="1")
    return env


@pytest.fixture
def worker(site_env, tmp_path):
    """A runworker process writing tmp_path/health.json; killed (and continued) at teardown."""
    health_file = tmp_path / "health.json"
    proc = subprocess.Popen([sys.executable, "manage.py", "runworker", "--concurrency", "1", "--heartbeat-interval",
                             str(HEARTBEAT), "--health-file", str(health_file)], cwd=ROOT, env=site_env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    yield proc, health_file
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait(10)


def healthcheck(site_env, health_file, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "manage.py", "queuecore_healthcheck", "--health-file", str(health_file),
                           *extra], cwd=ROOT, env=site_env, capture_output=True, text=True, timeout=60)


@pytest.mark.slow
def test_healthcheck_live_stopped_and_dead_worker(worker, site_env, redis_url, key_prefix):
    proc, health_file = worker
    wait_until(health_file.exists, timeout=30, message="the worker's first heartbeat")
    info = json.loads(health_file.read_text())
    assert info["pid"] == proc.pid and info["key_prefix"] == key_prefix and info["heartbeat_interval"] == HEARTBEAT

    live = healthcheck(site_env, health_file, "--max-age", "5")  # roomy: a loaded machine may delay a beat
    assert live.returncode == 0, live.stderr
    assert live.stdout.startswith(f"ok: worker {info['server_id']} alive")
    assert "Redis answers in" in live.stdout

    # The heartbeat key in Redis and the file both lapse three intervals after the last beat; the file
    # is written just after the key, so a check in the few ms between may find the key gone first.
    expired = f"unhealthy: worker {info['server_id']}: its heartbeat is not in Redis"
    seen: list[str] = []

    def stale_file() -> subprocess.CompletedProcess[str] | None:
        r = healthcheck(site_env, health_file)
        if r.returncode == 1:
            seen.append(r.stderr)
            if "last heartbeat" in r.stderr:
                return r
        return None

    proc.send_signal(signal.SIGSTOP)  # frozen: it stops heartbeating, the file goes stale
    stopped_at = time.time()
    stale = wait_until(stale_file, timeout=30)
    assert time.time() - stopped_at < 3 * HEARTBEAT + 10
    assert stale.stderr.startswith(f"unhealthy: worker {info['server_id']}: last heartbeat")
    assert "limit 0.6s" in stale.stderr and len(stale.stderr.strip().splitlines()) == 1
    assert all(line.startswith(expired) for line in seen[:-1]), seen

    proc.send_signal(signal.SIGCONT)  # thawed: healthy again at its next beat
    wait_until(lambda: healthcheck(site_env, health_file, "--max-age", "5").returncode == 0, timeout=30)

    proc.kill()  # dead: no clean exit, the file stays but goes stale
    proc.wait(10)
    seen.clear()
    dead = wait_until(stale_file, timeout=30)
    assert "last heartbeat" in dead.stderr
    assert all(line.startswith(expired) for line in seen[:-1]), seen


@pytest.mark.slow
def test_clean_stop_removes_the_health_file(worker, site_env):
    proc, health_file = worker
    wait_until(health_file.exists, timeout=30, message="the worker's first heartbeat")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    assert not health_file.exists()
    gone = healthcheck(site_env, health_file)
    assert gone.returncode == 1
    assert gone.stderr.strip() == f"unhealthy: no health file at {health_file}: the worker is not running (or " \
                                  "stopped cleanly)"


def test_health_check_fails_when_redis_does_not_answer(make_worker, tmp_path, private_redis, connection):
    """In process: a fresh file, but the Redis given to the check (a private one, stopped) is down."""
    health_file = tmp_path / "h.json"
    worker = make_worker(health_file=str(health_file), heartbeat_interval=0.2)
    wait_until(health_file.exists, timeout=10)
    client = connection.connect()
    try:
        assert check_health(health_file, client, max_age=30).ok
    finally:
        client.close()
    private_redis.stop()
    down = redis.Redis.from_url(private_redis.url, socket_timeout=0.5, socket_connect_timeout=0.5)
    report = check_health(health_file, down, max_age=30)
    assert not report.ok and report.reason.startswith("Redis does not answer: ConnectionError")
    assert report.exit_code == 1
    worker.shutdown()
    assert not health_file.exists()


def test_health_check_refuses_a_heartbeat_missing_from_redis(make_worker, tmp_path, connection, redis_url):
    """A fresh file naming a worker whose heartbeat is not under the prefix checked (another Redis db,
    prefix, or an expired heartbeat) is unhealthy. A review: a worker started with ``runworker
    --redis-url``, checked by a probe reading the settings' Redis, was "another Redis or prefix", with
    no word of which Redis it uses; the file names it (its password hidden), and so does the line."""
    from queuecore.core.topology import redact_url

    health_file = tmp_path / "h.json"
    make_worker(health_file=str(health_file), heartbeat_interval=0.2)
    wait_until(health_file.exists, timeout=10)
    info = json.loads(health_file.read_text())
    assert info["redis"] == redact_url(connection.redis_url)
    other = tmp_path / "other.json"  # a copy the worker does not rewrite under the test's feet
    other.write_text(json.dumps({**info, "key_prefix": info["key_prefix"] + "-other"}))
    client = connection.connect()
    try:
        report = check_health(other, client, max_age=60)
    finally:
        client.close()
    assert not report.ok and "its heartbeat is not in Redis" in report.reason
    assert f"under prefix {info['key_prefix'] + '-other'!r}" in report.reason
    assert f"the worker writes to {redact_url(connection.redis_url)}" in report.reason


@pytest.mark.django_db
def test_readiness_view_reports_redis_and_its_latency(settings, redis_url, key_prefix):
    settings.QUEUECORE = {"REDIS_URL": redis_url, "KEY_PREFIX": key_prefix}
    client = DjangoClient()
    response = client.get("/queuecore/ready/")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert body["status"] == "ok" and body["redis"]["ok"] is True
    assert 0 <= body["redis"]["latency_ms"] < 2000
    assert "no-cache" in response["Cache-Control"]
    assert client.post("/queuecore/ready/").status_code == 405
    head = client.head("/queuecore/ready/")  # load balancers probe with HEAD too
    assert head.status_code == 200 and head.content == b""


@pytest.mark.django_db
def test_readiness_view_is_503_when_redis_is_unreachable(settings, private_redis):
    url = private_redis.url
    private_redis.stop()
    settings.QUEUECORE = {"REDIS_URL": url}
    response = DjangoClient().get("/queuecore/ready/")
    assert response.status_code == 503
    body = response.json()
    assert body == {"status": "unavailable", "redis": {"ok": False, "latency_ms": body["redis"]["latency_ms"],
                                                       "error": "ConnectionError"}}
    assert str(private_redis.port) not in response.content.decode()


def test_health_file_and_log_format_settings_are_checked(settings):
    from django.core.checks import Error

    from queuecore.checks import check_settings

    settings.QUEUECORE = {"HEALTH_FILE": 5, "LOG_FORMAT": "xml"}  # one error never hides another
    assert check_settings(None) == [
        Error("QUEUECORE['LOG_FORMAT'] must be 'text' or 'json', got 'xml'.", id="queuecore.E012"),
        Error("QUEUECORE['HEALTH_FILE']: health_file must be a file path or None, got 5", id="queuecore.E005")]
    settings.QUEUECORE = {"HEALTH_FILE": 5}
    assert check_settings(None) == [
        Error("QUEUECORE['HEALTH_FILE']: health_file must be a file path or None, got 5", id="queuecore.E005")]
    settings.QUEUECORE = {"HEALTH_FILE": "/run/qc/health.json", "LOG_FORMAT": "json"}
    assert check_settings(None) == []


def test_a_health_file_in_a_missing_directory_is_refused_and_a_failed_write_is_logged_once(
        make_worker, tmp_path, caplog):
    from queuecore.core.errors import ConfigurationError
    from queuecore.core.liveness import LivenessFile

    with pytest.raises(ConfigurationError, match="does not exist"):
        make_worker(start=False, health_file=str(tmp_path / "nowhere" / "h.json"))
    directory = tmp_path / "d"
    directory.mkdir()
    live = LivenessFile(directory / "h.json", server_id="s", pid=1, host="h", key_prefix="p", interval=1.0)
    directory.rmdir()  # gone after start-up: the heartbeat goes on, the failure is logged once
    with caplog.at_level("WARNING", logger="queuecore.worker"):
        live.touch("active")
        live.touch("active")
        directory.mkdir()
        live.touch("active")
    assert [r.levelname for r in caplog.records] == ["ERROR", "WARNING"]
    assert "cannot write the health file" in caplog.records[0].getMessage()
    assert json.loads((directory / "h.json").read_text())["status"] == "active"


def test_a_health_file_that_is_a_directory_is_refused_and_never_fails_a_stop(settings, make_worker, tmp_path,
                                                                              caplog):
    """A review: a directory was accepted (its parent exists), and then the clean stop raised
    IsADirectoryError from remove(), skipping the rest of the shutdown; ``--processes 2`` crashed at start."""
    from queuecore.checks import check_settings
    from queuecore.core.errors import ConfigurationError
    from queuecore.core.liveness import LivenessFile, remove_left_files

    directory = tmp_path / "hdir"
    directory.mkdir()
    settings.QUEUECORE = {"HEALTH_FILE": str(directory)}
    [error] = check_settings(None)
    assert error.id == "queuecore.E005" and "is a directory: name a file in it" in error.msg
    with pytest.raises(ConfigurationError, match="is a directory"):
        make_worker(start=False, health_file=str(directory))
    with pytest.raises(ConfigurationError, match="is a directory"):
        LivenessFile(directory, server_id="s", pid=1, host="h", key_prefix="p", interval=1.0)
    path = tmp_path / "h.json"
    live = LivenessFile(path, server_id="s", pid=1, host="h", key_prefix="p", interval=1.0)
    path.mkdir()  # made a directory after the start
    with caplog.at_level("WARNING", logger="queuecore.worker"):
        live.remove()  # logged, not raised: the stop goes on
        assert remove_left_files(path, 2, "h") == []
    assert [r.levelname for r in caplog.records] == ["ERROR", "WARNING"]
    assert "cannot remove the health file" in caplog.records[0].getMessage()


def test_the_check_runs_without_django(make_worker, tmp_path, redis_url):
    """python -m queuecore.core.healthcheck: the same check for plain-Python workers."""
    health_file = tmp_path / "h.json"
    make_worker(health_file=str(health_file), heartbeat_interval=0.2)
    wait_until(health_file.exists, timeout=10)
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    ok = subprocess.run([sys.executable, "-m", "queuecore.core.healthcheck", str(health_file),
                         "--redis-url", redis_url, "--max-age", "30"],
                        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and ok.stdout.startswith("ok: worker ") and ok.stderr == ""
    missing = subprocess.run([sys.executable, "-m", "queuecore.core.healthcheck", str(tmp_path / "none.json"),
                              "--redis-url", redis_url], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1 and missing.stderr.startswith("unhealthy: no health file at ")


def test_the_plain_check_refuses_a_bad_option_in_one_line(tmp_path, redis_url):
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    for args, why in ((["--timeout", "0"], "socket_timeout is out of range"),
                      (["--redis-url", "foo://x"], "invalid Redis URL")):
        run = subprocess.run([sys.executable, "-m", "queuecore.core.healthcheck", str(tmp_path / "h.json"), *args],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        assert run.returncode == 1 and run.stdout == "", run
        assert run.stderr.startswith("unhealthy: ") and why in run.stderr and len(run.stderr.splitlines()) == 1


def test_the_plain_check_refuses_a_max_age_that_is_not_a_positive_finite_number(tmp_path, redis_url):
    """--max-age nan once disabled the age check; inf, 0 and negatives are refused too, in one line."""
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    for bad in ("nan", "inf", "-5", "0", "1e9"):
        run = subprocess.run([sys.executable, "-m", "queuecore.core.healthcheck", str(tmp_path / "h.json"),
                              "--redis-url", redis_url, f"--max-age={bad}"],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        assert run.returncode == 1 and run.stdout == "", run
        assert run.stderr.startswith("unhealthy: --max-age is out of range: ") and len(run.stderr.splitlines()) == 1


def test_check_max_age_accepts_a_positive_finite_number_only():
    assert check_max_age(None) is None and check_max_age(30.0) == 30.0 and check_max_age(259_200) == 259_200
    for bad in (float("nan"), float("inf"), float("-inf"), -5.0, 0.0, 259_201.0):
        with pytest.raises(ConfigurationError, match="--max-age is out of range"):
            check_max_age(bad)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -5.0])
def test_the_command_refuses_a_max_age_that_is_not_a_positive_finite_number(settings, tmp_path, bad):
    """``manage.py queuecore_healthcheck --max-age nan`` turned the heartbeat-file age check off."""
    from django.core.management import call_command
    from django.core.management.base import CommandError

    settings.QUEUECORE = {**settings.QUEUECORE, "HEALTH_FILE": str(tmp_path / "h.json")}
    with pytest.raises(CommandError, match="--max-age is out of range"):
        call_command("queuecore_healthcheck", max_age=bad)


def test_two_workers_given_one_health_file_are_told_and_a_clean_stop_leaves_the_others(
        make_worker, tmp_path, caplog):
    """Probe: two workers given one health file overwrote each other without a word; after a kill -9 of
    one the check stayed ok on the other's heartbeats, and a clean stop of one deleted the file the other
    relied on. Each now logs an ERROR naming the other, and removes the file only if it is its own."""
    shared = tmp_path / "same.json"
    with caplog.at_level("ERROR", logger="queuecore.worker"):
        first = make_worker(health_file=str(shared), heartbeat_interval=0.2)
        wait_until(shared.exists, timeout=10)
        second = make_worker(health_file=str(shared), heartbeat_interval=0.2)
        wait_until(lambda: len([r for r in caplog.records if "is also written by worker" in r.getMessage()]) >= 2,
                   timeout=10, message="both workers to see the other's heartbeat in the file")
    said = {r.getMessage() for r in caplog.records if "is also written by worker" in r.getMessage()}
    assert any(f"also written by worker {second.server_id}" in m for m in said)
    assert any(f"also written by worker {first.server_id}" in m for m in said)
    wait_until(lambda: json.loads(shared.read_text())["server_id"] == second.server_id, timeout=10)
    first.shutdown()  # the file is the second's now: left in place
    assert json.loads(shared.read_text())["server_id"] == second.server_id
    second.shutdown()
    assert not shared.exists()


def test_a_file_left_by_a_worker_that_died_here_is_not_taken_for_a_second_writer(tmp_path, caplog):
    """A child started in place of one killed a second ago finds that one's recent heartbeat in its file:
    the process is gone, so no ERROR; a live process's heartbeat there is one."""
    from queuecore.core.liveness import LivenessFile

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(10)
    path = tmp_path / "h.json.1"
    live = LivenessFile(path, server_id="new", pid=os.getpid(), host="here", key_prefix="p", interval=5.0)
    with caplog.at_level("ERROR", logger="queuecore.worker"):
        path.write_text(json.dumps({"server_id": "killed", "pid": dead.pid, "host": "here",
                                    "heartbeat_at": time.time()}))
        live.touch("active")
        assert not caplog.records
        path.write_text(json.dumps({"server_id": "other", "pid": os.getppid(), "host": "here",
                                    "heartbeat_at": time.time()}))
        live.touch("active")
    assert [r.getMessage() for r in caplog.records] == [
        f"the health file {path} is also written by worker other (pid {os.getppid()}): give each worker a file of "
        "its own, or the health check cannot tell them apart"]


def test_the_check_of_a_file_that_runworker_processes_split_checks_every_child(make_worker, tmp_path, connection):
    """Probe: with ``--processes 2`` the children write ``h.json.1`` and ``h.json.2``; the check given
    ``h.json`` said "the worker is not running". It now checks every child's file."""
    base = tmp_path / "h.json"
    workers = [make_worker(health_file=f"{base}.{n}", heartbeat_interval=0.2) for n in (1, 2)]
    wait_until(lambda: all(Path(f"{base}.{n}").exists() for n in (1, 2)), timeout=10)
    client = connection.connect()
    try:
        report = check_health(base, client, max_age=30)
        assert report.ok and report.reason.startswith(f"2 worker processes ({base}.N) alive: worker ")
        workers[1].shutdown()  # stopped cleanly: its file is gone, the other is checked
        assert check_health(base, client, max_age=30).ok
        stale = Path(f"{base}.2")
        stale.write_text(Path(f"{base}.1").read_text())
        os.utime(stale, (time.time() - 100, time.time() - 100))  # a child killed long ago
        report = check_health(base, client, max_age=30)
        assert not report.ok and report.reason.startswith("1 of 2 worker processes unhealthy: worker ")
        assert "last heartbeat 10" in report.reason
    finally:
        client.close()


@pytest.mark.django_db
def test_a_cluster_no_node_answers_gives_each_surface_its_own_answer_not_a_traceback(settings, tmp_path, caplog):
    """A review: a cluster client reads the slot map when it is made, outside the error handling of
    the readiness view (a 500), both health checks (80-line tracebacks), the metrics view and runworker
    (a traceback; under --processes every child crash-looped and the supervisor gave up)."""
    from django.core.management import call_command

    url = f"redis+cluster://127.0.0.1:{free_port()}"
    settings.QUEUECORE = {"REDIS_URL": url, "METRICS": {"TOKEN": "t0ken"}}
    ready = DjangoClient().get("/queuecore/ready/")
    assert ready.status_code == 503 and ready.json()["redis"]["error"] == "RedisUnavailable"
    scraped = DjangoClient().get("/metrics", headers={"Authorization": "Bearer t0ken"})
    assert scraped.status_code == 503 and scraped.content.startswith(b"Redis is unreachable: ")
    health_file = tmp_path / "h.json"
    health_file.write_text("{}")
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    plain = subprocess.run([sys.executable, "-m", "queuecore.core.healthcheck", str(health_file), "--redis-url", url,
                            "--timeout", "0.5"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert plain.returncode == 1 and plain.stderr.startswith("unhealthy: ") and len(plain.stderr.splitlines()) == 1
    with pytest.raises(SystemExit) as exited:
        call_command("queuecore_healthcheck", "--health-file", str(health_file), "--timeout", "0.5")
    assert exited.value.code == 1
    worker = subprocess.Popen([sys.executable, "manage.py", "runworker", "--redis-url", url], cwd=ROOT,
                              env={**os.environ, "QUEUECORE_REDIS_URL": url}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        line = wait_until(lambda: next((x for x in [worker.stdout.readline()] if "unreachable" in x or not x), None),
                          timeout=30, message="runworker's line")
        assert "Redis is unreachable" in line and "the worker starts once it answers" in line
        assert worker.poll() is None  # it waits for Redis
        worker.send_signal(signal.SIGINT)
        assert worker.wait(15) == 0 and "Traceback" not in worker.stdout.read()
    finally:
        worker.kill()
        worker.wait(10)


def test_files_left_by_earlier_runs_go_but_a_live_workers_file_stays(tmp_path):
    """``remove_left_files``, run by ``runworker --processes N`` before its children start."""
    import socket

    from queuecore.core.liveness import remove_left_files

    host, path = socket.gethostname(), tmp_path / "h.json"
    files = {name: tmp_path / name for name in ("h.json", "h.json.2", "h.json.3", "h.json.4", "h.json.5")}
    for name, pid in (("h.json", 2**22 + 7), ("h.json.2", 2**22 + 7), ("h.json.3", os.getpid()),
                      ("h.json.4", 2**22 + 7)):
        files[name].write_text(json.dumps({"server_id": name, "pid": pid, "host": host}))
    files["h.json.5"].write_text("not json")
    removed = remove_left_files(path, 2, host)
    assert sorted(removed) == sorted(str(files[n]) for n in ("h.json", "h.json.4", "h.json.5"))
    assert files["h.json.2"].exists()  # a slot the new run has: its child rewrites it
    assert files["h.json.3"].exists()  # its writer runs here: another worker's
