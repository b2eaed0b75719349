"""Automation runs, from each trigger to the end of the action's task, and the
`automation_rule.*` events they emit (the agent's side played through the
services the gateway calls)."""

import datetime as dt
import threading

from control_plane.agent_link import Plain
from control_plane.models import AutomationRule, AutomationRun, Backup, Deployment, Event
from control_plane.services.automation import triggers
from control_plane.services.tasks import engine
from tests.control_plane.automation.conftest import bearer
from tests.control_plane.automation.test_rules import P, rules_url

EVENT_FIELDS = {"rule_id", "rule_name", "run_id", "project_id", "action_type", "trigger_type",
                "branch", "actor", "environment_id", "task_id"}


def automation_events(rule_id):
    return [(e.name, e.data) for e in Event.select().where(Event.name.startswith("automation_rule."))
            .order_by(Event.created_at, Event.id) if e.data["rule_id"] == str(rule_id)]


def create(client, bk, trigger, action, key=None, **more):
    r = client.post(rules_url(bk), headers=key or bk.key,
                    json={"name": "the rule", "trigger": trigger, "action": action, **more})
    assert r.status_code == 201, r.json
    return r.json


def backup_of(env_id):
    return {"type": "backup", "environment_id": str(env_id)}


def test_a_manual_run_lasts_as_long_as_its_task_and_says_so(client, bk, store):
    rule = create(client, bk, {"type": "git_push", "branch": "main"}, backup_of(bk.env.id))
    r = client.post(f"{P}/automation-rules/{rule['id']}/run", headers=bk.key)
    assert r.status_code == 201, r.json
    run = r.json
    assert (run["status"], run["trigger_type"], run["branch"], run["finished_at"]) == (
        "running", "manual", None, None)
    task = Deployment.get_by_id(run["task_id"])
    assert (task.kind, task.trigger) == ("backup", "manual")
    assert run["actor"].startswith("key_")
    [(name, data)] = automation_events(rule["id"])
    assert name == "automation_rule.triggered" and set(data) == EVENT_FIELDS
    assert (data["rule_name"], data["action_type"], data["trigger_type"], data["actor"]) == (
        "the rule", "backup", "manual", run["actor"])

    bk.ack(task.id)
    bk.finish(task.id)
    runs = client.get(f"{P}/automation-rules/{rule['id']}/runs", headers=bk.ro_key).json
    [done] = runs["data"]
    assert done["status"] == "completed" and done["finished_at"] is not None
    assert client.get(f"{P}/automation-rules/{rule['id']}", headers=bk.ro_key).json[
        "last_run"]["status"] == "completed"
    name, data = automation_events(rule["id"])[-1]
    assert name == "automation_rule.completed"
    assert (data["status"], data["reason"], data["task_id"]) == ("completed", None, str(task.id))


def test_a_failed_action_fails_the_run_with_its_reason(client, bk, store):
    rule = create(client, bk, {"type": "git_push", "branch": "main"}, backup_of(bk.env.id))
    run = client.post(f"{P}/automation-rules/{rule['id']}/run", headers=bk.key).json
    bk.ack(run["task_id"])
    bk.finish(run["task_id"], ok=False, error="pg_dump: disk full")
    run = client.get(f"{P}/automation-rules/{rule['id']}/runs", headers=bk.key).json["data"][0]
    assert run["status"] == "failed" and "pg_dump: disk full" in run["reason"]
    name, data = automation_events(rule["id"])[-1]
    assert name == "automation_rule.failed" and "pg_dump: disk full" in data["reason"]


def test_an_action_that_cannot_start_is_skipped_and_a_disabled_rule_does_not_run(client, bk,
                                                                                   store):
    rule = create(client, bk, {"type": "git_push", "branch": "main"}, backup_of(bk.env.id))
    busy = bk.backup_via_api(client)  # a task in progress on the environment
    r = client.post(f"{P}/automation-rules/{rule['id']}/run", headers=bk.key)
    assert r.status_code == 201 and r.json["status"] == "skipped", r.json
    assert r.json["task_id"] is None and "already pending or running" in r.json["reason"]
    name, data = automation_events(rule["id"])[-1]
    assert (name, data["status"]) == ("automation_rule.failed", "skipped")
    assert Deployment.select().where(Deployment.environment == bk.env.id).count() == 1
    assert busy.task_id is not None

    client.patch(f"{P}/automation-rules/{rule['id']}", headers=bk.key, json={"enabled": False})
    r = client.post(f"{P}/automation-rules/{rule['id']}/run", headers=bk.key)
    assert r.status_code == 409 and r.json["error"] == "automation_rule_disabled"
    assert AutomationRun.select().count() == 1


