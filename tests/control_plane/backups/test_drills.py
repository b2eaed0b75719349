"""Restore drills as the control plane runs them (the agent simulated; the real
one, with real containers, is tests/e2e/backups/test_drill_flow.py): started on
/api/v1 of the newest completed backup or a given one, refused where the
environment or the backup cannot be drilled, what the agent measured kept and
shown on both surfaces, `backup.drill_completed` / `backup.drill_failed`, and the
weekly drills the backup policy takes."""

import datetime as dt

import pytest

from control_plane.agent_link import Plain
from control_plane.models import AgentCommand, Deployment, Environment, Event, Server
from control_plane.services.backups import policy
from tests.control_plane.backups.conftest import V1, P

MEASURED = {"restore_seconds": 12.5, "tables": 40, "rows": 1234, "attachments": 7}
MONDAY = dt.datetime(2026, 11, 2, 3, 0)


def _drill(client, bk, env, **body):
    return client.post(f"{V1}/environments/{env.id}/drills", headers=bk.h, json=body)


def _listed(client, headers, env, surface=P):
    r = client.get(f"{surface}/environments/{env.id}/drills", headers=headers)
    assert r.status_code == 200, r.json
    return r.json


def _event(name):
    return Event.select().where(Event.name == name).order_by(Event.created_at.desc()).first()


def test_a_drill_of_the_newest_backup_passes_and_is_shown(client, bk):
    bk.completed_backup(client)
    newest = bk.completed_backup(client)
    r = _drill(client, bk, bk.env)
    assert r.status_code == 202, r.json
    drill = r.json
    assert (drill["status"], drill["backup_id"], drill["trigger"]) == (
        "pending", str(newest.id), "manual")
    command = AgentCommand.get(AgentCommand.deployment == drill["id"])
    assert command.kind == "drill" and command.payload["backup_id"] == str(newest.id)
    assert command.payload["transfer_url"].endswith(f"/agent/v1/transfers/{newest.id}")
    r = _drill(client, bk, bk.env)  # one task at a time
    assert r.status_code == 409 and r.json["error"] == "task_in_progress", r.json
    bk.ack(drill["id"])
    assert _listed(client, bk.ro_key, bk.env)["items"][0]["status"] == "running"
    bk.finish(drill["id"], result={**MEASURED, "passed": True, "backup_id": str(newest.id)})
    for listing in (_listed(client, bk.ro_key, bk.env), _listed(client, bk.h, bk.env, V1)):
        [shown] = listing["items"]
        assert shown["status"] == "passed" and shown["error_message"] is None
        assert {k: shown[k] for k in MEASURED} == MEASURED
    event = _event("backup.drill_completed")
    assert event.data["task_id"] == drill["id"] and event.data["restore_seconds"] == 12.5
    assert (event.data["backup_id"], event.data["status"]) == (str(newest.id), "completed")
    assert Environment.get_by_id(bk.env.id).status == "running"  # it never moved


def test_a_failed_drill_alerts_with_what_it_measured(client, bk):
    backup = bk.completed_backup(client)
    drill = _drill(client, bk, bk.env, backup_id=str(backup.id)).json
    bk.ack(drill["id"])
    bk.finish(drill["id"], ok=False, result={"tables": 40, "rows": 1200},
              error="the drill failed: database.dump in storage does not match its manifest")
    [shown] = _listed(client, bk.ro_key, bk.env)["items"]
    assert shown["status"] == "failed" and "does not match" in shown["error_message"]
    assert (shown["tables"], shown["restore_seconds"]) == (40, None)
    event = _event("backup.drill_failed")
    assert event.data["task_id"] == drill["id"] and "does not match" in event.data[
        "error_message"]
    assert Environment.get_by_id(bk.env.id).status == "running"


