"""``rediss://`` against a Redis with a self-signed certificate: verified by default (an unknown CA
is refused with a clear ``BrokerError``), and with ``?ssl_ca_certs=<ca.pem>`` the whole path works:
enqueue, a worker runs the task, the result is kept."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest
import redis

from queuecore import BrokerError, Client, ConnectionConfig, Inspector, Worker, task
from tests.conftest import FAST, free_port, wait_until


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture
def tls_redis(tmp_path: Path):
    if not shutil.which("openssl") or not shutil.which("redis-server"):
        pytest.skip("openssl or a system redis-server is missing")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=qc-test-ca",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-keyout", "ca.key", "-out", "ca.pem", cwd=tmp_path)
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", "server.key",
            "-out", "server.csr", cwd=tmp_path)
    # What Python 3.13's strict verification (ssl.VERIFY_X509_STRICT) asks of a server certificate too.
    (tmp_path / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                      "authorityKeyIdentifier=keyid,issuer\nbasicConstraints=critical,CA:FALSE\n"
                                      "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "2", "-extfile", "san.ext", "-out", "server.pem", cwd=tmp_path)
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path),
         "--save", "", "--appendonly", "no", "--tls-cert-file", str(tmp_path / "server.pem"),
         "--tls-key-file", str(tmp_path / "server.key"), "--tls-ca-cert-file", str(tmp_path / "ca.pem"),
         "--tls-auth-clients", "no"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    probe = redis.Redis(port=port, ssl=True, ssl_ca_certs=str(tmp_path / "ca.pem"), socket_connect_timeout=0.5)

    def up() -> bool:
        if proc.poll() is not None:
            return True
        try:
            return bool(probe.ping())
        except redis.RedisError:
            return False

    wait_until(up, timeout=10, message="the TLS redis-server")
    if proc.poll() is not None:
        output = proc.stdout.read() if proc.stdout else ""
        pytest.skip(f"this redis-server has no TLS support: {output.strip()[-300:]}")
    probe.close()
    yield port, tmp_path / "ca.pem"
    proc.terminate()
    proc.wait(10)


def test_rediss_verifies_the_certificate_by_default(tls_redis) -> None:
    port, _ = tls_redis
    conn = ConnectionConfig(redis_url=f"rediss://127.0.0.1:{port}/0", key_prefix="qct-tls")
    with Client(connection=conn) as client, pytest.raises(BrokerError) as caught:
        client.enqueue("t.x", {})
    assert "certificate verify failed" in str(caught.value)
    assert str(caught.value).startswith("Redis is unreachable")


def test_rediss_with_the_ca_runs_tasks_end_to_end(tls_redis, registry) -> None:
    port, ca = tls_redis
    conn = ConnectionConfig(redis_url=f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={ca}", key_prefix="qct-tls")

    @task(name="t.tls", registry=registry)
    def handler(n: int) -> int:
        return n * 2

    worker = Worker(connection=conn, registry=registry, **FAST)
    with Client(connection=conn, registry=registry) as client, Inspector(connection=conn) as inspector:
        info = client.enqueue("t.tls", {"n": 21}, retention=60)
        worker.start()
        try:
            started = time.monotonic()
            done = wait_until(lambda: inspector.get_task("default", info.id).state == "completed" and
                              inspector.get_task("default", info.id), timeout=15, message="the task over TLS")
            print(f"\ncompleted over TLS in {time.monotonic() - started:.2f}s")
            assert done.result == 42
        finally:
            worker.shutdown(timeout=5)
