"""Projects: all five endpoints and their rules, through HTTP."""

import pytest

from control_plane.models import Project
from tests.conftest import auth, new_uuid

P = "/api/public/v1"


@pytest.fixture
def org_rw(world):
    org = world.org()
    raw, key = world.key(org)
    return org, raw


def test_create_get_update_delete(client, world, org_rw):
    org, raw = org_rw
    server = world.server(org)
    r = client.post(f"{P}/projects", headers=auth(raw), json={
        "name": "  Shop  ", "server_id": str(server.id), "erp_version": "17.0",
        "git_repo_url": "https://git.example.com/shop.git"})
    assert r.status_code == 201
    p = r.json
    assert set(p) == {"id", "name", "erp_version", "git_repo_url", "default_branch",
                      "environment_count", "server_id", "created_at"}
    assert p["name"] == "Shop" and p["default_branch"] == "main" and p["environment_count"] == 0
    assert p["server_id"] == str(server.id) and p["created_at"].endswith("Z")
    assert client.get(f"{P}/projects/{p['id']}", headers=auth(raw)).json == p
    assert client.get(f"{P}/projects", headers=auth(raw)).json["data"] == [p]

    r = client.patch(f"{P}/projects/{p['id']}", headers=auth(raw), json={"default_branch": "prod"})
    assert r.status_code == 200
    assert r.json["default_branch"] == "prod" and r.json["name"] == "Shop"
    assert r.json["git_repo_url"] == p["git_repo_url"]  # omitted fields stay
    r = client.patch(f"{P}/projects/{p['id']}", headers=auth(raw), json={"git_repo_url": None})
    assert r.json["git_repo_url"] is None

    r = client.delete(f"{P}/projects/{p['id']}", headers={**auth(raw), "X-Confirm-Delete": "true"})
    assert r.status_code == 204 and r.data == b""
    assert client.get(f"{P}/projects/{p['id']}", headers=auth(raw)).status_code == 404
    assert client.get(f"{P}/projects", headers=auth(raw)).json["pagination"]["total"] == 0
    assert Project.get_by_id(p["id"]).deleted_at is not None  # soft delete


def test_shared_server_is_usable_other_orgs_is_not(client, world, org_rw):
    org, raw = org_rw
    shared = world.server(None)
    foreign = world.server(world.org())
    ok = client.post(f"{P}/projects", headers=auth(raw), json={"name": "a", "server_id": str(shared.id)})
    assert ok.status_code == 201
    r = client.post(f"{P}/projects", headers=auth(raw), json={"name": "b", "server_id": str(foreign.id)})
    assert r.status_code == 404 and r.json["error"] == "not_found"
    r = client.post(f"{P}/projects", headers=auth(raw), json={"name": "b", "server_id": new_uuid()})
    assert r.status_code == 404


@pytest.mark.parametrize("body, field", [
    ({"name": "x" * 256}, "name"),
    ({"name": "   "}, "name"),
    ({"name": 5}, "name"),
    ({"server_id": "not-a-uuid"}, "server_id"),
    ({"git_repo_url": "http://insecure.example.com/r.git"}, "git_repo_url"),
    ({"git_repo_url": "git@github.com:a/b.git"}, "git_repo_url"),
    ({"git_repo_url": "https://e.com/" + "a" * 2048}, "git_repo_url"),
    ({"default_branch": "b" * 256}, "default_branch"),
    ({"default_branch": "has space"}, "default_branch"),
    ({"erp_version": "seventeen"}, "erp_version"),
    ({"unexpected": 1}, "unexpected"),
])
def test_create_validation_is_422_and_changes_nothing(client, world, org_rw, body, field):
    org, raw = org_rw
    server = world.server(org)
    full = {"name": "ok", "server_id": str(server.id), **body}
    r = client.post(f"{P}/projects", headers=auth(raw), json=full)
    assert r.status_code == 422
    assert r.json["error"] == "validation_error" and field in r.json["message"]
    assert field in r.json["details"]["json"]
    assert Project.select().count() == 0


def test_update_validation(client, world, org_rw):
    org, raw = org_rw
    project = world.project(org)
    for body in ({"name": ""}, {"name": None}, {"default_branch": "x" * 256},
                 {"git_repo_url": "ftp://x"}, {"server_id": new_uuid()}):
        r = client.patch(f"{P}/projects/{project.id}", headers=auth(raw), json=body)
        assert r.status_code == 422, body
    assert Project.get_by_id(project.id).name == project.name


