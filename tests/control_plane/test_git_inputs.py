"""Repository URLs and branch names through HTTP, on both APIs: names git itself
refuses are a 422 naming the field wherever a branch is taken, credentials in a
repository URL are refused, and a URL stored with credentials before that is
shown without them (and still deployed as stored)."""

import pytest

from control_plane.models import AgentCommand, Deployment, Environment, Project, RegistrationToken
from control_plane.services.accounts import orgs
from tests.conftest import auth

P, V1 = "/api/public/v1", "/api/v1"
# Each is refused by `git check-ref-format --branch` (tests/control_plane/test_git_rules.py).
GIT_REFUSES = ["-", "-oProxyCommand=x", "--upload-pack=touch", "../x", "a..b", "x.lock",
               "@{-1}", "HEAD", "a/", ".hidden", "a//b", "a."]


@pytest.fixture
def setup(world):
    org = world.org()
    project = world.project(org)
    env = world.environment(project, "running")
    Environment.update(branch="main").where(Environment.id == env.id).execute()
    user = world.user(org, permissions=["project.environments.deploy"])
    token = {"Authorization": f"Bearer {orgs.issue_user_token(user.id)}"}
    return org, project, env, token


def _state():
    return (list(Project.select(Project.id, Project.default_branch).tuples()),
            list(Environment.select(Environment.id, Environment.branch).tuples()),
            Deployment.select().count(), RegistrationToken.select().count())


@pytest.mark.parametrize("name", GIT_REFUSES)
def test_branch_names_git_refuses_are_422_on_every_endpoint(client, world, setup, name):
    org, project, env, token = setup
    raw = auth(world.key(org, server_registration=True)[0])
    before = _state()
    calls = [
        (P, "post", "/projects", raw, {"name": "p", "server_id": str(project.server_id),
                                       "default_branch": name}, "default_branch"),
        (P, "patch", f"/projects/{project.id}", raw, {"default_branch": name}, "default_branch"),
        (P, "post", f"/projects/{project.id}/environments", raw, {"name": "e", "branch": name},
         "branch"),
        (P, "patch", f"/environments/{env.id}", raw, {"branch": name}, "branch"),
        (P, "post", "/servers/registration-tokens", raw,
         {"auto_deploy": {"project_id": str(project.id), "branch": name}}, "auto_deploy"),
        (V1, "post", f"/environments/{env.id}/deploy", token, {"git_branch": name}, "git_branch"),
        (V1, "post", "/deployments", token, {"project_id": str(project.id),
                                             "environment_id": str(env.id), "git_branch": name},
         "git_branch"),
        (V1, "patch", f"/projects/{project.id}/environments/{env.id}", token,
         {"git_branch": name}, "git_branch"),
    ]
    for base, method, path, headers, body, field in calls:
        r = getattr(client, method)(base + path, headers=headers, json=body)
        assert r.status_code == 422, (path, r.json)
        assert r.json["error"] == "validation_error" and field in r.json["details"]["json"], path
    assert _state() == before


@pytest.mark.parametrize("name", [";id", "feature/x", "a@b", "17.0", "x/HEAD"])
def test_names_git_takes_are_taken(client, world, setup, name):
    org, project, env, token = setup
    raw = auth(world.key(org)[0])
    r = client.patch(f"{P}/environments/{env.id}", headers=raw, json={"branch": name})
    assert r.status_code == 200 and r.json["branch"] == name
    r = client.patch(f"{V1}/projects/{project.id}/environments/{env.id}", headers=token,
                     json={"git_branch": name})
    assert r.status_code == 200 and r.json["git_branch"] == name


@pytest.mark.parametrize("url", [
    "https://user:hunter2@git.example.com/shop.git",
    "https://ghp_0123456789abcdef@github.com/acme/erp.git",
    "https://user@git.example.com/shop.git",
    "file:///srv/berth/another-environment/addons",
    "/srv/berth/another-environment/addons",
    "ext::sh -c touch% /tmp/pwned",
    "-oProxyCommand=x",
    "https://git.example.com/",
])
def test_repository_urls_refused_with_422(client, world, setup, url):
    org, project, _, _ = setup
    raw = auth(world.key(org)[0])
    before = _state()
    r = client.post(f"{P}/projects", headers=raw, json={
        "name": "p", "server_id": str(project.server_id), "git_repo_url": url})
    assert r.status_code == 422 and "git_repo_url" in r.json["details"]["json"], r.json
    r = client.patch(f"{P}/projects/{project.id}", headers=raw, json={"git_repo_url": url})
    assert r.status_code == 422 and "git_repo_url" in r.json["details"]["json"], r.json
    assert "hunter2" not in r.get_data(as_text=True)  # a refused secret is not echoed
    assert _state() == before and Project.get_by_id(project.id).git_repo_url is None


def test_a_stored_url_with_credentials_is_shown_without_them_and_still_deploys(client, world,
                                                                               setup):
    org, project, _, _ = setup
    stored = "https://deploy:s3cr3t@git.example.com/shop.git"
    Project.update(git_repo_url=stored).where(Project.id == project.id).execute()
    reader = auth(world.key(org, "read_only")[0])
    shown = client.get(f"{P}/projects/{project.id}", headers=reader).json
    assert shown["git_repo_url"] == "https://git.example.com/shop.git"
    listed = client.get(f"{P}/projects", headers=reader).json["data"]
    assert [p["git_repo_url"] for p in listed] == ["https://git.example.com/shop.git"]
    r = client.post(f"{P}/projects/{project.id}/environments", headers=auth(world.key(org)[0]),
                    json={"name": "e2"})
    assert r.status_code == 201 and "s3cr3t" not in r.get_data(as_text=True)
    command = AgentCommand.select().order_by(AgentCommand.created_at.desc()).get()
    assert command.payload["git"]["url"] == stored  # the agent still gets what it needs


@pytest.mark.parametrize("url, accepted", [
    ("https://p.j05.s.k:3/s0kc)", True),  # a one-letter last label, `)` in the path
    ("https://git.dept.example.co.uk/team/repo.git", True),  # five labels
    ("https://github.com/org/repo.git", True),
    ("HTTPS://github.com/org/repo.git", False),  # outside the documented pattern
    ("https://github.com/org/re po", False),
    ("https://github.com:0/org/repo", False),
    ("https://github.com:65536/org/repo", False),
])
def test_repository_urls_follow_the_documented_pattern(client, world, setup, url, accepted):
    """The server takes exactly what the OpenAPI pattern describes: a client (or a
    fuzzer) following the document is not refused, and one outside it is."""
    import re

    org, project, env, token = setup
    raw = auth(world.key(org)[0])
    pattern = client.get(f"{P}/openapi.json").json["components"]["schemas"]["ProjectCreate"][
        "properties"]["git_repo_url"]["pattern"]
    assert bool(re.search(pattern, url)) is accepted
    r = client.patch(f"{P}/projects/{project.id}", headers=raw, json={"git_repo_url": url})
    assert r.status_code == (200 if accepted else 422), r.json