def test_a_schedule_fires_once_per_occurrence_whatever_the_schedulers(client, bk, store, at, app):
    settings = app.extensions["berth"].settings
    at(dt.datetime(2026, 6, 1, 9, 0))
    rule = create(client, bk, {"type": "schedule", "cron": "30 9 * * *"}, backup_of(bk.env.id))
    assert rule["next_run_at"] == "2026-06-01T09:30:00.000Z"
    at(dt.datetime(2026, 6, 1, 9, 29))
    assert triggers.fire_due(Plain(settings)) == []

    # Two schedulers at the same moment: one run.
    at(dt.datetime(2026, 6, 1, 9, 30, 5))
    barrier, fired = threading.Barrier(2), []

    def scheduler():
        barrier.wait()
        fired.extend(triggers.fire_due(Plain(settings)))
        app.extensions["berth"].db.close()
    threads = [threading.Thread(target=scheduler) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(fired) == 1 and AutomationRun.select().count() == 1
    [run] = AutomationRun.select()
    assert (run.trigger_type, run.actor) == ("schedule", "scheduler")
    task = Deployment.get_by_id(run.task)
    assert (task.kind, task.trigger) == ("backup", "scheduled")
    bk.ack(task.id)
    bk.finish(task.id)

    # Down for three days: the missed occurrences fire once, not three times.
    at(dt.datetime(2026, 6, 4, 12, 0))
    assert len(triggers.fire_due(Plain(settings))) == 1
    assert triggers.fire_due(Plain(settings)) == []
    assert AutomationRule.get_by_id(rule["id"]).next_run_at == dt.datetime(2026, 6, 5, 9, 30)


def test_a_local_time_schedule_keeps_across_dst_changes(client, bk, store, at, app):
    """02:30 in Berlin: skipped by the spring change (runs once, at 03:00), repeated
    by the autumn one (runs once)."""
    settings = app.extensions["berth"].settings
    for start, days in ((dt.datetime(2026, 3, 27, 12), 3), (dt.datetime(2026, 10, 23, 12), 3)):
        AutomationRun.delete().execute()
        at(start)
        rule = create(client, bk, {"type": "schedule", "cron": "30 2 * * *",
                                   "timezone": "Europe/Berlin"}, backup_of(bk.env.id),
                      key=bearer(bk.world.key(bk.org)[0]))
        fired = []
        for step in range(days * 24 * 4):  # a look every 15 minutes
            at(start + dt.timedelta(minutes=15 * step))
            for run in triggers.fire_due(Plain(settings)):
                fired.append(start + dt.timedelta(minutes=15 * step))
                if run.task:
                    bk.ack(run.task)
                    bk.finish(run.task)
        assert len(fired) == days, fired
        assert len({f.date() for f in fired}) == days, fired
        AutomationRule.update(enabled=False).where(AutomationRule.id == rule["id"]).execute()


def test_event_rules_follow_tasks_and_a_chain_is_cut(client, bk, store, app):
    """deploy.completed → a backup; backup.completed → a deploy: each run waits for
    its task, and the chain stops after MAX_DEPTH."""
    settings = app.extensions["berth"].settings
    env = bk.env
    r1 = create(client, bk, {"type": "event", "event": "deploy.completed",
                             "environment_id": str(env.id)}, backup_of(env.id))
    r2 = create(client, bk, {"type": "event", "event": "backup.completed",
                             "environment_id": str(env.id)},
                {"type": "deploy", "environment_id": str(env.id)})
    deploy = engine.start(env, "deploy", berth=Plain(settings))
    bk.ack(deploy.id)
    bk.finish(deploy.id, result={})
    seen = []
    for _ in range(10):
        triggers.start_pending(Plain(settings))
        running = list(AutomationRun.select().where(AutomationRun.status == "running",
                                                    AutomationRun.task.is_null(False)))
        if not running:
            break
        for run in running:
            seen.append((run.rule_id.hex, run.depth))
            bk.ack(run.task)
            bk.finish(run.task, result=None if run.rule_id.hex == r1["id"].replace("-", "")
                      else {})
    ids = {r1["id"].replace("-", ""): "r1", r2["id"].replace("-", ""): "r2"}
    assert [(ids[r], d) for r, d in seen] == [("r1", 0), ("r2", 1), ("r1", 2), ("r2", 3)]
    [cut] = AutomationRun.select().where(AutomationRun.status == "skipped")
    assert cut.depth == 4 and "deeper than 3" in cut.reason
    completed = [d for n, d in automation_events(r1["id"]) + automation_events(r2["id"])
                 if n == "automation_rule.completed"]
    assert len(completed) == 4 and all(d["trigger_type"] == "event" for d in completed)
    assert Backup.select().where(Backup.environment == env.id).count() == 2
