"""A resident agent upgraded from the control plane, for real: installed by the
real installer from an older build's wheelhouse, upgraded by the `agent-upgrades`
job to the version in the control plane's wheelhouse (downloaded over HTTP, a new
virtualenv beside the old one, an exec into it) and still deploying; and an
upgrade to a build that cannot work with this gateway rolled back by the old
version's guard, which starts the old agent again.

The older build is this source stamped 0.2.0.dev1: the release before (0.1.0) has
no `upgrade` command, so it is skipped as `reinstall_needed`, and the installer run
again on the server (the install command, or `curl …/install.sh | sh`) upgrades it
in place, keeping its credential: tested here from the previous release's own
installer and wheel."""

import json
import os
import signal
import subprocess
from importlib import resources
from pathlib import Path

import pytest
import requests
from werkzeug.serving import make_server

from control_plane import __version__
from control_plane.agent_install import wheelhouse
from control_plane.agent_link import Plain
from control_plane.models import AgentUpgrade, Server
from control_plane.services.servers import upgrades
from protocol.wire import REVISION
from tests.support.agents import wait_for
from tests.support.backup_flow import (
    Stand,
    _closing,
    connected,
    deployed,
    peopled,
    wait_running,
)
from tests.support.wheelhouse import stamped, swapped

pytestmark = pytest.mark.slow
OLD = "0.2.0.dev1"
PREVIOUS = Path(__file__).parents[2] / "compat" / "berth-0.1.0-py3-none-any.whl"
P = "/api/public/v1"


@pytest.fixture(scope="module")
def old_wheelhouse(agent_wheelhouse, tmp_path_factory):
    return stamped(agent_wheelhouse, tmp_path_factory.mktemp("old"), OLD)


@pytest.fixture
def stand(app, world, gateway, agents, tmp_path, erp_image, postgres_image, docker_client):
    """A control plane on real HTTP (the wheelhouse is downloaded from it), a server
    whose agent the installer put in tmp_path/opt from the older build, running."""
    import threading

    s = Stand()
    s.settings = app.extensions["berth"].settings
    s.set = lambda **kw: [target.update(kw) for target in (s.settings, app.config)]
    http = make_server("127.0.0.1", 0, _closing(app), threaded=True)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    for target in (s.settings, app.config):
        target.update(PUBLIC_URL=f"http://127.0.0.1:{http.server_port}", ERP_IMAGE=erp_image,
                      POSTGRES_IMAGE=postgres_image, AGENT_UPGRADE_CONCURRENCY=10)
    credential = peopled(s, world, tmp_path).credential
    s.gateway, s.created, s.box = gateway, [], tmp_path
    s.prefix = tmp_path / "opt"
    yield s, credential, agents
    for pid in _pids_under(tmp_path):  # the agent the guard started again, if any
        os.kill(pid, signal.SIGKILL)
    if s.created:
        from agent.deploy.environments import Environments

        envs = Environments(docker_client, root=tmp_path / "srv")
        for env_id in s.created:
            envs.destroy(env_id, True, lambda *a: None)
    http.shutdown()


