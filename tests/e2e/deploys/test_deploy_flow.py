"""The main flow through every part: POST an environment to the public API,
the gateway hands the deploy command to the real agent, the agent brings up
PostgreSQL and the ERP from the local images, and the environment is running."""

import urllib.request

import pytest

from agent.deploy.environments import Environments
from control_plane.models import AgentCommand, Event, Project, Server
from control_plane.services import agents as agent_svc
from tests.conftest import auth
from tests.support.agents import polled_get, registered_server, wait_for
from tests.support.git_repo import shop_repo

P = "/api/public/v1"


class deployable_keys:  # noqa: N801 - a namespace for the fixture's read-only key
    pass


@pytest.fixture
def deployable(app, world, agents, http_app, tmp_path, erp_image, postgres_image, docker_client):
    settings = app.extensions["berth"].settings
    settings["ERP_IMAGE"], settings["POSTGRES_IMAGE"] = erp_image, postgres_image
    bare = shop_repo(tmp_path)

    org = world.org()
    server, credential = registered_server(org)
    project = world.project(org, server)
    Project.update(git_repo_url=f"file://{bare}").where(Project.id == project.id).execute()
    raw, _ = world.key(org)
    deployable_keys.reader = world.key(org, "read_only")[0]  # polls: 120 a minute
    root = tmp_path / "srv"
    agents(server, credential, env={"BERTH_AGENT_ENV_ROOT": str(root)})
    wait_for(lambda: agent_svc.is_connected(Server.get_by_id(server.id)), what="connected")
    created = []
    yield org, project, raw, created
    envs = Environments(docker_client, root=root)
    for env_id in created:
        envs.destroy(env_id, True, lambda *a: None)


def test_create_environment_deploys_it(client, app, deployable, docker_client):
    org, project, raw, created = deployable
    r = client.post(f"{P}/projects/{project.id}/environments", headers=auth(raw),
                    json={"name": "Production", "environment_type": "production",
                          "cpu_cores": 1.5, "ram_mb": 768, "disk_gb": 10})
    assert r.status_code == 201, r.json
    env = r.json
    created.append(env["id"])
    assert env["status"] == "deploying" and env["branch"] == "main"
    assert (env["cpu_cores"], env["ram_mb"], env["disk_gb"]) == (1.5, 768, 10)
    assert env["last_commit"] is None
    assert env["url"] == (f"https://{env['id'].replace('-', '')[:12]}."
                          f"{app.config['APPS_DOMAIN']}")

    status = polled_get(client, f"{P}/environments/{env['id']}/status", auth(raw))
    task = status["last_deploy"]["id"]
    done = wait_for(lambda: (t := polled_get(client, f"{P}/deployments/{task}", auth(raw)))
                    ["status"] in ("completed", "failed") and t, timeout=120, interval=1.0,
                    what="deployment finished")
    assert done["status"] == "completed", done
    assert len(done["git_commit"]) == 40 and done["started_at"] and done["completed_at"]

    status = polled_get(client, f"{P}/environments/{env['id']}/status", auth(raw))
    assert status["status"] == "running" and status["container_running"] is True
    assert status["last_deploy"]["status"] == "completed"
    log = polled_get(client, f"{P}/environments/{env['id']}/logs", auth(raw))
    assert log["task_id"] == task and "health" in log["log"] and log["truncated"] is False
    short = polled_get(client, f"{P}/environments/{env['id']}/logs?lines=1", auth(raw))
    assert short["lines"] == 1 and short["truncated"] is True

    address = AgentCommand.get(AgentCommand.deployment == task).result["result"]["erp_address"]
    with urllib.request.urlopen(f"http://{address}/web/health", timeout=10) as h:
        assert h.status == 200
    # The allocation is the ERP container's limits.
    erp = docker_client.containers.list(filters={"label": [f"berth.environment_id={env['id']}",
                                                           "berth.role=erp"]})[0]
    assert erp.attrs["HostConfig"]["NanoCpus"] == 1_500_000_000
    assert erp.attrs["HostConfig"]["Memory"] == 768 * 1024 * 1024
    names = {e.name for e in Event.select().where(Event.organization == org.id)}
    assert {"environment.created", "deploy.started", "deploy.completed",
            "environment.status_changed"} <= names
    listed = client.get(f"{P}/projects/{project.id}/environments?status=RUNNING",
                        headers=auth(raw)).json
    assert [e["id"] for e in listed] == [env["id"]]


