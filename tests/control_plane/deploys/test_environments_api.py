"""PATCH /environments/{env_id}: rename an environment or change its branch,
through HTTP, on both database backends."""

import pytest

from control_plane.models import AgentCommand, Deployment, Environment, Event
from control_plane.services.tasks import engine
from tests.conftest import auth, new_uuid

P = "/api/public/v1"


@pytest.fixture
def setup(world):
    """An organization with a running environment, a full-access key for the
    writes and a read-only key for the reads (full access: 20 requests a minute)."""
    org = world.org()
    project = world.project(org)
    env = world.environment(project, "running")
    Environment.update(branch="main").where(Environment.id == env.id).execute()
    return org, project, env, world.key(org)[0], world.key(org, "read_only")[0]


def test_patch_renames_and_changes_the_branch(client, setup):
    org, project, env, raw, reader = setup
    before = client.get(f"{P}/environments/{env.id}", headers=auth(reader)).json
    r = client.patch(f"{P}/environments/{env.id}", headers=auth(raw),
                     json={"name": "  Staging  ", "branch": "release/2.0"})
    assert r.status_code == 200, r.json
    assert r.json["name"] == "Staging" and r.json["branch"] == "release/2.0"
    assert r.json["updated_at"] != before["updated_at"]
    # Everything else stays as it was, and the response is what a read returns.
    same = {k: v for k, v in r.json.items() if k not in ("name", "branch", "updated_at")}
    assert same == {k: v for k, v in before.items() if k not in ("name", "branch", "updated_at")}
    assert client.get(f"{P}/environments/{env.id}", headers=auth(reader)).json == r.json
    assert r.headers["X-API-Key-Id"] and "X-RateLimit-Remaining" in r.headers

    r = client.patch(f"{P}/environments/{env.id}", headers=auth(raw), json={"name": "Prod"})
    assert r.json["name"] == "Prod" and r.json["branch"] == "release/2.0"  # omitted: stays
    r = client.patch(f"{P}/environments/{env.id}", headers=auth(raw), json={"branch": "hotfix"})
    assert r.json["name"] == "Prod" and r.json["branch"] == "hotfix"
    # No redeploy, no agent command, no event: the change waits for the next deploy.
    assert Deployment.select().count() == 0 and AgentCommand.select().count() == 0
    assert Event.select().where(Event.organization == org.id).count() == 0


def test_empty_body_changes_nothing(client, setup):
    _, _, env, raw, reader = setup
    before = client.get(f"{P}/environments/{env.id}", headers=auth(reader)).json
    r = client.patch(f"{P}/environments/{env.id}", headers=auth(raw), json={})
    assert r.status_code == 200 and r.json == before
    r = client.patch(f"{P}/environments/{env.id}", headers=auth(raw))  # no body at all
    assert r.status_code == 200 and r.json == before


def test_new_branch_applies_on_the_next_deploy_only(client, app, setup):
    _, _, env, raw, reader = setup
    base = f"{P}/environments/{env.id}"
    first = client.post(f"{base}/actions/redeploy", headers=auth(raw)).json["task_id"]
    assert client.patch(base, headers=auth(raw), json={"branch": "feature-x"}).status_code == 200
    # The task queued before the change keeps the branch it was queued with.
    assert client.get(f"{P}/deployments/{first}", headers=auth(reader)).json["git_branch"] == "main"
    assert AgentCommand.get(AgentCommand.deployment == first).payload["git"]["branch"] == "main"

    engine.on_ack(first)  # the agent runs it and reports success
    engine.on_result(first, True, {"git_commit": "a" * 40}, None)
    assert client.get(base, headers=auth(reader)).json["status"] == "running"

    nxt = client.post(f"{base}/actions/deploy", headers=auth(raw))
    assert nxt.status_code == 202, nxt.json
    task = nxt.json["task_id"]
    assert client.get(f"{P}/deployments/{task}", headers=auth(reader)).json["git_branch"] \
        == "feature-x"
    assert AgentCommand.get(AgentCommand.deployment == task).payload["git"]["branch"] \
        == "feature-x"


