"""Automation rules end to end: a real `berth-agent run`, real containers, the
agent's HTTPS proxy with a real ACME server, the control plane's scheduler loop
running the automation and webhook jobs, and a real HTTPS webhook receiver.

A `preview` rule: the push of `feature/login` makes an environment that answers at
its own URL; a second push redeploys it with the new commit; the branch's
deletion deletes it. Every run's `automation_rule.*` events reach the receiver
with every field. A `copy_database` rule copies production into staging:
staging then holds production's rows, neutralised."""

import json
import subprocess

import pytest

from agent.deploy.environments import Environments
from control_plane.models import AutomationRun, Environment, Project, Server
from control_plane.scheduler import Job, Scheduler
from control_plane.services import agents as agent_svc
from control_plane.services.accounts import orgs
from control_plane.services.automation import triggers
from control_plane.services.projects import git_push
from control_plane.services.projects.addon_repositories import full_name_of
from control_plane.services.webhooks import delivery
from tests.conftest import auth
from tests.control_plane.projects.test_git_push import post
from tests.support.agents import registered_server, wait_for
from tests.support.backup_flow import (
    V1,
    P,
    _repo,
    completed_backup,
    production_and_staging,
    psql,
    settled,
)
from tests.support.proxy import APPS_DOMAIN, https_request, wait_https
from tests.support.webhook_receiver import https_receiver, trust_ca  # noqa: F401

EVENTS = ["automation_rule.triggered", "automation_rule.completed", "automation_rule.failed"]
FIELDS = {"rule_id", "rule_name", "run_id", "project_id", "action_type", "trigger_type",
          "branch", "actor", "environment_id", "task_id"}


class Auto:
    pass


@pytest.fixture
def scheduler(app):
    """The control plane's scheduler loop, with its automation and webhook jobs."""
    berth = app.extensions["berth"]
    loop = Scheduler([Job("automation", 0.3, lambda: triggers.run(berth)),
                      Job("webhooks", 0.3, lambda: delivery.run(berth))])
    loop.start_in_thread()
    yield loop
    loop.stop()


@pytest.fixture
def auto(app, client, world, proxied, agents, gateway, http_app, tmp_path, pebble, docker_client,
         https_receiver, trust_ca):  # noqa: F811
    a = Auto()
    settings = app.extensions["berth"].settings
    settings.update(WEBHOOK_ALLOW_PRIVATE=True, WEBHOOK_CA_BUNDLE=trust_ca)
    a.root = tmp_path / "srv"
    a.org = world.org()
    a.server, credential = registered_server(a.org)
    a.project = world.project(a.org, a.server)
    a.repo = _repo(tmp_path)
    Project.update(git_repo_url=a.repo).where(Project.id == a.project.id).execute()
    a.secret = git_push.issue_secret(a.project.id, public_url="https://berth.test")["secret"]
    a.key = auth(world.key(a.org)[0])
    a.reader = auth(world.key(a.org, "read_only")[0])
    user = world.user(a.org, permissions=("project.environments.deploy",))
    a.user = auth(orgs.issue_user_token(user.id))
    a.agent = agents(a.server, credential, env={"BERTH_AGENT_ENV_ROOT": str(a.root), **proxied})
    wait_for(lambda: str(a.server.id) in gateway.sessions
             and agent_svc.is_connected(Server.get_by_id(a.server.id)), timeout=30,
             what="agent connected")
    a.receiver, a.port, a.pebble = https_receiver, pebble.tls_port, pebble
    r = client.post(f"{P}/webhooks", headers=a.key, json={
        "url": https_receiver.url + "/hooks", "events": EVENTS, "project_id": str(a.project.id)})
    assert r.status_code == 201, r.json
    yield a
    settings.update(WEBHOOK_ALLOW_PRIVATE=False, WEBHOOK_CA_BUNDLE=None)
    envs = Environments(docker_client, root=a.root)
    for env in Environment.select().where(Environment.project == a.project.id):
        envs.destroy(str(env.id), True, lambda *line: None)


def commit_on(tmp_path, branch, text):
    work = tmp_path / "work"
    git = ["git", "-c", "user.email=d@example.com", "-c", "user.name=d"]
    subprocess.run(["git", "checkout", "-q", "-B", branch], cwd=work, check=True)
    (work / "shop" / "notes.txt").write_text(text)
    for cmd in ([*git, "add", "-A"], [*git, "commit", "-qm", text],
                ["git", "push", "-q", "-f", str(tmp_path / "repo.git"), branch]):
        subprocess.run(cmd, cwd=work, check=True)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=work, check=True,
                          capture_output=True, text=True).stdout.strip()


def push(client, a, branch, after):
    body = json.dumps({"ref": f"refs/heads/{branch}", "before": "0" * 40, "after": after,
                       "deleted": not after.strip("0"), "pusher": {"name": "ana"},
                       "repository": {"full_name": full_name_of(a.repo)},
                       "commits": []}).encode()
    r = post(client, body, a.secret, query=f"?project_id={a.project.id}")
    assert r.status_code == 200, r.json
    return r.json["automation_runs"]


