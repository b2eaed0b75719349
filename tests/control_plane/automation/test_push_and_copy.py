"""git_push rules fired by a signed push (through HTTP), copy_database runs (the
newest backup, or a fresh one, restored into the target, neutralised when it is
not production), and `berth admin rule`."""

import pytest

from control_plane.agent_link import Plain
from control_plane.models import (
    AgentCommand,
    AutomationRun,
    Deployment,
    Environment,
    Event,
    Project,
)
from control_plane.services.automation import rules, triggers
from tests.control_plane.automation.conftest import bearer
from tests.control_plane.automation.test_rules import P, rules_url
from tests.control_plane.projects.test_git_push import _admin_cli, post, push_body


def test_a_push_fires_the_rules_whose_glob_matches(client, setup):
    project, main = setup["project"], setup["main"]
    target = setup["env"]("release", auto_deploy=False)
    for branch in ("feature/*", "release"):
        rules.create_rule(project, name=f"on {branch}", trigger={
            "type": "git_push", "branch": branch},
            action={"type": "deploy", "environment_id": str(target.id)})
    r = post(client, push_body(ref="refs/heads/feature/login", pusher={"name": "ana"}),
             setup["secret"])
    assert r.status_code == 200, r.json
    [fired] = r.json["automation_runs"]
    assert fired["status"] == "running"
    run = AutomationRun.get_by_id(fired["run_id"])
    assert (run.trigger_type, run.branch, run.actor) == ("git_push", "feature/login", "ana")
    d = Deployment.get_by_id(run.task)
    # The environment's own branch is deployed (its head: the pushed commit is another branch's).
    assert (d.environment_id, d.trigger, d.git_commit) == (target.id, "git_push", None)
    event = Event.get(Event.name == "automation_rule.triggered")
    assert (event.data["branch"], event.data["actor"], event.data["trigger_type"]) == (
        "feature/login", "ana", "git_push")

    # A push to main matches neither glob; a branch deletion fires nothing.
    r = post(client, push_body(), setup["secret"])
    assert r.json["automation_runs"] == [] and len(r.json["deployments"]) == 1
    assert main.id in {d.environment_id for d in Deployment.select()}
    r = post(client, push_body(ref="refs/heads/feature/login", after="0" * 40), setup["secret"])
    assert r.json["automation_runs"] == []
    assert AutomationRun.select().count() == 1


def test_copy_database_restores_the_newest_backup_or_a_fresh_one(client, bk, store, app):
    settings = app.extensions["berth"].settings
    staging = bk.environment()
    Environment.update(environment_type="staging").where(Environment.id == staging.id).execute()
    old = bk.completed_backup(client)
    newest = bk.completed_backup(client)
    rule = client.post(rules_url(bk), headers=bk.key, json={
        "name": "refresh staging", "trigger": {"type": "schedule", "cron": "0 4 * * *"},
        "action": {"type": "copy_database", "source_environment_id": str(bk.env.id),
                   "environment_id": str(staging.id)}}).json
    run = client.post(f"{P}/automation-rules/{rule['id']}/run", headers=bk.key).json
    restore = Deployment.get_by_id(run["task_id"])
    assert restore.kind == "restore" and restore.environment_id == staging.id
    assert restore.extra_data["backup_id"] == str(newest.id) != str(old.id)
    assert restore.extra_data["neutralize"] is True  # staging: neutralised
    bk.ack(restore.id)
    bk.finish(restore.id, result={"neutralized": True})
    assert AutomationRun.get_by_id(run["id"]).status == "completed"

    # fresh: a backup of the source first, then that backup restored.
    key = bearer(bk.world.key(bk.org)[0])
    client.patch(f"{P}/automation-rules/{rule['id']}", headers=key, json={"action": {
        **rule["action"], "fresh": True}})
    run = client.post(f"{P}/automation-rules/{rule['id']}/run", headers=key).json
    backup_task = Deployment.get_by_id(run["task_id"])
    assert (backup_task.kind, backup_task.environment_id) == ("backup", bk.env.id)
    bk.ack(backup_task.id)
    bk.finish(backup_task.id)
    assert AutomationRun.get_by_id(run["id"]).status == "running"
    triggers.start_pending(Plain(settings))
    restore = Deployment.get_by_id(AutomationRun.get_by_id(run["id"]).task)
    assert restore.kind == "restore"
    assert restore.extra_data["backup_id"] == backup_task.extra_data["backup_id"]
    bk.ack(restore.id)
    bk.finish(restore.id, ok=False, error="pg_restore: out of space")
    done = AutomationRun.get_by_id(run["id"])
    assert done.status == "failed" and "out of space" in done.reason
    assert AgentCommand.select().where(AgentCommand.deployment == restore.id).count() == 1


