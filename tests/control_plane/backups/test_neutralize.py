"""Neutralisation of restored copies, as the control plane decides and records it:
on by default into staging and development, never into production, `false`
honoured and logged with who asked; what the agent read is shown on every
surface and in `restore.completed`. (The agent's side, with a real ERP image, is
in tests/e2e/backups/test_neutralize_flow.py.)"""

import pytest

from control_plane.models import (
    AgentCommand,
    Deployment,
    Environment,
    Event,
    Server,
    TaskLogLine,
)
from control_plane.services.tasks import engine
from tests.control_plane.backups.conftest import RESULT, V1, P
from tests.control_plane.test_admin_cli import data_dir, ok  # noqa: F401 - fixture


def _env(bk, environment_type):
    env = bk.environment()
    Environment.update(environment_type=environment_type).where(
        Environment.id == env.id).execute()
    return Environment.get_by_id(env.id)


def _restore(client, bk, env, source, **body):
    return client.post(f"{V1}/environments/{env.id}/restore", headers=bk.h,
                       json={"backup_id": str(source.id), **body})


CHECKED = {"profile": "standard", "cleared": {}, "checked": ["active outgoing mail server"],
           "anonymized": None}


def _payload(task_id):
    return AgentCommand.get(AgentCommand.deployment == task_id).payload


def _log(task_id):
    return [(line.level, line.message) for line in
            TaskLogLine.select().where(TaskLogLine.deployment == task_id).order_by(TaskLogLine.seq)]


@pytest.mark.parametrize(("environment_type", "body", "wanted"), [
    ("staging", {}, True), ("development", {}, True), ("staging", {"neutralize": None}, True),
    ("staging", {"neutralize": True}, True), ("production", {}, False),
    ("production", {"neutralize": False}, False)])
def test_who_is_neutralised(client, bk, environment_type, body, wanted):
    source = bk.completed_backup(client)
    env = _env(bk, environment_type)
    r = _restore(client, bk, env, source, **body)
    assert r.status_code == 202, r.json
    assert r.json["extra_data"]["neutralize"] is wanted
    assert _payload(r.json["id"])["neutralize"] is wanted
    assert _log(r.json["id"]) == []  # nothing to warn about


def test_false_is_honoured_and_says_who_asked(client, bk):
    source = bk.completed_backup(client)
    env = _env(bk, "staging")
    r = _restore(client, bk, env, source, neutralize=False)
    assert r.status_code == 202, r.json
    assert _payload(r.json["id"])["neutralize"] is False
    [(level, message)] = _log(r.json["id"])
    assert level == "warning" and '"neutralize": false' in message and bk.user.email in message
    shown = client.get(f"{P}/environments/{env.id}/logs?task_id={r.json['id']}",
                       headers=bk.ro_key).json["log"]
    assert bk.user.email in shown


def test_production_is_never_neutralised_and_bad_values_are_refused(client, bk):
    source = bk.completed_backup(client)
    prod = _env(bk, "production")
    before = Deployment.select().count()
    r = _restore(client, bk, prod, source, neutralize=True)
    assert r.status_code == 422 and r.json["error"] == "validation_error", r.json
    assert "neutralize" in r.json["details"] and "production" in r.json["message"]
    for bad in ("yes", 1, "true", [], {}):
        r = _restore(client, bk, _env(bk, "staging"), source, neutralize=bad)
        assert r.status_code == 422 and "neutralize" in r.json["details"]["json"], bad
    assert Deployment.select().count() == before  # nothing started


def _shown(client, bk, env):
    return {"public": client.get(f"{P}/environments/{env.id}", headers=bk.ro_key).json,
            "status": client.get(f"{P}/environments/{env.id}/status", headers=bk.ro_key).json,
            "ops": client.patch(f"{V1}/projects/{env.project_id}/environments/{env.id}",
                                headers=bk.h).json}


