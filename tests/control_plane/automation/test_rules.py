"""Automation rules on the public API: their life, who may touch them, and a 422
naming the field for every rule they must follow (nothing saved then)."""

import pytest

from control_plane.models import AutomationRule, Environment
from tests.control_plane.automation.conftest import bearer

P = "/api/public/v1"


def rules_url(bk, project=None):
    return f"{P}/projects/{(project or bk.project).id}/automation-rules"


def test_a_rule_is_created_read_listed_changed_and_deleted(client, bk):
    body = {"name": "nightly backup", "trigger": {"type": "schedule", "cron": "0 3 * * *",
                                                   "timezone": "Europe/Berlin"},
            "action": {"type": "backup", "environment_id": str(bk.env.id)}}
    r = client.post(rules_url(bk), headers=bk.key, json=body)
    assert r.status_code == 201, r.json
    rule = r.json
    assert rule["name"] == "nightly backup" and rule["enabled"] is True
    assert rule["project_id"] == str(bk.project.id) and rule["last_run"] is None
    assert rule["trigger"] == {"type": "schedule", "cron": "0 3 * * *",
                               "timezone": "Europe/Berlin"}
    assert rule["action"] == {"type": "backup", "environment_id": str(bk.env.id)}
    # 03:00 in Berlin is 01:00 or 02:00 UTC
    assert rule["next_run_at"].endswith(("T01:00:00.000Z", "T02:00:00.000Z")), rule["next_run_at"]

    assert client.get(f"{P}/automation-rules/{rule['id']}", headers=bk.ro_key).json == rule
    listed = client.get(rules_url(bk), headers=bk.ro_key).json
    assert [r["id"] for r in listed["data"]] == [rule["id"]]
    assert listed["pagination"]["total"] == 1

    r = client.patch(f"{P}/automation-rules/{rule['id']}", headers=bk.key,
                     json={"enabled": False, "name": "paused backup"})
    assert r.status_code == 200, r.json
    assert (r.json["enabled"], r.json["name"], r.json["next_run_at"]) == (
        False, "paused backup", None)
    assert r.json["trigger"] == rule["trigger"]  # omitted fields stay

    assert client.delete(f"{P}/automation-rules/{rule['id']}", headers=bk.key).status_code == 204
    assert client.get(f"{P}/automation-rules/{rule['id']}", headers=bk.key).status_code == 404
    assert client.get(rules_url(bk), headers=bk.key).json["data"] == []
    # Its history stays readable.
    r = client.get(f"{P}/automation-rules/{rule['id']}/runs", headers=bk.key)
    assert r.status_code == 200 and r.json["data"] == []


def test_keys_see_and_change_only_what_they_may(client, bk, world):
    body = {"name": "deploy", "trigger": {"type": "git_push", "branch": "main"},
            "action": {"type": "deploy", "environment_id": str(bk.env.id)}}
    r = client.post(rules_url(bk), headers=bk.ro_key, json=body)
    assert r.status_code == 403 and r.json["error"] == "write_access_required"
    rule = client.post(rules_url(bk), headers=bk.key, json=body).json
    other_project = world.project(bk.org, bk.server)
    scoped = bearer(world.key(bk.org, scope="project", project=other_project)[0])
    assert client.get(f"{P}/automation-rules/{rule['id']}", headers=scoped).status_code == 404
    assert client.get(rules_url(bk), headers=scoped).status_code == 404
    stranger = bearer(world.key(world.org())[0])
    for method, url in (("get", f"{P}/automation-rules/{rule['id']}"),
                        ("patch", f"{P}/automation-rules/{rule['id']}"),
                        ("delete", f"{P}/automation-rules/{rule['id']}"),
                        ("post", f"{P}/automation-rules/{rule['id']}/run"),
                        ("get", f"{P}/automation-rules/{rule['id']}/runs")):
        r = getattr(client, method)(url, headers=stranger, json={})
        assert r.status_code == 404, (method, url, r.json)
    assert AutomationRule.get_by_id(rule["id"]).deleted_at is None


