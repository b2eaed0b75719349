"""Crash recovery end to end: the real `berth serve` (SQLite in its data dir,
embedded mode), a real agent, real containers; one or the other is killed
with SIGKILL in the middle of a deployment. Every deployment then ends,
completed or failed, and none stays running past the reaper.

To stop a deployment at a known point, the agent runs with a "held git" in
front of the real one on its PATH: a `clone` of branch B waits while the
file hold-B exists in the test's gate directory (bounded)."""

import datetime as dt
import os
import shutil
import signal
import urllib.request

import pytest
import requests

from agent.deploy.environments import Environments
from control_plane.app import create_app
from control_plane.infra import clock
from control_plane.models import (
    AgentCommand,
    Deployment,
    Environment,
    Event,
    Project,
    Server,
    TaskLogLine,
)
from control_plane.services.tasks import queue, reaper
from tests.conftest import World, auth
from tests.support.agents import AgentProcess, registered_server, wait_for
from tests.support.git_repo import shop_repo
from tests.support.serve import Served
from tests.support.services import free_port

P = "/api/public/v1"
HELD_GIT = """#!/bin/sh
# The real git; a clone waits while the test holds its branch (at most 3 minutes).
if [ "$1" = clone ]; then
  branch=main prev=
  for arg in "$@"; do
    [ "$prev" = --branch ] && branch=$arg
    prev=$arg
  done
  echo $$ > "$HELD_GIT_DIR/cloning-$branch"
  i=0
  while [ -e "$HELD_GIT_DIR/hold-$branch" ] && [ $i -lt 1800 ]; do sleep 0.1; i=$((i+1)); done
fi
exec {git} "$@"
"""


class Plant:
    """The control plane process, the database it writes (read here too), an
    organization with a project on a registered server, and that server's agent."""

    def __init__(self, tmp_path, erp_image, postgres_image):
        self.tmp = tmp_path
        self.gates = tmp_path / "gates"
        self.gates.mkdir()
        self.root = tmp_path / "srv"
        self.grpc_port, self.http_port = free_port(), free_port()
        self.served = Served(tmp_path / "cp", {"CP_ERP_IMAGE": erp_image, "CP_PROXY_IMAGE": "",
                                               "CP_POSTGRES_IMAGE": postgres_image})
        self.app = self.agent = None
        self.envs = []

    def setup(self):
        tmp_path = self.tmp
        self.start_cp()
        self.app = create_app({"DATA_DIR": str(tmp_path / "cp"), "PROXY_IMAGE": ""})
        world = World(self.app)
        self.org = world.org()
        self.server, credential = registered_server(self.org)
        self.project = world.project(self.org, self.server)
        repo = shop_repo(self.tmp, branches=("main", "second"))
        Project.update(git_repo_url=f"file://{repo}").where(
            Project.id == self.project.id).execute()
        self.writer = auth(world.key(self.org)[0])
        self.reader = auth(world.key(self.org, "read_only")[0])
        self.agent = AgentProcess(tmp_path, f"127.0.0.1:{self.grpc_port}", self.server.id,
                                  credential, env={"BERTH_AGENT_ENV_ROOT": str(self.root),
                                                   "PATH": f"{self._held_git()}:{os.environ['PATH']}",
                                                   "HELD_GIT_DIR": str(self.gates)})
        self.start_agent()

    def _held_git(self):
        bin_dir = self.tmp / "held-bin"
        bin_dir.mkdir()
        (bin_dir / "git").write_text(HELD_GIT.format(git=shutil.which("git")))
        (bin_dir / "git").chmod(0o755)
        return bin_dir

    # --- processes --------------------------------------------------------------

    def start_cp(self):
        self.served.start(port=self.http_port, grpc_port=self.grpc_port)

    def kill_cp(self):
        self.served.proc.kill()
        self.served.proc.wait(15)
        self.served.log.close()

    def start_agent(self):
        self.agent.start()

    def kill_agent(self):
        self.agent.kill(signal.SIGKILL)

    def connected_since(self):
        return Server.get_by_id(self.server.id).connected_since

    # --- the held clone ------------------------------------------------------------

    def hold(self, branch):
        (self.gates / f"hold-{branch}").touch()

    def release(self, branch):
        (self.gates / f"hold-{branch}").unlink(missing_ok=True)

    def cloning(self, branch):
        return (self.gates / f"cloning-{branch}").exists()

    def kill_held_clone(self, branch):
        """The held git outlives a killed agent (it was its child): end it."""
        try:
            os.kill(int((self.gates / f"cloning-{branch}").read_text()), signal.SIGKILL)
        except (FileNotFoundError, ProcessLookupError, ValueError):
            pass

    # --- the API ----------------------------------------------------------------------

    def create_environment(self, name, branch="main"):
        r = requests.post(f"{self.served.url}{P}/projects/{self.project.id}/environments",
                          headers=self.writer, json={"name": name, "branch": branch}, timeout=30)
        assert r.status_code == 201, r.text
        env = r.json()
        self.envs.append(env["id"])
        return env["id"], str(Deployment.get(Deployment.environment == env["id"]).id)

    def get(self, path):
        r = requests.get(f"{self.served.url}{P}{path}", headers=self.reader, timeout=30)
        assert r.status_code == 200, r.text
        return r.json()

    def deployment(self, task):
        return Deployment.get_by_id(task)

    def mid_deploy(self, branch, task):
        """The agent acknowledged the task and is held in its clone, and the control
        plane has its clone line (a line in flight when the control plane dies is
        lost with it, and the checks below count that line)."""
        wait_for(lambda: self.cloning(branch), timeout=90, interval=0.2,
                 what=f"the agent cloning {branch}")
        wait_for(lambda: self.deployment(task).status == "running", timeout=30, interval=0.2,
                 what="the deployment running")
        wait_for(lambda: TaskLogLine.select().where(
            TaskLogLine.deployment == task, TaskLogLine.message.startswith("checking out"))
            .exists(), timeout=30, interval=0.2, what="its clone line recorded")

    def settled(self, task, timeout=120):
        return wait_for(lambda: (d := self.deployment(task)).status not in ("pending", "running")
                        and d, timeout=timeout, interval=0.5, what="the deployment settled")

    def journal(self, command_id):
        return self.agent.journal().get(command_id)

    def command(self, task):
        return AgentCommand.get(AgentCommand.deployment == task)

    def close(self, docker_client):
        for gate in self.gates.glob("hold-*"):
            gate.unlink()
        for marker in self.gates.glob("cloning-*"):
            self.kill_held_clone(marker.name[len("cloning-"):])
        if self.agent is not None and self.agent.proc is not None \
                and self.agent.proc.poll() is None:
            self.agent.kill(signal.SIGTERM)
        if getattr(self.served, "proc", None) is not None and self.served.proc.poll() is None:
            self.served.stop()
        envs = Environments(docker_client, root=self.root)
        for env_id in self.envs:
            envs.destroy(env_id, True, lambda *a: None)
        if self.app is not None:
            self.app.extensions["berth"].db.close()


