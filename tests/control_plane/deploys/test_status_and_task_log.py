"""GET /environments/{id}/status and /environments/{id}/logs against the spec's
Environment status snapshot and Task log."""

from tests.conftest import auth, new_uuid

P = "/api/public/v1"
NO_TASK = {"task_id": None, "log": "", "lines": 0, "truncated": False}


def test_task_log_of_no_task_is_null_not_404(client, world):
    """Spec, Task log: `task_id` is null if no task is found, for an environment
    without tasks and for an id that names none of this environment's."""
    org = world.org()
    project = world.project(org)
    env, other = world.environment(project), world.environment(project)
    writer, reader = (auth(world.key(org, kind)[0]) for kind in ("full_access", "read_only"))
    assert client.get(f"{P}/environments/{env.id}/logs", headers=reader).json == NO_TASK

    task = client.post(f"{P}/environments/{other.id}/actions/restart", headers=writer)
    assert task.status_code == 202, task.json
    task_id = task.json["task_id"]
    for asked in (new_uuid(), task_id):  # unknown; another environment's
        r = client.get(f"{P}/environments/{env.id}/logs", headers=reader,
                       query_string={"task_id": asked, "lines": 5})
        assert r.status_code == 200, r.json
        assert r.json == NO_TASK

    mine = client.get(f"{P}/environments/{other.id}/logs", headers=reader,
                      query_string={"task_id": task_id})
    assert mine.status_code == 200 and mine.json["task_id"] == task_id


def test_task_log_refusals_keep_their_status(client, world):
    org = world.org()
    env = world.environment(world.project(org))
    reader = auth(world.key(org, "read_only")[0])
    bad = client.get(f"{P}/environments/{env.id}/logs", headers=reader,
                     query_string={"task_id": "not-a-uuid"})
    assert bad.status_code == 422 and bad.json["error"] == "validation_error"
    assert "task_id" in bad.json["message"]
    # An environment outside the key's organization stays a 404, task id or not.
    foreign = world.environment(world.project(world.org()))
    for query in ({}, {"task_id": new_uuid()}):
        r = client.get(f"{P}/environments/{foreign.id}/logs", headers=reader, query_string=query)
        assert r.status_code == 404 and r.json["error"] == "not_found"


def test_container_running_is_true_when_running_or_paused(client, world):
    """Spec, Environment status snapshot: `container_running` is true when the
    status is running or paused."""
    org = world.org()
    project = world.project(org)
    reader = auth(world.key(org, "read_only")[0])
    expected = {"running": True, "paused": True, "stopped": False, "failed": False,
                "deploying": False}
    for status, running in expected.items():
        env = world.environment(project, status=status)
        r = client.get(f"{P}/environments/{env.id}/status", headers=reader)
        assert r.status_code == 200, r.json
        assert r.json["status"] == status
        assert r.json["container_running"] is running, status
