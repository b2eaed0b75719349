"""The backup policy on /api/v1 (defaults, changes, refused input), the
scheduler's job that takes scheduled backups (once a day, once even with two
schedulers at the same time) and the expiry of scheduled backups (GFS)."""

import datetime as dt
import threading

import pytest

from control_plane.agent_link import Plain
from control_plane.models import Backup, Deployment, Environment
from control_plane.services.backups import policy
from tests.control_plane.backups.conftest import V1

DAY = dt.datetime(2026, 11, 2, 2, 1)  # a Monday, a minute after the default time


def url(env):
    return f"{V1}/environments/{env.id}/backup-policy"


def production(bk, **fields):
    """A production environment; its weekly drills off unless asked (test_drills.py)."""
    fields.setdefault("drill_enabled", False)
    env = bk.environment()
    Environment.update(environment_type="production", **fields).where(
        Environment.id == env.id).execute()
    return Environment.get_by_id(env.id)


# --- the API ----------------------------------------------------------------------

def test_defaults_are_odoo_sh_s_and_on_for_production_only(client, bk, at):
    at(DAY)
    prod = production(bk, drill_enabled=None)
    r = client.get(url(prod), headers=bk.h)
    assert r.status_code == 200, r.json
    assert r.json == {"environment_id": str(prod.id), "enabled": True, "time_of_day": "02:00",
                      "keep_daily": 7, "keep_weekly": 4, "keep_monthly": 3,
                      "last_scheduled_for": None, "next_run_at": "2026-11-02T02:01:00.000Z",
                      "drills_enabled": True, "last_drill_scheduled_for": None,
                      "next_drill_at": "2026-11-02T02:01:00.000Z"}
    r = client.get(url(bk.env), headers=bk.h)  # a development environment
    assert r.json["enabled"] is False and r.json["next_run_at"] is None
    assert r.json["drills_enabled"] is False and r.json["next_drill_at"] is None
    assert r.json["keep_daily"] == 7


def test_a_change_keeps_the_fields_left_out(client, bk, at):
    at(DAY)
    r = client.put(url(bk.env), headers=bk.h,
                   json={"enabled": True, "time_of_day": "23:30", "keep_weekly": 0})
    assert r.status_code == 200, r.json
    assert (r.json["enabled"], r.json["time_of_day"], r.json["keep_daily"],
            r.json["keep_weekly"], r.json["keep_monthly"]) == (True, "23:30", 7, 0, 3)
    assert r.json["next_run_at"] == "2026-11-02T23:30:00.000Z"
    assert client.get(url(bk.env), headers=bk.h).json == r.json
    r = client.put(url(bk.env), headers=bk.h, json={"keep_monthly": 365})
    assert (r.json["time_of_day"], r.json["keep_monthly"], r.json["enabled"]) == ("23:30", 365,
                                                                                   True)


@pytest.mark.parametrize("body", [
    {"enabled": "true"}, {"enabled": 1}, {"enabled": None},
    {"keep_daily": 366}, {"keep_daily": -1}, {"keep_weekly": 1.5}, {"keep_monthly": "3"},
    {"keep_daily": True}, {"time_of_day": "24:00"}, {"time_of_day": "2:00"},
    {"time_of_day": "02:00:00"}, {"time_of_day": 200}, {"retention": 7},
    {"keep_daily": 3, "time_of_day": "12:60"},
])
def test_bad_input_is_422_and_changes_nothing(client, bk, body):
    before = client.get(url(bk.env), headers=bk.h).json
    r = client.put(url(bk.env), headers=bk.h, json=body)
    assert r.status_code == 422, r.json
    assert r.json["error"] == "validation_error" and r.json["message"]
    assert client.get(url(bk.env), headers=bk.h).json == before


def test_who_may_read_and_change_it(client, bk, world):
    reader = world.user(bk.org)
    from control_plane.services.accounts import orgs
    h = {"Authorization": f"Bearer {orgs.issue_user_token(reader.id)}"}
    assert client.get(url(bk.env), headers=h).status_code == 200
    r = client.put(url(bk.env), headers=h, json={"enabled": True})
    assert r.status_code == 403 and r.json["error"] == "permission_denied"
    stranger = world.user(world.org(), permissions=("project.environments.deploy",))
    h = {"Authorization": f"Bearer {orgs.issue_user_token(stranger.id)}"}
    assert client.get(url(bk.env), headers=h).status_code == 404
    assert client.put(url(bk.env), headers=h, json={"enabled": True}).status_code == 404
    assert client.get(url(bk.env)).status_code == 401
    assert Environment.get_by_id(bk.env.id).backup_enabled is None


# --- the scheduler's job ------------------------------------------------------------

def scheduled(env):
    return list(Backup.select().where(Backup.environment == env.id,
                                      Backup.backup_type == "scheduled")
                .order_by(Backup.created_at))


