"""Commit statuses: a project's forge set through the public API (the token sealed,
never shown), and each build's status sent to a real HTTPS stub of GitHub's, GitLab's
and Gitea's commit status API that records what it received; a forge that fails is
tried again later. Builds are arranged as the automation leaves them (their flow with
an agent: tests/e2e/automation/test_build_flow.py)."""

import json

import pytest

from control_plane.infra import clock, secretbox
from control_plane.models import Build, Project
from control_plane.models.project import FORGE_TOKEN_PURPOSE
from control_plane.services.webhooks import commit_statuses
from tests.conftest import auth
from tests.support.webhook_receiver import https_receiver, trust_ca  # noqa: F401 - fixtures

P = "/api/public/v1"
SHA = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def berth(app, trust_ca):  # noqa: F811
    b = app.extensions["berth"]
    b.settings.update(WEBHOOK_ALLOW_PRIVATE=True, WEBHOOK_CA_BUNDLE=trust_ca,
                      PUBLIC_URL="https://berth.example.com")
    yield b
    b.settings.update(WEBHOOK_ALLOW_PRIVATE=False, WEBHOOK_CA_BUNDLE=None)


def _project(world, url="https://github.com/acme/erp.git"):
    org = world.org()
    project = world.project(org)
    Project.update(git_repo_url=url).where(Project.id == project.id).execute()
    return org, project


def _build(project, status="running", **fields):
    return Build.create(organization=project.organization_id, project=project.id,
                        branch="feature/x", commit=SHA, status=status, stage="test", **fields)


def test_the_forge_is_set_shown_without_its_token_and_cleared(client, world, https_receiver):  # noqa: F811
    org, project = _project(world)
    key, reader = auth(world.key(org)[0]), auth(world.key(org, "read_only")[0])
    url = f"{P}/projects/{project.id}/forge"
    assert client.get(url, headers=reader).json == {
        "project_id": str(project.id), "provider": None, "api_url": None, "token_set": False}
    r = client.put(url, headers=key, json={"provider": "github", "token": "ghp_secret"})
    assert r.status_code == 200 and r.json == {
        "project_id": str(project.id), "provider": "github",
        "api_url": "https://api.github.com", "token_set": True}
    stored = Project.get_by_id(project.id).forge_token
    assert "ghp_secret" not in stored
    assert secretbox.unseal(stored, FORGE_TOKEN_PURPOSE) == "ghp_secret"
    assert "ghp_secret" not in json.dumps(client.get(url, headers=reader).json)
    for bad in ({"provider": "bitbucket", "token": "t"}, {"provider": "github"},
                {"provider": "gitlab", "token": "t", "api_url": "http://git.example.com"},
                {"provider": "gitea", "token": ""}):
        r = client.put(url, headers=key, json=bad)
        assert r.status_code == 422 and r.json["error"] == "validation_error", bad
    assert client.put(url, headers=reader, json={"provider": "github",
                                                 "token": "t"}).status_code == 403
    assert client.delete(url, headers=key).status_code == 204
    assert client.get(url, headers=reader).json["token_set"] is False
    other = auth(world.key(world.org())[0])
    assert client.get(url, headers=other).status_code == 404


@pytest.mark.parametrize("provider, path, auth_header, running, passed, failed", [
    ("github", f"/repos/acme/erp/statuses/{SHA}", ("Authorization", "Bearer tok"),
     "pending", "success", "failure"),
    ("gitlab", f"/projects/acme%2Ferp/statuses/{SHA}", ("PRIVATE-TOKEN", "tok"),
     "running", "success", "failed"),
    ("gitea", f"/repos/acme/erp/statuses/{SHA}", ("Authorization", "token tok"),
     "pending", "success", "failure"),
])
def test_each_builds_status_reaches_the_forge(client, world, berth, https_receiver,  # noqa: F811
                                              provider, path, auth_header, running, passed,
                                              failed):
    org, project = _project(world)
    key = auth(world.key(org)[0])
    r = client.put(f"{P}/projects/{project.id}/forge", headers=key, json={
        "provider": provider, "token": "tok", "api_url": https_receiver.url + "/api"})
    assert r.status_code == 200, r.json
    build = _build(project)
    other = _build(project, status="failed", reason="1 failed, 0 error(s) of 2 tests")
    commit_statuses.run(berth)
    got = https_receiver.wait_for(2)
    assert {g.path for g in got} == {"/api" + path}
    assert all(g.headers.get(auth_header[0]) == auth_header[1] for g in got)
    bodies = {json.loads(g.body)["state"]: json.loads(g.body) for g in got}
    assert set(bodies) == {running, failed}
    sent = bodies[running]
    assert sent["target_url"] == f"https://berth.example.com/builds/{build.id}"
    assert sent["description"] == "running (test)"
    assert sent.get("context", sent.get("name")) == "berth/build"
    assert bodies[failed]["description"] == "failed: 1 failed, 0 error(s) of 2 tests"
    assert bodies[failed]["target_url"].endswith(str(other.id))

    # Reported once: the next pass sends nothing until the status changes.
    commit_statuses.run(berth)
    Build.update(status="passed", counts={"tests": 2}).where(Build.id == build.id).execute()
    commit_statuses.run(berth)
    got = https_receiver.wait_for(3)
    assert len(got) == 3 and json.loads(got[2].body)["state"] == passed
    assert json.loads(got[2].body)["description"] == "passed: 2 tests"
    assert Build.get_by_id(build.id).status_reported == "passed"


def test_a_forge_that_fails_is_tried_again_later(client, world, berth, https_receiver,  # noqa: F811
                                                 fake_clock):
    org, project = _project(world)
    Project.update(forge_provider="github", forge_api_url=https_receiver.url,
                   forge_token=secretbox.seal("tok", FORGE_TOKEN_PURPOSE)).where(
        Project.id == project.id).execute()
    https_receiver.respond(500, 502, then=201)
    build = _build(project, status="passed", counts={"tests": 1})
    commit_statuses.run(berth)
    b = Build.get_by_id(build.id)
    assert (b.status_reported, b.status_attempts, b.status_error) == (None, 1, "HTTP 500")
    assert b.status_next_at == clock.now() + commit_statuses.FIRST_RETRY
    commit_statuses.run(berth)  # not due yet: nothing sent
    assert len(https_receiver.requests) == 1
    fake_clock.advance(seconds=30)
    commit_statuses.run(berth)
    assert Build.get_by_id(build.id).status_attempts == 2  # 502, then a minute
    fake_clock.advance(seconds=60)
    commit_statuses.run(berth)
    b = Build.get_by_id(build.id)
    assert (b.status_reported, b.status_attempts, b.status_error) == ("passed", 0, None)
    assert len(https_receiver.requests) == 3

    # A token that cannot be read (the secret key changed) is not tried again.
    Project.update(forge_token="not-sealed").where(Project.id == project.id).execute()
    again = _build(project, status="failed")
    commit_statuses.run(berth)
    b = Build.get_by_id(again.id)
    assert b.status_reported == "failed" and "set it again" in b.status_error
    assert len(https_receiver.requests) == 3
