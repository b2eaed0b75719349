"""Neutralisation of restored copies, as the control plane decides and records it:
on by default into staging and development, never into production, `false`
honoured and logged with who asked; what the agent read is shown on every
surface and in `restore.completed`. (The agent's side, with a real ERP image, is
in tests/e2e/backups/test_neutralize_flow.py.)"""

import pytest

from control_plane.models import AgentCommand, Deployment, Environment, Event, TaskLogLine
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
                            "neutralized": True})
    assert Deployment.get_by_id(task).status == "success"
    assert {k: v["neutralized"] for k, v in _shown(client, bk, env).items()} == \
        {"public": True, "status": True, "ops": True}
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