def _install(s, wheelhouse_dir):
    script = s.box / "install.sh"
    script.write_text((resources.files("control_plane.agent_install") / "install.sh").read_text())
    env = {**os.environ, "BERTH_PREFIX": str(s.prefix),
           "BERTH_BIN_LINK": str(s.box / "bin" / "berth-agent"),
           "BERTH_CONFIG_DIR": str(s.box / "etc"), "BERTH_DATA_DIR": str(s.box / "var"),
           "BERTH_ENV_ROOT": str(s.box / "srv")}
    done = subprocess.run(["sh", str(script), "--wheelhouse",
                           str(wheelhouse.tar_path(wheelhouse_dir)), "--no-register"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return s.box / "bin" / "berth-agent"


def _started(s, credential, agents, wheelhouse_dir):
    link = _install(s, wheelhouse_dir)
    agent = agents(s.server, credential, env={"BERTH_AGENT_ENV_ROOT": str(s.box / "srv")},
                   executable=str(link))
    connected(s)
    assert Server.get_by_id(s.server.id).agent_version == OLD
    return agent


def _rolled_out(s, timeout):
    """The scheduler's job, turn after turn, until the upgrade has settled."""
    def settled():
        upgrades.roll_out(Plain(s.settings, s.gateway))
        row = AgentUpgrade.get(AgentUpgrade.server == s.server.id)
        return row if row.status in ("succeeded", "failed") else None
    return wait_for(settled, timeout=timeout, interval=1, what="the upgrade settled")


def _listed(client, s):
    rows = client.get(f"{P}/servers", headers=s.reader).json["data"]
    return next(r for r in rows if r["id"] == str(s.server.id))


def _pids_under(path):
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(path).encode() in (proc / "cmdline").read_bytes():
                pids.append(int(proc.name))
        except OSError:
            pass
    return pids


def _log(agent, s):
    """The agent's and the guard's logs, for a failure's message."""
    return "".join(p.read_text(errors="replace") for p in (
        agent.dir / "agent.log", agent.dir / "data" / "upgrade.log") if p.exists())


def test_an_agent_is_upgraded_beside_itself_and_still_deploys(client, stand, agent_wheelhouse,
                                                              old_wheelhouse):
    s, credential, agents = stand
    s.set(WHEELHOUSE_DIR=str(agent_wheelhouse), AGENT_UPGRADE_TIMEOUT=120)
    agent = _started(s, credential, agents, old_wheelhouse)
    assert _listed(client, s)["agent_behind"] is True

    asked = upgrades.request([s.server.id])
    assert asked == {"version": __version__, "queued": [str(s.server.id)], "skipped": []}
    row = _rolled_out(s, timeout=300)
    assert row.status == "succeeded", (row.error, _log(agent, s))
    assert agent.proc.poll() is None  # the same process, now the new version (exec)

    wait_for(lambda: Server.get_by_id(s.server.id).agent_version == __version__, timeout=30,
             what="the new version connected")
    assert _listed(client, s)["agent_behind"] is False
    assert (s.prefix / "current").resolve() == s.prefix / f"venv-{__version__}"
    assert (s.prefix / "venv" / "bin" / "python").exists()  # the old one kept beside it
    done = agent.journal()[row.command.hex]
    assert done["ok"] is True and done["result"] == {"from_version": OLD,
                                                      "to_version": __version__}
    _, status = agent.status()
    assert status["version"] == __version__ and status["connected"] is True

    env_id = deployed(client, s, "Production", "production")
    wait_running(client, s, env_id)
    # Nothing left to do: a second request says so.
    assert upgrades.request([s.server.id])["skipped"] == [
        {"server_id": str(s.server.id), "reason": "current"}]


def test_an_upgrade_that_cannot_connect_rolls_back_by_itself(client, stand, agent_wheelhouse,
                                                            old_wheelhouse, tmp_path):
    """The new build speaks a protocol revision this gateway is too old for: it
    never stays connected, and at the deadline the old version's guard moves the
    link back, records the command failed and starts the old version again."""
    s, credential, agents = stand

    def too_new(source):
        wire = source / "protocol" / "wire.py"
        wire.write_text(wire.read_text().replace(f"REVISION = {REVISION}\n",
                                                     "REVISION = 99\n", 1))
    broken = stamped(agent_wheelhouse, tmp_path / "broken", __version__, too_new)
    s.set(WHEELHOUSE_DIR=str(broken), AGENT_UPGRADE_TIMEOUT=15)
    agent = _started(s, credential, agents, old_wheelhouse)

    upgrades.request([s.server.id])
    row = _rolled_out(s, timeout=300)
    assert row.status == "failed", _log(agent, s)
    assert row.error == (f"berth-agent {__version__} did not connect within 15 s: "
                         f"rolled back to {OLD}")
    wait_for(lambda: agent.proc.poll() is not None, timeout=30, what="the new process stopped")
    # The old version, started again by the guard, is connected.
    wait_for(lambda: Server.get_by_id(s.server.id).agent_version == OLD
             and str(s.server.id) in s.gateway.sessions, timeout=60,
             what="the old version back")
    assert (s.prefix / "current").resolve() == s.prefix / "venv"
    assert _listed(client, s)["agent_behind"] is True
    assert "rolled back from" in (agent.dir / "data" / "upgrade.log").read_text()
    # Automatic upgrades do not try that version again by themselves.
    s.set(AGENT_AUTO_UPGRADE=True)
    upgrades.roll_out(Plain(s.settings))
    assert AgentUpgrade.select().where(AgentUpgrade.server == s.server.id).count() == 1


def test_the_previous_release_is_upgraded_by_running_the_installer_again(
        client, stand, agent_wheelhouse, tmp_path):
    """0.1.0, installed by its own installer from its own wheel, cannot upgrade
    itself: `agents upgrade` says so; the installer this control plane serves, run
    again there, installs the current agent over it with the same credential, and
    the server deploys."""
    import zipfile

    s, credential, agents = stand
    previous = swapped(agent_wheelhouse, tmp_path / "previous", PREVIOUS)
    s.set(WHEELHOUSE_DIR=str(previous))
    url = s.settings["PUBLIC_URL"]
    env = {**os.environ, "BERTH_CONTROL_PLANE": url, "BERTH_PREFIX": str(s.prefix),
           "BERTH_BIN_LINK": str(s.box / "bin" / "berth-agent"),
           "BERTH_CONFIG_DIR": str(s.box / "etc"), "BERTH_DATA_DIR": str(s.box / "var"),
           "BERTH_ENV_ROOT": str(s.box / "srv")}
    (s.box / "etc").mkdir()
    (s.box / "etc" / "agent.json").write_text(json.dumps({  # as its registration left it
        "control_plane": url, "grpc_address": s.settings["GRPC_PUBLIC_ADDRESS"],
        "server_id": str(s.server.id), "credential": credential}))
    old_script = s.box / "install-0.1.0.sh"
    with zipfile.ZipFile(PREVIOUS) as wheel:
        # The previous release kept the script at the package's top.
        old_script.write_bytes(wheel.read("control_plane/install.sh"))
    done = subprocess.run(["sh", str(old_script)], env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    link = s.box / "bin" / "berth-agent"
    run_env = {"BERTH_AGENT_CONFIG": str(s.box / "etc" / "agent.json"),
               "BERTH_AGENT_DATA_DIR": str(s.box / "var"),
               "BERTH_AGENT_ENV_ROOT": str(s.box / "srv")}
    first = agents(s.server, credential, env=run_env, executable=str(link))
    connected(s)
    assert Server.get_by_id(s.server.id).agent_version == "0.1.0"
    assert upgrades.request([s.server.id])["skipped"] == [
        {"server_id": str(s.server.id), "reason": "reinstall_needed"}]

    s.set(WHEELHOUSE_DIR=str(agent_wheelhouse))
    script = requests.get(f"{url}/install.sh", timeout=10).text  # what the server fetches
    (s.box / "install.sh").write_text(script)
    again = subprocess.run(["sh", str(s.box / "install.sh")], env=env,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "keeping the existing credential" in again.stdout
    first.kill(signal.SIGTERM)  # the service's restart, which systemd does after an install
    agents(s.server, credential, env=run_env, executable=str(link))
    wait_for(lambda: Server.get_by_id(s.server.id).agent_version == __version__
             and str(s.server.id) in s.gateway.sessions, timeout=60,
             what="the current agent connected")
    assert json.loads((s.box / "etc" / "agent.json").read_text())["credential"] == credential
    assert _listed(client, s)["agent_behind"] is False
    env_id = deployed(client, s, "Production", "production")
    wait_running(client, s, env_id)
