"""Deploy faults the agent must survive: a port clash. (A bad branch, a missing
image and an unreachable repository are in test_environments.py.)

The ERP's port 8069 is published on the server's loopback, on a port the
engine picks unless the deploy names one (`http_port`). A named port that
another process or container already holds must fail the deploy with a reason
a person can act on, leave no ERP container behind that could not start, and a
retry must work once the port is free."""

import socket
import urllib.request
import uuid

import pytest

from agent.environments import DeployError, Environments
from control_plane.models import AgentCommand, Server
from control_plane.services import agents as agent_svc
from control_plane.services.deploys import environments as env_svc
from tests.agent_support import polled_get, registered_server, wait_for
from tests.conftest import auth

P = "/api/public/v1"


@pytest.fixture
def envs(docker_client, tmp_path):
    e = Environments(docker_client, root=tmp_path / "srv", health_timeout=60)
    created = []
    yield e, created
    for env_id in created:
        e.destroy(env_id, True, lambda *a: None)


@pytest.fixture
def held_port():
    """A loopback port a plain process is listening on."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    yield holder.getsockname()[1], holder
    holder.close()


def spec(env_id, erp_image, postgres_image, **extra):
    return {"environment_id": env_id, "erp_image": erp_image, "postgres_image": postgres_image,
            "git": None, **extra}


def roles(docker_client, env_id):
    found = docker_client.containers.list(
        all=True, filters={"label": f"berth.environment_id={env_id}"})
    return {c.labels["berth.role"]: c.status for c in found}


def healthy(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/web/health", timeout=10) as r:
        return r.status == 200


@pytest.mark.parametrize("holder", ["process", "container"])
def test_port_clash_fails_readably_and_a_retry_works(envs, docker_client, erp_image,
                                                     postgres_image, held_port, holder,
                                                     labeled_container):
    e, created = envs
    env_id = str(uuid.uuid4())
    created.append(env_id)
    port, sock = held_port
    if holder == "container":  # another environment's container publishes it
        sock.close()
        labeled_container(uuid.uuid4(), "erp", ["sleep", "600"],
                          ports={"8069/tcp": ("127.0.0.1", port)})
    lines = []
    for _ in range(2):  # the same fault again: still readable, nothing piles up
        with pytest.raises(DeployError, match=f"port {port} on 127.0.0.1 is already in use"):
            e.deploy(spec(env_id, erp_image, postgres_image, http_port=port),
                     lambda level, msg: lines.append(msg))
        # No ERP container that could not start is left holding the name; the
        # database (ready, with its data) stays for the retry.
        assert roles(docker_client, env_id) == {"postgres": "running"}
    assert "removed the ERP container that could not start" in lines

    if holder == "process":
        sock.close()
    else:
        labeled_container.remove_all()
    result = e.deploy(spec(env_id, erp_image, postgres_image, http_port=port), lambda *a: None)
    assert result["http_port"] == port and healthy(port)
    assert roles(docker_client, env_id) == {"postgres": "running", "erp": "running"}


def test_port_clash_reason_reaches_the_task_log(client, app, world, agents, tmp_path, held_port,
                                                erp_image, postgres_image, docker_client):
    """Through the real agent: the deployment fails, and its task log says why."""
    settings = app.extensions["berth"].settings
    settings["ERP_IMAGE"], settings["POSTGRES_IMAGE"] = erp_image, postgres_image
    port, _ = held_port
    org = world.org()
    server, credential = registered_server(org)
    project = world.project(org, server)
    _, key = world.key(org)
    reader = auth(world.key(org, "read_only")[0])
    # Queued while the agent is away, with the port named, then delivered on connect.
    env = env_svc.create_environment(key, project.id, name="Pinned", berth=app.extensions["berth"])
    command = AgentCommand.get(AgentCommand.server == server.id)
    AgentCommand.update(payload={**command.payload, "http_port": port}).where(
        AgentCommand.id == command.id).execute()
    root = tmp_path / "srv"
    agents(server, credential, env={"BERTH_AGENT_ENV_ROOT": str(root)})
    try:
        wait_for(lambda: agent_svc.is_connected(Server.get_by_id(server.id)), what="connected")
        task = wait_for(lambda: (t := polled_get(client, f"{P}/deployments/{command.deployment_id}",
                                                 reader))["status"]
                        in ("completed", "failed") and t, timeout=120, interval=0.3,
                        what="deployment finished")
        assert task["status"] == "failed"
        assert f"port {port} on 127.0.0.1 is already in use" in task["error_message"]
        log = client.get(f"{P}/environments/{env.id}/logs", headers=reader).json["log"]
        assert f"port {port} on 127.0.0.1 is already in use" in log.splitlines()[-1]
        assert client.get(f"{P}/environments/{env.id}", headers=reader).json["status"] == "failed"
        assert roles(docker_client, str(env.id)) == {"postgres": "running"}
    finally:
        Environments(docker_client, root=root).destroy(str(env.id), True, lambda *a: None)
