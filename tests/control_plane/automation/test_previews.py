"""Preview environments: one per pushed branch, deployed on later pushes, filled
from a source environment (neutralised), bounded, and deleted with their branch
or after their time without a push."""

import datetime as dt

import pytest

from control_plane.agent_link import Plain
from control_plane.models import AutomationRun, Deployment, Environment, Project, Server
from control_plane.services.automation import rules, triggers
from control_plane.vocabulary.errors import InvalidAutomationRule
from tests.control_plane.projects.test_git_push import post, push_body, secret_for

SHA1, SHA2 = "1" * 40, "2" * 40


def _push(client, secret, branch, after=SHA1, delivery=None):
    r = post(client, push_body(ref=f"refs/heads/{branch}", after=after,
                               pusher={"name": "ana"}), secret, delivery=delivery)
    assert r.status_code == 200, r.json
    return r.json


def test_a_branch_gets_a_preview_until_it_is_deleted(client, bk, store, app, at):
    settings = app.extensions["berth"].settings
    Project.update(git_repo_url="https://github.com/acme/erp.git").where(
        Project.id == bk.project.id).execute()
    secret = secret_for(bk.project)
    source = bk.completed_backup(client)
    rule = rules.create_rule(bk.project, name="previews", trigger={
        "type": "git_push", "branch": "feature/*"}, action={
        "type": "preview", "source_environment_id": str(bk.env.id), "max_environments": 2,
        "ttl_hours": 24})
    assert rule.action == {"type": "preview", "source_environment_id": str(bk.env.id),
                           "max_environments": 2, "ttl_hours": 24}

    # The first push makes the environment and deploys it.
    at(dt.datetime(2026, 6, 1, 9, 0))
    [fired] = _push(client, secret, "feature/login")["automation_runs"]
    run = AutomationRun.get_by_id(fired["run_id"])
    env = Environment.get_by_id(run.environment_id)
    assert (env.name, env.branch, env.environment_type, env.preview_rule) == (
        "preview-feature-login", "feature/login", "development", rule.id)
    first = Deployment.get_by_id(run.task)
    assert (first.kind, first.trigger, run.stage) == ("deploy", "git_push", "create")
    bk.ack(first.id)
    bk.finish(first.id, result={})
    # Then the source's newest backup, neutralised.
    triggers.start_pending(Plain(settings))
    run = AutomationRun.get_by_id(run.id)
    copy = Deployment.get_by_id(run.task)
    assert (run.stage, copy.kind, copy.extra_data["backup_id"]) == (
        "copy", "restore", str(source.id))
    assert copy.extra_data["neutralize"] is True
    bk.ack(copy.id)
    bk.finish(copy.id, result={"neutralized": True})
    assert AutomationRun.get_by_id(run.id).status == "completed"

    # A later push deploys the pushed commit to the same environment.
    at(dt.datetime(2026, 6, 1, 12, 0))
    [fired] = _push(client, secret, "feature/login", after=SHA2)["automation_runs"]
    run = AutomationRun.get_by_id(fired["run_id"])
    d = Deployment.get_by_id(run.task)
    assert (run.stage, d.environment_id, d.git_commit) == ("deploy", env.id, SHA2)
    bk.ack(d.id)
    bk.finish(d.id, result={})

    # max_environments: a second branch fits, a third is skipped.
    [second] = _push(client, secret, "feature/pay")["automation_runs"]
    [third] = _push(client, secret, "feature/ship")["automation_runs"]
    assert second["status"] == "running" and third["status"] == "skipped"
    assert "max_environments" in AutomationRun.get_by_id(third["run_id"]).reason
    assert Environment.select().where(Environment.preview_rule == rule.id).count() == 2

    # The branch deleted: its preview is deleted, data and all.
    [gone] = _push(client, secret, "feature/login", after="0" * 40)["automation_runs"]
    run = AutomationRun.get_by_id(gone["run_id"])
    delete = Deployment.get_by_id(run.task)
    assert (run.stage, delete.kind, delete.environment_id) == ("remove", "delete", env.id)
    bk.ack(delete.id)
    bk.finish(delete.id, result={})
    assert not Environment.get_by_id(env.id).is_active
    assert AutomationRun.get_by_id(run.id).status == "completed"

    # feature/pay saw no push for a day: the scheduler deletes it, once.
    pay = Environment.get(Environment.branch == "feature/pay", Environment.is_active)
    bk.ack(Deployment.get(Deployment.environment == pay.id).id)
    bk.finish(Deployment.get(Deployment.environment == pay.id).id, result={})
    at(dt.datetime(2026, 6, 2, 11, 59))
    assert triggers.expire_previews(Plain(settings)) == []
    at(dt.datetime(2026, 6, 2, 12, 1))
    [expired] = triggers.expire_previews(Plain(settings))
    assert triggers.expire_previews(Plain(settings)) == []
    assert (expired.trigger_type, expired.actor, expired.stage) == ("schedule", "scheduler",
                                                                   "remove")
    assert Deployment.get_by_id(expired.task).kind == "delete"


def test_a_preview_needs_a_push_and_room_on_its_server(client, bk):
    env = str(bk.env.id)
    for trigger in ({"type": "schedule", "cron": "0 3 * * *"},
                    {"type": "event", "event": "deploy.completed", "environment_id": env}):
        with pytest.raises(InvalidAutomationRule) as raised:
            rules.create_rule(bk.project, name="x", trigger=trigger, action={"type": "preview"})
        assert "action.type" in raised.value.extra["details"]
    for bad in ({"ttl_hours": 0}, {"max_environments": 51}, {"ttl_hours": "1"},
                {"source_environment_id": "nope"}):
        with pytest.raises(InvalidAutomationRule) as raised:
            rules.create_rule(bk.project, name="x", trigger={"type": "git_push", "branch": "*"},
                              action={"type": "preview", **bad})
        assert f"action.{next(iter(bad))}" in raised.value.extra["details"], bad

    # A server whose environments claim its memory takes no preview.
    Server.update(ram_mb=2048).where(Server.id == bk.server.id).execute()
    Environment.update(ram_mb=1536).where(Environment.id == bk.env.id).execute()
    Project.update(git_repo_url="https://github.com/acme/erp.git").where(
        Project.id == bk.project.id).execute()
    rules.create_rule(bk.project, name="previews", trigger={"type": "git_push", "branch": "*"},
                      action={"type": "preview"})
    [fired] = _push(client, secret_for(bk.project), "feature/big")["automation_runs"]
    run = AutomationRun.get_by_id(fired["run_id"])
    assert run.status == "skipped" and "has no room" in run.reason
    assert Environment.select().where(Environment.preview_rule.is_null(False)).count() == 0
