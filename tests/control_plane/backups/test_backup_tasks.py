"""A backup as a task on /api/v1: the command as the agent receives it, the
Backup row following its task (acknowledged, completed, failed, unverified,
cancelled, reaped), the events, and that a backup is not a deployment."""

from control_plane.models import AgentCommand, Backup, Deployment, Environment, Event
from control_plane.services.tasks import reaper
from tests.control_plane.backups.conftest import RESULT, V1


def events_named(prefix=""):
    return [e.name for e in Event.select().order_by(Event.created_at, Event.id)
            if e.name.startswith(prefix)]


def test_a_backup_is_queued_as_a_task_with_the_agreed_command(app, client, bk):
    # The environment's deployed code, for the manifest: its last successful deploy.
    from control_plane.services.tasks import engine
    engine.new_record(bk.env, "deploy", trigger="manual", git_branch="main",
                      git_commit="c" * 40)
    Deployment.update(status="success", config={"addon_repositories": [
        {"name": "acme-tools", "url": "https://example.com/t.git", "commit": "a" * 40}]}).execute()
    r = client.post(f"{V1}/environments/{bk.env.id}/backups", headers=bk.h,
                    json={"backup_type": "manual", "comment": "before the upgrade"})
    assert r.status_code == 202, r.json
    body = r.json
    assert body["status"] == "pending" and body["backup_type"] == "manual"
    assert body["notes"] == "before the upgrade" and body["environment_id"] == str(bk.env.id)
    assert body["is_verified"] is False and body["error_message"] is None
    task = Deployment.get_by_id(body["task_id"])
    assert (task.kind, task.status, task.trigger) == ("backup", "pending", "manual")
    command = AgentCommand.get(AgentCommand.deployment == task.id)
    public_url = app.config["PUBLIC_URL"].rstrip("/")
    assert command.kind == "backup" and command.server_id == bk.server.id
    assert command.payload == {
        "environment_id": str(bk.env.id), "backup_id": body["id"],
        "transfer_url": f"{public_url}/agent/v1/transfers/{body['id']}",
        "objects": ["database.dump", "filestore.tar.zst", "manifest.json"],
        "filestore_layout": "objects",
        "erp_version": "17.0", "git_commit": "c" * 40, "addon_commits": {"acme-tools": "a" * 40}}
    backup = Backup.get_by_id(body["id"])
    assert backup.storage_prefix == f"backups/{bk.env.id}/{backup.id}/"
    assert Environment.get_by_id(bk.env.id).status == "running"  # unchanged while it runs


def test_the_row_follows_its_task_to_completed(client, bk):
    backup = bk.backup_via_api(client)
    bk.ack(backup.task_id)
    backup = Backup.get_by_id(backup.id)
    assert backup.status == "running" and backup.started_at is not None
    assert events_named() == ["backup.started"]
    bk.finish(backup.task_id)
    backup = Backup.get_by_id(backup.id)
    assert backup.status == "completed" and backup.is_verified and backup.verified_at
    assert (backup.database_size, backup.filestore_size, backup.total_size,
            backup.compressed_size) == (1000, 2000, 3000, 900)
    assert backup.manifest == RESULT["manifest"] and backup.parts == RESULT["parts"]
    assert backup.duration_seconds is not None and backup.completed_at is not None
    assert Deployment.get_by_id(backup.task_id).status == "success"
    assert events_named() == ["backup.started", "backup.completed"]
    event = Event.get(Event.name == "backup.completed")
    assert event.data["backup_id"] == str(backup.id) and event.data["status"] == "completed"
    assert event.data["total_size"] == 3000
    assert Environment.get_by_id(bk.env.id).status == "running"


def test_a_failed_or_unverified_backup_is_failed_with_the_reason(client, bk):
    failed = bk.backup_via_api(client)
    bk.ack(failed.task_id)
    bk.finish(failed.task_id, ok=False, error="pg_dump: connection refused")
    failed = Backup.get_by_id(failed.id)
    assert failed.status == "failed" and failed.error_message == "pg_dump: connection refused"
    assert not failed.is_verified

    unverified = bk.backup_via_api(client)
    bk.ack(unverified.task_id)
    bk.finish(unverified.task_id, result={**RESULT, "verified": False})
    unverified = Backup.get_by_id(unverified.id)
    assert unverified.status == "failed" and "not verified" in unverified.error_message
    assert Deployment.get_by_id(unverified.task_id).status == "failed"
    assert events_named("backup.") == ["backup.started", "backup.failed"] * 2
    assert Event.get(Event.name == "backup.failed").data["error_message"]
    assert events_named("deploy.") == []  # a backup is not a deployment
    assert Environment.get_by_id(bk.env.id).status == "running"  # never moved