def test_a_copy_rule_may_ask_for_a_safer_copy(client, bk):
    staging = bk.environment()
    Environment.update(environment_type="staging").where(Environment.id == staging.id).execute()
    Environment.update(environment_type="production").where(Environment.id == bk.env.id).execute()
    bk.completed_backup(client)
    copy = {"type": "copy_database", "source_environment_id": str(bk.env.id),
            "environment_id": str(staging.id)}
    for bad, field in (({"neutralize_profile": "lenient"}, "neutralize_profile"),
                       ({"anonymize": "yes"}, "anonymize")):
        r = client.post(rules_url(bk), headers=bk.key, json={
            "name": "bad", "trigger": {"type": "schedule", "cron": "0 4 * * *"},
            "action": {**copy, **bad}})
        assert r.status_code == 422 and field in str(r.json["details"]), r.json
    r = client.post(rules_url(bk), headers=bk.key, json={
        "name": "into production", "trigger": {"type": "schedule", "cron": "0 4 * * *"},
        "action": {**copy, "environment_id": str(bk.env.id), "source_environment_id":
                   str(staging.id), "allow_production": True, "anonymize": True}})
    assert r.status_code == 422 and "action.anonymize" in r.json["details"], r.json
    rule = client.post(rules_url(bk), headers=bk.key, json={
        "name": "anonymised staging", "trigger": {"type": "schedule", "cron": "0 4 * * *"},
        "action": {**copy, "neutralize_profile": "strict", "anonymize": True}}).json
    assert (rule["action"]["neutralize_profile"], rule["action"]["anonymize"]) == (
        "strict", True)
    run = client.post(f"{P}/automation-rules/{rule['id']}/run", headers=bk.key).json
    payload = AgentCommand.get(AgentCommand.deployment == run["task_id"]).payload
    assert (payload["neutralize"], payload["neutralize_profile"], payload["anonymize"]) == (
        True, "strict", True)


def test_admin_rule_commands(tmp_path, backend):
    """`berth admin rule list|create|run`, on a data directory of its own."""
    if backend != "sqlite":
        pytest.skip("the console script uses the data directory's SQLite")
    admin = _admin_cli(tmp_path)
    org = admin("org", "create", "--name", "acme")["id"]
    server = admin("server", "create", "--name", "s", "--provider", "p", "--cpu-cores", 1,
                   "--ram-mb", 4096, "--disk-gb", 10, "--org", org)["id"]
    from control_plane.app import create_app

    create_app({"DATA_DIR": str(tmp_path / "cli")})
    project = Project.create(organization=org, server=server, name="p")
    env = Environment.create(project=project, server=server, name="prod", status="running")
    created = admin("rule", "create", "--project", project.id, "--name", "nightly",
                    "--on", "schedule", "--cron", "0 3 * * *", "--timezone", "Europe/Paris",
                    "--action", "backup", "--environment", env.id)
    assert created["trigger"] == {"type": "schedule", "cron": "0 3 * * *",
                                  "timezone": "Europe/Paris"}
    assert created["action"] == {"type": "backup", "environment_id": str(env.id)}
    assert created["next_run_at"] is not None and created["last_run"] is None
    refused = admin("rule", "create", "--project", project.id, "--name", "bad", "--on",
                    "schedule", "--cron", "0 0 30 2 *", "--action", "backup", "--environment",
                    env.id, ok=False)
    assert "trigger.cron" in refused
    run = admin("rule", "run", created["id"])
    assert (run["trigger_type"], run["actor"], run["status"]) == ("manual", "operator", "running")
    assert run["task_id"] is not None
    [listed] = admin("rule", "list", "--project", project.id)["items"]
    assert listed["id"] == created["id"] and listed["last_run"]["id"] == run["id"]