def test_what_the_agent_read_is_shown_and_sent(client, bk):
    source = bk.completed_backup(client)
    env = _env(bk, "staging")
    assert {k: v["neutralized"] for k, v in _shown(client, bk, env).items()} == \
        {"public": None, "status": None, "ops": None}  # nothing read yet
    task = _restore(client, bk, env, source).json["id"]
    bk.ack(task)
    bk.finish(task, result={"safety": RESULT, "restored_from": str(source.id),
                            "neutralized": True, "safe_copy": CHECKED})
    assert Deployment.get_by_id(task).status == "success"
    assert {k: v["neutralized"] for k, v in _shown(client, bk, env).items()} == \
        {"public": True, "status": True, "ops": True}
    assert {k: v["anonymized"] for k, v in _shown(client, bk, env).items()} == \
        {"public": False, "status": False, "ops": False}
    event = Event.select().where(Event.name == "restore.completed").order_by(
        Event.created_at.desc()).first()
    assert event.data["neutralized"] is True and event.data["task_id"] == task
    assert _log(task) == []

    # Production restored from the same backup: the agent reads false.
    prod = _env(bk, "production")
    task = _restore(client, bk, prod, source).json["id"]
    bk.ack(task)
    bk.finish(task, result={"safety": RESULT, "restored_from": str(source.id),
                            "neutralized": False})
    assert _shown(client, bk, prod)["public"]["neutralized"] is False
    assert _shown(client, bk, env)["public"]["neutralized"] is True  # the other one kept


def test_an_agent_from_before_neutralisation(client, bk):
    """Its result has no `neutralized`: unknown, and the task log says the copy is live."""
    source = bk.completed_backup(client)
    env = _env(bk, "development")
    task = _restore(client, bk, env, source).json["id"]
    bk.ack(task)
    bk.finish(task, result={"safety": RESULT, "restored_from": str(source.id)})
    assert Deployment.get_by_id(task).status == "success"
    assert _shown(client, bk, env)["public"]["neutralized"] is None
    [(level, message)] = _log(task)
    assert level == "warning" and "did not neutralise" in message and "upgrade" in message
    event = Event.select().where(Event.name == "restore.completed").order_by(
        Event.created_at.desc()).first()
    assert event.data["neutralized"] is None


def test_a_failed_restore_changes_nothing_shown(client, bk):
    source = bk.completed_backup(client)
    env = _env(bk, "staging")
    task = _restore(client, bk, env, source).json["id"]
    bk.ack(task)
    bk.finish(task, result={"safety": RESULT, "restored_from": str(source.id),
                            "neutralized": True})
    task = _restore(client, bk, env, source).json["id"]
    bk.ack(task)
    bk.finish(task, ok=False, result={"safety": RESULT},
              error="the restore failed: odoo neutralize failed (exit 1)")
    assert _shown(client, bk, env)["public"]["neutralized"] is True
    failed = Event.select().where(Event.name == "restore.failed").first()
    assert "neutralized" not in failed.data


def test_an_import_restore_decides_the_same_way(client, store, bk):
    def uploaded(env):
        imp = client.post(f"{V1}/environments/{env.id}/imports", headers=bk.h, json={}).json
        base = f"{V1}/environments/{env.id}/imports/{imp['import_id']}"
        store.sizes[f"imports/{env.id}/{imp['import_id']}/upload"] = 10
        assert client.post(f"{base}/complete", headers=bk.h, json={
            "parts": [{"part_number": 1, "etag": "a"}]}).status_code == 200
        return base

    staging, prod = _env(bk, "staging"), _env(bk, "production")
    r = client.post(f"{uploaded(staging)}/restore", headers=bk.h)  # no body at all
    assert r.status_code == 202, r.json
    assert _payload(r.json["id"])["neutralize"] is True
    base = uploaded(prod)
    r = client.post(f"{base}/restore", headers=bk.h, json={"neutralize": True})
    assert r.status_code == 422 and "neutralize" in r.json["details"]
    r = client.post(f"{base}/restore", headers=bk.h, json={})
    assert r.status_code == 202 and _payload(r.json["id"])["neutralize"] is False
    other = _env(bk, "development")
    r = client.post(f"{uploaded(other)}/restore", headers=bk.h, json={"neutralize": False})
    assert r.status_code == 202 and _payload(r.json["id"])["neutralize"] is False
    assert bk.user.email in _log(r.json["id"])[0][1]
    r = client.post(f"{uploaded(_env(bk, 'staging'))}/restore", headers=bk.h,
                    json={"neutralize_profile": "strict", "anonymize": True})
    assert r.status_code == 202, r.json
    payload = _payload(r.json["id"])
    assert (payload["neutralize"], payload["neutralize_profile"], payload["anonymize"]) == (
        True, "strict", True)
    r = client.post(f"{uploaded(_env(bk, 'production'))}/restore", headers=bk.h,
                    json={"anonymize": True})
    assert r.status_code == 422 and "anonymize" in r.json["details"]


