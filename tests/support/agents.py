"""A real gateway on port 0 inside the test process, and real `berth-agent run`
processes talking to it."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from control_plane.gateway.server import Gateway
from control_plane.infra import config, security
from control_plane.models import Server
from tests.support.waiting import wait_for  # noqa: F401  (imported from here by many tests)

AGENT = str(Path(sys.executable).with_name("berth-agent"))


def polled_get(client, url, headers, status=200):
    """GET for a polling loop, as a well-behaved client polls: a 429 waits out its
    Retry-After (a read-only key allows 120 requests a minute) and asks again."""
    for _ in range(3):
        r = client.get(url, headers=headers)
        if r.status_code != 429:
            break
        time.sleep(min(int(r.headers.get("Retry-After", "1")), 30))  # not a wait: Retry-After
    assert r.status_code == status, (url, r.status_code, r.json)
    return r.json


def closing(app):
    """The app with its database connection given back when each request ends: a
    threaded test server runs every request on a thread of its own (berth serve's
    pool reuses them), and a PostgreSQL pool would otherwise run dry."""
    from werkzeug.wsgi import ClosingIterator

    db = app.extensions["berth"].db

    def wsgi(environ, start_response):
        return ClosingIterator(app(environ, start_response), [db.close])
    return wsgi


@pytest.fixture
def http_app(app):
    """The app on real HTTP (port 0) as its PUBLIC_URL: what agents reach of the
    control plane besides the gateway (the backups' transfer API, local storage)."""
    import threading

    from werkzeug.serving import make_server

    server = make_server("127.0.0.1", 0, closing(app), threaded=True)
    url = f"http://127.0.0.1:{server.server_port}"
    app.config["PUBLIC_URL"] = url  # the services' settings too: one dict
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield url
    server.shutdown()
    thread.join(10)


@pytest.fixture
def gateway(app):
    # Its metric history written every second, not every minute.
    gw = Gateway(images=config.images(app.extensions["berth"].settings), history_every=1)
    port = gw.start_in_thread("127.0.0.1:0")
    app.extensions["berth"].gateway = gw
    for settings in (app.config, app.extensions["berth"].settings):
        settings["GRPC_PUBLIC_ADDRESS"] = f"127.0.0.1:{port}"
    yield gw
    gw.stop_from_thread()


class AgentProcess:
    """`berth-agent run` (this release's, or another's `executable`)."""

    def __init__(self, tmp_path, address, server_id, credential, env=None, executable=AGENT):
        self.executable = executable
        self.dir = tmp_path / f"agent-{server_id}"
        self.dir.mkdir(exist_ok=True)
        self.config = self.dir / "agent.json"
        self.config.write_text(json.dumps({
            "control_plane": "http://127.0.0.1:1", "grpc_address": address,
            "server_id": str(server_id), "credential": credential}))
        self.env = {**os.environ, "BERTH_AGENT_CONFIG": str(self.config),
                    "BERTH_AGENT_DATA_DIR": str(self.dir / "data"), **(env or {})}
        self.proc = None

    def start(self):
        self.log = open(self.dir / "agent.log", "ab")
        self.proc = subprocess.Popen([self.executable, "run"], env=self.env, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        return self

    def kill(self, sig=signal.SIGKILL):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(15)
        self.log.close()

    def status(self):
        out = subprocess.run([self.executable, "status", "--json"], env=self.env, capture_output=True,
                             text=True, timeout=30)
        return out.returncode, json.loads(out.stdout)

    def journal(self):
        path = self.dir / "data" / "commands.json"
        return json.loads(path.read_text()) if path.exists() else {}


def registered_server(org, name="srv"):
    """A server with an agent credential, as registration would leave it."""
    credential = "agt_live_" + security.random_token(40)
    server = Server.create(organization=org, name=name, provider="byos", cpu_cores=2,
                           ram_mb=2048, disk_gb=20,
                           agent_credential_hash=security.digest(credential))
    return server, credential


@pytest.fixture
def agents(tmp_path, gateway):
    started = []

    def start(server, credential, address=None, env=None, executable=AGENT):
        a = AgentProcess(tmp_path, address or f"127.0.0.1:{gateway.port}", server.id, credential,
                         env, executable)
        started.append(a.start())
        return a

    yield start
    for a in started:
        a.kill()