def test_refused_backups_change_nothing(client, world, bk):
    url = f"{V1}/environments/{bk.env.id}/backups"
    r = client.post(url, headers=bk.h, json={"backup_type": "scheduled"})
    assert r.status_code == 422 and r.json["error"] == "validation_error"
    r = client.post(url, headers=bk.h, json={"comment": "x" * 1001})
    assert r.status_code == 422
    bk.backup_via_api(client)
    r = client.post(url, headers=bk.h, json={})
    assert r.status_code == 409 and r.json["error"] == "task_in_progress"
    stopped = bk.environment(status="pending")  # never deployed: nothing to back up
    r = client.post(f"{V1}/environments/{stopped.id}/backups", headers=bk.h, json={})
    assert r.status_code == 409 and r.json["error"] == "environment_not_ready"
    reader = bk.world.user(bk.org)
    from control_plane.services.accounts import orgs
    r = client.post(f"{V1}/environments/{stopped.id}/backups",
                    headers={"Authorization": f"Bearer {orgs.issue_user_token(reader.id)}"},
                    json={})
    assert r.status_code == 403
    other = world.org()
    other_env = bk.environment(project=world.project(other))
    r = client.post(f"{V1}/environments/{other_env.id}/backups", headers=bk.h, json={})
    assert r.status_code == 404
    assert Backup.select().count() == 1 and AgentCommand.select().count() == 1


def test_a_deploy_waits_for_a_running_backup(client, bk):
    bk.backup_via_api(client)
    r = client.post(f"{V1}/environments/{bk.env.id}/deploy", headers=bk.h, json={"force": True})
    assert r.status_code == 409


def test_cancel_marks_the_backup_cancelled(client, bk):
    backup = bk.backup_via_api(client)
    bk.ack(backup.task_id)
    r = client.post(f"{V1}/deployments/{backup.task_id}/cancel", headers=bk.h)
    assert r.status_code == 200, r.json
    backup = Backup.get_by_id(backup.id)
    assert backup.status == "cancelled" and backup.completed_at is not None
    assert Environment.get_by_id(bk.env.id).status == "running"
    assert AgentCommand.get(AgentCommand.deployment == backup.task_id).status == "withdrawn"
    bk.finish(backup.task_id)  # the agent's late result changes nothing
    assert Backup.get_by_id(backup.id).status == "cancelled"
    assert "deploy.cancelled" not in events_named()


def test_a_backup_is_not_a_deployment(client, bk):
    """last_deploy, retry and rollback ignore or refuse backup tasks."""
    deployed = Deployment.create(
        environment=bk.env, project=bk.project, version=1, kind="deploy", trigger="manual",
        status="success", git_branch="main", git_commit="1" * 40, image_tag="erp:1")
    backup = bk.completed_backup(client)
    failed = bk.backup_via_api(client)
    bk.finish(failed.task_id, ok=False, error="disk full")
    r = client.get(f"/api/public/v1/environments/{bk.env.id}/status", headers=bk.key)
    assert r.json["last_deploy"]["id"] == str(deployed.id)
    r = client.post(f"{V1}/deployments/{failed.task_id}/retry", headers=bk.h)
    assert r.status_code == 400 and r.json["error"] == "task_not_retryable"
    r = client.post(f"{V1}/deployments/{backup.task_id}/rollback", headers=bk.h)
    assert r.status_code == 400 and r.json["error"] == "rollback_not_allowed"
    r = client.post(f"{V1}/environments/{bk.env.id}/deploy", headers=bk.h, json={})
    assert r.status_code == 200 and r.json["deployment"]["id"] == str(deployed.id)


def test_the_reaper_gives_backups_longer_then_fails_them(client, fake_clock, bk):
    backup = bk.backup_via_api(client)
    bk.ack(backup.task_id)
    fake_clock.advance(minutes=31)
    assert reaper.reap() == []  # a deployment would be reaped now; a backup is not
    fake_clock.advance(hours=3)
    assert [str(d) for d in reaper.reap()] == [str(backup.task_id)]
    backup = Backup.get_by_id(backup.id)
    assert backup.status == "failed" and "timed out" in backup.error_message
    assert Deployment.get_by_id(backup.task_id).status == "failed"
    assert Environment.get_by_id(bk.env.id).status == "running"
    assert events_named("backup.") == ["backup.started", "backup.failed"]
