"""Who cancelled a deployment is shown by name, never by e-mail address: the task
log and the deployment are read by every read-only key and every member of the
organization."""

from control_plane.models import Deployment, Environment
from control_plane.services.accounts import orgs
from tests.conftest import auth

V1, P = "/api/v1", "/api/public/v1"
DEPLOY, CANCEL = "project.environments.deploy", "project.deployments.cancel"


def test_the_cancel_actor_is_named_without_the_address(client, world):
    org = world.org()
    server = world.server(org)
    project = world.project(org, server)
    alice = orgs.create_user(org.id, "Alice Ops", "alice@example.com", (DEPLOY, CANCEL))
    reader = orgs.create_user(org.id, "Reader", "reader@example.com", ())
    env = Environment.create(project=project, server=server, name="prod", status="running",
                             branch="main", cpu_cores=1.0, ram_mb=1024)
    Deployment.create(environment=env, project=project, version=1, kind="deploy",
                      trigger="manual", status="success", git_branch="main",
                      git_commit="1" * 40, image_tag="erp:1", config={})
    alice_h = auth(orgs.issue_user_token(alice.id))
    r = client.post(f"{V1}/environments/{env.id}/deploy", headers=alice_h, json={"force": True})
    assert r.status_code == 201, r.json
    task = r.json["deployment"]["id"]
    r = client.post(f"{V1}/deployments/{task}/cancel", headers=alice_h)
    assert r.status_code == 200 and "alice@example.com" not in r.json["message"]

    read_only, _ = world.key(org, key_type="read_only")
    log = client.get(f"{P}/environments/{env.id}/logs", query_string={"task_id": task},
                     headers=auth(read_only))
    assert log.status_code == 200, log.json
    assert "Cancelled by Alice Ops:" in log.json["log"]
    assert "alice@example.com" not in log.json["log"]

    for path in (f"{P}/deployments/{task}", f"{P}/environments/{env.id}"):
        r = client.get(path, headers=auth(read_only))
        assert r.status_code == 200 and "alice@example.com" not in r.get_data(as_text=True)

    row = client.get(f"{V1}/deployments/{task}", headers=auth(orgs.issue_user_token(reader.id)))
    assert row.status_code == 200, row.json
    assert row.json["extra_data"]["cancelled_by"] == {"id": str(alice.id), "name": "Alice Ops"}
    assert "alice@example.com" not in row.get_data(as_text=True)
