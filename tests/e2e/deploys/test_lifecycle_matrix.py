"""Every action from `running`, `stopped`, `failed` and `error`, on an environment
with data, through a real agent and real containers: a resident `berth-agent
run`, and a server reached over SSH (a real sshd). What the control plane accepts
or refuses is the lifecycle's (control_plane/vocabulary/lifecycle.py); what an accepted
action leaves is checked on the API and on the containers themselves.

`stopped` is reached by a real stop. `failed` and `error` are arranged as a
failed deploy and a runtime error leave an environment: its containers there
(the ERP stopped behind the control plane's back, for `error`), its status set.
The flows reuse one environment per connection, destroyed and deployed again
along the way; deletions take three more, and a project's deletion one more.
Both connections, each on one database (the resident agent on PostgreSQL, SSH on
SQLite): the control plane's side is tested on both by the model's test."""

import pytest

from agent.deploy.environments import Environments
from control_plane.models import Environment, Project
from control_plane.vocabulary import lifecycle, states
from tests.conftest import auth
from tests.e2e.servers.test_ssh_servers import add, ssh  # noqa: F401 (the SSH stand's fixture)
from tests.support.agents import polled_get, wait_for
from tests.support.backup_flow import connected, peopled
from tests.support.git_repo import shop_repo

pytestmark = pytest.mark.slow
P, V1 = "/api/public/v1", "/api/v1"
E, K = states.EnvironmentStatus, lifecycle.K
STATUSES = (E.RUNNING, E.STOPPED, E.FAILED, E.ERROR)
ACTIONS = (K.DEPLOY, K.REDEPLOY, K.RESTART, K.START, K.STOP, K.BACKUP, K.RESTORE, K.DESTROY)
SERVING = {"erp": "running", "postgres": "running"}


