"""The scale-out topology of deploy/compose.yaml for the tests, on the images `make
test` builds (the control-plane image, and local stand-ins for PostgreSQL, Redis and
HAProxy): `Stack` runs it on a Swarm (tests/support/compose.test.yaml added; the fixtures are
in tests/control_plane/scale_out/conftest.py), `ComposeProject` with docker-compose on
one engine; `Agent` is a real agent that registers through the balancer."""

import json
import os
import re
import secrets
import subprocess
from pathlib import Path

import requests

from tests.support.agents import AGENT, wait_for
from tests.support.docker_engine import _require_image
from tests.support.services import free_port
from tests.support.webhook_receiver import _ca

ROOT = Path(__file__).resolve().parents[2]
STACK = "berth-test"
IMAGES = {"BERTH_IMAGE": "berth-control-plane:latest", "POSTGRES_IMAGE": "berth-test-postgres:latest",
          "REDIS_IMAGE": "berth-test-redis:latest", "HAPROXY_IMAGE": "berth-test-haproxy:latest"}
P = "/api/public/v1"
# HAProxy's log lines on a gateway slot's state: "Server gateways/gw1 is UP, reason: ...",
# "... is DOWN, ...", "... is going DOWN for maintenance ...".
BALANCER_STATE = re.compile(r"Server gateways/(gw\d+)\b.*? is (?:going )?(UP|DOWN)")


def docker(*args, check=True, timeout=120, env=None):
    return subprocess.run(["docker", *args], check=check, capture_output=True, text=True,
                          timeout=timeout, env=env)


def require_images(docker_client):
    for image in IMAGES.values():
        _require_image(docker_client, image)


