"""The control-plane image (images/control-plane, built by `make test` from the local
Debian base): it runs as an unprivileged user, serves the installer and the agent
packages at once (built into the image), keeps its data owner-only, and stops
cleanly on SIGTERM."""

import time

import pytest
import requests

from tests.support.docker_engine import _require_image
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

IMAGE = "berth-control-plane:latest"


@pytest.fixture(scope="module")
def control_plane_image(docker_client):
    return _require_image(docker_client, IMAGE)


def _address(container):
    container.reload()
    [net] = container.attrs["NetworkSettings"]["Networks"].values()
    return net["IPAddress"]


def _wait_healthy(url, container, timeout=60):
    def healthy():
        try:
            return requests.get(url + "/healthz", timeout=2).status_code == 200
        except requests.ConnectionError:
            return False

    wait_for(healthy, timeout=timeout, interval=0.2, what="the control plane started",
             detail=lambda: container.logs().decode())


def test_the_image_serves_an_embedded_control_plane(docker_client, control_plane_image):
    container = docker_client.containers.run(
        control_plane_image, detach=True, environment={"CP_PUBLIC_URL": "http://cp.example:8000"},
        labels={"berth.test": "control-plane-image"})
    try:
        url = f"http://{_address(container)}:8000"
        _wait_healthy(url, container)
        script = requests.get(url + "/install.sh", timeout=10)
        wheels = requests.get(url + "/agent/wheelhouse.tar", timeout=30)
        user = container.exec_run(["id", "-u"]).output.decode().strip()
        modes = container.exec_run(["sh", "-c", "stat -c '%a %U %n' /var/lib/berth "
                                    "/var/lib/berth/*"]).output.decode()
        started = time.monotonic()
        container.stop(timeout=30)
        stopped_in = time.monotonic() - started
        result = container.wait(timeout=10)
        log = container.logs().decode()
    finally:
        container.remove(force=True)

    assert "http://cp.example:8000" in script.text
    assert wheels.status_code == 200, wheels.text  # built into the image: no 503 first
    assert "building the agent wheelhouse" not in log
    assert user != "0"
    lines = modes.splitlines()
    assert lines[0].startswith("700 berth")
    assert all(line.startswith("600 berth") for line in lines[1:]), modes
    assert {"berth.sqlite3", "secret_key"} <= {line.rsplit("/", 1)[1] for line in lines[1:]}
    assert result["StatusCode"] == 0, log  # SIGTERM: a clean stop, not a kill
    assert stopped_in < 15
