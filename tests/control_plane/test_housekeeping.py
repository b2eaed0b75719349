"""Retention: task logs go 90 days after their deployment finished, idempotency
records after their 24 hours, outbox events once no webhook needs them (30 days);
on both database backends."""

import uuid

import pytest

from control_plane import events
from control_plane.models import Event, IdempotencyRecord, TaskLogLine, Webhook, WebhookDelivery
from control_plane.services import housekeeping
from control_plane.services.tasks import engine
from tests.conftest import auth

P = "/api/public/v1"


def finished_with_log(app, world, project, lines=3):
    env = world.environment(project, "running")
    d = engine.start(env, "deploy", berth=app.extensions["berth"], trigger="manual")
    engine.on_ack(d.id)
    for i in range(lines):
        TaskLogLine.create(deployment=d.id, seq=i, message=f"step {i}")
    engine.on_result(d.id, True, {}, None)
    return env, d


def test_task_logs_go_90_days_after_their_deployment_finished(app, client, world, fake_clock):
    org = world.org()
    project = world.project(org)
    reader = world.key(org, "read_only")[0]
    old_env, old = finished_with_log(app, world, project)
    fake_clock.advance(days=60)
    new_env, new = finished_with_log(app, world, project)

    fake_clock.advance(days=31)  # old: 91 days; new: 31 days
    assert housekeeping.run()["task_log_lines"] == 3

    gone = client.get(f"{P}/environments/{old_env.id}/logs", headers=auth(reader)).json
    assert gone == {"task_id": str(old.id), "log": "", "lines": 0, "truncated": False}
    kept = client.get(f"{P}/environments/{new_env.id}/logs", headers=auth(reader)).json
    assert kept["lines"] == 3 and kept["log"].startswith("step 0")
    # The record itself stays: the task still answers.
    assert client.get(f"{P}/deployments/{old.id}", headers=auth(reader)).status_code == 200
    assert housekeeping.run()["task_log_lines"] == 0


def test_expired_idempotency_records_go(app, client, world, fake_clock):
    org = world.org()
    raw = world.key(org)[0]
    headers = {**auth(raw), "X-Idempotency-Key": str(uuid.uuid4())}
    body = {"name": "a", "server_id": str(world.server(org).id)}
    assert client.post(f"{P}/projects", headers=headers, json=body).status_code == 201
    fake_clock.advance(hours=23)
    assert housekeeping.run()["idempotency_records"] == 0
    fake_clock.advance(hours=2)
    assert housekeeping.run()["idempotency_records"] == 1
    assert IdempotencyRecord.select().count() == 0


def test_events_go_once_no_webhook_needs_them(app, world, fake_clock):
    org = world.org()
    project = world.project(org)
    hook = Webhook.create(organization=org, url="https://hooks.example.com/x",
                          events=["deploy.completed"], secret_encrypted="x")
    done = events.record_event(org.id, project.id, "deploy.completed", {})
    owed = events.record_event(org.id, project.id, "deploy.completed", {})
    waiting = events.record_event(org.id, project.id, "deploy.completed", {})
    Event.update(fanned_out=True).where(Event.id.in_([done.id, owed.id])).execute()
    WebhookDelivery.create(webhook=hook, event=owed, status="retrying")

    fake_clock.advance(days=29)
    assert housekeeping.run()["events"] == 0
    fake_clock.advance(days=2)
    assert housekeeping.run()["events"] == 1
    left = {e.id for e in Event.select()}
    assert left == {owed.id, waiting.id}  # still owed to a webhook; not yet fanned out


def test_a_turn_with_nothing_to_remove_takes_no_write_lock(app, backend, tmp_path):
    """SQLite: while another connection holds the write lock (requests writing), a
    housekeeping turn that finds nothing old does not wait for it, nor fail."""
    if backend != "sqlite":
        pytest.skip("SQLite's single writer")
    import sqlite3

    db = app.extensions["berth"].db
    db.execute_sql("PRAGMA busy_timeout = 50")
    writer = sqlite3.connect(db.database, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    try:
        assert housekeeping.run() == {"task_log_lines": 0, "idempotency_records": 0,
                                      "events": 0, "domain_claims": 0, "automation_rules": 0,
                                      "audit_events": 0, "shell_sessions": 0}
    finally:
        writer.execute("ROLLBACK")
        writer.close()
        db.execute_sql("PRAGMA busy_timeout = 15000")


def test_automation_rules_go_90_days_after_their_deletion_with_their_runs(app, world):
    import datetime as dt

    from control_plane.infra import clock
    from control_plane.models import AutomationRule, AutomationRun

    org = world.org()
    project = world.project(org)
    now = clock.now()

    def rule(deleted_days_ago):
        r = AutomationRule.create(organization=org, project=project, name="r",
                                  trigger={"type": "git_push", "branch": "main"},
                                  action={"type": "backup"}, trigger_type="git_push",
                                  deleted_at=now - dt.timedelta(days=deleted_days_ago))
        AutomationRun.create(rule=r, trigger_type="manual", actor="k", status="completed",
                             started_at=now)
        return r
    old, recent = rule(91), rule(89)
    assert housekeeping.run()["automation_rules"] == 1
    assert AutomationRule.get_or_none(AutomationRule.id == old.id) is None
    assert AutomationRun.select().where(AutomationRun.rule == old.id).count() == 0
    assert AutomationRun.select().where(AutomationRun.rule == recent.id).count() == 1


def test_shell_sessions_end_when_they_cannot_go_on_and_go_with_the_audit_log(
        app, world, fake_clock):
    import datetime as dt

    from control_plane.infra import clock
    from control_plane.models import ShellSession

    org = world.org()
    env = world.environment(world.project(org))
    now = clock.now()

    def session(**fields):
        return ShellSession.create(organization=org, environment=env, server_id=env.server_id,
                                   actor_type="api_key", expires_at=now + dt.timedelta(
                                       seconds=30), **fields).id
    unused = session()
    held = session(started_at=now, seen_at=now)
    done = session(started_at=now, seen_at=now, ended_at=now, end_reason="exited", exit_code=0)
    fake_clock.advance(seconds=60)
    housekeeping.run()
    assert ShellSession.get_by_id(unused).end_reason == "expired"
    assert ShellSession.get_by_id(held).ended_at is None  # said alive a minute ago
    fake_clock.advance(seconds=60)
    housekeeping.run()
    assert ShellSession.get_by_id(held).end_reason == "disconnected"
    assert ShellSession.get_by_id(done).end_reason == "exited"
    fake_clock.advance(days=91)
    assert housekeeping.run(retention_days=90)["shell_sessions"] == 3
    assert not ShellSession.select().count()
