"""The deployment-operations surface end to end: the real gateway, a real
`berth-agent run` and real containers. One environment goes through a deploy,
a second commit, a rollback to the first (the add-ons on disk and in the ERP
return to it), a forced redeploy (data kept), a cancel while the agent is away
(the command is never delivered), a destroy that keeps the environment
directory, a deploy that brings it back, and a destroy with its data."""

import json
import subprocess
import urllib.request

import pytest

from agent.deploy.environments import Environments
from control_plane.infra import clock
from control_plane.models import AddonRepository, AgentCommand, Project, Server
from control_plane.services import agents as agent_svc
from control_plane.services.accounts import orgs
from tests.conftest import auth
from tests.support.agents import registered_server, wait_for
from tests.support.git_repo import Repo, manifest

P, V1 = "/api/public/v1", "/api/v1"
PERMISSIONS = ("project.environments.deploy", "project.deployments.cancel")


def _git(work, *args):
    return subprocess.run(["git", *args], cwd=work, check=True, capture_output=True,
                          text=True).stdout.strip()


class Flow:
    pass


@pytest.fixture
def flow(app, world, agents, gateway, http_app, tmp_path, erp_image, postgres_image,
         docker_client):
    settings = app.extensions["berth"].settings
    settings["ERP_IMAGE"], settings["POSTGRES_IMAGE"] = erp_image, postgres_image
    f = Flow()
    f.root = tmp_path / "srv"
    f.repo = Repo(tmp_path)
    f.c1 = f.repo.commit({"shop": "1.0"}, "v1.0")
    # An add-on repository next to the project's code: a rollback returns it too.
    f.tools = Repo(tmp_path, "tools", work="tools")
    f.a1 = f.tools.commit({"base_tools": "1.0"}, "v1.0")

    f.org = world.org()
    f.server, credential = registered_server(f.org)
    f.project = world.project(f.org, f.server)
    Project.update(git_repo_url=f.repo.url).where(Project.id == f.project.id).execute()
    # Local repositories, which the API and the CLI refuse: written as rows.
    AddonRepository.create(project=f.project, url=f.tools.url, full_name="acme/tools",
                           branch="main", updated_at=clock.now())
    f.key = auth(world.key(f.org)[0])
    user = world.user(f.org, permissions=PERMISSIONS)
    f.user = auth(orgs.issue_user_token(user.id))
    f.gateway = gateway
    f.agent = agents(f.server, credential, env={"BERTH_AGENT_ENV_ROOT": str(f.root)})
    _wait_connected(f)
    f.created = []
    yield f
    envs = Environments(docker_client, root=f.root)
    for env_id in f.created:
        envs.destroy(env_id, True, lambda *a: None)


def _wait_connected(f):
    wait_for(lambda: str(f.server.id) in f.gateway.sessions
             and agent_svc.is_connected(Server.get_by_id(f.server.id)), timeout=30,
             what="agent connected")


def _settled(client, f, deployment_id):
    return wait_for(lambda: (d := client.get(f"{V1}/deployments/{deployment_id}",
                                             headers=f.user).json)["status"]
                    in ("success", "failed", "cancelled", "destroyed") and d,
                    timeout=180, interval=0.3, what=f"deployment {deployment_id} settled")


def _erp(d, path):
    result = AgentCommand.get(AgentCommand.deployment == d["id"]).result["result"]
    with urllib.request.urlopen(f"http://{result['erp_address']}{path}",
                                timeout=10) as r:
        return json.load(r)


def _addons_on_disk(f, env_id):
    addons = f.root / env_id / "addons"
    return _git(addons, "rev-parse", "HEAD"), (addons / "shop" / "__manifest__.py").read_text()


def _tools_on_disk(f, env_id):
    return _git(f.root / env_id / "addons" / ".addon-repositories" / "acme-tools",
                "rev-parse", "HEAD")


def _objects(docker_client, env_id):
    label = f"berth.environment_id={env_id}"
    return (docker_client.containers.list(all=True, filters={"label": label}),
            docker_client.volumes.list(filters={"label": label}),
            docker_client.networks.list(filters={"label": label}))


