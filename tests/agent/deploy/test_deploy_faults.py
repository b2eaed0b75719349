"""Deploy faults the agent must survive: configuration that would leave its line.
(A bad branch, a missing image and an unreachable repository are in
test_environments.py; the proxy's own faults in tests/e2e/proxy/test_proxy.py.) And
the ERP publishes no port on the server: only the proxy reaches it, on its
network."""

import urllib.request
import uuid

import pytest

from agent.deploy.environments import DeployError, Environments

P = "/api/public/v1"


@pytest.fixture
def envs(docker_client, tmp_path):
    e = Environments(docker_client, root=tmp_path / "srv", health_timeout=60)
    created = []
    yield e, created
    for env_id in created:
        e.destroy(env_id, True, lambda *a: None)


def spec(env_id, erp_image, postgres_image, **extra):
    return {"environment_id": env_id, "erp_image": erp_image, "postgres_image": postgres_image,
            "git": None, **extra}


def roles(docker_client, env_id):
    found = docker_client.containers.list(
        all=True, filters={"label": f"berth.environment_id={env_id}"})
    return {c.labels["berth.role"]: c.status for c in found}


def healthy(address):
    with urllib.request.urlopen(f"http://{address}/web/health", timeout=10) as r:
        return r.status == 200


@pytest.mark.parametrize("extra, said", [
    ({"erp_options": {"dbfilter": "x\nadmin_passwd = open"}}, "refused ERP options"),
    ({"erp_options": {"Bad Key": "1"}}, "refused ERP options"),
    ({"postgres_settings": {"fsync=off -c x": "1"}}, "refused PostgreSQL settings"),
    ({"variables": {"A-B": "x"}}, "refused variables"),
    ({"variables": {"A": "x\x00y"}}, "refused variables"),
])
def test_configuration_that_would_leave_its_line_is_refused_before_anything(
        envs, docker_client, erp_image, postgres_image, extra, said):
    """The control plane checks its allow-lists; the agent still refuses what could
    break out of a configuration file's line or a command-line argument, and
    touches nothing."""
    e, created = envs
    env_id = str(uuid.uuid4())
    created.append(env_id)
    with pytest.raises(DeployError, match=said):
        e.deploy(spec(env_id, erp_image, postgres_image, **extra), lambda *a: None)
    assert roles(docker_client, env_id) == {}
    assert not (e.root / env_id).exists()


def test_the_erp_publishes_no_port_and_answers_on_its_network(envs, docker_client, erp_image,
                                                              postgres_image):
    e, created = envs
    env_id = str(uuid.uuid4())
    created.append(env_id)
    result = e.deploy(spec(env_id, erp_image, postgres_image), lambda *a: None)
    erp = docker_client.containers.get(result["erp_container"])
    assert not any(erp.attrs["NetworkSettings"]["Ports"].values())  # nothing published
    assert erp.attrs["HostConfig"]["PortBindings"] in (None, {})
    network = next(iter(erp.attrs["NetworkSettings"]["Networks"]))
    assert network == f"berth-{env_id.replace('-', '')[:12]}"
    assert healthy(result["erp_address"])