@pytest.fixture
def plant(tmp_path, erp_image, postgres_image, docker_client):
    p = Plant(tmp_path, erp_image, postgres_image)
    try:
        p.setup()
        wait_for(lambda: p.connected_since() is not None, timeout=60, what="the agent connected")
        yield p
    finally:
        p.close(docker_client)


def reap_later(minutes=31):
    """The reaper as it will run `minutes` from now."""
    later = clock.now() + dt.timedelta(minutes=minutes)
    clock.set_source(lambda: later)
    try:
        return reaper.reap()
    finally:
        clock.set_source(None)


def nothing_left_running(plant):
    assert Deployment.select().where(Deployment.status.in_(("pending", "running"))).count() == 0
    assert reap_later() == []


def http_ok(address):
    with urllib.request.urlopen(f"http://{address}/web/health", timeout=10) as r:
        return r.status == 200


def test_control_plane_killed_mid_deploy(plant):
    """Two deployments are in the agent's hands when `berth serve` dies: one
    finishes while it is down (its result is asked for again when the agent
    reconnects), the other after the restart (sent on the new stream)."""
    plant.hold("main")
    plant.hold("second")
    env_a, task_a = plant.create_environment("A", "main")
    env_b, task_b = plant.create_environment("B", "second")
    plant.mid_deploy("main", task_a)
    plant.mid_deploy("second", task_b)

    plant.kill_cp()
    plant.release("main")  # A finishes while nobody listens
    command_a = plant.command(task_a).id.hex
    wait_for(lambda: (plant.journal(command_a) or {}).get("state") == "done", timeout=120,
             interval=0.5, what="A finished on the server")
    assert plant.deployment(task_a).status == "running"  # nobody was told

    plant.start_cp()
    a = plant.settled(task_a, timeout=120)
    assert a.status == "success", a.error_message
    assert plant.deployment(task_b).status == "running"  # still in the agent's hands
    plant.release("second")
    b = plant.settled(task_b, timeout=120)
    assert b.status == "success", b.error_message

    for env_id, task in ((env_a, task_a), (env_b, task_b)):
        t = plant.get(f"/deployments/{task}")
        assert t["status"] == "completed" and t["completed_at"]
        assert plant.get(f"/environments/{env_id}")["status"] == "running"
        assert http_ok(plant.command(task).result["result"]["erp_address"])
        # Run once: one clone line in its log, one entry in the agent's journal.
        lines = [m for (m,) in TaskLogLine.select(TaskLogLine.message)
                 .where(TaskLogLine.deployment == task).tuples()]
        assert sum(m.startswith("checking out") for m in lines) == 1
    assert sorted(plant.agent.journal()) == sorted(
        [plant.command(task_a).id.hex, plant.command(task_b).id.hex])
    names = [e.name for e in Event.select().where(Event.organization == plant.org.id)]
    assert names.count("deploy.completed") == 2 and "deploy.failed" not in names
    nothing_left_running(plant)