@pytest.mark.parametrize("body, field", [
    ({"name": "x" * 256}, "name"),
    ({"name": "   "}, "name"),
    ({"name": ""}, "name"),
    ({"name": None}, "name"),
    ({"name": 5}, "name"),
    ({"branch": "b" * 256}, "branch"),
    ({"branch": "has space"}, "branch"),
    ({"branch": ""}, "branch"),
    ({"branch": None}, "branch"),
    ({"environment_type": "production"}, "environment_type"),
    ({"status": "stopped"}, "status"),
    ({"unexpected": 1}, "unexpected"),
])
def test_validation_is_422_and_changes_nothing(client, setup, body, field):
    _, _, env, raw, reader = setup
    before = client.get(f"{P}/environments/{env.id}", headers=auth(reader)).json
    r = client.patch(f"{P}/environments/{env.id}", headers=auth(raw),
                     json={"name": "fine", **body} if field != "name" else body)
    assert r.status_code == 422, r.json
    assert r.json["error"] == "validation_error" and field in r.json["details"]["json"]
    assert client.get(f"{P}/environments/{env.id}", headers=auth(reader)).json == before


def test_limits_are_inclusive(client, setup):
    _, _, env, raw, _ = setup
    r = client.patch(f"{P}/environments/{env.id}", headers=auth(raw),
                     json={"name": "n" * 255, "branch": "b" * 255})
    assert r.status_code == 200
    assert len(r.json["name"]) == 255 and len(r.json["branch"]) == 255


def test_read_only_key_is_refused(client, setup):
    _, _, env, _, reader = setup
    r = client.patch(f"{P}/environments/{env.id}", headers=auth(reader), json={"name": "x"})
    assert r.status_code == 403 and r.json["error"] == "write_access_required"
    assert Environment.get_by_id(env.id).name == env.name


def test_out_of_scope_environments_are_not_found(client, world, setup):
    org, project, env, raw, _ = setup
    foreign = world.environment(world.project(world.org()))
    sibling = world.environment(world.project(org))
    gone = world.environment(project, "deleted", active=False)
    scoped = world.key(org, scope="project", project=project)[0]
    for key, target in ((raw, foreign), (raw, gone), (scoped, sibling)):
        r = client.patch(f"{P}/environments/{target.id}", headers=auth(key), json={"name": "x"})
        assert r.status_code == 404 and r.json["error"] == "not_found", (key, target)
        assert Environment.get_by_id(target.id).name != "x"
    r = client.patch(f"{P}/environments/{new_uuid()}", headers=auth(raw), json={"name": "x"})
    assert r.status_code == 404
    # A project-scoped full-access key may edit its own project's environments.
    r = client.patch(f"{P}/environments/{env.id}", headers=auth(scoped), json={"name": "mine"})
    assert r.status_code == 200 and r.json["name"] == "mine"


def test_idempotency_key_is_accepted_and_ignored(client, setup):
    _, _, env, raw, _ = setup
    headers = {**auth(raw), "X-Idempotency-Key": "same"}
    first = client.patch(f"{P}/environments/{env.id}", headers=headers, json={"name": "one"})
    again = client.patch(f"{P}/environments/{env.id}", headers=headers, json={"name": "two"})
    assert first.status_code == again.status_code == 200
    assert again.json["name"] == "two" and "X-Idempotency-Replayed" not in again.headers
    blank = {**auth(raw), "X-Idempotency-Key": ""}  # not even checked
    assert client.patch(f"{P}/environments/{env.id}", headers=blank, json={}).status_code == 200