def test_unknown_branch_fails_with_a_readable_reason(client, deployable):
    org, project, raw, created = deployable
    r = client.post(f"{P}/projects/{project.id}/environments", headers=auth(raw),
                    json={"name": "Broken", "branch": "no-such-branch"})
    created.append(r.json["id"])
    task = client.get(f"{P}/environments/{r.json['id']}/status",
                      headers=auth(raw)).json["last_deploy"]["id"]
    done = wait_for(lambda: (t := polled_get(client, f"{P}/deployments/{task}", auth(raw)))
                    ["status"] in ("completed", "failed") and t, timeout=120, interval=1.0,
                    what="deployment finished")
    assert done["status"] == "failed" and "no-such-branch" in done["error_message"]
    env = polled_get(client, f"{P}/environments/{r.json['id']}", auth(raw))
    assert env["status"] == "failed"
    log = polled_get(client, f"{P}/environments/{r.json['id']}/logs", auth(raw))
    assert "cloning the repository failed" in log["log"]


def _finish(client, accepted):
    assert accepted.status_code == 202, accepted.json
    body = accepted.json
    assert body["status"] == "queued"
    assert body["poll_url"] == f"/api/public/v1/deployments/{body['task_id']}"
    reader = auth(deployable_keys.reader)
    return wait_for(lambda: (t := polled_get(client, body["poll_url"], reader))
                    ["status"] in ("completed", "failed") and t, timeout=120, interval=1.0,
                    what="task finished")


def test_actions_and_delete(client, deployable, docker_client):
    org, project, raw, created = deployable
    env = client.post(f"{P}/projects/{project.id}/environments", headers=auth(raw),
                      json={"name": "Staging"}).json
    created.append(env["id"])
    base = f"{P}/environments/{env['id']}"
    first = polled_get(client, f"{base}/status", auth(raw))["last_deploy"]["id"]
    # One queued-or-running task per environment.
    busy = client.post(f"{base}/actions/restart", headers=auth(raw))
    assert busy.status_code == 409 and busy.json["error"] == "task_in_progress"
    reader = auth(deployable_keys.reader)
    wait_for(lambda: polled_get(client, f"{P}/deployments/{first}", reader)["status"]
             == "completed", timeout=120, interval=1.0, what="first deploy")

    assert _finish(client, client.post(f"{base}/actions/stop", headers=auth(raw)))[
        "status"] == "completed"
    assert polled_get(client, base, reader)["status"] == "stopped"
    label = {"label": f"berth.environment_id={env['id']}"}
    assert {c.status for c in docker_client.containers.list(all=True, filters=label)} == {"exited"}
    # An action that would change nothing is refused (the lifecycle), and no task is made.
    again = client.post(f"{base}/actions/stop", headers=auth(raw))
    assert again.status_code == 409 and again.json["error"] == "invalid_transition"

    for action in ("start", "restart", "redeploy"):
        done = _finish(client, client.post(f"{base}/actions/{action}", headers=auth(raw)))
        assert done["status"] == "completed" and done["kind"] == action
        assert polled_get(client, base, reader)["status"] == "running"
    assert client.post(f"{base}/actions/explode", headers=auth(raw)).status_code == 404

    r = client.delete(base, headers=auth(raw))
    assert r.status_code == 400 and r.json["error"] == "confirm_required"
    done = _finish(client, client.delete(base, headers={**auth(raw), "X-Confirm-Delete": "true"}))
    assert done["status"] == "completed" and done["kind"] == "delete"
    polled_get(client, base, reader, status=404)
    assert docker_client.containers.list(all=True, filters=label) == []
    assert "environment.deleted" in {e.name for e in Event.select().where(Event.organization == org.id)}


def test_a_failed_start_leaves_the_environment_in_error(client, deployable, docker_client):
    """A start that fails on the server is recorded (task failed with the reason,
    environment `error`), and the agent's stream carries on."""
    org, project, raw, created = deployable
    env = client.post(f"{P}/projects/{project.id}/environments", headers=auth(raw),
                      json={"name": "Fragile"}).json
    created.append(env["id"])
    base = f"{P}/environments/{env['id']}"
    reader = auth(deployable_keys.reader)
    first = polled_get(client, f"{base}/status", reader)["last_deploy"]["id"]
    wait_for(lambda: polled_get(client, f"{P}/deployments/{first}", reader)["status"]
             == "completed", timeout=120, interval=1.0, what="first deploy")
    assert _finish(client, client.post(f"{base}/actions/stop", headers=auth(raw)))[
        "status"] == "completed"
    # Out of band, the environment's network goes: its containers cannot start.
    docker_client.networks.get(f"berth-{env['id'].replace('-', '')[:12]}").remove()

    failed = _finish(client, client.post(f"{base}/actions/start", headers=auth(raw)))
    assert failed["status"] == "failed" and failed["error_message"]
    assert polled_get(client, base, reader)["status"] == "error"
    changes = [(e.data["from"], e.data["to"]) for e in Event.select().where(
        Event.name == "environment.status_changed").order_by(Event.created_at)
        if e.data["environment_id"] == env["id"]]
    assert changes[-1] == ("stopped", "error")

    # The result was recorded and the stream carried on: the next task runs.
    assert _finish(client, client.post(f"{base}/actions/stop", headers=auth(raw)))[
        "status"] == "completed"
    assert polled_get(client, base, reader)["status"] == "stopped"