def test_what_cannot_be_drilled_is_refused_and_changes_nothing(client, bk):
    before = Deployment.select().count()
    r = _drill(client, bk, bk.env)
    assert r.status_code == 409 and r.json["error"] == "no_completed_backup", r.json
    other = bk.environment()
    theirs = bk.completed_backup(client, env=other)
    before = Deployment.select().count()
    r = _drill(client, bk, bk.env, backup_id=str(theirs.id))
    assert r.status_code == 404 and r.json["error"] == "not_found", r.json
    for bad in ("yes", 1, "../x"):
        r = _drill(client, bk, bk.env, backup_id=bad)
        assert r.status_code == 422 and "backup_id" in r.json["details"]["json"], r.json
    stopped = bk.environment(status="stopped")
    Environment.update(status="running").where(Environment.id == stopped.id).execute()
    own = bk.completed_backup(client, env=stopped)
    Environment.update(status="stopped").where(Environment.id == stopped.id).execute()
    before = Deployment.select().count()
    r = _drill(client, bk, stopped, backup_id=str(own.id))
    assert r.status_code == 409 and r.json["error"] == "environment_not_ready", r.json
    r = client.post(f"{V1}/environments/{bk.env.id}/drills", headers=bk.key, json={})
    assert r.status_code == 401  # an API key is not a user token
    bk.completed_backup(client)
    Server.update(agent_version="0.1.0").where(Server.id == bk.server.id).execute()
    before = Deployment.select().count()
    r = _drill(client, bk, bk.env)
    assert r.status_code == 409 and r.json["error"] == "agent_upgrade_required", r.json
    assert "0.1.0" in r.json["message"]
    assert Deployment.select().count() == before


def test_weekly_drills_follow_the_backup_policy(app, client, bk, at):
    berth = Plain(app.extensions["berth"].settings)
    at(MONDAY)
    prod = bk.environment()
    Environment.update(environment_type="production").where(Environment.id == prod.id).execute()
    staging = bk.environment()
    Environment.update(environment_type="staging").where(Environment.id == staging.id).execute()
    for env in (prod, staging):
        Environment.update(backup_enabled=False).where(Environment.id == env.id).execute()
    policy.run(berth)
    assert Deployment.select().where(Deployment.kind == "drill").count() == 0  # no backup yet
    bk.completed_backup(client, env=prod)
    bk.completed_backup(client, env=staging)
    policy.run(berth)
    [drill] = Deployment.select().where(Deployment.kind == "drill")
    assert (drill.environment_id, drill.trigger) == (prod.id, "scheduled")  # production only
    shown = client.get(f"{V1}/environments/{prod.id}/backup-policy", headers=bk.h).json
    assert shown["last_drill_scheduled_for"] == "2026-11-02T03:00:00.000Z"
    assert shown["next_drill_at"] == "2026-11-09T03:00:00.000Z"
    bk.ack(drill.id)
    bk.finish(drill.id, result={**MEASURED, "passed": True})
    at(MONDAY + dt.timedelta(days=6, hours=23))
    policy.run(berth)
    assert Deployment.select().where(Deployment.kind == "drill").count() == 1  # not yet due
    at(MONDAY + dt.timedelta(days=7))
    policy.run(berth)
    policy.run(berth)  # taken once
    assert Deployment.select().where(Deployment.kind == "drill").count() == 2
    # Turned off for production, on for staging: staging's is due at once.
    for env, on in ((prod, False), (staging, True)):
        r = client.put(f"{V1}/environments/{env.id}/backup-policy", headers=bk.h,
                       json={"drills_enabled": on})
        assert r.status_code == 200 and r.json["drills_enabled"] is on, r.json
    newest = Deployment.select().where(Deployment.kind == "drill").order_by(
        Deployment.created_at.desc()).first()
    bk.ack(newest.id)
    bk.finish(newest.id, result={**MEASURED, "passed": True})
    at(MONDAY + dt.timedelta(days=14))
    policy.run(berth)
    drills = list(Deployment.select().where(Deployment.kind == "drill")
                  .order_by(Deployment.created_at))
    assert [d.environment_id for d in drills] == [prod.id, prod.id, staging.id]


@pytest.mark.parametrize("body", [{"drills_enabled": "yes"}, {"drills_enabled": None}])
def test_a_bad_drill_setting_is_refused(client, bk, body):
    r = client.put(f"{V1}/environments/{bk.env.id}/backup-policy", headers=bk.h, json=body)
    assert r.status_code == 422 and "drills_enabled" in r.json["details"]["json"], r.json