def _bad_bodies(bk, prod, other_env):
    env = str(bk.env.id)
    backup = {"type": "backup", "environment_id": env}
    push = {"type": "git_push", "branch": "main"}
    return [
        ({"name": "", "trigger": push, "action": backup}, "name"),
        ({"name": "x", "trigger": {"type": "webhook"}, "action": backup}, "trigger.type"),
        ({"name": "x", "trigger": push, "action": {"type": "reboot"}}, "action.type"),
        ({"name": "x", "trigger": {"type": "git_push", "branch": "feat ure"}, "action": backup},
         "trigger.branch"),
        ({"name": "x", "trigger": {"type": "git_push"}, "action": backup}, "trigger.branch"),
        ({"name": "x", "trigger": {"type": "schedule", "cron": "61 * * * *"}, "action": backup},
         "trigger.cron"),
        ({"name": "x", "trigger": {"type": "schedule", "cron": "0 3 * *"}, "action": backup},
         "trigger.cron"),
        ({"name": "x", "trigger": {"type": "schedule", "cron": "0 0 30 2 *"}, "action": backup},
         "trigger.cron"),  # never fires
        ({"name": "x", "trigger": {"type": "schedule", "cron": "0 3 * * *",
                                   "timezone": "Mars/Olympus"}, "action": backup},
         "trigger.timezone"),
        ({"name": "x", "trigger": {"type": "schedule", "cron": "0 3 * * *",
                                   "timezone": "Europe/" + "x" * 300}, "action": backup},
         "trigger.timezone"),
        ({"name": "x", "trigger": {"type": "schedule", "cron": "9" * 500 + " * * * *"},
          "action": backup}, "trigger.cron"),
        ({"name": "x", "trigger": {"type": "event"}, "action": {"type": "backup"}},
         "trigger.event"),
        ({"name": "x", "trigger": {"type": "event", "event": "deploy.started",
                                   "environment_id": env}, "action": backup}, "trigger.event"),
        ({"name": "x", "trigger": {"type": "event", "event": "deploy.completed",
                                   "environment_id": other_env}, "action": backup},
         "trigger.environment_id"),
        ({"name": "x", "trigger": {"type": "event", "event": "backup.completed",
                                   "environment_id": env}, "action": backup}, "action.type"),
        ({"name": "x", "trigger": push, "action": {"type": "deploy", "environment_id": other_env}},
         "action.environment_id"),
        ({"name": "x", "trigger": push, "action": {"type": "backup"}}, "action.environment_id"),
        ({"name": "x", "trigger": push, "action": {
            "type": "copy_database", "source_environment_id": env,
            "environment_id": str(prod.id)}}, "action.allow_production"),
        ({"name": "x", "trigger": push, "action": {
            "type": "copy_database", "source_environment_id": env, "environment_id": env}},
         "action.environment_id"),
    ]


def test_every_rule_a_rule_must_follow_is_a_422_naming_the_field(client, bk, world):
    prod = bk.environment()
    Environment.update(environment_type="production").where(Environment.id == prod.id).execute()
    other_env = world.environment(world.project(bk.org, bk.server))
    for i, (body, field) in enumerate(_bad_bodies(bk, prod, str(other_env.id))):
        key = bk.key if i < 15 else bearer(bk.world.key(bk.org)[0])  # 20 writes a minute a key
        r = client.post(rules_url(bk), headers=key, json=body)
        assert r.status_code == 422, (field, r.json)
        if r.json["error"] == "invalid_automation_rule":
            assert field in r.json["details"], (field, r.json)
        else:  # the body's own shape (marshmallow)
            assert r.json["error"] == "validation_error", r.json
    assert AutomationRule.select().count() == 0
    # With the word said, a copy into production is a rule.
    r = client.post(rules_url(bk), headers=bearer(bk.world.key(bk.org)[0]), json={
        "name": "refresh prod", "trigger": {"type": "git_push", "branch": "main"},
        "action": {"type": "copy_database", "source_environment_id": str(bk.env.id),
                   "environment_id": str(prod.id), "allow_production": True}})
    assert r.status_code == 201, r.json
    assert r.json["action"]["fresh"] is False


def test_a_project_holds_at_most_100_rules(client, bk):
    for i in range(100):
        AutomationRule.create(organization=bk.org, project=bk.project, name=f"r{i}",
                              trigger={"type": "git_push", "branch": "main"},
                              action={"type": "deploy", "environment_id": str(bk.env.id)},
                              trigger_type="git_push")
    r = client.post(rules_url(bk), headers=bk.key, json={
        "name": "one more", "trigger": {"type": "git_push", "branch": "main"},
        "action": {"type": "deploy", "environment_id": str(bk.env.id)}})
    assert r.status_code == 409 and r.json["error"] == "automation_rule_limit_reached"
    page = client.get(rules_url(bk) + "?limit=60", headers=bk.ro_key).json
    assert len(page["data"]) == 60 and page["pagination"]["has_more"]
    rest = client.get(rules_url(bk) + f"?limit=60&cursor={page['pagination']['next_cursor']}",
                      headers=bk.ro_key).json
    assert len(rest["data"]) == 40 and not rest["pagination"]["has_more"]


@pytest.mark.parametrize("patch", [{"trigger": {"type": "schedule", "cron": "nope"}},
                                   {"action": {"type": "backup", "environment_id": None}},
                                   {"name": ""}])
def test_a_bad_change_changes_nothing(client, bk, patch):
    rule = client.post(rules_url(bk), headers=bk.key, json={
        "name": "deploy", "trigger": {"type": "git_push", "branch": "main"},
        "action": {"type": "deploy", "environment_id": str(bk.env.id)}}).json
    r = client.patch(f"{P}/automation-rules/{rule['id']}", headers=bk.key, json=patch)
    assert r.status_code == 422, r.json
    assert client.get(f"{P}/automation-rules/{rule['id']}", headers=bk.key).json == rule