def test_agent_killed_mid_deploy_and_restarted(plant):
    """At most once: the restarted agent does not run the command again; it
    reports it failed, and the environment can be deployed again."""
    plant.hold("main")
    env_id, task = plant.create_environment("C")
    plant.mid_deploy("main", task)
    command = plant.command(task).id.hex
    before = plant.connected_since()

    plant.kill_agent()
    plant.kill_held_clone("main")
    assert plant.journal(command) == {"state": "started"}
    plant.release("main")
    plant.start_agent()
    wait_for(lambda: plant.connected_since() not in (None, before), timeout=60,
             what="the agent reconnected")
    d = plant.settled(task, timeout=60)
    assert d.status == "failed"
    t = plant.get(f"/deployments/{task}")
    assert t["status"] == "failed" and "interrupted by an agent restart" in t["error_message"]
    assert plant.get(f"/environments/{env_id}")["status"] == "failed"
    assert plant.journal(command)["state"] == "done" and plant.journal(command)["ok"] is False
    lines = [m for (m,) in TaskLogLine.select(TaskLogLine.message)
             .where(TaskLogLine.deployment == task).tuples()]
    assert sum(m.startswith("checking out") for m in lines) == 1  # not run again
    nothing_left_running(plant)

    r = requests.post(f"{plant.served.url}{P}/environments/{env_id}/actions/deploy",
                      headers=plant.writer, timeout=30)
    assert r.status_code == 202, r.text
    again = plant.settled(r.json()["task_id"], timeout=150)
    assert again.status == "success", again.error_message
    assert plant.get(f"/environments/{env_id}")["status"] == "running"


def test_agent_gone_past_the_cut_off_is_reaped(plant):
    """The agent dies and stays away: the reaper fails the deployment after 30
    minutes; the agent coming back later changes nothing."""
    plant.hold("main")
    env_id, task = plant.create_environment("D")
    plant.mid_deploy("main", task)
    command = plant.command(task)
    plant.kill_agent()
    plant.kill_held_clone("main")
    plant.release("main")

    assert reap_later(minutes=29) == []
    assert [str(d) for d in reap_later(minutes=31)] == [task]
    t = plant.get(f"/deployments/{task}")
    assert t["status"] == "failed" and "timed out after 30 minutes" in t["error_message"]
    assert plant.get(f"/environments/{env_id}")["status"] == "error"
    assert "timed out after 30 minutes" in plant.get(f"/environments/{env_id}/logs")["log"]
    assert AgentCommand.get_by_id(command.id).status == "withdrawn"

    before = plant.connected_since()
    plant.start_agent()
    wait_for(lambda: plant.connected_since() not in (None, before), timeout=60,
             what="the agent reconnected")
    # A command queued now arrives after whatever the new stream carried first.
    ping = queue.enqueue(plant.server.id, "ping")
    wait_for(lambda: AgentCommand.get_by_id(ping.id).status == "succeeded", timeout=30,
             what="a later command done")
    # Its journal says it was interrupted; the withdrawn command is not asked for.
    assert plant.journal(command.id.hex)["ok"] is False
    d = Deployment.get_by_id(task)
    assert d.status == "failed" and d.error_message.startswith("Deployment timed out")
    assert Environment.get_by_id(env_id).status == "error"
    assert AgentCommand.get_by_id(command.id).status == "withdrawn"
    failed = Event.select().where(Event.organization == plant.org.id,
                                  Event.name == "deploy.failed")
    assert [e.data["task_id"] for e in failed] == [task]
    nothing_left_running(plant)