class Stack:
    def __init__(self):
        self.http_port, self.grpc_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.http_port}"
        self.env = {**os.environ, **IMAGES,
                    "POSTGRES_PASSWORD": secrets.token_hex(16),
                    "BERTH_SECRET_KEY": secrets.token_hex(32),
                    "BERTH_HTTP_PORT": str(self.http_port), "BERTH_GRPC_PORT": str(self.grpc_port),
                    "BERTH_PUBLIC_URL": self.url, "BERTH_PROXY_IMAGE": "",
                    "BERTH_ERP_IMAGE": "berth-test-erp:latest",
                    "BERTH_ENV_POSTGRES_IMAGE": "berth-test-postgres:latest",
                    "BERTH_GRPC_PUBLIC_ADDRESS": f"127.0.0.1:{self.grpc_port}",
                    "BERTH_TEST_CA": _ca()[1]}

    def deploy(self):
        docker("stack", "deploy", "--resolve-image", "never", "-c",
               str(ROOT / "deploy" / "compose.yaml"), "-c", str(ROOT / "tests" / "support" / "compose.test.yaml"),
               STACK, env=self.env)

    def containers(self, service):
        out = docker("ps", "-q", "--filter", f"label=com.docker.swarm.service.name={STACK}_{service}")
        return out.stdout.split()

    @staticmethod
    def metric(container, sample, port=9100):
        """A sample from a process's own /metrics (gateways and schedulers at 9100, web
        processes at 8000; 0 when it has none yet, or has not started)."""
        script = ("import urllib.request;print(urllib.request.urlopen("
                  f"'http://127.0.0.1:{port}/metrics').read().decode())")
        out = docker("exec", container, "python3", "-c", script, check=False).stdout
        lines = [ln for ln in out.splitlines() if ln.startswith(sample + " ")]
        return int(float(lines[0].split()[-1])) if lines else 0

    def agents_held(self, container):
        return self.metric(container, "berth_gateway_agents_connected")

    def gateways_serving(self, count=2):
        """`count` gateway processes running, each listening, and the balancer's health
        check sending to each (its log's last word on each slot is UP). A gateway
        stopped by the test before restarts on its own a few seconds later; a test
        that kills "one of two" must not find the other still starting."""
        gateways = self.containers("gateway")
        listening = "import socket;socket.create_connection(('127.0.0.1', 50051), 1)"
        if len(gateways) != count or any(
                docker("exec", c, "python3", "-c", listening, check=False).returncode
                for c in gateways):
            return False
        [balancer] = self.containers("balancer")
        # slot: its last state ("resolves again" marks a slot UP before its check)
        last = dict(BALANCER_STATE.findall(docker("logs", balancer).stdout))
        return list(last.values()).count("UP") >= count

    def busiest_gateway(self):
        return max(self.containers("gateway"), key=self.agents_held)

    def errors(self, service="web"):
        """The error lines its processes logged (for a failing assertion's message)."""
        return [line for c in self.containers(service)
                for line in docker("logs", c).stderr.splitlines() if '"level": "error"' in line]

    @staticmethod
    def bridge_address():
        """This machine's address on the Swarm's bridge: where its containers reach it."""
        return docker("network", "inspect", "docker_gwbridge", "--format",
                      "{{(index .IPAM.Config 0).Gateway}}").stdout.strip()

    def container_at(self, address):
        """The container whose bridge address `address` is (None: no such one)."""
        attached = json.loads(docker("network", "inspect", "docker_gwbridge", "--format",
                                     "{{json .Containers}}").stdout)
        return next((cid for cid, c in attached.items()
                     if c["IPv4Address"].split("/")[0] == address), None)

    def admin(self, *args):
        [container, *_] = self.containers("web")
        out = docker("exec", container, "berth", "admin", *args)
        return json.loads(out.stdout)

    def answering(self):
        try:
            return requests.get(self.url + "/healthz", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def api(self, method, key, path, body=None, headers=None):
        """A public API request through the balancer."""
        return requests.request(method, self.url + P + path, json=body, timeout=30,
                                headers={"Authorization": f"Bearer {key}", **(headers or {})})

    def new_org(self, name):
        """An organization with a full-access key that may register servers and a
        read-only one: {"id", "key", "read"}."""
        org = self.admin("org", "create", "--name", name, "--server-quota", "10")
        key = self.admin("key", "create", "--org", org["id"], "--name", "ops", "--type",
                         "full_access", "--scope", "organization", "--server-registration")["key"]
        read = self.admin("key", "create", "--org", org["id"], "--name", "read", "--type",
                          "read_only", "--scope", "organization")["key"]
        return {"id": org["id"], "key": key, "read": read}

    def key(self, org, name, kind="full_access"):
        """A fresh organization key: its own rate-limit window."""
        return self.admin("key", "create", "--org", org["id"], "--name", name, "--type", kind,
                          "--scope", "organization")["key"]

    def registration_token(self, org, name):
        r = self.api("POST", org["key"], "/servers/registration-tokens", {"server_name": name})
        assert r.status_code == 201, r.text
        return r.json()["token"]

    def served_by(self, answers):
        """The web containers that logged the request id of any of `answers`. Access
        lines are written in batches (at most 0.1 s late): wait until each id is seen."""
        ids = {r.headers["X-Request-Id"] for r in answers}
        logs = {}

        def every_id_logged():
            logs.update((c, docker("logs", c).stderr) for c in self.containers("web"))
            return all(any(i in log for log in logs.values()) for i in ids)

        wait_for(every_id_logged, timeout=10, interval=0.2, what="the access lines")
        return [c for c, log in logs.items() if any(i in log for i in ids)]

    def remove(self):
        docker("stack", "rm", STACK, check=False)
        # `stack rm` returns at once: wait until its containers and network are gone.
        wait_for(lambda: not docker("ps", "-aq", "--filter",
                                    f"label=com.docker.stack.namespace={STACK}").stdout.strip(),
                 timeout=90, interval=1, what="stack containers removed")
        wait_for(lambda: not docker("network", "ls", "-q", "--filter",
                                    f"label=com.docker.stack.namespace={STACK}").stdout.strip(),
                 timeout=60, interval=1, what="stack network removed")
        # The database's volume too: the next run's PostgreSQL has another password.
        volumes = docker("volume", "ls", "-q", "--filter",
                         f"label=com.docker.stack.namespace={STACK}").stdout.split()
        if volumes:
            docker("volume", "rm", *volumes, check=False)


class Agent:
    """A real `berth-agent`, registered with a token through the balancer."""

    def __init__(self, tmp_path, name):
        self.dir = tmp_path / name
        self.dir.mkdir()
        self.env = {**os.environ, "BERTH_AGENT_CONFIG": str(self.dir / "agent.json"),
                    "BERTH_AGENT_DATA_DIR": str(self.dir / "data"),
                    "BERTH_AGENT_ENV_ROOT": str(self.dir / "srv")}
        self.proc = None

    def register(self, url, token):
        subprocess.run([AGENT, "register", "--control-plane", url], input=token, text=True,
                       env=self.env, check=True, capture_output=True, timeout=60)
        return json.loads((self.dir / "agent.json").read_text())["server_id"]

    def start(self):
        self.log = open(self.dir / "agent.log", "ab")
        self.proc = subprocess.Popen([AGENT, "run"], env=self.env, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        return self

    def status(self):
        out = subprocess.run([AGENT, "status", "--json"], env=self.env, capture_output=True,
                             text=True, timeout=30)
        return json.loads(out.stdout) if out.stdout else {}

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


class ComposeProject(Stack):
    """The same topology run by `docker-compose` on one engine, without a Swarm."""

    NAME = "berthone"

    def _compose(self, *args, timeout=300):
        return subprocess.run(["docker-compose", "-p", self.NAME, "-f",
                               str(ROOT / "deploy" / "compose.yaml"), "-f",
                               str(ROOT / "deploy" / "compose.v1.yaml"), *args],
                              check=True, capture_output=True, text=True, timeout=timeout,
                              env=self.env)

    def deploy(self, *args):
        self._compose("up", "-d", *args)

    def containers(self, service):
        out = docker("ps", "-q", "--filter", f"label=com.docker.compose.project={self.NAME}",
                     "--filter", f"label=com.docker.compose.service={service}")
        return out.stdout.split()

    def remove(self):
        self._compose("down", "--volumes", "--remove-orphans", "--timeout", "10")
