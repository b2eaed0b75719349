"""Retention: task logs go 90 days after their deployment finished, idempotency
records after their 24 hours, outbox events once no webhook needs them (30 days);
on both database backends."""

import uuid

from control_plane import events
from control_plane.models import Event, IdempotencyRecord, TaskLogLine, Webhook, WebhookDelivery
from control_plane.services import housekeeping
from control_plane.services.tasks import engine
from tests.conftest import auth

P = "/api/public/v1"


def finished_with_log(app, world, project, lines=3):
    env = world.environment(project, "deploying")
    d = engine.start(env, "deploy", settings=app.extensions["berth"].settings, trigger="manual")
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
