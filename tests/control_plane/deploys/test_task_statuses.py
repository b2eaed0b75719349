"""Task statuses where the spec fixes them, through HTTP: the status snapshot's
`last_deploy.status` is one of the spec's five (`pending` while the server's
agent is away, a cancelled task `failed` with `outcome: cancelled`), the task
poll endpoint keeps `cancelled`, and `/api/v1` shows a destroyed environment's
status as every other surface does (`pending`)."""

from control_plane.infra import clock
from control_plane.models import AgentCommand, Server
from control_plane.services.accounts import orgs
from control_plane.services.tasks import engine
from tests.conftest import auth

P, V1 = "/api/public/v1", "/api/v1"
FIVE = ["pending", "queued", "running", "completed", "failed"]


def connect(server):
    now = clock.now()
    Server.update(connected_since=now, last_seen_at=now).where(Server.id == server.id).execute()


def disconnect(server):
    Server.update(connected_since=None).where(Server.id == server.id).execute()


def test_the_status_snapshot_shows_only_the_spec_s_five_task_statuses(client, world):
    org = world.org()
    server = world.server(org)
    project = world.project(org, server)
    key = auth(world.key(org)[0])
    user = world.user(org, permissions=("project.deployments.cancel",))
    token = {"Authorization": f"Bearer {orgs.issue_user_token(user.id)}"}
    r = client.post(f"{P}/projects/{project.id}/environments", headers=key, json={"name": "e"})
    assert r.status_code == 201, r.json
    env_id = r.json["id"]

    def last_deploy():
        r = client.get(f"{P}/environments/{env_id}/status", headers=key)
        assert r.status_code == 200, r.json
        return r.json["last_deploy"]

    def polled(task_id):
        return client.get(f"{P}/deployments/{task_id}", headers=key).json["status"]

    # Accepted, but the server's agent is not connected: nothing was dispatched.
    first = last_deploy()
    assert (first["status"], first["outcome"]) == ("pending", None)
    assert polled(first["id"]) == "pending"
    connect(server)  # its agent is there to take it
    assert (last_deploy()["status"], polled(first["id"])) == ("queued", "queued")
    engine.record_ack(server.id, AgentCommand.get(AgentCommand.deployment == first["id"]).id)
    assert last_deploy()["status"] == "running"

    r = client.post(f"{V1}/deployments/{first['id']}/cancel", headers=token)
    assert r.status_code == 200, r.json
    cancelled = last_deploy()
    assert (cancelled["status"], cancelled["outcome"]) == ("failed", "cancelled")
    assert cancelled["completed_at"] is not None
    assert polled(first["id"]) == "cancelled"  # the poll endpoint keeps it (anchor notes)

    # An action on a server whose agent went away answers what the snapshot shows.
    disconnect(server)
    r = client.post(f"{P}/environments/{env_id}/actions/deploy", headers=key)
    assert r.status_code == 202 and r.json["status"] == "pending", r.json
    assert last_deploy()["status"] == "pending"
    connect(server)
    r = client.get(f"{P}/environments/{env_id}/status", headers=key)
    assert r.json["last_deploy"]["status"] == "queued"


def test_the_openapi_document_declares_exactly_those_five(client):
    doc = client.get(f"{P}/openapi.json").json
    last = doc["components"]["schemas"]["LastDeploy"]["properties"]
    assert last["status"]["enum"] == FIVE
    assert last["outcome"]["enum"] == ["completed", "failed", "cancelled", None]
    task = doc["components"]["schemas"]["Task"]["properties"]["status"]
    assert task["enum"] == [*FIVE, "cancelled"]


def test_api_v1_patch_shows_a_destroyed_environment_as_pending(client, world):
    org = world.org()
    project = world.project(org)
    destroyed = world.environment(project, status="destroyed", active=False)
    user = world.user(org, permissions=("project.environments.deploy",))
    token = {"Authorization": f"Bearer {orgs.issue_user_token(user.id)}"}
    r = client.patch(f"{V1}/projects/{project.id}/environments/{destroyed.id}", headers=token,
                     json={"auto_deploy": True})
    assert r.status_code == 200, r.json
    assert (r.json["status"], r.json["is_active"]) == ("pending", False)
    doc = client.get(f"{V1}/openapi.json").json
    assert "`pending`" in doc["components"]["schemas"]["OpsEnvironment"]["properties"][
        "status"]["description"]
