"""Backups, restores and exports are tasks but not deployments: they take no
`version` (the spec's version "increments per new deployment"), so the
deployments of an environment count 1, 2, 3 whatever was backed up between them;
and the policy's backups carry the spec's `scheduled` trigger. Through HTTP."""

import datetime as dt

from control_plane.models import Deployment
from control_plane.services.backups import policy
from control_plane.services.tasks import engine
from tests.control_plane.backups.conftest import V1

DAY = dt.datetime(2026, 3, 2, 2, 0)


def record(client, bk, task_id):
    r = client.get(f"{V1}/deployments/{task_id}", headers=bk.h)
    assert r.status_code == 200, r.json
    return r.json


def test_backup_restore_and_export_tasks_take_no_deployment_version(client, bk):
    first = engine.new_record(bk.env, "deploy", trigger="manual", git_branch="main")
    first.status = "success"
    first.save()
    backup = bk.completed_backup(client)
    r = client.post(f"{V1}/environments/{bk.env.id}/restore", headers=bk.h,
                    json={"backup_id": str(backup.id)})
    assert r.status_code == 202, r.json
    restore = r.json
    assert restore["kind"] == "restore" and restore["version"] is None
    bk.ack(restore["id"])
    bk.finish(restore["id"], result={"safety": {}})
    r = client.post(f"{V1}/backups/{backup.id}/export", headers=bk.h)
    assert r.status_code == 202 and r.json["kind"] == "export", r.json
    engine.settle(Deployment.get_by_id(r.json["id"]), engine.Outcome("failed", error="x"))
    tasks = [record(client, bk, t) for t in (backup.task_id, restore["id"], r.json["id"])]
    assert [t["version"] for t in tasks] == [None, None, None]

    r = client.post(f"{V1}/environments/{bk.env.id}/deploy", headers=bk.h, json={"force": True})
    assert r.status_code == 201, r.json
    assert r.json["deployment"]["version"] == 2  # the environment's second deployment
    r = client.get(f"{V1}/deployments", headers=bk.h)
    versions = {d["kind"]: d["version"] for d in r.json["data"]}
    assert versions["redeploy"] == 2 and versions["deploy"] == 1
    assert versions["backup"] is None and versions["restore"] is None
    # The public poll URL says the same.
    public = client.get(f"/api/public/v1/deployments/{backup.task_id}", headers=bk.key)
    assert public.status_code == 200 and public.json["version"] is None


def test_a_scheduled_backup_carries_the_scheduled_trigger(app, client, bk, at):
    from control_plane.models import Environment
    Environment.update(environment_type="production").where(
        Environment.id == bk.env.id).execute()
    at(DAY)
    [backup] = policy.run(app.extensions["berth"])
    task = record(client, bk, backup.task_id)
    assert (task["kind"], task["trigger"], task["version"]) == ("backup", "scheduled", None)
    manual = bk.completed_backup
    at(DAY + dt.timedelta(hours=1))
    bk.ack(backup.task_id)
    bk.finish(backup.task_id)
    asked = manual(client)
    assert record(client, bk, asked.task_id)["trigger"] == "manual"
