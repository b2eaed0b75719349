"""Disk figures end to end: a real environment deployed by the real agent with
the real Docker engine; bytes written into its filestore and rows into its
database; the agent's periodic measurement (its interval shortened) reaches
GET /environments/{id}/metrics and `berth-agent status`."""

import datetime as dt
import json
import os
import subprocess

import pytest

from agent.deploy.environments import Environments
from control_plane.models import Environment, Project, Server
from control_plane.services import agents as agent_svc
from tests.conftest import auth
from tests.support.agents import AGENT, polled_get, registered_server, wait_for
from tests.support.git_repo import shop_repo

P = "/api/public/v1"
WRITTEN = 3 * 1024 * 1024
ROWS = 10_000  # of about 1 kB of random text each: some 10 MB


@pytest.fixture
def interval():
    """The agent's disk interval, in seconds: shortened, so a test sees passes."""
    return "1"


@pytest.fixture
def deployed(app, world, agents, tmp_path, erp_image, postgres_image, docker_client, client,
             interval):
    settings = app.extensions["berth"].settings
    settings["ERP_IMAGE"], settings["POSTGRES_IMAGE"] = erp_image, postgres_image
    bare = shop_repo(tmp_path)

    org = world.org()
    server, credential = registered_server(org)
    project = world.project(org, server)
    Project.update(git_repo_url=f"file://{bare}").where(Project.id == project.id).execute()
    raw, _ = world.key(org)
    reader, _ = world.key(org, "read_only")  # for the polls: more requests a minute
    root = tmp_path / "srv"
    agent = agents(server, credential, env={"BERTH_AGENT_ENV_ROOT": str(root),
                                            "BERTH_AGENT_DISK_INTERVAL_SECONDS": interval})
    wait_for(lambda: agent_svc.is_connected(Server.get_by_id(server.id)), what="connected")
    r = client.post(f"{P}/projects/{project.id}/environments", headers=auth(raw),
                    json={"name": "Measured", "disk_gb": 5})
    assert r.status_code == 201, r.json
    env_id = r.json["id"]
    try:
        task = client.get(f"{P}/environments/{env_id}/status",
                          headers=auth(reader)).json["last_deploy"]["id"]
        done = wait_for(lambda: (t := polled_get(client, f"{P}/deployments/{task}", auth(reader)))["status"] in ("completed", "failed") and t,
                        timeout=120, interval=0.5, what="deployment finished")
        assert done["status"] == "completed", done
        yield env_id, reader, root / env_id, agent, done["completed_at"]
    finally:
        Environments(docker_client, root=root).destroy(env_id, True, lambda *a: None)


def _row(env_id):
    return Environment.get_by_id(env_id)


@pytest.mark.parametrize("interval", ["3600"])
def test_a_deploy_is_measured_at_once_not_at_the_end_of_the_interval(client, deployed):
    """With an hour between passes, the first figures of a new environment still come
    within seconds of its deploy: the deploy wakes the meter."""
    env_id, raw, _, _, deployed_at = deployed
    deployed_at = dt.datetime.fromisoformat(deployed_at.replace("Z", "+00:00")).replace(tzinfo=None)
    measured = wait_for(lambda: (e := _row(env_id)).disk_measured_at
                        and e.disk_measured_at >= deployed_at and e.disk_addons_bytes and e,
                        timeout=30, what="figures measured after the deploy")
    assert measured.disk_database_bytes > 1_000_000