def test_one_scheduled_backup_a_day_once_its_time_has_come(app, bk, at):
    settings = app.extensions["berth"].settings
    prod = production(bk)
    at(DAY.replace(hour=1, minute=59))
    assert policy.run(Plain(settings)) == []
    at(DAY)
    [backup] = policy.run(Plain(settings))
    assert (backup.environment_id, backup.backup_type, backup.status) == (prod.id, "scheduled",
                                                                         "pending")
    task = Deployment.get_by_id(backup.task_id)
    assert (task.kind, task.status) == ("backup", "pending")
    assert bk.command(task.id).kind == "backup"
    assert Backup.get_by_id(backup.id).expires_at is not None
    assert Environment.get_by_id(prod.id).backup_scheduled_for == DAY.replace(minute=0)
    bk.ack(task.id)
    bk.finish(task.id)
    at(DAY + dt.timedelta(hours=5))
    assert policy.run(Plain(settings)) == []  # the day's is taken
    at(DAY + dt.timedelta(days=1))
    assert len(policy.run(Plain(settings))) == 1
    assert len(scheduled(prod)) == 2


def test_a_busy_or_stopped_environment_is_tried_again_the_same_day(app, bk, at):
    settings = app.extensions["berth"].settings
    prod = production(bk)
    at(DAY)
    manual = bk.backup_via_api(app.test_client(), prod)  # a task in progress
    assert policy.run(Plain(settings)) == [] and scheduled(prod) == []
    bk.ack(manual.task_id)
    bk.finish(manual.task_id)
    Environment.update(status="stopped").where(Environment.id == prod.id).execute()
    at(DAY + dt.timedelta(hours=1))
    assert policy.run(Plain(settings)) == []
    Environment.update(status="running").where(Environment.id == prod.id).execute()
    at(DAY + dt.timedelta(hours=2))
    assert len(policy.run(Plain(settings))) == 1


def test_disabled_or_not_yet_due_environments_are_left_alone(app, bk, at):
    settings = app.extensions["berth"].settings
    production(bk, backup_enabled=False)
    late = bk.environment()
    Environment.update(backup_enabled=True, backup_time="23:00").where(
        Environment.id == late.id).execute()
    at(DAY)
    assert policy.run(Plain(settings)) == []  # neither; the development bk.env is off by default
    at(DAY.replace(hour=23))
    assert [b.environment_id for b in policy.run(Plain(settings))] == [late.id]


def test_two_schedulers_at_once_take_each_due_backup_once(app, bk, at):
    settings = app.extensions["berth"].settings
    due = [production(bk) for _ in range(4)]
    production(bk, status="stopped")
    at(DAY)
    start, taken, failures = threading.Barrier(2), [], []

    def scheduler():
        try:
            start.wait()
            taken.extend(policy.run(Plain(settings)))
        except Exception as exc:  # pragma: no cover - reported below
            failures.append(exc)

    threads = [threading.Thread(target=scheduler) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert failures == []
    assert sorted(str(b.environment_id) for b in taken) == sorted(str(e.id) for e in due)
    for env in due:
        assert len(scheduled(env)) == 1
        assert Deployment.select().where(Deployment.environment == env.id).count() == 1


# --- expiry -------------------------------------------------------------------------

def take(bk, settings, at, when, ok=True):
    at(when)
    [backup] = policy.run(Plain(settings))
    bk.ack(backup.task_id)
    bk.finish(backup.task_id, ok=ok, error=None if ok else "pg_dump failed")
    return backup.id


def expires(backup_id):
    return Backup.get_by_id(backup_id).expires_at


def test_scheduled_backups_are_kept_as_daily_weekly_and_monthly_copies(app, client, bk, at):
    settings = app.extensions["berth"].settings
    production(bk)
    saturday = take(bk, settings, at, dt.datetime(2026, 10, 31, 2, 1))
    sunday = take(bk, settings, at, dt.datetime(2026, 11, 1, 2, 1))
    monday = take(bk, settings, at, dt.datetime(2026, 11, 2, 2, 1), ok=False)
    tuesday = take(bk, settings, at, dt.datetime(2026, 11, 3, 2, 1))
    wednesday = take(bk, settings, at, dt.datetime(2026, 11, 4, 2, 1))
    # October's and ISO week 44's first: the longest, 3 months
    assert expires(saturday) == dt.datetime(2027, 1, 31, 2, 1)
    assert expires(sunday) == dt.datetime(2027, 2, 1, 2, 1)  # November's first
    assert expires(monday) == dt.datetime(2026, 11, 9, 2, 1)  # failed: a daily only
    assert expires(tuesday) == dt.datetime(2026, 12, 1, 2, 1)  # week 45's first that stands
    assert expires(wednesday) == dt.datetime(2026, 11, 11, 2, 1)  # a daily
    env = Backup.get_by_id(saturday).environment
    r = client.put(url(env), headers=bk.h, json={"keep_daily": 2, "keep_weekly": 1,
                                                  "keep_monthly": 0})
    assert r.status_code == 200, r.json
    assert expires(saturday) == dt.datetime(2026, 11, 7, 2, 1)
    assert expires(sunday) == dt.datetime(2026, 11, 3, 2, 1)
    assert expires(tuesday) == dt.datetime(2026, 11, 10, 2, 1)
    assert expires(wednesday) == dt.datetime(2026, 11, 6, 2, 1)
    r = client.get(f"{V1}/environments/{env.id}/backups", headers=bk.h)
    by_id = {item["id"]: item["expires_at"] for item in r.json["items"]}
    assert by_id[str(tuesday)] == "2026-11-10T02:01:00.000Z"


def test_manual_and_pre_deploy_backups_have_a_fixed_retention(client, bk, at):
    at(DAY)
    manual = bk.backup_via_api(client)
    assert expires(manual.id) == DAY + dt.timedelta(days=30)
