"""An environment's configuration on /api/v1 and `berth admin config`: read,
changed (a `config_update` deployment when it has containers), secrets sealed
and masked, bad input refused with nothing stored; retry keeps, rollback
reverts and a forced redeploy takes the configuration (the queued commands
show what the agent is sent)."""

import json

import pytest

from control_plane.infra import secretbox
from control_plane.infra.db import database
from control_plane.models import AgentCommand, Deployment, Environment, TaskLogLine
from control_plane.services.accounts import orgs
from control_plane.services.tasks import engine

V1 = "/api/v1"
DEPLOY = ("project.environments.deploy",)


class Member:
    def __init__(self, world, permissions=DEPLOY, status="running"):
        self.org = world.org()
        self.user = world.user(self.org, permissions)
        self.h = {"Authorization": f"Bearer {orgs.issue_user_token(self.user.id)}"}
        self.project = world.project(self.org)
        self.env = world.environment(self.project, status=status)
        self.url = f"{V1}/environments/{self.env.id}/config"


@pytest.fixture
def m(world):
    return Member(world)


def _command(deployment_id):
    return AgentCommand.get(AgentCommand.deployment == deployment_id)


def _delivered(deployment_id):
    """The payload as the gateway hands it to the agent."""
    from control_plane.services.environment_settings import configuration
    return configuration.for_agent(_command(deployment_id).payload)


def _succeed(deployment_id):
    engine.on_ack(deployment_id)
    engine.on_result(deployment_id, True, {"erp_container": "e", "db_container": "d"}, None)


CHANGE = {"variables": {"SMTP_HOST": {"value": "mail.example.com"},
                        "SMTP_PASSWORD": {"value": "hunter2-very-secret", "secret": True}},
          "erp_options": {"workers": 2, "log_level": "warn",
                          "server_wide_modules": ["base", "web"]},
          "postgres_settings": {"work_mem": "8MB", "max_connections": 50}}


def test_change_redeploys_with_config_update_and_masks_secrets(client, m):
    assert client.get(m.url, headers=m.h).json == {
        "environment_id": str(m.env.id), "variables": [], "erp_options": {},
        "postgres_settings": {}, "updated_at": None}
    r = client.patch(m.url, headers=m.h, json=CHANGE)
    assert r.status_code == 201, r.json
    d = r.json["deployment"]
    assert (d["trigger"], d["kind"], d["status"]) == ("config_update", "redeploy", "pending")
    shown = r.json["configuration"]
    assert shown["variables"] == [
        {"name": "SMTP_HOST", "secret": False, "value": "mail.example.com"},
        {"name": "SMTP_PASSWORD", "secret": True, "value": None}]
    assert shown["erp_options"] == CHANGE["erp_options"]
    assert shown["postgres_settings"] == CHANGE["postgres_settings"]
    assert client.get(m.url, headers=m.h).json == shown
    assert Environment.get_by_id(m.env.id).status == "deploying"

    # Stored sealed everywhere: the environment, the deployment, the queued command.
    for row in (Environment.get_by_id(m.env.id).variables,
                Deployment.get_by_id(d["id"]).config["variables"],
                _command(d["id"]).payload):
        assert "hunter2" not in json.dumps(row)
    sealed = Environment.get_by_id(m.env.id).variables["SMTP_PASSWORD"]["value"]
    assert secretbox.unseal(sealed, "environment-variable") == "hunter2-very-secret"
    # ... and plain only as it leaves for the agent.
    sent = _delivered(d["id"])
    assert sent["variables"] == {"SMTP_HOST": "mail.example.com",
                                 "SMTP_PASSWORD": "hunter2-very-secret"}
    assert sent["erp_options"] == {"log_level": "warn", "server_wide_modules": "base,web",
                                   "workers": "2"}
    assert sent["postgres_settings"] == {"max_connections": "50", "work_mem": "8MB"}
    assert not any("hunter2" in line.message for line in TaskLogLine.select())