def test_operations_flow(client, flow, docker_client):
    f = flow
    env = client.post(f"{P}/projects/{f.project.id}/environments", headers=f.key,
                      json={"name": "Production"}).json
    env_id = env["id"]
    f.created.append(env_id)

    # 1. The first deployment, at the first commit.
    listed = client.get(f"{V1}/deployments?project_id={f.project.id}", headers=f.user).json
    d1 = _settled(client, f, listed["data"][0]["id"])
    assert d1["status"] == "success" and d1["git_commit"] == f.c1 and d1["can_rollback"]
    assert _addons_on_disk(f, env_id) == (f.c1, manifest("shop", "1.0"))
    assert _tools_on_disk(f, env_id) == f.a1

    # 2. A second commit (of both repositories), deployed through POST /deployments.
    c2 = f.repo.commit({"shop": "2.0"}, "v2.0")
    a2 = f.tools.commit({"base_tools": "2.0"}, "v2.0")
    r = client.post(f"{V1}/deployments", headers=f.user, json={
        "project_id": str(f.project.id), "environment_id": env_id, "git_branch": "main"})
    assert r.status_code == 201 and r.json["trigger"] == "manual"
    d2 = _settled(client, f, r.json["id"])
    assert d2["status"] == "success" and d2["git_commit"] == c2 and d2["version"] == 2
    # The database had data: a pre_deploy backup was taken first, through real storage.
    pre = client.get(f"{V1}/environments/{env_id}/backups?backup_type=pre_deploy",
                     headers=f.user).json["items"]
    assert [(b["status"], b["is_verified"]) for b in pre] == [("completed", True)], pre
    assert _addons_on_disk(f, env_id)[0] == c2 and _tools_on_disk(f, env_id) == a2
    assert _erp(d2, "/berth/addons")["addons"][0]["version"] == "2.0"
    db_uuid = _erp(d2, "/berth/info")["database_uuid"]
    assert db_uuid

    # 3. Rollback to the first: the code on disk and in the ERP is the first commit again.
    r = client.post(f"{V1}/deployments/{d1['id']}/rollback", headers=f.user)
    assert r.status_code == 201, r.json
    assert (r.json["trigger"], r.json["rollback_from_id"]) == ("rollback", d1["id"])
    assert r.json["extra_data"]["rollback_to"] == d1["id"]
    d3 = _settled(client, f, r.json["id"])
    assert d3["status"] == "success" and d3["git_commit"] == f.c1
    assert _addons_on_disk(f, env_id) == (f.c1, manifest("shop", "1.0"))
    assert _tools_on_disk(f, env_id) == f.a1  # the add-on repository went back too
    assert _erp(d3, "/berth/addons")["addons"][0]["version"] == "1.0"
    assert _erp(d3, "/berth/info")["database_uuid"] == db_uuid  # data is not rolled back

    # 4. Without force a running environment is left alone; with force it is redeployed:
    # a new ERP container, the same database container, volume and filestore.
    r = client.post(f"{V1}/environments/{env_id}/deploy", headers=f.user, json={})
    assert r.status_code == 200 and r.json["skipped"] is True
    containers = {c.labels["berth.role"]: c.id for c in _objects(docker_client, env_id)[0]}
    marker = f.root / env_id / "filestore" / "kept.txt"
    marker.write_text("attachment")
    r = client.post(f"{V1}/environments/{env_id}/deploy", headers=f.user, json={"force": True})
    assert r.status_code == 201 and r.json["deployment"]["kind"] == "redeploy"
    d4 = _settled(client, f, r.json["deployment"]["id"])
    assert d4["status"] == "success" and d4["git_commit"] == c2  # the branch's head
    after = {c.labels["berth.role"]: c.id for c in _objects(docker_client, env_id)[0]}
    assert after["postgres"] == containers["postgres"] and after["erp"] != containers["erp"]
    assert marker.read_text() == "attachment"
    assert _erp(d4, "/berth/info")["database_uuid"] == db_uuid

    # 5. Cancel a pending deployment while the agent is away: its command is
    # withdrawn and never reaches the agent when it comes back.
    f.agent.kill()
    wait_for(lambda: str(f.server.id) not in f.gateway.sessions, timeout=30,
             what="agent gone")
    r = client.post(f"{V1}/environments/{env_id}/deploy", headers=f.user, json={"force": True})
    pending = r.json["deployment"]
    assert pending["status"] == "pending"
    r = client.post(f"{V1}/deployments/{pending['id']}/cancel", headers=f.user)
    assert r.status_code == 200 and "cancelled" in r.json["message"]
    assert client.get(f"{P}/environments/{env_id}", headers=f.key).json["status"] == "running"
    f.agent.start()
    _wait_connected(f)
    command = AgentCommand.get(AgentCommand.deployment == pending["id"])
    assert command.status == "withdrawn" and command.delivered_at is None
    assert client.get(f"{V1}/deployments/{pending['id']}", headers=f.user).json[
        "status"] == "cancelled"

    # 6. Destroy, keeping the data: every Docker object goes, the directory stays.
    r = client.delete(f"{V1}/deployments/environment/{env_id}/destroy", headers=f.user)
    assert r.status_code == 200, r.json
    assert {k: r.json[k] for k in ("environment_id", "deleted_containers", "deleted_database",
                                   "deleted_data")} == {
        "environment_id": env_id, "deleted_containers": 2, "deleted_database": True,
        "deleted_data": False}
    assert _objects(docker_client, env_id) == ([], [], [])
    # Commands go out oldest first: the cancelled one would have preceded the destroy.
    assert command.id.hex not in f.agent.journal()
    assert AgentCommand.get_by_id(command.id).status == "withdrawn"
    env_dir = f.root / env_id
    assert marker.read_text() == "attachment" and (env_dir / "addons" / "shop").is_dir()
    assert not (env_dir / "odoo.conf").exists() and not (env_dir / "db.secret").exists()
    record = client.get(f"{V1}/deployments/{r.json['deployment_id']}", headers=f.user).json
    assert (record["trigger"], record["status"]) == ("destroy", "destroyed")
    shown = client.get(f"{P}/environments/{env_id}", headers=f.key)
    assert shown.status_code == 200 and shown.json["status"] == "pending"  # the spec's word

    # 7. A destroyed environment can be deployed again (a new database), then
    # destroyed with its data: nothing of it is left.
    r = client.post(f"{V1}/environments/{env_id}/deploy", headers=f.user)
    assert r.status_code == 201
    d5 = _settled(client, f, r.json["deployment"]["id"])
    assert d5["status"] == "success"
    assert client.get(f"{P}/environments/{env_id}", headers=f.key).json["status"] == "running"
    assert _erp(d5, "/berth/info")["database_uuid"] != db_uuid
    r = client.delete(f"{V1}/deployments/environment/{env_id}/destroy?delete_data=true",
                      headers=f.user)
    assert r.status_code == 200 and r.json["deleted_data"] is True
    assert r.json["deleted_containers"] == 2 and r.json["deleted_database"] is True
    assert _objects(docker_client, env_id) == ([], [], [])
    assert not env_dir.exists()
