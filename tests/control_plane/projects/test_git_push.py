"""Deploy on git push: POST /api/v1/webhooks/<git_provider>, signed with the
project's secret, through HTTP on both database backends."""

import hashlib
import hmac
import json
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from control_plane.models import (
    AgentCommand,
    Deployment,
    Environment,
    GitDelivery,
    GitWebhookSecret,
)
from control_plane.services.projects import addon_repositories, git_push

URL = "/api/v1/webhooks"
SHA1, SHA2 = "a" * 40, "b" * 40


def secret_for(project, rotate=False):
    return git_push.issue_secret(project.id, rotate=rotate,
                                 public_url="https://berth.example.com")["secret"]


def push_body(repo="acme/erp", ref="refs/heads/main", after=SHA1, **extra):
    body = {"ref": ref, "before": "0" * 40, "after": after,
            "repository": {"full_name": repo, "name": repo.split("/")[-1]},
            "commits": [{"id": after, "message": "change"}], **extra}
    return json.dumps(body).encode()


def sign(secret, body):
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def post(client, body, secret=None, *, event="push", delivery=None, provider="github",
         headers=None, query=""):
    h = {"Content-Type": "application/json"}
    if provider == "github":
        h |= {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery or str(uuid.uuid4())}
    else:
        h |= {"X-Git-Event": event, "X-Git-Delivery": delivery or str(uuid.uuid4())}
    if secret is not None:
        h["X-Hub-Signature-256"] = sign(secret, body)
    h |= headers or {}
    return client.post(f"{URL}/{provider}{query}", data=body, headers=h)


@pytest.fixture
def setup(world):
    """A project on github.com/acme/erp with three environments: `main` with auto-deploy
    on, `staging` with auto-deploy on, `main` with auto-deploy off."""
    org = world.org()
    project = world.project(org)
    project.git_repo_url = "https://github.com/Acme/ERP.git"
    project.save()

    def env(branch, auto_deploy=True, status="running"):
        e = world.environment(project, status=status)
        Environment.update(branch=branch, auto_deploy=auto_deploy).where(
            Environment.id == e.id).execute()
        return Environment.get_by_id(e.id)

    return {"org": org, "project": project, "main": env("main"), "staging": env("staging"),
            "manual": env("main", auto_deploy=False), "secret": secret_for(project), "env": env}


def test_signed_push_deploys_the_pushed_commit(client, setup):
    r = post(client, push_body(), setup["secret"])
    assert r.status_code == 200, r.json
    assert r.json["duplicate"] is False and r.json["ignored"] is False
    assert r.json["branch"] == "main" and r.json["commit"] == SHA1
    assert r.json["repository"] == "acme/erp" and r.json["skipped"] == []
    [queued] = r.json["deployments"]
    assert queued["environment_id"] == str(setup["main"].id)
    assert queued["source"] == "project" and queued["git_commit"] == SHA1
    assert r.headers["X-RateLimit-Limit"] == "30" and r.headers["X-RateLimit-Remaining"] == "29"

    d = Deployment.get_by_id(queued["deployment_id"])
    assert (d.trigger, d.triggered_by_id, d.git_commit, d.git_branch, d.status) == (
        "git_push", None, SHA1, "main", "pending")
    assert d.extra_data["git_push"]["repository"] == "acme/erp"
    cmd = AgentCommand.get(AgentCommand.deployment == d.id)
    assert cmd.kind == "deploy" and cmd.payload["git"]["commit"] == SHA1
    assert cmd.payload["addon_repositories"] == []
    assert Environment.get_by_id(setup["main"].id).status == "deploying"
    # Only the auto-deploy environment on the pushed branch.
    assert Deployment.select().count() == 1


def test_generic_header_spellings_and_the_gateway_is_woken(app, client, setup):
    woken = []

    class RecordingGateway:  # stands in for the gRPC gateway: records wake-ups only
        def wake(self, server_id):
            woken.append(server_id)

    app.extensions["berth"].gateway = RecordingGateway()
    body = push_body(ref="refs/heads/staging", after=SHA2)
    r = post(client, body, setup["secret"], provider="generic")
    assert r.status_code == 200 and len(r.json["deployments"]) == 1
    assert r.json["deployments"][0]["environment_id"] == str(setup["staging"].id)
    assert woken == [setup["staging"].server_id]


