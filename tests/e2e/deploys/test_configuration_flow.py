"""An environment's configuration end to end: the real gateway, a real
`berth-agent run` and real containers. Variables (one secret), ERP options
and a PostgreSQL setting are set, deployed (`config_update`) and read back
from inside the containers; changed and read again; a rollback brings the
first values back; a destroy removes the configuration file."""

import pytest

from agent.deploy.environments import Environments
from control_plane.models import Server, TaskLogLine
from control_plane.services import agents as agent_svc
from control_plane.services.accounts import orgs
from tests.conftest import auth
from tests.support.agents import registered_server, wait_for

P, V1 = "/api/public/v1", "/api/v1"
SECRET = "hunter2-config-flow-secret"


class Flow:
    pass


@pytest.fixture
def flow(app, world, agents, gateway, http_app, tmp_path, erp_image, postgres_image,
         docker_client):
    settings = app.extensions["berth"].settings
    settings["ERP_IMAGE"], settings["POSTGRES_IMAGE"] = erp_image, postgres_image
    f = Flow()
    f.root = tmp_path / "srv"
    f.org = world.org()
    f.server, credential = registered_server(f.org)
    f.project = world.project(f.org, f.server)  # no Git repository: no add-ons
    f.key = auth(world.key(f.org)[0])
    user = world.user(f.org, permissions=("project.environments.deploy",))
    f.user = auth(orgs.issue_user_token(user.id))
    f.agent = agents(f.server, credential, env={"BERTH_AGENT_ENV_ROOT": str(f.root)})
    wait_for(lambda: str(f.server.id) in gateway.sessions
             and agent_svc.is_connected(Server.get_by_id(f.server.id)), timeout=30,
             what="agent connected")
    f.created = []
    yield f
    envs = Environments(docker_client, root=f.root)
    for env_id in f.created:
        envs.destroy(env_id, True, lambda *a: None)


def _settled(client, f, deployment_id):
    d = wait_for(lambda: (d := client.get(f"{V1}/deployments/{deployment_id}",
                                          headers=f.user).json)["status"]
                 in ("success", "failed", "cancelled", "destroyed") and d,
                 timeout=180, interval=0.3, what=f"deployment {deployment_id} settled")
    assert d["status"] in ("success", "destroyed"), d
    return d


def _inside(docker_client, env_id):
    """What the containers run with: the ERP's environment and configuration file,
    and the database server's settings."""
    short = env_id.replace("-", "")[:12]
    erp = docker_client.containers.get(f"berth-{short}-erp")
    db = docker_client.containers.get(f"berth-{short}-db")
    env = dict(line.split("=", 1) for line in
               erp.exec_run(["env"]).output.decode().splitlines() if "=" in line)
    conf = dict(line.split(" = ", 1) for line in
                erp.exec_run(["cat", "/etc/odoo/odoo.conf"]).output.decode().splitlines()
                if " = " in line)
    code, out = db.exec_run(["psql", "-U", "odoo", "-d", "odoo", "-tAc",
                             "select current_setting('work_mem'), "
                             "current_setting('max_connections')"])
    assert code == 0, out
    return env, conf, tuple(out.decode().strip().split("|"))


def _change(client, f, env_id, body):
    r = client.patch(f"{V1}/environments/{env_id}/config", headers=f.user, json=body)
    assert r.status_code == 201, r.json
    assert r.json["deployment"]["trigger"] == "config_update"
    return _settled(client, f, r.json["deployment"]["id"])


def test_configuration_reaches_the_containers_and_follows_rollback(client, flow,
                                                                   docker_client):
    f = flow
    env_id = client.post(f"{P}/projects/{f.project.id}/environments", headers=f.key,
                         json={"name": "Production"}).json["id"]
    f.created.append(env_id)
    first = client.get(f"{V1}/deployments?project_id={f.project.id}", headers=f.user).json
    _settled(client, f, first["data"][0]["id"])
    env, conf, pg = _inside(docker_client, env_id)
    assert "MODE" not in env and "workers" not in conf and pg == ("4MB", "100")  # defaults

    d2 = _change(client, f, env_id, {
        "variables": {"MODE": {"value": "one"},
                      "SMTP_PASSWORD": {"value": SECRET, "secret": True}},
        "erp_options": {"workers": 2, "log_level": "warn"},
        "postgres_settings": {"work_mem": "8MB", "max_connections": 50}})
    env, conf, pg = _inside(docker_client, env_id)
    assert (env["MODE"], env["SMTP_PASSWORD"]) == ("one", SECRET)
    assert (conf["workers"], conf["log_level"], conf["proxy_mode"]) == ("2", "warn", "True")
    assert pg == ("8MB", "50")
    logged = [line.message for line in TaskLogLine.select()]
    assert logged and not any(SECRET in text for text in logged)
    assert SECRET not in str(client.get(f"{V1}/environments/{env_id}/config",
                                        headers=f.user).json)

    _change(client, f, env_id, {"variables": {"MODE": {"value": "two"}},
                                "erp_options": {"workers": 4},
                                "postgres_settings": {"work_mem": "16MB"}})
    env, conf, pg = _inside(docker_client, env_id)
    assert (env["MODE"], env["SMTP_PASSWORD"], conf["workers"], pg) == (
        "two", SECRET, "4", ("16MB", "50"))

    r = client.post(f"{V1}/deployments/{d2['id']}/rollback", headers=f.user)
    assert r.status_code == 201, r.json
    _settled(client, f, r.json["id"])
    env, conf, pg = _inside(docker_client, env_id)
    assert (env["MODE"], conf["workers"], pg) == ("one", "2", ("8MB", "50"))
    shown = client.get(f"{V1}/environments/{env_id}/config", headers=f.user).json
    assert shown["postgres_settings"] == {"work_mem": "8MB", "max_connections": 50}

    r = client.delete(f"{V1}/deployments/environment/{env_id}/destroy", headers=f.user)
    assert r.status_code == 200, r.json
    assert not (f.root / env_id / "odoo.conf").exists()  # rule 9
    f.created.remove(env_id)