class Stand:
    """What the flows drive: the API (test client and headers), the project, and
    the server's containers (`envs`, the agent's own view of them)."""

    def __init__(self, app, client, docker_client, root):
        self.app, self.client = app, client
        self.envs = Environments(docker_client, root=root)
        self.created = []

    # --- the API -----------------------------------------------------------------------

    def call(self, method, path, headers, **kw):
        self.app.extensions["berth"].limiter.reset()  # a minute passes between actions
        r = getattr(self.client, method)(path, headers=headers, **kw)
        assert r.status_code < 500, r.json
        return r

    def status(self, env_id):
        r = self.client.get(f"{P}/environments/{env_id}", headers=self.reader)
        return "gone" if r.status_code == 404 else r.json["status"]

    def settled(self, task_id):
        return wait_for(lambda: (d := self.client.get(f"{V1}/deployments/{task_id}",
                                                       headers=self.user).json)["status"]
                        not in ("pending", "running") and d, timeout=240, interval=0.3,
                        what=f"task {task_id}")

    def create(self, project=None, name="env"):
        r = self.call("post", f"{P}/projects/{(project or self.project).id}/environments",
                      self.key, json={"name": name})
        assert r.status_code == 201, r.json
        self.created.append(r.json["id"])
        return r.json["id"]

    def deployed(self, env_id):
        task = polled_get(self.client, f"{P}/environments/{env_id}/status",
                          self.reader)["last_deploy"]
        assert self.settled(task["id"])["status"] == "success"
        assert self.status(env_id) == E.RUNNING

    def act(self, env_id, kind):
        """(response, task id or None) of asking for `kind` where people ask for it."""
        if kind in (K.DEPLOY, K.REDEPLOY, K.RESTART, K.START, K.STOP):
            r = self.call("post", f"{P}/environments/{env_id}/actions/{kind}", self.key)
            return r, r.status_code == 202 and r.json["task_id"]
        if kind == K.DELETE:
            r = self.call("delete", f"{P}/environments/{env_id}",
                          {**self.key, "X-Confirm-Delete": "true"})
            return r, r.status_code == 202 and r.json["task_id"]
        if kind == K.DESTROY:
            r = self.call("delete", f"{V1}/deployments/environment/{env_id}/destroy", self.user)
            return r, r.status_code == 200 and r.json["deployment_id"]
        if kind == K.BACKUP:
            r = self.call("post", f"{V1}/environments/{env_id}/backups", self.user, json={})
            return r, r.status_code == 202 and r.json["task_id"]
        r = self.call("post", f"{V1}/environments/{env_id}/restore", self.user,
                      json={"backup_id": self.backup_id})
        return r, r.status_code == 202 and r.json["id"]

    # --- the server ------------------------------------------------------------------------

    def containers(self, env_id):
        return {c.labels["berth.role"]: c.status for c in self.envs._all(env_id)}

    def arrange(self, env_id, status):
        """The environment with its data, in `status`."""
        if status == E.STOPPED and self.status(env_id) == E.STOPPED:
            return
        if self.status(env_id) in (E.PENDING, "gone"):  # destroyed: deployed again
            r = self.call("post", f"{V1}/environments/{env_id}/deploy", self.user, json={})
            assert self.settled(r.json["deployment"]["id"])["status"] == "success"
        if self.containers(env_id) != SERVING or self.status(env_id) != E.RUNNING:
            Environment.update(status=E.STOPPED).where(Environment.id == env_id).execute()
            r, task = self.act(env_id, K.START)
            assert task and self.settled(task)["status"] == "success", r.json
        if status == E.STOPPED:
            r, task = self.act(env_id, K.STOP)
            assert task and self.settled(task)["status"] == "success", r.json
        elif status in (E.FAILED, E.ERROR):
            if status == E.ERROR:  # its ERP stopped behind the control plane's back
                self.envs._container(self.envs._names(env_id)["erp"]).stop(timeout=10)
            Environment.update(status=status).where(Environment.id == env_id).execute()
        assert self.status(env_id) == status

    def tasks(self, env_id):
        """How many tasks the environment's project has."""
        project = Environment.get_by_id(env_id).project_id
        return self.client.get(f"{V1}/deployments", headers=self.user, query_string={
            "project_id": str(project), "limit": 1}).json["pagination"]["total"]


def one_action(s, env_id, status, kind):
    """`kind` from `status`: refused as the lifecycle says, changing nothing, or
    carried out on the server."""
    s.arrange(env_id, status)
    before = s.tasks(env_id)
    r, task = s.act(env_id, kind)
    rule = lifecycle.rule(kind)
    if not lifecycle.allowed(kind, status):
        assert r.status_code == 409 and r.json["error"] == rule.refusal.code, (kind, r.json)
        assert s.status(env_id) == status and s.tasks(env_id) == before
        return
    assert task, (status, kind, r.json)
    done = s.settled(task)
    assert done["status"] in ("success", "destroyed"), (status, kind, done)
    expected = rule.done or status
    assert s.status(env_id) == states.public_environment_status(expected), (status, kind)
    if kind == K.DESTROY:
        assert s.containers(env_id) == {}
    elif expected == E.RUNNING:
        assert s.containers(env_id) == SERVING, (status, kind)
    elif expected == E.STOPPED:
        assert set(s.containers(env_id).values()) == {"exited"}, (status, kind)
    if kind == K.BACKUP:  # left as it was found: a stopped database is stopped again
        assert s.containers(env_id)["postgres"] == ("running" if status == E.RUNNING
                                                    else "exited")


def removals(s):
    """A deletion from each status (three more environments), the last one by
    deleting the project of a stopped environment: containers and volumes go."""
    others = [s.create(name=f"doomed-{n}") for n in range(3)]
    for env_id in others:
        s.deployed(env_id)
    for env_id, status in zip([s.main, *others], STATUSES, strict=True):
        s.arrange(env_id, status)
        r, task = s.act(env_id, K.DELETE)
        assert task and s.settled(task)["status"] == "success", (status, r.json)
        assert s.status(env_id) == "gone" and s.containers(env_id) == {}