def test_unsigned_or_badly_signed_is_401_and_does_nothing(client, setup):
    body, secret = push_body(), setup["secret"]
    r = post(client, body)
    assert r.status_code == 401 and r.json["error"] == "missing_signature"
    assert set(r.json) == {"error", "message"}
    for bad in (sign("wrong-secret", body), sign(secret, body + b" "), "sha1=" + "0" * 40,
                "sha256=", "sha256=" + "z" * 64, "sha256=" + "0" * 64, "nonsense"):
        r = post(client, body, headers={"X-Hub-Signature-256": bad})
        assert r.status_code == 401 and r.json["error"] == "invalid_signature", bad
    # A repository no project has: no secret can match.
    other = push_body(repo="someone/else")
    assert post(client, other, secret).json["error"] == "invalid_signature"
    assert Deployment.select().count() == 0 and GitDelivery.select().count() == 0


def test_secret_is_stored_encrypted_and_rotation_invalidates_the_old_one(client, setup):
    old = setup["secret"]
    row = GitWebhookSecret.get(GitWebhookSecret.project == setup["project"].id)
    assert old not in row.secret_encrypted and old.startswith("gwh_")
    with pytest.raises(Exception, match="--rotate"):
        secret_for(setup["project"])  # an existing secret is not replaced by accident
    new = secret_for(setup["project"], rotate=True)
    assert new != old
    r = post(client, push_body(), old)
    assert r.status_code == 401 and r.json["error"] == "invalid_signature"
    assert post(client, push_body(), new).status_code == 200


def test_a_delivery_is_handled_once(client, setup):
    body, delivery = push_body(), str(uuid.uuid4())
    first = post(client, body, setup["secret"], delivery=delivery)
    # The first deployment finishes: a redelivery still does nothing.
    Deployment.update(status="success").execute()
    Environment.update(status="running").where(Environment.status == "deploying").execute()
    again = post(client, body, setup["secret"], delivery=delivery)
    assert again.status_code == 200 and again.json["duplicate"] is True
    assert again.json["deployments"] == first.json["deployments"]
    assert Deployment.select().count() == 1
    # Another delivery of the same push is a new request.
    third = post(client, body, setup["secret"])
    assert third.json["duplicate"] is False and len(third.json["deployments"]) == 1