def test_only_named_keys_change_null_removes_and_no_change_is_no_deployment(client, m):
    assert client.patch(m.url, headers=m.h, json=CHANGE).status_code == 201
    _succeed(Deployment.get(Deployment.environment == m.env.id).id)
    r = client.patch(m.url, headers=m.h, json={"erp_options": {"workers": None},
                                               "variables": {"SMTP_HOST": None}})
    assert r.status_code == 201, r.json
    cfg = r.json["configuration"]
    assert [v["name"] for v in cfg["variables"]] == ["SMTP_PASSWORD"]
    assert cfg["erp_options"] == {"log_level": "warn", "server_wide_modules": ["base", "web"]}
    assert _delivered(r.json["deployment"]["id"])["variables"] == {
        "SMTP_PASSWORD": "hunter2-very-secret"}  # a secret left out is kept
    _succeed(r.json["deployment"]["id"])
    # The same values again (a secret sealed afresh compares equal): nothing to do.
    same = {"erp_options": {"log_level": "warn"},
            "variables": {"SMTP_PASSWORD": {"value": "hunter2-very-secret", "secret": True}}}
    r = client.patch(m.url, headers=m.h, json=same)
    assert r.status_code == 200 and r.json["deployment"] is None, r.json
    assert Deployment.select().where(Deployment.environment == m.env.id).count() == 2


def test_not_deployed_environment_stores_for_its_next_deployment(client, world):
    m = Member(world, status="pending")
    r = client.patch(m.url, headers=m.h, json={"variables": {"A": {"value": "1"}}})
    assert r.status_code == 200 and r.json["deployment"] is None, r.json
    r = client.post(f"{V1}/environments/{m.env.id}/deploy", headers=m.h, json={})
    assert r.status_code == 201, r.json
    assert _delivered(r.json["deployment"]["id"])["variables"] == {"A": "1"}


@pytest.mark.parametrize("body, where", [
    ({"variables": {"1BAD": {"value": "x"}}}, "variables.1BAD"),
    ({"variables": {"BAD-NAME": {"value": "x"}}}, "variables.BAD-NAME"),
    ({"variables": {"PASSWORD": {"value": "x"}}}, "variables.PASSWORD"),
    ({"variables": {"PGHOST": {"value": "x"}}}, "variables.PGHOST"),
    ({"variables": {"TOKEN_svc_live_rw_abc": {"value": "x"}}}, "variables.TOKEN_svc_live_rw_abc"),
    ({"variables": {"KEY_AKIAIOSFODNN7EXAMPLE": {"value": "x"}}},
     "variables.KEY_AKIAIOSFODNN7EXAMPLE"),
    ({"variables": {"X_a8f3k2m9q7w1z5x0c4v6b": {"value": "x"}}}, "variables.X_a8f3k2m9q7w1z5x0c4v6b"),
    ({"variables": {"NUL": {"value": "a\u0000b"}}}, 400),  # the guard of every JSON body
    ({"erp_options": {"db_password": "x"}}, None),
    ({"erp_options": {"workers": 65}}, "erp_options.workers"),
    ({"erp_options": {"workers": "4"}}, "erp_options.workers"),
    ({"erp_options": {"workers": True}}, "erp_options.workers"),
    ({"erp_options": {"log_level": "loud"}}, "erp_options.log_level"),
    ({"erp_options": {"dbfilter": "(unclosed"}}, "erp_options.dbfilter"),
    ({"erp_options": {"dbfilter": "a\nadmin_passwd = x"}}, "erp_options.dbfilter"),
    ({"erp_options": {"server_wide_modules": ["base", "web; rm"]}},
     "erp_options.server_wide_modules"),
    ({"erp_options": {"limit_memory_soft": 2 * 1024 ** 3, "limit_memory_hard": 1024 ** 3}},
     "erp_options.limit_memory_hard"),
    ({"postgres_settings": {"work_mem": "8 MB"}}, "postgres_settings.work_mem"),
    ({"postgres_settings": {"work_mem": "3GB"}}, "postgres_settings.work_mem"),
    ({"postgres_settings": {"shared_buffers": 128}}, "postgres_settings.shared_buffers"),
    ({"postgres_settings": {"max_connections": 5}}, "postgres_settings.max_connections"),
    ({"postgres_settings": {"fsync": "off"}}, None),
])
def test_bad_input_is_refused_and_changes_nothing(client, m, body, where):
    r = client.patch(m.url, headers=m.h, json=body)
    assert r.status_code == (where if isinstance(where, int) else 422), r.json
    assert set(r.json) >= {"error", "message"}
    if isinstance(where, str):
        assert r.json["error"] == "invalid_configuration" and where in r.json["details"], r.json
    assert Deployment.select().where(Deployment.environment == m.env.id).count() == 0
    env = Environment.get_by_id(m.env.id)
    assert (env.variables, env.erp_options, env.postgres_settings, env.status) == (
        None, None, None, "running")