def test_the_admin_cli(data_dir):  # noqa: F811
    from control_plane.app import create_app
    from control_plane.infra import migrate
    from tests.conftest import World

    app = create_app({})  # settings from CP_DATA_DIR only, like the CLI
    migrate.upgrade(app.extensions["berth"].db)
    world = World(app)
    env = world.environment(world.project(world.org()))
    Environment.update(environment_type="staging").where(Environment.id == env.id).execute()
    created = ok(data_dir, "backup", "create", "--environment", env.id)
    command = AgentCommand.get(AgentCommand.deployment == created["task_id"])
    engine.record_result(env.server_id, command.id, True, RESULT)

    live = ok(data_dir, "backup", "restore", "--environment", env.id, "--backup",
              created["id"], "--no-neutralize")
    assert live["neutralize"] is False and _payload(live["task_id"])["neutralize"] is False
    assert "berth admin" in _log(live["task_id"])[0][1]
    engine.record_result(env.server_id, AgentCommand.get(
        AgentCommand.deployment == live["task_id"]).id, True,
        {"safety": RESULT, "restored_from": created["id"], "neutralized": False})
    safe = ok(data_dir, "backup", "restore", "--environment", env.id, "--backup", created["id"])
    assert safe["neutralize"] is True and _payload(safe["task_id"])["neutralize"] is True
    assert (safe["neutralize_profile"], safe["anonymize"]) == ("standard", False)
    engine.record_result(env.server_id, AgentCommand.get(
        AgentCommand.deployment == safe["task_id"]).id, True,
        {"safety": RESULT, "restored_from": created["id"], "neutralized": True})
    strict = ok(data_dir, "backup", "restore", "--environment", env.id, "--backup",
                created["id"], "--profile", "strict", "--anonymize")
    assert (strict["neutralize_profile"], strict["anonymize"]) == ("strict", True)
    payload = _payload(strict["task_id"])
    assert (payload["neutralize_profile"], payload["anonymize"]) == ("strict", True)


# --- profiles, anonymisation and the environment's copy policy -----------------

def _policy(client, bk, env, **body):
    return client.put(f"{V1}/environments/{env.id}/copy-policy", headers=bk.h, json=body)


def test_the_copy_policy_is_read_and_changed(client, bk):
    env = _env(bk, "staging")
    url = f"{V1}/environments/{env.id}/copy-policy"
    assert client.get(url, headers=bk.h).json == {
        "environment_id": str(env.id), "profile": "standard", "anonymize": False}
    for bad in ({"profile": "lenient"}, {"profile": None}, {"anonymize": "yes"},
                {"anonymize": 1}, {"other": True}):
        r = _policy(client, bk, env, **bad)
        assert r.status_code == 422 and r.json["error"] == "validation_error", (bad, r.json)
    assert client.get(url, headers=bk.h).json["profile"] == "standard"  # nothing changed
    r = _policy(client, bk, env, profile="strict")
    assert r.status_code == 200 and r.json["profile"] == "strict" and not r.json["anonymize"]
    r = _policy(client, bk, env, anonymize=True)
    assert r.json == {"environment_id": str(env.id), "profile": "strict", "anonymize": True}
    assert client.get(url, headers=bk.h).json == r.json
    prod = _env(bk, "production")
    r = _policy(client, bk, prod, profile="strict")
    assert r.status_code == 422 and "profile" in r.json["details"], r.json
    assert _policy(client, bk, prod).status_code == 200  # nothing asked, nothing refused