def test_concurrent_duplicates_make_one_deployment(app, setup):
    body, delivery = push_body(), str(uuid.uuid4())
    n = 4
    barrier, responses = threading.Barrier(n), []

    def send():
        client = app.test_client()
        barrier.wait()
        responses.append(post(client, body, setup["secret"], delivery=delivery))

    threads = [threading.Thread(target=send) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(r.status_code for r in responses) == [200] * n
    assert sorted(r.json["duplicate"] for r in responses) == [False] + [True] * (n - 1)
    assert len({r.json["deployments"][0]["deployment_id"] for r in responses}) == 1
    assert Deployment.select().count() == 1 and GitDelivery.select().count() == 1


def test_other_branch_or_auto_deploy_off_does_nothing(client, setup):
    r = post(client, push_body(ref="refs/heads/feature-x"), setup["secret"])
    assert r.status_code == 200 and r.json["deployments"] == [] and r.json["skipped"] == []
    Environment.update(auto_deploy=False).execute()
    r = post(client, push_body(), setup["secret"])
    assert r.status_code == 200 and r.json["deployments"] == []
    assert Deployment.select().count() == 0


def test_tags_and_branch_deletions_deploy_nothing(client, setup):
    r = post(client, push_body(ref="refs/tags/v1.0"), setup["secret"])
    assert r.status_code == 200 and r.json["ignored"] is True and r.json["branch"] is None
    r = post(client, push_body(after="0" * 40, deleted=True), setup["secret"])
    assert r.status_code == 200 and r.json["ignored"] is True
    assert Deployment.select().count() == 0


def test_busy_or_undeployable_environments_are_skipped(client, setup):
    post(client, push_body(), setup["secret"])  # main now has a pending deployment
    paused = setup["env"]("main", status="destroying")  # no deploy starts from there
    r = post(client, push_body(after=SHA2), setup["secret"])
    assert r.status_code == 200 and r.json["deployments"] == []
    reasons = {s["environment_id"]: s["reason"] for s in r.json["skipped"]}
    assert reasons == {str(setup["main"].id): "deployment_in_progress",
                       str(paused.id): "not_deployable"}
    assert Deployment.select().count() == 1


def test_addon_repository_push_redeploys_the_projects_auto_deploy_environments(client, setup):
    project = setup["project"]
    addon = addon_repositories.add(project.id, "https://github.com/OCA/web.git", branch="17.0")
    body = push_body(repo="OCA/web", ref="refs/heads/17.0", after=SHA2)
    r = post(client, body, setup["secret"])
    assert r.status_code == 200
    deployed = {d["environment_id"] for d in r.json["deployments"]}
    assert deployed == {str(setup["main"].id), str(setup["staging"].id)}
    assert {d["source"] for d in r.json["deployments"]} == {"addon_repository"}
    d = Deployment.get_by_id(r.json["deployments"][0]["deployment_id"])
    assert d.trigger == "git_push" and d.triggered_by_id is None and d.git_commit is None
    cmd = AgentCommand.get(AgentCommand.deployment == d.id)
    assert cmd.payload["addon_repositories"] == [
        {"name": "oca-web", "url": "https://github.com/OCA/web.git", "branch": "17.0"}]
    assert d.config["addon_repositories"] == cmd.payload["addon_repositories"]

    Deployment.update(status="success").execute()
    Environment.update(status="running").where(Environment.status == "deploying").execute()
    # Another branch of the add-on repository, or an inactive / manual one: nothing.
    assert post(client, push_body(repo="OCA/web", ref="refs/heads/16.0"),
                setup["secret"]).json["deployments"] == []
    addon_repositories.update(addon.id, auto_deploy=False)
    assert post(client, body, setup["secret"]).json["deployments"] == []
    addon_repositories.update(addon.id, auto_deploy=True, is_active=False)
    assert post(client, body, setup["secret"]).json["deployments"] == []
    # Inactive add-on repositories are not checked out either.
    r = post(client, push_body(), setup["secret"])
    cmd = AgentCommand.get(AgentCommand.deployment == r.json["deployments"][0]["deployment_id"])
    assert cmd.payload["addon_repositories"] == []


def test_projects_sharing_a_repository_act_only_on_the_matching_signature(client, world, setup):
    other = world.project(setup["org"])
    other.git_repo_url = "git@github.com:acme/erp.git"
    other.save()
    other_env = setup["env"]("main")
    Environment.update(project=other.id).where(Environment.id == other_env.id).execute()
    other_secret = secret_for(other)
    r = post(client, push_body(), other_secret)
    assert [d["environment_id"] for d in r.json["deployments"]] == [str(other_env.id)]
    # project_id in the query narrows the candidates to one project.
    r = post(client, push_body(), setup["secret"], query=f"?project_id={other.id}")
    assert r.status_code == 401


def test_gitea_and_gitlab_signatures(client, setup):
    body = push_body()
    sig = sign(setup["secret"], body).removeprefix("sha256=")
    r = post(client, body, provider="gitea",
             headers={"X-Gitea-Event": "push", "X-Gitea-Signature": sig})
    assert r.status_code == 200 and len(r.json["deployments"]) == 1
    Deployment.update(status="success").execute()
    Environment.update(status="running").where(Environment.status == "deploying").execute()
    gl = json.dumps({"object_kind": "push", "ref": "refs/heads/main", "after": SHA2,
                     "project": {"path_with_namespace": "acme/erp"}, "commits": []}).encode()
    r = post(client, gl, provider="gitlab", headers={
        "X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": setup["secret"]})
    assert r.status_code == 200 and r.json["deployments"][0]["git_commit"] == SHA2
    r = post(client, gl, provider="gitlab", headers={"X-Gitlab-Token": "wrong"})
    assert r.status_code == 401


def test_ping_and_other_events_are_ignored(client, setup):
    body = json.dumps({"zen": "Keep it simple.", "hook_id": 1,
                       "repository": {"full_name": "acme/erp"}}).encode()
    r = post(client, body, setup["secret"], event="ping")
    assert r.status_code == 200 and r.json["ignored"] is True and r.json["event"] == "ping"
    assert r.json["deployments"] == []
    r = post(client, push_body(), setup["secret"], event="issues")
    assert r.status_code == 200 and r.json["ignored"] is True
    assert post(client, body, event="ping").status_code == 401  # still signed
    assert Deployment.select().count() == 0 and GitDelivery.select().count() == 0


def test_unknown_provider_is_404(client, setup):
    r = post(client, push_body(), setup["secret"], provider="bitbucket")
    assert r.status_code == 404 and r.json == {"error": "not_found", "message": "Not found."}


def test_rate_limit_30_per_minute(client, setup):
    body = push_body(ref="refs/heads/nowhere")
    for _ in range(30):
        assert post(client, body, setup["secret"]).status_code == 200
    r = post(client, body, setup["secret"])
    assert r.status_code == 429 and r.json["error"] == "rate_limit_exceeded"
    assert int(r.headers["Retry-After"]) >= 1 and r.json["retry_after"] >= 1
    # Unsigned requests count too; another repository from the same address does not share it.
    assert post(client, body).status_code == 429
    assert post(client, push_body(repo="acme/other")).status_code == 401


@pytest.mark.parametrize("body, headers, code", [
    (b"{not json", {}, "invalid_payload"),
    (b"", {}, "invalid_payload"),
    (b"[1, 2]", {}, "invalid_payload"),
    (b"[" * 100_000, {}, "invalid_payload"),
    (json.dumps({"ref": "refs/heads/main", "commits": []}).encode(), {}, "invalid_payload"),
    (json.dumps({"ref": "refs/heads/main", "commits": [],
                 "repository": {"full_name": 5}}).encode(), {}, "invalid_payload"),
    (json.dumps({"repository": {"full_name": "acme/erp"}, "commits": []}).encode(), {},
     "invalid_payload"),
    (json.dumps({"ref": "refs/heads/main", "repository": {"full_name": "acme/erp"}}).encode(),
     {}, "invalid_payload"),
    (json.dumps({"ref": "refs/heads/main", "repository": {"full_name": "acme/erp"},
                 "commits": {}, "after": SHA1}).encode(), {}, "invalid_payload"),
    (push_body(after="not-a-commit"), {}, "invalid_payload"),
    (push_body(ref=["refs/heads/main"]), {}, "invalid_payload"),
    (push_body(ref="refs/heads/"), {}, "invalid_payload"),
    (push_body(), {"X-GitHub-Event": ""}, "missing_header"),
    (push_body(), {"X-GitHub-Delivery": ""}, "missing_header"),
    (push_body(), {"X-GitHub-Delivery": "x" * 300}, "missing_header"),
])
def test_malformed_requests_are_400(client, setup, body, headers, code):
    r = post(client, body, setup["secret"], headers=headers)
    assert r.status_code == 400, r.json
    assert r.json["error"] == code and set(r.json) == {"error", "message"}
    assert Deployment.select().count() == 0


def test_openapi_documents_the_endpoint(client):
    spec = client.get("/api/v1/openapi.json").json
    op = spec["paths"]["/api/v1/webhooks/{git_provider}"]["post"]
    assert {"200", "400", "401", "404", "429"} <= set(op["responses"])
    assert op["security"] == []
    assert {p["name"] for p in op["parameters"]} >= {
        "X-Hub-Signature-256", "X-Git-Event", "X-Git-Delivery", "project_id"}
    path_params = spec["paths"]["/api/v1/webhooks/{git_provider}"]["parameters"]
    assert set(path_params[0]["schema"]["enum"]) == {"github", "gitea", "gitlab", "generic"}


BERTH = str(Path(sys.executable).parent / "berth")


def _admin_cli(tmp_path, **settings):
    """`berth admin …` on a data directory of its own: parsed JSON, or stderr
    when it is expected to fail."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CP_")}
    env |= {"CP_DATA_DIR": str(tmp_path / "cli"), **settings}

    def admin(*args, ok=True):
        proc = subprocess.run([BERTH, "admin", *map(str, args)], env=env, capture_output=True,
                              text=True, timeout=60)
        assert (proc.returncode == 0) == ok, proc.stderr
        return json.loads(proc.stdout) if ok else proc.stderr
    return admin


def test_admin_commands(tmp_path, backend):
    if backend != "sqlite":
        pytest.skip("the console script uses the data directory's SQLite")
    admin = _admin_cli(tmp_path, CP_PUBLIC_URL="https://berth.example.com")

    org = admin("org", "create", "--name", "acme")["id"]
    server = admin("server", "create", "--name", "s", "--provider", "p", "--cpu-cores", 1,
                   "--ram-mb", 1024, "--disk-gb", 10, "--org", org)["id"]
    from control_plane.app import create_app
    from control_plane.models import Project

    create_app({"DATA_DIR": str(tmp_path / "cli")})
    project = Project.create(organization=org, server=server, name="p",
                             git_repo_url="https://github.com/acme/erp.git")
    out = admin("project", "webhook-secret", project.id)
    assert set(out) == {"project_id", "secret", "url", "provider"}
    assert out["url"] == f"https://berth.example.com/api/v1/webhooks/github?project_id={project.id}"
    assert "--rotate" in admin("project", "webhook-secret", project.id, ok=False)
    assert admin("project", "webhook-secret", project.id, "--rotate")["secret"] != out["secret"]
    added = admin("addon", "add", "--project", project.id, "--url",
                  "https://github.com/OCA/web.git", "--branch", "17.0")
    assert (added["full_name"], added["branch"], added["auto_deploy"], added["is_active"]) == (
        "oca/web", "17.0", True, True)
    updated = admin("addon", "update", added["id"], "--inactive", "--no-auto-deploy")
    assert (updated["is_active"], updated["auto_deploy"]) == (False, False)
    listed = admin("addon", "list", "--project", project.id)["addon_repositories"]
    assert [a["id"] for a in listed] == [added["id"]]
    admin("addon", "add", "--project", project.id, "--url", "https://github.com/OCA/web",
          ok=False)  # already there


def test_admin_addon_repositories_follow_the_git_rules(tmp_path, backend):
    """`berth admin addon add|update|list`: URLs and branches as the API's; local
    repositories and credentials refused; a URL stored with credentials listed
    without them."""
    if backend != "sqlite":
        pytest.skip("the console script uses the data directory's SQLite")
    admin = _admin_cli(tmp_path)

    org = admin("org", "create", "--name", "acme")["id"]
    from control_plane.app import create_app
    from control_plane.models import AddonRepository, Project

    create_app({"DATA_DIR": str(tmp_path / "cli")})
    project = Project.create(organization=org, name="p")
    add = ("addon", "add", "--project", project.id, "--url")
    for url, why in (("file:///srv/berth/other/addons", "must be"),
                     ("/srv/berth/other/addons", "must be"),
                     ("ext::sh -c touch% /tmp/x", "must be"),
                     ("https://u:hunter2@github.com/OCA/web.git", "credentials"),
                     ("https://ghp_token@github.com/OCA/web.git", "credentials"),
                     ("--upload-pack=touch /tmp/x", "'-'")):
        err = admin(*add, url, ok=False)
        assert why in err and "hunter2" not in err, err
    for branch in ("-oProxyCommand=x", "a..b", "x.lock", "@{-1}", "HEAD"):
        assert "branch" in admin(*add, "git@github.com:OCA/web.git", "--branch", branch,
                                 ok=False)
    assert AddonRepository.select().count() == 0
    for url in ("git@github.com:OCA/web.git", "ssh://git@github.com/OCA/server-tools.git",
                "https://github.com/OCA/queue.git"):
        added = admin(*add, url)
        assert added["url"] == url
    assert "branch" in admin("addon", "update", added["id"], "--branch", "../x", ok=False)
    AddonRepository.update(url="https://u:hunter2@github.com/OCA/queue.git").where(
        AddonRepository.id == added["id"]).execute()
    listed = admin("addon", "list", "--project", project.id)["addon_repositories"]
    assert [a["url"] for a in listed][-1] == "https://github.com/OCA/queue.git"