def test_openapi_documents_the_patch(client):
    spec = client.get(f"{P}/openapi.json").json
    op = spec["paths"]["/api/public/v1/environments/{env_id}"]["patch"]
    assert {"200", "401", "403", "404", "422", "429"} <= set(op["responses"])
    ref = op["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    body = spec["components"]["schemas"][ref]
    assert set(body["properties"]) == {"name", "branch"} and not body.get("required")
    assert body["properties"]["name"]["maxLength"] == 255
    assert body["properties"]["branch"]["maxLength"] == 255
    ok = op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    assert ok.endswith("/Environment")


@pytest.mark.parametrize("action", ["redeploy", "restart"])
def test_concurrent_actions_queue_exactly_one_task(app, setup, action):
    """Rule 8 under a race: eight clients ask at once; one task is queued, the
    others get 409 task_in_progress, none a 500."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    _, _, env, raw, _ = setup
    barrier = threading.Barrier(8)

    def post(_):
        barrier.wait()
        r = app.test_client().post(f"{P}/environments/{env.id}/actions/{action}",
                                   headers=auth(raw))
        return r.status_code, r.json.get("error")

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(post, range(8)))
    assert sorted(s for s, _ in results) == [202] + [409] * 7, results
    assert {e for s, e in results if s == 409} == {"task_in_progress"}
    assert Deployment.select().where(Deployment.environment == env.id).count() == 1


def test_create_takes_an_allocation_that_fits_the_server(client, world):
    org = world.org()
    project = world.project(org)  # the server: 4 cores, 8192 MB, 100 GB
    raw = world.key(org)[0]
    url = f"{P}/projects/{project.id}/environments"
    for body, field in (({"cpu_cores": 4.5}, "cpu_cores"), ({"ram_mb": 8193}, "ram_mb"),
                        ({"disk_gb": 101}, "disk_gb")):
        r = client.post(url, headers=auth(raw), json={"name": "big", **body})
        assert r.status_code == 422 and r.json["error"] == "exceeds_server_capacity", r.json
        assert field in r.json["message"]
    for body in ({"cpu_cores": 0}, {"ram_mb": 100}, {"disk_gb": "lots"}):
        r = client.post(url, headers=auth(raw), json={"name": "bad", **body})
        assert r.status_code == 422 and r.json["error"] == "validation_error"
    assert Environment.select().count() == 0
    r = client.post(url, headers=auth(raw),
                    json={"name": "fits", "cpu_cores": 4, "ram_mb": 8192, "disk_gb": 100})
    assert r.status_code == 201 and (r.json["cpu_cores"], r.json["ram_mb"]) == (4.0, 8192)
    command = AgentCommand.get(AgentCommand.kind == "deploy")
    assert (command.payload["cpu_cores"], command.payload["ram_mb"]) == (4.0, 8192)


def test_create_defaults_list_order_and_status_filter(client, world):
    from control_plane.models import Project
    org = world.org()
    project = world.project(org)
    raw, reader = world.key(org)[0], world.key(org, "read_only")[0]
    url = f"{P}/projects/{project.id}/environments"
    Project.update(default_branch="develop").where(Project.id == project.id).execute()
    first = client.post(url, headers=auth(raw), json={"name": "a"}).json
    assert first["branch"] == "develop"
    Project.update(default_branch=None).where(Project.id == project.id).execute()
    second = client.post(url, headers=auth(raw), json={"name": "b", "branch": "feature/x"}).json
    third = client.post(url, headers=auth(raw), json={"name": "c"}).json
    assert (second["branch"], third["branch"]) == ("feature/x", "main")
    assert Environment.get_by_id(first["id"]).environment_type == "development"
    bad = client.post(url, headers=auth(raw), json={"name": "d", "environment_type": "qa"})
    assert bad.status_code == 422 and "environment_type" in bad.json["details"]["json"]
    Environment.update(status="running").where(Environment.id == second["id"]).execute()
    world.environment(project, "running", active=False)  # inactive: never listed
    listed = client.get(url, headers=auth(reader)).json
    assert [e["id"] for e in listed] == [first["id"], second["id"], third["id"]]
    running = client.get(f"{url}?status=Running", headers=auth(reader)).json
    assert [e["id"] for e in running] == [second["id"]]
