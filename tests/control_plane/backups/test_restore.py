"""A restore on /api/v1: its task and safety backup, the command as the agent
receives it, what its result does, and the backups it refuses."""

from control_plane.models import AgentCommand, Backup, Deployment, Environment, Event
from tests.control_plane.backups.conftest import RESULT, V1


def test_a_restore_is_a_task_with_a_safety_backup(app, client, bk):
    source = bk.completed_backup(client)
    r = client.post(f"{V1}/environments/{bk.env.id}/restore", headers=bk.h,
                    json={"backup_id": str(source.id)})
    assert r.status_code == 202, r.json
    task = Deployment.get_by_id(r.json["id"])
    assert (r.json["kind"], r.json["status"]) == ("restore", "pending")
    safety = Backup.get(Backup.task == task.id)
    assert safety.status == "pending" and safety.source_backup_id == source.id
    assert str(task.id) in safety.notes and str(source.id) in safety.notes
    assert task.extra_data == {"backup_id": str(source.id), "safety_backup_id": str(safety.id),
                               "neutralize": True, "profile": "standard",
                               "anonymize": False}  # a development environment
    command = AgentCommand.get(AgentCommand.deployment == task.id)
    base = app.config["PUBLIC_URL"].rstrip("/") + "/agent/v1/transfers/"
    assert command.kind == "restore" and command.payload == {
        "environment_id": str(bk.env.id), "backup_id": str(source.id),
        "transfer_url": base + str(source.id),
        "safety": {"environment_id": str(bk.env.id), "backup_id": str(safety.id),
                   "transfer_url": base + str(safety.id),
                   "objects": ["database.dump", "filestore.tar.zst", "manifest.json"],
                   "filestore_layout": "objects",
                   "erp_version": "17.0", "git_commit": None, "addon_commits": {}},
        "health_timeout": 120, "neutralize": True, "neutralize_profile": "standard",
        "anonymize": False}
    r = client.post(f"{V1}/environments/{bk.env.id}/backups", headers=bk.h, json={})
    assert r.status_code == 409 and r.json["error"] == "task_in_progress"

    bk.ack(task.id)
    assert Backup.get_by_id(safety.id).status == "running"
    bk.finish(task.id, result={"safety": RESULT, "restored_from": str(source.id)})
    assert Deployment.get_by_id(task.id).status == "success"
    safety = Backup.get_by_id(safety.id)
    assert safety.status == "completed" and safety.is_verified and safety.total_size == 3000
    assert Environment.get_by_id(bk.env.id).status == "running"
    events = [(e.name, e.data.get("to")) for e in Event.select().order_by(Event.created_at, Event.id)]
    # While its data is replaced the ERP does not serve: the environment says so.
    assert events[-4:] == [("environment.status_changed", "deploying"), ("restore.started", None),
                           ("environment.status_changed", "running"), ("restore.completed", None)]
    assert Event.get(Event.name == "restore.completed").data["backup_id"] == str(source.id)
    # the restore's safety backup is listed with the others, newest first
    r = client.get(f"{V1}/environments/{bk.env.id}/backups", headers=bk.h)
    assert [b["id"] for b in r.json["items"]] == [str(safety.id), str(source.id)]


def test_a_failed_restore_keeps_its_safety_backup_when_it_was_verified(client, bk):
    source = bk.completed_backup(client)
    first = client.post(f"{V1}/environments/{bk.env.id}/restore", headers=bk.h,
                        json={"backup_id": str(source.id)}).json["id"]
    bk.ack(first)
    bk.finish(first, ok=False, result={"safety": RESULT, "untouched": True},
              error="pg_restore failed; the safety backup was put back")
    assert Backup.get(Backup.task == first).status == "completed"
    assert Environment.get_by_id(bk.env.id).status == "running"  # put back as it was
    second = client.post(f"{V1}/environments/{bk.env.id}/restore", headers=bk.h,
                         json={"backup_id": str(source.id)}).json["id"]
    bk.finish(second, ok=False, error="safety backup failed: disk full")
    safety = Backup.get(Backup.task == second)
    assert safety.status == "failed" and safety.error_message == "safety backup failed: disk full"
    failed = Event.select().where(Event.name == "restore.failed")
    assert [e.data["task_id"] for e in failed.order_by(Event.created_at)] == [first, second]
    # A failed restore is put back by the agent: the environment serves as before.
    assert Environment.get_by_id(bk.env.id).status == "running"


def test_restore_from_another_environment_of_the_project(client, bk):
    staging = bk.environment()
    source = bk.completed_backup(client)
    r = client.post(f"{V1}/environments/{staging.id}/restore", headers=bk.h,
                    json={"backup_id": str(source.id)})
    assert r.status_code == 202
    assert AgentCommand.get(AgentCommand.deployment == r.json["id"]).payload[
        "environment_id"] == str(staging.id)


def test_refused_restores_change_nothing(client, world, bk):
    source = bk.completed_backup(client)
    pending = bk.backup_via_api(client, env=bk.environment())
    other_project = world.project(bk.org, bk.server)
    foreign = bk.environment(project=other_project)
    url = f"{V1}/environments/{bk.env.id}/restore"
    before = (Deployment.select().count(), Backup.select().count())
    r = client.post(url, headers=bk.h, json={"backup_id": str(pending.id)})
    assert r.status_code == 400 and r.json["error"] == "backup_not_completed"
    r = client.post(f"{V1}/environments/{foreign.id}/restore", headers=bk.h,
                    json={"backup_id": str(source.id)})
    assert r.status_code == 404
    r = client.post(url, headers=bk.h, json={"backup_id": "0" * 32})
    assert r.status_code == 404
    r = client.post(url, headers=bk.h, json={})
    assert r.status_code == 422
    stopped = bk.environment(status="stopped")
    r = client.post(f"{V1}/environments/{stopped.id}/restore", headers=bk.h,
                    json={"backup_id": str(source.id)})
    assert r.status_code == 409 and r.json["error"] == "environment_not_ready"
    assert (Deployment.select().count(), Backup.select().count()) == before