def run_of(client, a, rule_id, run_id):
    """The run once it ended, as the API shows it (waited for in the database: the
    key's rate limit is for people)."""
    wait_for(lambda: AutomationRun.get_by_id(run_id).status != "running", timeout=180,
             interval=0.3, what=f"run {run_id} ended")
    return next(r for r in client.get(f"{P}/automation-rules/{rule_id}/runs",
                                      headers=a.reader).json["data"] if r["id"] == run_id)


def received(a, count):
    a.receiver.wait_for(count, timeout=60)
    return [json.loads(r.body) for r in a.receiver.requests]


def test_a_branch_gets_a_preview_at_its_own_url_until_it_is_deleted(client, auto, scheduler,
                                                                     loopback_dns, tmp_path):
    a = auto
    rule = client.post(f"{P}/projects/{a.project.id}/automation-rules", headers=a.key, json={
        "name": "previews", "trigger": {"type": "git_push", "branch": "feature/*"},
        "action": {"type": "preview"}}).json
    first = commit_on(tmp_path, "feature/login", "v1")
    [fired] = push(client, a, "feature/login", first)
    run = run_of(client, a, rule["id"], fired["run_id"])
    assert run["status"] == "completed", run
    env = client.get(f"{P}/environments/{run['environment_id']}", headers=a.reader).json
    assert (env["name"], env["branch"]) == ("preview-feature-login", "feature/login")
    host = env["url"].removeprefix("https://")
    assert host.endswith(APPS_DOMAIN)
    loopback_dns.a(host)
    roots = a.pebble.issuing_roots()
    status, _, body = wait_https(host, a.port, roots)
    assert status == 200 and json.loads(body) == {"status": "pass"}

    # A second push: the same environment, redeployed with the new commit.
    second = commit_on(tmp_path, "feature/login", "v2")
    [fired] = push(client, a, "feature/login", second)
    run = run_of(client, a, rule["id"], fired["run_id"])
    assert run["status"] == "completed" and run["environment_id"] == env["id"], run["reason"]
    task = client.get(f"{V1}/deployments/{run['task_id']}", headers=a.user).json
    assert task["git_commit"] == second
    assert https_request(host, a.port, "/web/health", roots)[0] == 200

    # The branch deleted: the preview goes, and its URL with it.
    [fired] = push(client, a, "feature/login", "0" * 40)
    run = run_of(client, a, rule["id"], fired["run_id"])
    assert run["status"] == "completed", run
    assert client.get(f"{P}/environments/{env['id']}", headers=a.reader).status_code == 404
    assert _status(host, a.port, roots) != 200

    # Every run's events reached the receiver, each with every field.
    events = received(a, 6)
    assert [e["event"] for e in events].count("automation_rule.triggered") == 3
    assert [e["event"] for e in events].count("automation_rule.completed") == 3
    for e in events:
        assert FIELDS <= set(e["data"]), e
        assert (e["data"]["rule_name"], e["data"]["action_type"], e["data"]["trigger_type"],
                e["data"]["branch"], e["data"]["actor"]) == (
            "previews", "preview", "git_push", "feature/login", "ana")


def _status(host, port, roots):
    """The URL's answer, or None when nothing answers for the name any more."""
    try:
        return https_request(host, port, "/web/health", roots, timeout=5)[0]
    except OSError:
        return None


@pytest.mark.parametrize("stand", ["local"], indirect=True)
def test_copy_database_makes_staging_a_neutralised_copy_of_production(client, stand, scheduler):
    s = stand
    prod, staging = production_and_staging(client, s)
    psql(s, prod, "CREATE TABLE orders (ref text); INSERT INTO orders VALUES ('SO001')")
    psql(s, prod, "INSERT INTO ir_mail_server (name, smtp_host, smtp_port, active) "
                  "VALUES ('smtp', 'mail.example.com', 25, true)")
    completed_backup(client, s, prod)
    rule = client.post(f"{P}/projects/{s.project.id}/automation-rules", headers=s.key, json={
        "name": "refresh staging", "trigger": {"type": "schedule", "cron": "0 4 * * *"},
        "action": {"type": "copy_database", "source_environment_id": prod,
                   "environment_id": staging}}).json
    r = client.post(f"{P}/automation-rules/{rule['id']}/run", headers=s.key)
    assert r.status_code == 201 and r.json["status"] == "running", r.json
    done = settled(client, s, r.json["task_id"])
    assert done["status"] in ("success", "completed"), done
    run = wait_for(lambda: (x := client.get(f"{P}/automation-rules/{rule['id']}/runs",
                                            headers=s.key).json["data"][0])["status"]
                   != "running" and x, timeout=30, interval=0.3, what="the run ended")
    assert run["status"] == "completed", run
    assert psql(s, staging, "SELECT ref FROM orders") == "SO001"
    assert psql(s, staging, "SELECT value FROM ir_config_parameter "
                            "WHERE key = 'database.is_neutralized'") == "true"
    # Its one active mail server is neutralisation's dummy, pointed at the catcher.
    assert psql(s, staging, "SELECT name, smtp_host FROM ir_mail_server WHERE active") == \
        "neutralization - disable emails|host.docker.internal"
    assert client.get(f"{P}/environments/{staging}", headers=s.reader).json["neutralized"] is True
    assert psql(s, prod, "SELECT count(*) FROM ir_mail_server WHERE active") == "1"
