"""Agents already installed keep working. The previous release is its wheel,
`berth-0.1.0-py3-none-any.whl` beside this file (built from the tag v0.1.0; see
README.md here), installed in a virtualenv of its own.

- Its agent (protocol revision 0) connects to this control plane, deploys an
  environment (ignoring the WAL archiving its command asks for), runs an environment command that agents of this release receive
  as a typed message, reports its disk figures, answers live metrics requests,
  takes a verified backup and restores it into staging (it does not neutralise:
  the copy is shown as unknown, its task log says so).
- This release's agent, given the previous control plane, refuses with a clear
  message and no traceback: `register` before it spends the token, and `run`
  with a credential the previous control plane issued (its log and `berth-agent
  status`)."""

import json
import os
import subprocess
import sys
import sysconfig
import threading
from pathlib import Path

import pytest
import requests
from werkzeug.serving import make_server

from agent.deploy.environments import Environments
from control_plane.infra.db import database
from control_plane.models import Deployment, Environment, Server
from control_plane.services.backups import wal
from control_plane.services.tasks import engine
from protocol.kinds import TaskKind
from protocol.wire import REVISION
from tests.conftest import auth
from tests.support.agents import AGENT, wait_for
from tests.support.backup_flow import (
    Stand,
    _closing,
    completed_backup,
    connected,
    deployed,
    peopled,
    settled,
    wait_running,
)
from tests.support.serve import Served
from tests.support.shell_client import open_shell, serve_app

pytestmark = pytest.mark.slow
WHEEL = Path(__file__).with_name("berth-0.1.0-py3-none-any.whl")
P = "/api/public/v1"


@pytest.fixture(scope="session")
def previous_release(tmp_path_factory):
    """The previous release's `berth` and `berth-agent`, from its wheel, in a
    virtualenv of its own; its dependencies (the same pins) are this one's."""
    root = tmp_path_factory.mktemp("berth-0.1.0")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(root / "bin" / "python"),
                    "install", "--quiet", "--no-deps", "--no-index", str(WHEEL)], check=True)
    site = subprocess.run([root / "bin" / "python", "-c",
                           "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    version = subprocess.run([root / "bin" / "python", "-c", "import agent, sys; "
                              "sys.stdout.write(agent.__version__)"],
                             capture_output=True, text=True, check=True, cwd=root).stdout
    assert version == "0.1.0"  # the wheel's code, not this checkout's
    return root / "bin"


