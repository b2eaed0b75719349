"""Metrics and runtime-log endpoints: scope, readiness, limits, and the errors
when no agent answers (the live paths are in tests/agent/test_live.py)."""

import pytest

from tests.conftest import auth

P = "/api/public/v1"


@pytest.fixture
def setup(world):
    org = world.org()
    server = world.server(org)
    project = world.project(org, server)
    env = world.environment(project, "running", server=server)
    raw, _ = world.key(org, "read_only")
    return org, server, project, env, raw


def test_server_metrics_scope(client, world, setup):
    org, server, project, env, raw = setup
    shared = world.server(None)
    foreign = world.server(world.org())
    for sid in (shared.id, foreign.id, "00000000-0000-0000-0000-000000000000"):
        r = client.get(f"{P}/servers/{sid}/metrics", headers=auth(raw))
        assert r.status_code == 404 and r.json["error"] == "not_found"
    # A project-scoped key reads a server only while it hosts the project's environment.
    other_project = world.project(org, server)
    scoped, _ = world.key(org, "read_only", scope="project", project=other_project)
    assert client.get(f"{P}/servers/{server.id}/metrics", headers=auth(scoped)).status_code == 404
    world.environment(other_project, "running", server=server)
    r = client.get(f"{P}/servers/{server.id}/metrics", headers=auth(scoped))
    assert r.status_code == 502 and r.json["error"] == "metrics_unavailable"


def test_server_metrics_without_agent_is_502_then_target_limit(client, world, setup):
    org, server, project, env, raw = setup
    other_key, _ = world.key(org, "read_only")
    for i in range(6):  # 6 per minute per server, across all keys
        r = client.get(f"{P}/servers/{server.id}/metrics", headers=auth(raw if i % 2 else other_key))
        assert r.status_code == 502 and r.json["error"] == "metrics_unavailable"
    r = client.get(f"{P}/servers/{server.id}/metrics", headers=auth(raw))
    assert r.status_code == 429 and r.json["error"] == "target_rate_limit"
    assert r.json["retry_after"] >= 1 and r.headers["Retry-After"]


@pytest.mark.parametrize("status", ["pending", "deploying"])
def test_environment_not_ready(client, world, setup, status):
    org, server, project, env, raw = setup
    env_nr = world.environment(project, status, server=server)
    for path in ("metrics", "runtime-logs"):
        r = client.get(f"{P}/environments/{env_nr.id}/{path}", headers=auth(raw))
        assert r.status_code == 409 and r.json["error"] == "environment_not_ready"


def test_environment_without_server(client, world, setup):
    from control_plane.models import Environment
    org, server, project, env, raw = setup
    Environment.update(server=None).where(Environment.id == env.id).execute()
    for path in ("metrics", "runtime-logs"):
        r = client.get(f"{P}/environments/{env.id}/{path}", headers=auth(raw))
        assert r.status_code == 409 and r.json["error"] == "no_server"


def test_environment_scope(client, world, setup):
    org, server, project, env, raw = setup
    foreign_raw, _ = world.key(world.org(), "read_only")
    other_project = world.project(org, server)
    scoped, _ = world.key(org, "read_only", scope="project", project=other_project)
    for key in (foreign_raw, scoped):
        for path in ("metrics", "runtime-logs"):
            r = client.get(f"{P}/environments/{env.id}/{path}", headers=auth(key))
            assert r.status_code == 404


@pytest.mark.parametrize("query", ["lines=0", "lines=1001", "lines=x", "source=nginx"])
def test_runtime_logs_validation_is_422(client, setup, query):
    *_, env, raw = setup
    r = client.get(f"{P}/environments/{env.id}/runtime-logs?{query}", headers=auth(raw))
    assert r.status_code == 422 and r.json["error"] == "validation_error"


def test_runtime_logs_without_agent_is_502_server_unreachable(client, setup):
    *_, env, raw = setup
    r = client.get(f"{P}/environments/{env.id}/runtime-logs", headers=auth(raw))
    assert r.status_code == 502 and r.json["error"] == "server_unreachable"


def test_runtime_logs_and_metrics_limits(client, world, setup):
    org, server, project, env, raw = setup
    for _ in range(6):
        assert client.get(f"{P}/environments/{env.id}/runtime-logs", headers=auth(raw)).status_code == 502
    r = client.get(f"{P}/environments/{env.id}/runtime-logs", headers=auth(raw))
    assert r.status_code == 429 and r.json["error"] == "target_rate_limit"
    # Metrics of the same environment have their own 6 per minute...
    for _ in range(6):
        assert client.get(f"{P}/environments/{env.id}/metrics", headers=auth(raw)).status_code == 502
    assert client.get(f"{P}/environments/{env.id}/metrics", headers=auth(raw)).status_code == 429


def test_twenty_per_organization_per_server(client, world, setup):
    org, server, project, env, raw = setup
    keys = [world.key(org, "read_only")[0] for _ in range(3)]
    envs = [world.environment(project, "running", server=server) for _ in range(4)]
    codes = []
    for i in range(21):  # spread over environments to stay under the per-environment 6
        e = envs[i % 4]
        path = "metrics" if i % 2 else "runtime-logs"
        codes.append(client.get(f"{P}/environments/{e.id}/{path}",
                                headers=auth(keys[i % 3])).status_code)
    assert codes[:20] == [502] * 20 and codes[20] == 429


@pytest.mark.parametrize("cpu, memory, disk, expected", [
    (0, 0, 0, "healthy"),
    (79.99, 79.99, 79.99, "healthy"),
    (80, 0, 0, "warning"), (0, 80, 0, "warning"), (0, 0, 80, "warning"),
    (94.99, 94.99, 89.99, "warning"),
    (95, 0, 0, "critical"), (0, 95, 0, "critical"), (0, 0, 90, "critical"),
    (100, 100, 100, "critical"),
])
def test_server_status_thresholds(cpu, memory, disk, expected):
    """Spec: warning at CPU or memory >= 80% or disk >= 80%; critical at CPU or
    memory >= 95% or disk >= 90%. Fed the protocol message the agent sends, as the
    agent link hands it to the services."""
    from control_plane.agent_link import host_metrics_data
    from control_plane.services.servers.monitoring import server_status
    from protocol.v1 import agent_pb2 as pb

    m = pb.HostMetrics(cpu_percent=cpu, memory_percent=memory, disk_percent=disk)
    assert server_status(host_metrics_data(m)) == expected
