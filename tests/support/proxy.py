"""The real parts behind an environment's HTTPS URL in tests: Debian's `pebble`
(a real ACME server) on loopback, validating through the loopback DNS server,
its own HTTPS listener under a trustme CA; the ports the agent's proxy listens
on (loopback only); a control plane configured to run the proxy; and an HTTPS
client that connects to loopback while naming the host (SNI, Host header) and
trusting pebble's issuing root."""

import http.client
import json
import os
import shutil
import socket
import ssl
import subprocess
import urllib.request
from base64 import b64encode
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme

from tests.support.docker_engine import _require_image
from tests.support.waiting import wait_for

PROXY_IMAGE = "berth-test-proxy:latest"
APPS_DOMAIN = "apps.berth-test.com"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Pebble:
    directory: str
    ca_file: str  # the roots to trust for the directory's own HTTPS
    http_port: int  # where it validates http-01 (the proxy's HTTP port)
    tls_port: int  # where it validates tls-alpn-01 (the proxy's HTTPS port)
    management: str
    ssl_context: ssl.SSLContext
    proc: subprocess.Popen = None

    def issuing_roots(self):
        """PEM of pebble's issuing root (random per start)."""
        with urllib.request.urlopen(f"{self.management}/roots/0", context=self.ssl_context,
                                    timeout=10) as r:
            return r.read().decode()


