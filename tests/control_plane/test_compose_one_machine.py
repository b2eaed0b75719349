"""deploy/compose.yaml on one engine without a Swarm (`docker-compose up`, Debian's
1.29): the migration runs once and the processes wait for it, both web processes
answer behind the balancer, an agent registers and is reached through it, and one
more command scales the web processes, which the balancer finds without a reload."""

import re

import pytest
import requests

from tests.agent_support import wait_for
from tests.docker_support import _require_image
from tests.scale_out_support import IMAGES, Agent, ComposeProject, P, docker

pytestmark = pytest.mark.slow


def _answers(url):
    try:
        return requests.get(url + "/healthz", timeout=2).status_code == 200
    except requests.RequestException:
        return False


@pytest.fixture(scope="module")
def project(docker_client):
    for image in IMAGES.values():
        _require_image(docker_client, image)
    p = ComposeProject()
    p.remove()  # whatever an interrupted run left
    try:
        p.deploy()
        wait_for(lambda: _answers(p.url), timeout=240, interval=1,
                 what="the project answering through the balancer")
        yield p
    finally:
        p.remove()


def _served_by(project, answers):
    ids = {r.headers["X-Request-Id"] for r in answers}
    return {c for c in project.containers("web") if any(i in docker("logs", c).stderr for i in ids)}


def _projects(project, key, n):
    answers = [requests.get(project.url + P + "/projects", timeout=30,
                            headers={"Authorization": f"Bearer {key}"}) for _ in range(n)]
    assert [r.status_code for r in answers] == [200] * n, [r.text for r in answers]
    return answers


def test_the_topology_runs_with_compose_and_scales_with_one_command(project, tmp_path):
    [migrate] = docker("ps", "-aq", "--filter", f"label=com.docker.compose.project={project.NAME}",
                       "--filter", "label=com.docker.compose.service=migrate").stdout.split()
    logs = docker("logs", migrate)
    assert re.search(r"applied \d+ migration", logs.stdout + logs.stderr)  # then it exited
    org = project.admin("org", "create", "--name", "one-machine", "--server-quota", "2")
    key = project.admin("key", "create", "--org", org["id"], "--name", "ops", "--type",
                        "full_access", "--scope", "organization", "--server-registration")["key"]
    read = project.admin("key", "create", "--org", org["id"], "--name", "read", "--type",
                         "read_only", "--scope", "organization")["key"]
    assert len(project.containers("web")) == 2
    assert len(_served_by(project, _projects(project, read, 10))) == 2

    token = requests.post(project.url + P + "/servers/registration-tokens", timeout=30,
                          headers={"Authorization": f"Bearer {key}"},
                          json={"server_name": "one"}).json()["token"]
    agent = Agent(tmp_path, "agent")
    server_id = agent.register(project.url, token)
    agent.start()
    try:
        wait_for(lambda: agent.status().get("connected"), timeout=60, interval=0.5,
                 what="the agent connected through the balancer")
        metrics = requests.get(f"{project.url}{P}/servers/{server_id}/metrics", timeout=30,
                               headers={"Authorization": f"Bearer {read}"})
        assert metrics.status_code == 200, metrics.text
    finally:
        agent.stop()

    project.deploy("--no-recreate", "--scale", "web=3")
    assert len(project.containers("web")) == 3
    wait_for(lambda: len(_served_by(project, _projects(project, read, 6))) == 3, timeout=60,
             interval=1, what="the balancer sending requests to the third web process")
