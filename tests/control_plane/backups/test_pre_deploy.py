"""A deploy, redeploy or rollback of an environment whose database has data
carries a `pre_deploy` backup: its row follows the deploy's task, and a
failed backup fails the deploy with the environment as it was."""

import datetime as dt

from control_plane.models import Backup, Deployment, Environment, Event, TaskLogLine
from control_plane.services.tasks import engine, reaper
from control_plane.vocabulary import states
from protocol.kinds import Phase
from tests.control_plane.backups.conftest import RESULT, V1

DEPLOYED = {"erp_container": "erp-2", "db_container": "db-2"}


def with_data(bk):
    """bk.env as after a successful first deploy: its database container exists."""
    first = engine.new_record(bk.env, "deploy", trigger="manual")
    Deployment.update(status=states.DeploymentStatus.SUCCESS, git_commit="a" * 40).where(
        Deployment.id == first.id).execute()
    Environment.update(db_container="db-1", erp_container="erp-1").where(
        Environment.id == bk.env.id).execute()
    return first


def redeploy(client, bk):
    r = client.post(f"{V1}/environments/{bk.env.id}/deploy", headers=bk.h, json={"force": True})
    assert r.status_code == 201, r.json
    return Deployment.get_by_id(r.json["deployment"]["id"])


def pre_backup_of(d):
    return Backup.get(Backup.task == d.id)


def test_a_redeploy_takes_a_pre_deploy_backup_first(app, client, bk, at):
    at(dt.datetime(2026, 11, 2, 12, 0))
    with_data(bk)
    d = redeploy(client, bk)
    backup = pre_backup_of(d)
    assert (backup.backup_type, backup.status, backup.environment_id) == ("pre_deploy", "pending",
                                                                         bk.env.id)
    assert backup.expires_at == dt.datetime(2026, 11, 9, 12, 0)  # 7 days
    payload = bk.command(d.id).payload
    public_url = app.config["PUBLIC_URL"].rstrip("/")
    assert payload["pre_backup"] == {
        "environment_id": str(bk.env.id), "backup_id": str(backup.id),
        "transfer_url": f"{public_url}/agent/v1/transfers/{backup.id}",
        "objects": ["database.dump", "filestore.tar.zst", "manifest.json"],
        "filestore_layout": "objects",
        "erp_version": "17.0", "git_commit": "a" * 40, "addon_commits": {}}
    bk.ack(d.id)
    assert pre_backup_of(d).status == "running"
    bk.finish(d.id, result={**DEPLOYED, "pre_backup": RESULT})
    backup = pre_backup_of(d)
    assert backup.status == "completed" and backup.is_verified and backup.total_size == 3000
    assert Deployment.get_by_id(d.id).status == "success"
    env = Environment.get_by_id(bk.env.id)
    assert (env.status, env.db_container) == ("running", "db-2")
    listed = client.get(f"{V1}/environments/{bk.env.id}/backups?backup_type=pre_deploy",
                        headers=bk.h).json
    assert [item["id"] for item in listed["items"]] == [str(backup.id)]


def test_a_failed_pre_deploy_backup_fails_the_deploy_and_leaves_the_environment(client, bk):
    with_data(bk)
    d = redeploy(client, bk)
    assert Environment.get_by_id(bk.env.id).status == "deploying"
    bk.ack(d.id)
    bk.finish(d.id, ok=False, result={"untouched": True},
              error="the pre-deploy backup failed (pg_dump: connection refused); nothing was "
                    "deployed and the environment is as it was")
    d = Deployment.get_by_id(d.id)
    assert d.status == "failed" and "pre-deploy backup failed" in d.error_message
    backup = pre_backup_of(d)
    assert backup.status == "failed" and "pg_dump" in backup.error_message
    env = Environment.get_by_id(bk.env.id)
    assert (env.status, env.db_container, env.erp_container) == ("running", "db-1", "erp-1")


def test_a_stopped_environment_stays_stopped_however_often_its_backup_fails(client, bk):
    """A failure that changed nothing is no new stable state: the second attempt
    leaves the environment as the first found it (it became `failed` before)."""
    with_data(bk)
    bk.env.status = "stopped"
    Environment.update(status="stopped").where(Environment.id == bk.env.id).execute()
    for _ in range(2):
        d = redeploy(client, bk)
        assert pre_backup_of(d).status == "pending"  # a stopped database has data too
        bk.ack(d.id)
        bk.finish(d.id, ok=False, result={"untouched": True},
                  error="the pre-deploy backup failed; nothing was deployed")
        assert Environment.get_by_id(bk.env.id).status == "stopped"
    moves = [(e.data["from"], e.data["to"]) for e in Event.select().where(
        Event.name == "environment.status_changed").order_by(Event.created_at, Event.id)]
    assert moves == [("stopped", "deploying"), ("deploying", "stopped")] * 2