def test_the_previous_agent_deploys_reports_and_backs_up(
        app, client, world, gateway, agents, tmp_path, erp_image, postgres_image,
        docker_client, previous_release, monkeypatch):
    monkeypatch.setenv("BERTH_AGENT_DISK_INTERVAL_SECONDS", "1")
    settings = app.extensions["berth"].settings
    settings["ERP_IMAGE"], settings["POSTGRES_IMAGE"] = erp_image, postgres_image
    http = make_server("127.0.0.1", 0, _closing(app), threaded=True)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    public = f"http://127.0.0.1:{http.server_port}"
    for target in (settings, app.config):
        target.update(PUBLIC_URL=public, STORAGE_URL=None, S3_ENDPOINT_URL=None)

    s = Stand()
    credential = peopled(s, world, tmp_path).credential
    s.gateway, s.created, root = gateway, [], tmp_path / "srv"
    agents(s.server, credential, env={"BERTH_AGENT_ENV_ROOT": str(root)},
           executable=str(previous_release / "berth-agent"))
    try:
        connected(s)
        assert Server.get_by_id(s.server.id).agent_version == "0.1.0"
        assert gateway.sessions[str(s.server.id)].revision == 0  # it says no revision

        env_id = deployed(client, s, "Production", "production")
        wait_running(client, s, env_id)
        # It knows nothing of WAL archiving: the deploy works, nothing is archived,
        # and the status waits for an agent that does (no alert meanwhile).
        r = client.get(f"/api/v1/environments/{env_id}/wal-archive", headers=s.user)
        assert (r.json["status"], r.json["files"]) == ("starting", 0), r.json
        assert wal.watch() == 0
        # An environment command: a typed message for this release's agents, JSON for it.
        r = client.post(f"{P}/environments/{env_id}/actions/restart", headers=s.key)
        assert r.status_code == 202, r.json
        assert settled(client, s, r.json["task_id"])["status"] == "success"
        # It reports: its disk figures reach the environment's row, and it answers
        # live reads of the server's and the environment's figures.
        wait_for(lambda: Environment.get_by_id(env_id).disk_measured_at is not None,
                 timeout=60, what="disk figures reported")
        host = client.get(f"{P}/servers/{s.server.id}/metrics", headers=s.reader)
        assert host.status_code == 200 and host.json["memory_total_bytes"] > 0, host.json
        figures = client.get(f"{P}/environments/{env_id}/metrics", headers=s.reader)
        assert figures.status_code == 200 and figures.json["erp"]["status"] == "running"

        b = completed_backup(client, s, env_id, comment="by the previous agent")
        assert b["is_verified"] is True and b["total_size"] > 0
        # A copy into staging: it ignores the request to neutralise, so the copy
        # is shown as unknown and its task log says the copy is live.
        staging = deployed(client, s, "Staging", "staging")
        wait_running(client, s, staging)
        r = client.post(f"/api/v1/environments/{staging}/restore", headers=s.user,
                        json={"backup_id": b["id"]})
        assert r.status_code == 202, r.json
        done = settled(client, s, r.json["id"])
        assert done["status"] == "success", done
        assert client.get(f"{P}/environments/{staging}", headers=s.reader).json[
            "neutralized"] is None
        log = client.get(f"{P}/environments/{staging}/logs?task_id={done['id']}",
                         headers=s.reader).json["log"]
        assert "predates neutralisation" in log and "upgrade" in log
        # It has no mail catcher: reading the copy's mails says so (and to upgrade).
        r = client.get(f"{P}/environments/{staging}/mails", headers=s.reader)
        assert r.status_code == 409 and r.json["error"] == "no_mail_catcher", r.json
        assert "upgrade" in r.json["message"]
        # It opens no shell sessions: the session's stream says so (and to upgrade), and
        # the agent was sent nothing it does not know.
        r, sh = open_shell(serve_app(app), s.key, env_id, command=["true"])
        assert r.status_code == 201, r.text
        sh.ended(timeout=15)
        assert sh.error["code"] == "shell_unavailable" and "upgrade" in sh.error["message"]
        # A build's test run (a command it does not know): the task fails saying so, and
        # the environment serves on.
        with database.atomic():
            d = engine.start(Environment.get_by_id(env_id), TaskKind.TEST,
                             berth=app.extensions["berth"])
        wait_for(lambda: Deployment.get_by_id(d.id).status in ("failed", "success"),
                 timeout=60, what="the test task ended")
        ended = Deployment.get_by_id(d.id)
        assert ended.status == "failed" and "unknown command kind 'test'" in \
            ended.error_message, ended.error_message
        assert client.get(f"{P}/environments/{env_id}", headers=s.reader).json[
            "status"] == "running"
    finally:
        envs = Environments(docker_client, root=root)
        for env_id in s.created:
            envs.destroy(env_id, True, lambda *a: None)
        http.shutdown()


def _agent(args, env, token=None):
    return subprocess.run([*args], env=env, input=token, capture_output=True, text=True,
                          timeout=60)


def test_this_agent_refuses_the_previous_control_plane_clearly(previous_release, tmp_path):
    served = Served(tmp_path / "cp", berth=str(previous_release / "berth")).start()
    try:
        key = served.admin("bootstrap")["key"]
        token = requests.post(f"{served.url}{P}/servers/registration-tokens", timeout=10,
                              headers=auth(key)).json()["token"]
        env = {**os.environ, "BERTH_AGENT_CONFIG": str(tmp_path / "agent.json"),
               "BERTH_AGENT_DATA_DIR": str(tmp_path / "agent-data")}
        register = ["register", "--control-plane", served.url, "--token-file", "-"]

        refused = _agent([AGENT, *register], env, token)
        assert refused.returncode == 1, refused
        assert f"protocol revision 0, older than this agent's {REVISION}" in refused.stderr
        assert "Traceback" not in refused.stderr and not (tmp_path / "agent.json").exists()

        # The token was not spent: the previous release's agent registers with it.
        done = _agent([str(previous_release / "berth-agent"), *register], env, token)
        assert done.returncode == 0, done.stderr

        log_path = tmp_path / "agent.log"
        with open(log_path, "w") as log:
            run = subprocess.Popen([AGENT, "run"], env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            def refused_status():
                out = _agent([AGENT, "status", "--json"], env)
                state = json.loads(out.stdout) if out.stdout else {}
                return "older than this agent" in (state.get("last_error") or "") and (
                    out, state)
            out, state = wait_for(refused_status, timeout=30, what="the refusal in its status")
            assert out.returncode == 1 and state["connected"] is False
            assert "upgrade the control plane" in log_path.read_text()
        finally:
            run.terminate()
            run.wait(15)
        assert "Traceback" not in log_path.read_text()
        server_id = json.loads((tmp_path / "agent.json").read_text())["server_id"]
        servers = requests.get(f"{served.url}{P}/servers", headers=auth(key), timeout=10).json()
        listed = [x for x in servers["data"] if x["id"] == server_id]
        assert listed and listed[0]["connected"] is False  # it never held the stream
    finally:
        text = served.stop()
    assert "Traceback" not in text
