"""One stack of deploy/compose.yaml for the package's tests, on a single-node Swarm
made for them (and kept: see `swarm`), with an organization, its keys and three
real agents registered through the balancer."""

import pytest

from agent.deploy.environments import Environments
from tests.support.agents import wait_for
from tests.support.scale_out import Agent, Stack, docker, require_images


@pytest.fixture(scope="package")
def swarm(docker_client):
    """The engine made a single-node Swarm if it is not one, and kept one afterwards
    (never left): `docker swarm leave` drops the engine's name records of every container already
    on a bridge network, so the environments other tests run on this engine at the
    same time (the other worker) would no longer find their database by name."""
    require_images(docker_client)
    if docker_client.info()["Swarm"]["LocalNodeState"] != "active":
        docker("swarm", "init", "--advertise-addr", "127.0.0.1")


@pytest.fixture(scope="package")
def stack(swarm):
    s = Stack()
    s.remove()  # whatever an interrupted run left
    s.deploy()
    try:
        wait_for(s.answering, timeout=240, interval=1,
                 what="the stack answering through the balancer")
        wait_for(lambda: len(s.containers("web")) == 2 and len(s.containers("gateway")) == 2
                 and len(s.containers("scheduler")) == 2, timeout=120, interval=1,
                 what="two of each process kind")
        yield s
    finally:
        s.remove()


@pytest.fixture(scope="package")
def org(stack):
    return stack.new_org("scale-out")


@pytest.fixture(scope="package")
def agents(stack, org, tmp_path_factory, docker_client):
    tmp = tmp_path_factory.mktemp("agents")
    started, deployed = [], []
    try:
        for i in range(3):
            agent = Agent(tmp, f"agent-{i}")
            agent.server_id = agent.register(stack.url, stack.registration_token(org, f"node-{i}"))
            started.append(agent.start())
        wait_for(lambda: all(a.status().get("connected") for a in started), timeout=60,
                 interval=0.5, what="three agents connected through the balancer")
        yield started, deployed
    finally:
        for agent in started:
            agent.stop()
        for agent, env_id in deployed:  # the environments' containers on this engine
            Environments(docker_client, root=agent.dir / "srv").destroy(env_id, True,
                                                                     lambda *a: None)