def test_create_and_delete_need_org_scope(client, world):
    org = world.org()
    project = world.project(org)
    raw, _ = world.key(org, scope="project", project=project)
    r = client.post(f"{P}/projects", headers=auth(raw),
                    json={"name": "x", "server_id": str(project.server_id)})
    assert r.status_code == 403 and r.json["error"] == "org_scope_required"
    r = client.delete(f"{P}/projects/{project.id}", headers={**auth(raw), "X-Confirm-Delete": "true"})
    assert r.status_code == 403 and r.json["error"] == "project_scoped_key"
    # A project-scoped full-access key may update its own project.
    r = client.patch(f"{P}/projects/{project.id}", headers=auth(raw), json={"name": "renamed"})
    assert r.status_code == 200 and r.json["name"] == "renamed"


@pytest.mark.parametrize("value", [None, "false", "TRUE", "yes", "1", ""])
def test_delete_needs_exact_confirmation(client, world, org_rw, value):
    org, raw = org_rw
    project = world.project(org)
    headers = auth(raw) if value is None else {**auth(raw), "X-Confirm-Delete": value}
    r = client.delete(f"{P}/projects/{project.id}", headers=headers)
    assert r.status_code == 400 and r.json["error"] == "confirm_required"
    assert Project.get_by_id(project.id).deleted_at is None


@pytest.mark.parametrize("status, blocked", [("running", True), ("deploying", True),
                                             ("stopped", False), ("failed", False)])
def test_delete_refused_while_environment_runs_or_deploys(client, world, org_rw, status, blocked):
    org, raw = org_rw
    project = world.project(org)
    world.environment(project, status=status)
    r = client.delete(f"{P}/projects/{project.id}", headers={**auth(raw), "X-Confirm-Delete": "true"})
    if blocked:
        assert r.status_code == 409 and r.json["error"] == "environments_running"
        assert Project.get_by_id(project.id).deleted_at is None
    else:
        assert r.status_code == 204


def test_delete_removes_its_environments_from_the_server(client, world, org_rw):
    """Its stopped, failed and destroyed environments are deleted as the public
    API deletes one: a `delete` task each (containers, volume, directory); they
    leave the lists at once, and receivers hear of each as its removal completes."""
    from control_plane.models import AgentCommand, Deployment, Environment, Event
    from control_plane.services.tasks import engine, queue
    org, raw = org_rw
    project = world.project(org)
    kept = [world.environment(project, "stopped"), world.environment(project, "failed"),
            world.environment(project, "destroyed", active=False)]
    r = client.delete(f"{P}/projects/{project.id}", headers={**auth(raw), "X-Confirm-Delete": "true"})
    assert r.status_code == 204
    assert Event.select().where(Event.name == "environment.deleted").count() == 0
    for env in kept:
        row = Environment.get_by_id(env.id)
        assert (row.status, row.is_active) == ("destroying", False)
        task = Deployment.get(Deployment.environment == env.id)
        command = AgentCommand.get(AgentCommand.deployment == task.id)
        assert (task.kind, command.kind, command.payload["delete_data"]) == (
            "delete", "destroy", True)
        queue.mark_delivered(command.id)
        engine.record_ack(command.server_id, command.id.hex)
        engine.record_result(command.server_id, command.id.hex, True, {"deleted_containers": 2})
        assert Environment.get_by_id(env.id).status == "deleted"
    deleted = [e.data for e in Event.select().where(Event.name == "environment.deleted")]
    assert sorted(d["environment_id"] for d in deleted) == sorted(str(e.id) for e in kept)
    assert {d["project_id"] for d in deleted} == {str(project.id)}


def test_delete_waits_for_a_task_in_progress(client, world, org_rw):
    org, raw = org_rw
    project = world.project(org)
    env = world.environment(project, "stopped")
    from control_plane.models import Deployment
    Deployment.create(environment=env, project=project, kind="backup", trigger="manual",
                      status="running")
    r = client.delete(f"{P}/projects/{project.id}", headers={**auth(raw), "X-Confirm-Delete": "true"})
    assert r.status_code == 409 and r.json["error"] == "environments_running"
    assert client.get(f"{P}/projects/{project.id}", headers=auth(raw)).status_code == 200


def test_environment_count_is_active_environments(client, world, org_rw):
    org, raw = org_rw
    project = world.project(org)
    world.environment(project, "running")
    world.environment(project, "stopped")
    world.environment(project, "pending", active=False)
    assert client.get(f"{P}/projects/{project.id}", headers=auth(raw)).json["environment_count"] == 2
    listed = client.get(f"{P}/projects", headers=auth(raw)).json["data"]
    assert listed[0]["environment_count"] == 2


def test_malformed_project_id_is_404(client, org_rw):
    _, raw = org_rw
    r = client.get(f"{P}/projects/not-a-uuid", headers=auth(raw))
    assert r.status_code == 404 and r.json["error"] == "not_found"