@pytest.mark.parametrize(("policy", "body", "sent"), [
    ({}, {}, ("standard", False)),
    ({}, {"neutralize_profile": "strict"}, ("strict", False)),
    ({}, {"anonymize": True}, ("standard", True)),
    ({"profile": "strict"}, {}, ("strict", False)),
    ({"profile": "strict"}, {"neutralize_profile": "strict", "anonymize": True}, ("strict", True)),
    ({"anonymize": True}, {}, ("standard", True)),
    ({"anonymize": True}, {"neutralize_profile": "strict"}, ("strict", True)),
])
def test_a_request_raises_the_policy(client, bk, policy, body, sent):
    source = bk.completed_backup(client)
    env = _env(bk, "staging")
    assert _policy(client, bk, env, **policy).status_code == 200
    r = _restore(client, bk, env, source, **body)
    assert r.status_code == 202, r.json
    payload = _payload(r.json["id"])
    assert (payload["neutralize_profile"], payload["anonymize"]) == sent
    assert payload["neutralize"] is True


@pytest.mark.parametrize(("environment_type", "policy", "body", "field"), [
    ("staging", {"profile": "strict"}, {"neutralize_profile": "standard"}, "neutralize_profile"),
    ("staging", {"profile": "strict"}, {"neutralize": False}, "neutralize"),
    ("staging", {"anonymize": True}, {"anonymize": False}, "anonymize"),
    ("staging", {"anonymize": True}, {"neutralize": False}, "neutralize"),
    ("development", {}, {"neutralize": False, "anonymize": True}, "neutralize"),
    ("development", {}, {"neutralize": False, "neutralize_profile": "strict"}, "neutralize"),
    ("production", {}, {"anonymize": True}, "anonymize"),
    ("production", {}, {"neutralize_profile": "standard"}, "neutralize_profile"),
])
def test_a_less_safe_copy_is_refused(client, bk, environment_type, policy, body, field):
    source = bk.completed_backup(client)
    env = _env(bk, environment_type)
    Environment.update(copy_profile=policy.get("profile"),
                       anonymize_copies=policy.get("anonymize")).where(
        Environment.id == env.id).execute()
    before = Deployment.select().count()
    r = _restore(client, bk, env, source, **body)
    assert r.status_code == 422 and r.json["error"] == "validation_error", r.json
    assert field in r.json["details"], r.json
    assert Deployment.select().count() == before  # nothing started
    r = _restore(client, bk, env, source, neutralize_profile="lenient")
    assert r.status_code == 422 and "neutralize_profile" in r.json["details"]["json"]


def test_an_older_agent_is_not_asked_for_what_it_would_skip(client, bk):
    source = bk.completed_backup(client)
    env = _env(bk, "staging")
    Server.update(agent_version="0.1.0").where(Server.id == env.server_id).execute()
    for body in ({"neutralize_profile": "strict"}, {"anonymize": True}):
        r = _restore(client, bk, env, source, **body)
        assert r.status_code == 409 and r.json["error"] == "agent_upgrade_required", r.json
        assert "0.1.0" in r.json["message"] and "upgrade" in r.json["message"]
    assert _restore(client, bk, env, source).status_code == 202  # standard: it warns after


def test_what_an_anonymised_copy_records(client, bk):
    source = bk.completed_backup(client)
    env = _env(bk, "staging")
    task = _restore(client, bk, env, source, anonymize=True,
                    neutralize_profile="strict").json["id"]
    bk.ack(task)
    made = {**CHECKED, "profile": "strict", "anonymized": {"res_partner": 12, "res_users": 3}}
    bk.finish(task, result={"safety": RESULT, "restored_from": str(source.id),
                            "neutralized": True, "safe_copy": made})
    assert {k: v["anonymized"] for k, v in _shown(client, bk, env).items()} == \
        {"public": True, "status": True, "ops": True}
    event = Event.select().where(Event.name == "restore.completed").order_by(
        Event.created_at.desc()).first()
    assert (event.data["anonymized"], event.data["neutralize_profile"]) == (True, "strict")
    assert _log(task) == []
    # A result without the record (an agent before the checks): not known, and said.
    task = _restore(client, bk, env, source).json["id"]
    bk.ack(task)
    bk.finish(task, result={"safety": RESULT, "restored_from": str(source.id),
                            "neutralized": True})
    assert _shown(client, bk, env)["public"]["anonymized"] is None
    [(level, message)] = _log(task)
    assert level == "warning" and "did not check" in message