def test_figures_of_a_deployed_environment(client, deployed, docker_client):
    env_id, raw, env_dir, agent, deployed_at = deployed
    # Figures measured once the deploy was done (one taken mid-deploy has no checkout yet).
    deployed_at = dt.datetime.fromisoformat(deployed_at.replace("Z", "+00:00")).replace(tzinfo=None)
    before = wait_for(lambda: (e := _row(env_id)).disk_measured_at
                      and e.disk_measured_at > deployed_at and e.disk_database_bytes
                      and e.disk_addons_bytes and e.disk_filestore_bytes is not None and e,
                      timeout=30, what="the first figures after the deploy")
    assert before.disk_database_bytes > 1_000_000  # an empty database is some MB already
    assert before.disk_addons_bytes > 0  # the checkout, with its .git

    blob = env_dir / "filestore" / "filestore" / "odoo" / "ab"
    blob.mkdir(parents=True)
    (blob / "ab12").write_bytes(os.urandom(WRITTEN))
    db = docker_client.containers.list(filters={"label": [f"berth.environment_id={env_id}",
                                                          "berth.role=postgres"]})[0]
    code, out = db.exec_run(["psql", "-U", "odoo", "-d", "odoo", "-v", "ON_ERROR_STOP=1", "-c",
                             "CREATE TABLE ballast AS SELECT g AS id, (SELECT string_agg("
                             "md5(random()::text), '') FROM generate_series(1, 30 + 0 * g)) "
                             f"AS s FROM generate_series(1, {ROWS}) g"])
    assert code == 0, out

    after = wait_for(lambda: (e := _row(env_id)).disk_filestore_bytes >= (
        before.disk_filestore_bytes + WRITTEN) and e.disk_database_bytes >= (
        before.disk_database_bytes + ROWS * 900) and e, timeout=30,
        what="figures with the new bytes and rows")

    r = client.get(f"{P}/environments/{env_id}/metrics", headers=auth(raw))
    assert r.status_code == 200, r.json
    disk = r.json["disk"]
    assert disk["allocated_gb"] == 5
    assert disk["filestore_bytes"] >= before.disk_filestore_bytes + WRITTEN
    assert disk["database_bytes"] >= after.disk_database_bytes  # measured again meanwhile
    assert disk["addons_bytes"] == before.disk_addons_bytes  # untouched
    measured = dt.datetime.fromisoformat(disk["measured_at"].replace("Z", "+00:00"))
    assert dt.timedelta(0) <= dt.datetime.now(dt.UTC) - measured < dt.timedelta(seconds=30)

    # The server owner sees the same figures on the server.
    out = subprocess.run([AGENT, "status", "--json"], env=agent.env, capture_output=True,
                         text=True, timeout=30)
    state = json.loads(out.stdout)
    assert state["disk"][env_id]["filestore_bytes"] >= before.disk_filestore_bytes + WRITTEN
    assert state["disk_measured_at"].endswith("Z")
    text = subprocess.run([AGENT, "status"], env=agent.env, capture_output=True, text=True,
                          timeout=30).stdout
    assert "filestore" in text and "database" in text


def test_what_the_size_is_made_of(client, deployed, docker_client):
    """Attachments whose file is gone and files no attachment names, counted by the
    agent from the ERP's own tables and filestore; the largest tables first."""
    env_id, raw, env_dir, agent, deployed_at = deployed
    store = env_dir / "filestore" / "filestore" / "odoo"
    for name in ("ab/ab01", "cd/cd02", "ef/ef03"):  # the first two kept, ef03 orphaned
        (store / name).parent.mkdir(parents=True, exist_ok=True)
        (store / name).write_bytes(name.encode())
    (store / "checklist" / "ab").mkdir(parents=True)  # Odoo's GC marks: not attachments
    (store / "checklist" / "ab" / "ab01").write_bytes(b"")
    db = docker_client.containers.list(filters={"label": [f"berth.environment_id={env_id}",
                                                          "berth.role=postgres"]})[0]
    code, out = db.exec_run(["psql", "-U", "odoo", "-d", "odoo", "-v", "ON_ERROR_STOP=1", "-c",
                             "INSERT INTO ir_attachment (name, store_fname) VALUES"
                             " ('kept', 'ab/ab01'), ('also kept', 'cd/cd02'),"
                             " ('gone', '12/12ff'), ('outside', '../../../etc/passwd');"
                             " CREATE TABLE ballast AS SELECT g, md5(g::text) AS s"
                             " FROM generate_series(1, 20000) g; ANALYZE ballast"])
    assert code == 0, out

    def measured():
        r = client.get(f"{P}/environments/{env_id}/size", headers=auth(raw))
        assert r.status_code == 200, r.json
        tables = r.json["largest_tables"] or [{"name": None}]
        return r.json["attachments_missing"] == 2 and tables[0]["name"] == "ballast" and r.json

    body = wait_for(measured, timeout=30, interval=0.5, what="the attachment check",
                    detail=lambda: client.get(f"{P}/environments/{env_id}/size",
                                              headers=auth(raw)).json)
    assert sorted(body["missing_sample"]) == ["../../../etc/passwd", "12/12ff"]
    assert (body["files_orphaned"], body["filestore_files"]) == (1, 4)
    assert body["largest_tables"][0]["name"] == "ballast"
    assert body["largest_tables"][0]["rows"] == 20000
    assert len(body["largest_tables"]) <= 10 and body["database_bytes"] > 0
