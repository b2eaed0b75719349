"""deploy/compose.yaml on one engine without a Swarm (`docker-compose up`, Debian's
1.29): the migration runs once and the processes wait for it, both web processes
answer behind the balancer, an agent registers and is reached through it, and one
more command scales the web processes, which the balancer finds without a reload."""

import re

import pytest

from tests.support.agents import wait_for
from tests.support.scale_out import Agent, ComposeProject, docker, require_images

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def project(docker_client):
    require_images(docker_client)
    p = ComposeProject()
    p.remove()  # whatever an interrupted run left
    try:
        p.deploy()
        wait_for(p.answering, timeout=240, interval=1,
                 what="the project answering through the balancer")
        yield p
    finally:
        p.remove()


def _projects(project, key, n):
    answers = [project.api("GET", key, "/projects") for _ in range(n)]
    assert [r.status_code for r in answers] == [200] * n, [r.text for r in answers]
    return answers


def test_the_topology_runs_with_compose_and_scales_with_one_command(project, tmp_path):
    [migrate] = docker("ps", "-aq", "--filter", f"label=com.docker.compose.project={project.NAME}",
                       "--filter", "label=com.docker.compose.service=migrate").stdout.split()
    logs = docker("logs", migrate)
    assert re.search(r"applied \d+ migration", logs.stdout + logs.stderr)  # then it exited
    org = project.new_org("one-machine")
    assert len(project.containers("web")) == 2
    assert len(project.served_by(_projects(project, org["read"], 10))) == 2

    agent = Agent(tmp_path, "agent")
    server_id = agent.register(project.url, project.registration_token(org, "one"))
    agent.start()
    try:
        wait_for(lambda: agent.status().get("connected"), timeout=60, interval=0.5,
                 what="the agent connected through the balancer")
        metrics = project.api("GET", org["read"], f"/servers/{server_id}/metrics")
        assert metrics.status_code == 200, metrics.text
    finally:
        agent.stop()

    project.deploy("--no-recreate", "--scale", "web=3")
    assert len(project.containers("web")) == 3
    wait_for(lambda: len(project.served_by(_projects(project, org["read"], 6))) == 3, timeout=60,
             interval=1, what="the balancer sending requests to the third web process")
