"""Live reads through the whole chain: HTTP → gateway → the real agent →
the real Docker engine and containers carrying the agent's labels."""

import re

import pytest

from control_plane.models import Server
from control_plane.services import agents as agent_svc
from tests.conftest import auth
from tests.support.agents import registered_server, wait_for

P = "/api/public/v1"
MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture
def live(world, agents):
    org = world.org()
    server, credential = registered_server(org)
    project = world.project(org, server)
    env = world.environment(project, "running", server=server)
    raw, _ = world.key(org, "read_only")

    def connect(**agent_env):
        agents(server, credential, env=agent_env or None)
        wait_for(lambda: agent_svc.is_connected(Server.get_by_id(server.id)),
                 what="agent connected")

    return server, project, env, raw, connect


def test_server_metrics(client, live):
    server, _, _, raw, connect = live
    connect()
    r = client.get(f"{P}/servers/{server.id}/metrics", headers=auth(raw))
    assert r.status_code == 200, r.json
    m = r.json
    assert m["server_id"] == str(server.id) and m["status"] in ("healthy", "warning", "critical")
    assert 0 <= m["cpu_percent"] <= 100 and 0 < m["memory_percent"] < 100
    assert m["memory_total_bytes"] > m["memory_used_bytes"] > 0
    assert m["disk_total_bytes"] > m["disk_used_bytes"] > 0
    assert m["network_rx_bytes_per_second"] >= 0 and m["containers_running"] <= m["container_count"]
    assert MS.match(m["queried_at"])


def test_environment_metrics_of_its_own_containers(client, live, labeled_container):
    _, _, env, raw, connect = live
    labeled_container(env.id, "erp", ["sh", "-c", "while :; do :; done"],
                      mem_limit="64m")
    labeled_container(env.id, "postgres", ["sleep", "600"])
    labeled_container("00000000-0000-0000-0000-00000000beef", "erp", ["sleep", "600"])
    connect()

    def measured():  # the agent's first disk measurement (an exec in the postgres
        # container, which its CPU figure would show) is over
        r = client.get(f"{P}/environments/{env.id}/metrics", headers=auth(raw))
        assert r.status_code == 200, r.json
        return r.json if r.json["disk"]["measured_at"] else None

    wait_for(measured, timeout=30, interval=0.5, what="the first disk measurement")
    r = client.get(f"{P}/environments/{env.id}/metrics", headers=auth(raw))
    assert r.status_code == 200, r.json
    body = r.json
    assert body["environment_id"] == str(env.id) and body["status"] == "running"
    erp, pg = body["erp"], body["postgres"]
    assert erp["status"] == "running" and erp["cpu_percent"] > 10
    assert erp["memory_limit_bytes"] == 64 * 1024 * 1024
    assert 0 < erp["memory_used_bytes"] <= erp["memory_limit_bytes"]
    assert 0 < erp["memory_percent"] <= 100
    assert pg["status"] == "running" and pg["cpu_percent"] < 20
    assert set(body["disk"]) == {"allocated_gb", "database_bytes", "filestore_bytes",
                                 "addons_bytes", "measured_at"}
    assert MS.match(body["queried_at"])


def test_stopped_or_missing_containers_are_null(client, live, labeled_container):
    _, _, env, raw, connect = live
    stopped = labeled_container(env.id, "erp", ["sleep", "600"])
    stopped.stop(timeout=0)
    connect()
    r = client.get(f"{P}/environments/{env.id}/metrics", headers=auth(raw))
    assert r.status_code == 200 and r.json["erp"] is None and r.json["postgres"] is None


def test_runtime_logs(client, live, labeled_container):
    _, _, env, raw, connect = live
    erp = labeled_container(env.id, "erp", ["sh", "-c", "for i in $(seq 1 50); do echo line-$i; "
                                            "done; sleep 600"])
    labeled_container(env.id, "postgres", ["sh", "-c", "echo ready; sleep 600"])
    # Waited on through Docker: the API allows six log reads a minute per environment.
    wait_for(lambda: b"line-50" in erp.logs(), what="container printed its lines")
    connect()
    r = client.get(f"{P}/environments/{env.id}/runtime-logs?lines=10&source=container",
                   headers=auth(raw))
    assert r.status_code == 200
    body = r.json
    assert body["log"].split("\n") == [f"line-{i}" for i in range(41, 51)]
    assert body["lines"] == 10 and body["truncated"] is True and body["source"] == "container"
    assert MS.match(body["fetched_at"])
    r = client.get(f"{P}/environments/{env.id}/runtime-logs?source=postgres", headers=auth(raw))
    assert r.json["log"] == "ready" and r.json["truncated"] is False


def test_runtime_logs_of_a_missing_container(client, live):
    _, _, env, raw, connect = live
    connect()
    r = client.get(f"{P}/environments/{env.id}/runtime-logs", headers=auth(raw))
    assert r.status_code == 409 and r.json["error"] == "container_not_found"


def test_engine_down_maps_to_502(client, live):
    """The agent runs, but its container engine does not answer."""
    server, _, env, raw, connect = live
    connect(DOCKER_HOST="unix:///nonexistent/docker.sock")
    r = client.get(f"{P}/environments/{env.id}/runtime-logs", headers=auth(raw))
    assert r.status_code == 502 and r.json["error"] == "server_unreachable"
    r = client.get(f"{P}/environments/{env.id}/metrics", headers=auth(raw))
    assert r.status_code == 502 and r.json["error"] == "metrics_unavailable"
    # Host metrics do not need the engine.
    assert client.get(f"{P}/servers/{server.id}/metrics", headers=auth(raw)).status_code == 200


def test_engine_that_never_answers_is_504_after_20_seconds(client, live, tmp_path, backend):
    if backend != "sqlite":
        pytest.skip("20 s of waiting; nothing here depends on the database")
    import time

    from tests.support.docker_engine import silent_engine

    server, _, env, raw, connect = live
    with silent_engine(tmp_path / "silent.sock") as url:
        connect(DOCKER_HOST=url)
        started = time.monotonic()
        r = client.get(f"{P}/environments/{env.id}/runtime-logs", headers=auth(raw))
        elapsed = time.monotonic() - started
    assert r.status_code == 504 and r.json["error"] == "engine_timeout"
    assert 15 < elapsed < 30  # the spec's 20 s, not a hung request