def test_permission_scope_and_busy_environment(client, world, m):
    reader = Member(world, permissions=())
    other = client.get(reader.url.replace(str(reader.env.id), str(m.env.id)), headers=reader.h)
    assert other.status_code == 404
    assert client.get(reader.url, headers=reader.h).status_code == 200
    r = client.patch(reader.url, headers=reader.h, json={"variables": {"A": {"value": "1"}}})
    assert r.status_code == 403 and r.json["error"] == "permission_denied"
    assert client.patch(m.url, headers=m.h, json={"variables": {"A": {"value": "1"}}}
                        ).status_code == 201
    r = client.patch(m.url, headers=m.h, json={"variables": {"A": {"value": "2"}}})
    assert r.status_code == 409 and r.json["error"] == "deployment_in_progress", r.json
    shown = client.get(m.url, headers=m.h).json["variables"]
    assert shown == [{"name": "A", "secret": False, "value": "1"}]  # the refused one stored nothing


def test_retry_keeps_rollback_reverts_and_forced_redeploy_uses_current(client, m):
    first = client.patch(m.url, headers=m.h, json={
        "variables": {"MODE": {"value": "one"}}, "postgres_settings": {"work_mem": "4MB"}}
    ).json["deployment"]["id"]
    _succeed(first)
    second = client.patch(m.url, headers=m.h, json={
        "variables": {"MODE": {"value": "two"}}, "postgres_settings": {"work_mem": "16MB"}}
    ).json["deployment"]["id"]
    engine.on_ack(second)
    engine.on_result(second, False, None, "the ERP did not start")
    retry = client.post(f"{V1}/deployments/{second}/retry", headers=m.h).json
    assert _delivered(retry["id"])["variables"] == {"MODE": "two"}  # rule 1
    engine.on_ack(retry["id"])
    engine.on_result(retry["id"], False, None, "still not")

    back = client.post(f"{V1}/deployments/{first}/rollback", headers=m.h)
    assert back.status_code == 201, back.json
    sent = _delivered(back.json["id"])
    assert (sent["variables"], sent["postgres_settings"]) == (  # rule 5
        {"MODE": "one"}, {"work_mem": "4MB"})
    cfg = client.get(m.url, headers=m.h).json
    assert cfg["variables"][0]["value"] == "one" and cfg["postgres_settings"] == {
        "work_mem": "4MB"}
    _succeed(back.json["id"])

    with database.atomic():  # a change made while nothing is deployed, read by rule 7
        Environment.update(erp_options={"workers": 3}).where(
            Environment.id == m.env.id).execute()
    forced = client.post(f"{V1}/environments/{m.env.id}/deploy", headers=m.h,
                         json={"force": True}).json["deployment"]
    assert _delivered(forced["id"])["erp_options"] == {"workers": "3"}