def start_pebble(work, dns_address):
    """pebble on loopback ports, validating names through `dns_address`; its own
    HTTPS listener under a trustme CA (written to work/ca.pem)."""
    work = Path(work)
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert.private_key_pem.write_to_path(str(work / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(work / "cert.pem"))
    ca.cert_pem.write_to_path(str(work / "ca.pem"))
    listen, manage = free_port(), free_port()
    p = Pebble(directory=f"https://127.0.0.1:{listen}/dir", ca_file=str(work / "ca.pem"),
               http_port=free_port(), tls_port=free_port(),
               management=f"https://127.0.0.1:{manage}", ssl_context=ssl.create_default_context(
                   cafile=str(work / "ca.pem")))
    (work / "config.json").write_text(json.dumps({"pebble": {
        "listenAddress": f"127.0.0.1:{listen}", "managementListenAddress": f"127.0.0.1:{manage}",
        "certificate": str(work / "cert.pem"), "privateKey": str(work / "key.pem"),
        "httpPort": p.http_port, "tlsPort": p.tls_port, "ocspResponderURL": "",
        "externalAccountBindingRequired": False}}))
    log = open(work / "pebble.log", "w")
    # No random sleeps before validation, no random nonce rejections: fast and steady.
    env = {**os.environ, "PEBBLE_VA_NOSLEEP": "1", "PEBBLE_WFE_NONCEREJECT": "0"}
    p.proc = subprocess.Popen(["pebble", "-config", str(work / "config.json"),
                               "-dnsserver", dns_address],
                              stdout=log, stderr=subprocess.STDOUT, env=env)
    log.close()

    def answering():
        try:
            with urllib.request.urlopen(p.directory, context=p.ssl_context, timeout=2):
                return True
        except OSError:
            assert p.proc.poll() is None, "pebble exited: " + (work / "pebble.log").read_text()
            return False

    try:
        wait_for(answering, timeout=20, interval=0.1, what="pebble answering",
                 detail=(work / "pebble.log").read_text)
    except AssertionError:
        p.proc.kill()
        raise
    return p


@pytest.fixture(scope="session")
def pebble(tmp_path_factory, loopback_dns):
    if shutil.which("pebble") is None:
        pytest.fail("pebble is not installed (run: scripts/ensure-system-deps.sh test)",
                    pytrace=False)
    p = start_pebble(tmp_path_factory.mktemp("pebble"), loopback_dns.address)
    yield p
    p.proc.terminate()
    p.proc.wait(timeout=10)


@pytest.fixture(scope="session")
def proxy_image(docker_client):
    """Caddy (Debian's 2.6) with the official caddy image's conventions."""
    return _require_image(docker_client, PROXY_IMAGE)


@pytest.fixture
def proxied(app, pebble, proxy_image, erp_image, postgres_image, loopback_dns, docker_client,
            tmp_path):
    """The control plane set to run the proxy with pebble, and the agent environment
    that makes the proxy listen where pebble validates. The proxy container (one per
    engine) is removed before and after."""
    changes = dict(ERP_IMAGE=erp_image, POSTGRES_IMAGE=postgres_image, PROXY_IMAGE=proxy_image,
                   ACME_DIRECTORY_URL=pebble.directory, ACME_CA_ROOTS=pebble.ca_file,
                   APPS_DOMAIN=APPS_DOMAIN, DNS_RESOLVER=loopback_dns.address, DNS_TIMEOUT=2)
    app.config.update(changes)  # as the app's start-up; the services' settings are this dict
    loopback_dns.clear()
    _remove_proxy(docker_client)  # one an interrupted run left behind
    agent_env = {"BERTH_AGENT_PROXY_HTTP": f"127.0.0.1:{pebble.http_port}",
                 "BERTH_AGENT_PROXY_HTTPS": f"127.0.0.1:{pebble.tls_port}",
                 "BERTH_AGENT_PROXY_WATCH_SECONDS": "1", "BERTH_AGENT_PROXY_RETRY_SECONDS": "1"}
    yield agent_env
    loopback_dns.clear()
    _remove_proxy(docker_client)


def _remove_proxy(docker_client):
    import docker.errors

    try:
        docker_client.containers.get("berth-proxy").remove(force=True)
    except docker.errors.NotFound:
        pass


def https_request(name, port, path, roots_pem, headers=None, timeout=20):
    """(status, headers, body) of a GET to https://name:port/path, connected to
    127.0.0.1, the certificate verified for `name` against `roots_pem`."""
    context = ssl.create_default_context(cadata=roots_pem)

    class Loopback(http.client.HTTPSConnection):
        def connect(self):
            sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
            self.sock = context.wrap_socket(sock, server_hostname=name)

    conn = Loopback(name, port, context=context, timeout=timeout)
    try:
        conn.request("GET", path, headers=headers or {})
        answer = conn.getresponse()
        return answer.status, dict(answer.getheaders()), answer.read()
    finally:
        conn.close()


def websocket_hello(name, port, roots_pem, timeout=20):
    """The upgrade on /websocket over HTTPS: (status line, first text frame)."""
    context = ssl.create_default_context(cadata=roots_pem)
    key = b64encode(os.urandom(16)).decode()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw:
        with context.wrap_socket(raw, server_hostname=name) as sock:
            sock.sendall((f"GET /websocket HTTP/1.1\r\nHost: {name}\r\nUpgrade: websocket\r\n"
                          f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                          "Sec-WebSocket-Version: 13\r\n\r\n").encode())
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
            head, _, rest = data.partition(b"\r\n\r\n")
            while len(rest) < 2 or len(rest) < 2 + rest[1]:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                rest += chunk
    status = head.split(b"\r\n", 1)[0].decode()
    frame = rest[2:2 + rest[1]].decode() if len(rest) >= 2 else ""
    return status, frame


def wait_https(name, port, roots_pem, path="/web/health", timeout=60, running=False):
    """The first verified HTTPS answer of the environment (a certificate is
    obtained on demand; a route may still be on its way: 404). `running`: the
    environment has just been deployed, so its route's "not running" 503 is waited
    through too (the proxy takes a deploy's end at its next pass)."""
    waited = (404, 503) if running else (404,)
    last = [None]

    def answered():
        try:
            answer = https_request(name, port, path, roots_pem, timeout=10)
        except (OSError, ssl.SSLError) as exc:
            last[0] = exc
            return None
        last[0] = f"{answer[0]} {answer[2][:100]!r}"
        return answer if answer[0] not in waited else None

    return wait_for(answered, timeout=timeout, interval=0.3,
                    what=f"a verified HTTPS answer from {name}", detail=lambda: last[0])