def test_auto_deploy_applies_when_the_server_registers(client, app, world, gateway, tmp_path,
                                                       erp_image, postgres_image, docker_client):
    import grpc

    from control_plane.infra import config
    from protocol.v1 import agent_pb2 as pb
    from protocol.v1 import agent_pb2_grpc as pb_grpc
    from tests.support.agents import AgentProcess

    settings = app.extensions["berth"].settings
    settings["ERP_IMAGE"], settings["POSTGRES_IMAGE"] = erp_image, postgres_image
    gateway.images = config.images(settings)  # as read at start-up with these settings
    org = world.org()
    project = world.project(org)
    raw, _ = world.key(org, server_registration=True)
    token = client.post(f"{P}/servers/registration-tokens", headers=auth(raw), json={
        "server_name": "auto", "auto_deploy": {"project_id": str(project.id),
                                               "environment_name": "Production"}}).json
    with grpc.insecure_channel(f"127.0.0.1:{gateway.port}") as ch:
        reply = pb_grpc.AgentGatewayStub(ch).Register(pb.RegisterRequest(
            token=token["token"], facts=pb.HostFacts(hostname="auto-box", cpu_cores=2,
                                                     ram_mb=2048, disk_gb=20)), timeout=30)
    root = tmp_path / "srv"
    agent = AgentProcess(tmp_path, f"127.0.0.1:{gateway.port}", reply.server_id,
                         reply.credential, env={"BERTH_AGENT_ENV_ROOT": str(root)}).start()
    reader = auth(world.key(org, "read_only")[0])
    try:
        env = wait_for(lambda: next(iter(polled_get(
            client, f"{P}/projects/{project.id}/environments?status=running", reader)), None),
            timeout=120, interval=1.0, what="auto-deployed environment running")
        assert env["name"] == "Production" and env["server_id"] == reply.server_id
        task = client.get(f"{P}/environments/{env['id']}/status",
                          headers=reader).json["last_deploy"]["id"]
        assert client.get(f"{P}/deployments/{task}", headers=reader).json["trigger"] == "auto_deploy"
    finally:
        agent.kill()
        for e in client.get(f"{P}/projects/{project.id}/environments", headers=reader).json:
            Environments(docker_client, root=root).destroy(e["id"], True, lambda *a: None)


def test_an_ai_agent_stops_and_deploys_through_mcp(client, deployable, http_app):
    """The MCP server's tools (the SDK's client on /mcp, over real HTTP) drive the real
    agent: stop, then deploy; the environment is running again, and MCP reads it so."""
    from tests.control_plane.mcp.test_mcp import answer, session

    org, project, raw, created = deployable
    env = client.post(f"{P}/projects/{project.id}/environments", headers=auth(raw),
                      json={"name": "Agent"}).json
    created.append(env["id"])
    reader = auth(deployable_keys.reader)
    first = polled_get(client, f"{P}/environments/{env['id']}/status", reader)["last_deploy"]["id"]
    wait_for(lambda: polled_get(client, f"{P}/deployments/{first}", reader)["status"]
             == "completed", timeout=120, interval=1.0, what="first deploy")

    def through_mcp(tool, **arguments):
        (result,) = session(http_app, raw, (tool, {"environment_id": env["id"], **arguments}))
        assert not result.is_error, answer(result)
        task = answer(result)["task_id"]
        return wait_for(lambda: (t := polled_get(client, f"{P}/deployments/{task}", reader))
                        ["status"] in ("completed", "failed") and t, timeout=120, interval=1.0,
                        what=f"{tool} finished")

    assert through_mcp("stop_environment")["status"] == "completed"
    assert polled_get(client, f"{P}/environments/{env['id']}", reader)["status"] == "stopped"
    assert through_mcp("deploy_environment", confirm=True)["status"] == "completed"
    (status,) = session(http_app, deployable_keys.reader,
                        ("environment_status", {"environment_id": env["id"]}))
    assert answer(status)["status"] == "running" and answer(status)["container_running"]