def project_deletion(s, world):
    """Deleting a project deletes its stopped environment from the server."""
    project = world.project(s.org, s.server_row)
    Project.update(git_repo_url=s.repo).where(Project.id == project.id).execute()
    env_id = s.create(project)
    s.deployed(env_id)
    s.arrange(env_id, E.STOPPED)
    volumes = s.envs.docker.volumes.list(filters={"label": f"berth.environment_id={env_id}"})
    assert volumes
    r = s.call("delete", f"{P}/projects/{project.id}", {**s.key, "X-Confirm-Delete": "true"})
    assert r.status_code == 204, r.json
    wait_for(lambda: s.containers(env_id) == {}, timeout=120, interval=0.5, what="removed")
    assert s.envs.docker.volumes.list(filters={"label": f"berth.environment_id={env_id}"}) == []


def matrix(s, world):
    s.main = s.create(name="main")
    s.deployed(s.main)
    r, task = s.act(s.main, K.BACKUP)
    assert s.settled(task)["status"] == "success"
    s.backup_id = r.json["id"]
    for status in STATUSES:
        for kind in ACTIONS:
            one_action(s, s.main, status, kind)
    removals(s)
    project_deletion(s, world)


@pytest.fixture
def resident(app, client, world, agents, gateway, http_app, tmp_path, erp_image, postgres_image,
             docker_client):
    settings = app.extensions["berth"].settings
    settings["ERP_IMAGE"], settings["POSTGRES_IMAGE"] = erp_image, postgres_image
    s = Stand(app, client, docker_client, tmp_path / "srv")
    peopled(s, world, tmp_path)
    s.server_row, s.gateway = s.server, gateway
    s.repo = Project.get_by_id(s.project.id).git_repo_url
    agents(s.server, s.credential, env={"BERTH_AGENT_ENV_ROOT": str(tmp_path / "srv")})
    connected(s)
    yield s
    for env_id in s.created:
        s.envs.destroy(env_id, True, lambda *a: None)


# Once each: the control plane's side on both databases is the model's test
# (tests/control_plane/deploys/test_lifecycle_model.py); here the agents, resident on
# PostgreSQL and over SSH (below) on SQLite.
@pytest.mark.backends("postgres")
def test_every_action_from_every_state_with_a_resident_agent(resident, world):
    matrix(resident, world)


@pytest.fixture
def over_ssh_stand(app, client, ssh, tmp_path, erp_image, postgres_image,  # noqa: F811
                   docker_client):
    import threading

    from control_plane.models import Server
    from control_plane.scheduler import Scheduler, jobs
    from control_plane.services.accounts import orgs

    ssh.settings.update(ERP_IMAGE=erp_image, POSTGRES_IMAGE=postgres_image)
    server = add(client, ssh)
    s = Stand(app, client, docker_client, ssh.box / "srv")
    s.org, s.key, s.reader = ssh.org, ssh.key, ssh.reader
    s.server_row = Server.get_by_id(server["id"])
    s.project = ssh.world.project(s.org, s.server_row)
    s.repo = f"file://{shop_repo(tmp_path)}"
    Project.update(git_repo_url=s.repo).where(Project.id == s.project.id).execute()
    s.user = auth(orgs.issue_user_token(ssh.world.user(
        s.org, permissions=("project.environments.deploy", "project.deployments.cancel")).id))
    scheduler = Scheduler([j for j in jobs(ssh.berth) if j.name == "ssh-servers"])
    threading.Thread(target=scheduler.run, daemon=True).start()
    yield s
    scheduler.stop() if hasattr(scheduler, "stop") else scheduler.stopping.set()
    for env_id in s.created:
        s.envs.destroy(env_id, True, lambda *a: None)


@pytest.mark.backends("sqlite")
def test_every_action_from_every_state_over_ssh(over_ssh_stand, world):
    matrix(over_ssh_stand, world)