def test_a_deploy_failing_after_its_backup_keeps_the_backup(client, bk):
    with_data(bk)
    d = redeploy(client, bk)
    bk.ack(d.id)
    bk.finish(d.id, ok=False, result={"pre_backup": RESULT}, error="the image was not found")
    assert pre_backup_of(d).status == "completed"
    assert Environment.get_by_id(bk.env.id).status == "failed"  # the deploy's own failure


def test_a_success_without_the_backup_does_not_make_it_completed(client, bk):
    with_data(bk)
    d = redeploy(client, bk)
    bk.ack(d.id)
    bk.finish(d.id, result=DEPLOYED)  # an agent that ignored pre_backup
    backup = pre_backup_of(d)
    assert backup.status == "failed" and "no verified pre-deploy backup" in backup.error_message
    assert Deployment.get_by_id(d.id).status == "success"


def test_a_rollback_takes_one_and_a_first_deploy_does_not(client, bk):
    first = with_data(bk)
    r = client.post(f"{V1}/deployments/{first.id}/rollback", headers=bk.h)
    assert r.status_code in (200, 201, 202), r.json
    rollback = Deployment.get(Deployment.rollback_from == first.id)
    assert pre_backup_of(rollback).backup_type == "pre_deploy"
    assert "pre_backup" in bk.command(rollback.id).payload
    fresh = bk.environment(status="pending")
    r = client.post(f"{V1}/environments/{fresh.id}/deploy", headers=bk.h, json={})
    assert r.status_code == 201, r.json
    d = Deployment.get_by_id(r.json["deployment"]["id"])
    assert "pre_backup" not in bk.command(d.id).payload
    assert Backup.select().where(Backup.task == d.id).count() == 0


def test_a_cancelled_deploy_cancels_its_backup(client, bk):
    with_data(bk)
    d = redeploy(client, bk)
    r = client.post(f"{V1}/deployments/{d.id}/cancel", headers=bk.h)
    assert r.status_code == 200, r.json
    assert pre_backup_of(d).status == "cancelled"


def test_the_reaper_gives_a_deploy_with_a_pre_deploy_backup_longer(client, fake_clock, bk):
    with_data(bk)
    d = redeploy(client, bk)
    plain = bk.environment()  # no data: a plain redeploy, reaped after 30 minutes
    r = client.post(f"{V1}/environments/{plain.id}/deploy", headers=bk.h, json={"force": True})
    plain_d = r.json["deployment"]["id"]
    bk.ack(d.id)
    bk.ack(plain_d)
    fake_clock.advance(minutes=31)
    assert [str(t) for t in reaper.reap()] == [plain_d]
    fake_clock.advance(hours=3)
    assert reaper.reap() == [d.id]
    d = Deployment.get_by_id(d.id)
    assert d.status == "failed"
    assert d.error_message == "Deployment timed out after 3 hours in its pre-deploy backup"
    assert pre_backup_of(d).status == "failed"


def test_the_deploy_has_its_30_minutes_once_its_backup_is_done(client, fake_clock, bk):
    """A long pre-deploy backup is not cut by the deploy's 30 minutes; once the
    agent reports it done, the deploy itself has the spec's 30 minutes."""
    with_data(bk)
    d = redeploy(client, bk)
    assert d.time_limit_minutes == 180
    bk.ack(d.id)
    fake_clock.advance(hours=2)  # the backup takes its time
    assert reaper.reap() == []
    engine.record_phase(bk.server.id, bk.command(d.id).id.hex, Phase.DEPLOY)
    engine.record_phase(bk.server.id, bk.command(d.id).id.hex, Phase.DEPLOY)  # said twice
    assert Deployment.get_by_id(d.id).time_limit_minutes == 30
    fake_clock.advance(minutes=29)
    assert reaper.reap() == []
    fake_clock.advance(minutes=2)
    assert reaper.reap() == [d.id]
    d = Deployment.get_by_id(d.id)
    assert d.error_message == "Deployment timed out after 30 minutes"
    log = [line.message for line in TaskLogLine.select().where(TaskLogLine.deployment == d.id)
           .order_by(TaskLogLine.seq)]
    assert log[0] == "the pre-deploy backup is done: the deployment has 30 minutes from now"
    assert len(log) == 2  # the report said twice is taken once
