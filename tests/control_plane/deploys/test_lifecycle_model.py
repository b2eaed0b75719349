"""Every action from every state, against a model: hypothesis' RuleBasedStateMachine
drives the public and operations APIs of a real `berth serve` (both databases),
with a simulated agent speaking the real wire protocol whose outcomes the test
chooses: success, a failure that changed something or nothing, a hang (then a
cancel or the reaper's time-out), a dropped stream, a restart mid-task.

The model is this file's own account of what should happen, built on the
declared table (control_plane/vocabulary/lifecycle.py: which action starts from which
status, where it goes). After every step:
- each environment's status, as the public API shows it, is the model's;
- every event a real HTTPS receiver got is the model's (name, `kind`, statuses);
- no answer is a 500;
- every task pending or running has a reason: the agent holds it, or it waits
  for an agent that is not connected;
- an idempotent replay is the first answer, and repeats nothing.

Bounded for `make test`: BERTH_MODEL_EXAMPLES (default 6) runs of up to
BERTH_MODEL_STEPS (default 25) steps, per database. A longer search:
    BERTH_MODEL_EXAMPLES=100 BERTH_MODEL_STEPS=50 \\
        pytest tests/control_plane/deploys/test_lifecycle_model.py
"""

import collections
import datetime as dt
import itertools
import json
import os
import time
import uuid
from dataclasses import dataclass, field

import pytest
import requests
from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from control_plane.models import Deployment, Server
from control_plane.services import agents as agent_svc
from control_plane.services.accounts import orgs
from control_plane.vocabulary import lifecycle, states
from tests.support.agents import registered_server, wait_for
from tests.support.serve import Served
from tests.support.sim_agent import SimAgent
from tests.support.webhook_receiver import https_receiver, trust_ca  # noqa: F401 (fixtures)

E, K = states.EnvironmentStatus, lifecycle.K
P, V1 = "/api/public/v1", "/api/v1"
EXAMPLES = int(os.environ.get("BERTH_MODEL_EXAMPLES", "6"))
STEPS = int(os.environ.get("BERTH_MODEL_STEPS", "25"))
# A step takes ~0.2 s of a quiet machine's time; a longer search gets a longer bound.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(max(300, EXAMPLES * STEPS))]
# Deployment requests per organization and minute (the spec's 10): each run is an
# organization of its own and asks for at most this many.
ORG_DEPLOYMENTS = 9
PUBLIC_ACTIONS = (K.DEPLOY, K.REDEPLOY, K.RESTART, K.START, K.STOP, K.DELETE)
DEPLOY_EVENTS = ("deploy.started", "deploy.completed", "deploy.failed", "deploy.cancelled",
                 "environment.created", "environment.deleted", "environment.status_changed")
DATA_EVENTS = ("backup.started", "backup.completed", "backup.failed", "restore.started",
               "restore.completed", "restore.failed")
_runs = itertools.count()


@dataclass
class Task:
    id: str
    kind: str
    before: str
    backup_id: str | None = None  # a backup task's backup
    command: str | None = None  # the agent's command id, once it arrived


@dataclass
class Env:
    id: str
    status: str = E.DEPLOYING
    active: bool = True
    containers: bool = False
    task: Task | None = None
    gone: list = field(default_factory=list)  # commands whose task ended without them

    @property
    def shown(self):
        return states.public_environment_status(self.status)


@pytest.fixture
def served(app, tmp_path, backend, trust_ca):  # noqa: F811
    env = {"CP_SECRET_KEY": app.config["SECRET_KEY"], "CP_WEBHOOK_ALLOW_PRIVATE": "1",
           "CP_WEBHOOK_CA_BUNDLE": trust_ca, "CP_WEBHOOK_POLL_SECONDS": "0.05",
           "CP_REAPER_INTERVAL_SECONDS": "1", "CP_DESTROY_WAIT_SECONDS": "0",
           "CP_PROXY_IMAGE": ""}
    if backend == "postgres":
        env["CP_DATABASE_URL"] = app.config["DATABASE_URL"]
    s = Served(app.config["DATA_DIR"], env).start()
    yield s
    log = s.stop()
    assert '"status": 500' not in log and "Traceback" not in log, log[-3000:]


def test_every_action_from_every_state_against_the_model(app, world, served,
                                                         https_receiver):  # noqa: F811
    receiver = https_receiver

    class Lifecycle(RuleBasedStateMachine):
        @initialize()
        def an_organization_with_a_connected_agent(self):
            self.run = next(_runs)
            self.org = world.org()
            user = world.user(self.org, ["project.environments.deploy",
                                         "project.deployments.cancel"])
            self.ops = {"Authorization": f"Bearer {orgs.issue_user_token(user.id)}"}
            # A full-access key makes 20 requests a minute: enough keys for a run's writes.
            self.writers = itertools.cycle(
                [{"Authorization": f"Bearer {world.key(self.org, owner_id=user.id)[0]}"}
                 for _ in range(2 + STEPS // 5)])
            self.readers = itertools.cycle(
                [{"Authorization": f"Bearer {world.key(self.org, 'read_only')[0]}"}
                 for _ in range(4)])
            self.server, credential = registered_server(self.org, name=f"sim-{self.run}")
            self.project = world.project(self.org, self.server)
            self.envs, self.backups, self.counted = {}, [], 0
            self.holding = {}  # commands acknowledged and not answered, as they came (a set)
            self.expected = collections.Counter()
            for n, names in enumerate((DEPLOY_EVENTS, DATA_EVENTS)):
                r = self.call("post", f"{P}/webhooks", json={
                    "url": f"{receiver.url}/run-{self.run}/{n}", "events": list(names),
                    "project_id": str(self.project.id)})
                assert r.status_code == 201, r.text
            self.agent = SimAgent(served.grpc, credential, heartbeat_every=2)
            self.wait_connected(True)
            self.create()

        def teardown(self):
            if hasattr(self, "agent"):
                self.agent.close()

        # --- talking to the control plane ------------------------------------------------

        def call(self, method, path, headers=None, **kw):
            if headers is None:
                headers = next(self.readers) if method == "get" else next(self.writers)
            r = requests.request(method, served.url + path, headers=headers, timeout=30, **kw)
            for _ in range(3):  # a read waits out its key's window, as a client does
                if method != "get" or r.status_code != 429:
                    break
                time.sleep(int(r.headers.get("Retry-After", "1")))  # not a wait: its Retry-After
                r = requests.request(method, served.url + path, headers=headers, timeout=30, **kw)
            assert r.status_code != 500, (method, path, r.text)
            return r

        def refused(self, r, status, code):
            assert (r.status_code, r.json().get("error")) == (status, code), r.text

        def wait_connected(self, connected):
            wait_for(lambda: agent_svc.is_connected(Server.get_by_id(self.server.id)) == connected,
                     timeout=15, what=f"the agent {'connected' if connected else 'gone'}")

        # --- the model's moves ----------------------------------------------------------

        def expect(self, name, env, *detail):
            self.expected[(name, env.id, *detail)] += 1

        def move(self, env, target):
            if target and target != env.status:
                self.expect("environment.status_changed", env,
                            states.public_environment_status(env.status),
                            states.public_environment_status(target))
                env.status = target

        def begin(self, env, task):
            """A task was accepted: the environment's move, then its command's arrival."""
            rule_ = lifecycle.rule(task.kind)
            self.move(env, rule_.during)
            if not env.active and not rule_.removes:  # deployed again after a destroy
                env.active = True
                self.expect("environment.created", env)
            env.task = task
            self.take_command(env)

        def take_command(self, env):
            """The agent acknowledges the task's command as it arrives (if connected)."""
            task = env.task
            if task is None or task.command or not self.agent.connected:
                return
            known = {c for e in self.envs.values() for c in e.gone} | {
                e.task.command for e in self.envs.values() if e.task and e.task.command}
            task.command = self.agent.wait_command(env.id, exclude=known).command_id
            self.holding[task.command] = None
            if lifecycle.rule(task.kind).deploy_events:
                self.expect("deploy.started", env, task.kind)
            elif task.kind in (K.BACKUP, K.RESTORE):
                self.expect(f"{task.kind}.started", env)

        def settle(self, env, how):
            """`how`: success, touched, untouched (the agent's), cancelled, timed_out."""
            task, rule_ = env.task, lifecycle.rule(env.task.kind)
            env.task = None
            if task.command and how in ("cancelled", "timed_out"):
                env.gone.append(task.command)
            ok = how == "success"
            if ok and task.kind in (K.DEPLOY, K.REDEPLOY):
                env.containers = True
            if ok and rule_.removes:
                env.containers, env.active = False, False
                self.expect("environment.deleted", env)
            target = rule_.after(task.before, how)
            if target:
                self.move(env, target)
                if target == E.DESTROYED and env.active:  # it leaves the lists again
                    env.active = False
                    self.expect("environment.deleted", env)
            if rule_.deploy_events:
                name = {"success": "completed", "cancelled": "cancelled"}.get(how, "failed")
                detail = (env.shown,) if how == "cancelled" else ()
                self.expect(f"deploy.{name}", env, task.kind, *detail)
            elif task.kind == K.BACKUP and how != "cancelled":  # a cancel sends none
                self.expect(f"backup.{'completed' if ok else 'failed'}", env)
                if ok:
                    self.backups.append(task.backup_id)
            elif task.kind == K.RESTORE and how != "cancelled":
                self.expect(f"restore.{'completed' if ok else 'failed'}", env)

        def accepted(self, env, kind, task_id, before, backup_id=None):
            self.begin(env, Task(str(task_id), kind, before, backup_id=backup_id))

        def decide(self, env, kind, busy_code):
            """(status, error) the API must refuse with, or None: accepted."""
            if env.status == E.DELETED:
                return 404, "not_found"
            if env.task is not None:
                return 409, busy_code
            if not lifecycle.allowed(kind, env.status, has_containers=env.containers):
                return 409, lifecycle.rule(kind).refusal.code
            return None

        # --- rules: what people ask ----------------------------------------------------------

        def create(self):
            r = self.call("post", f"{P}/projects/{self.project.id}/environments",
                          json={"name": f"env-{len(self.envs)}"})
            assert r.status_code == 201 and r.json()["status"] == E.DEPLOYING, r.text
            env = self.envs[r.json()["id"]] = Env(r.json()["id"])
            self.counted += 1
            self.expect("environment.created", env)
            task = self.call("get", f"{P}/environments/{env.id}/status").json()["last_deploy"]
            env.task = Task(task["id"], K.DEPLOY, E.PENDING)
            self.take_command(env)

        @precondition(lambda self: len(self.envs) < 3 and self.counted < ORG_DEPLOYMENTS)
        @rule()
        def create_environment(self):
            self.create()

        def some_env(self, data):
            # In creation order, not by id: ids differ from run to run, and a run
            # must draw the same choices when it is played again.
            return self.envs[data.draw(st.sampled_from(list(self.envs)))]

        @precondition(lambda self: self.counted < ORG_DEPLOYMENTS)
        @rule(data=st.data(), kind=st.sampled_from(PUBLIC_ACTIONS), replay=st.booleans())
        def public_action(self, data, kind, replay):
            env = self.some_env(data)
            refusal, before = self.decide(env, kind, "task_in_progress"), env.status
            headers = {**next(self.writers)}
            if replay:
                headers["X-Idempotency-Key"] = str(uuid.uuid4())
            if kind == K.DELETE:
                headers["X-Confirm-Delete"] = "true"
                send = lambda: self.call("delete", f"{P}/environments/{env.id}", headers)  # noqa: E731
            else:
                send = lambda: self.call("post", f"{P}/environments/{env.id}/actions/{kind}",  # noqa: E731
                                         headers)
            r = send()
            if refusal:
                self.refused(r, *refusal)
            else:
                assert r.status_code == 202, r.text
                self.counted += 1
                self.accepted(env, kind, r.json()["task_id"], before)
            if replay:
                again = send()
                if kind == K.DELETE:  # the key is ignored on a DELETE (rule 6): asked again
                    self.refused(again, *(refusal or (409, "task_in_progress")))
                    return
                assert (again.status_code, again.json()) == (r.status_code, r.json())
                assert again.headers["X-Idempotency-Replayed"] == "true"

        @precondition(lambda self: self.counted < ORG_DEPLOYMENTS)
        @rule(data=st.data(), force=st.booleans())
        def ops_deploy(self, data, force):
            env = self.some_env(data)
            kind, before = (K.REDEPLOY if force else K.DEPLOY), env.status
            refusal = self.decide(env, kind, "deployment_in_progress")
            r = self.call("post", f"{V1}/environments/{env.id}/deploy", self.ops,
                          json={"force": force})
            if refusal:
                return self.refused(r, *refusal)
            if not force and env.status == E.RUNNING:
                assert r.status_code == 200 and r.json()["skipped"] is True, r.text
                return
            assert r.status_code == 201 and r.json()["deployment"]["kind"] == kind, r.text
            self.counted += 1
            self.accepted(env, kind, r.json()["deployment"]["id"], before)

        @precondition(lambda self: self.counted < ORG_DEPLOYMENTS)
        @rule(data=st.data())
        def destroy(self, data):
            env = self.some_env(data)
            before, refusal = env.status, self.decide(env, K.DESTROY, "deployment_in_progress")
            if (refusal is None or refusal[1] == "invalid_transition") and not self.agent.connected:
                refusal = (502, "server_unreachable")  # checked before the status
            r = self.call("delete", f"{V1}/deployments/environment/{env.id}/destroy", self.ops)
            if refusal:
                return self.refused(r, *refusal)
            # The request waits 0 s for the agent: the destroy goes on.
            assert r.status_code == 504 and r.json()["error"] == "destroy_timeout", r.text
            self.counted += 1
            self.accepted(env, K.DESTROY, r.json()["deployment_id"], before)

        @rule(data=st.data())
        def backup(self, data):
            env = self.some_env(data)
            refusal, before = self.decide(env, K.BACKUP, "task_in_progress"), env.status
            r = self.call("post", f"{V1}/environments/{env.id}/backups", self.ops, json={})
            if refusal:
                return self.refused(r, *refusal)
            assert r.status_code == 202, r.text
            self.accepted(env, K.BACKUP, r.json()["task_id"], before, backup_id=r.json()["id"])

        @precondition(lambda self: self.backups)
        @rule(data=st.data())
        def restore(self, data):
            env, source = self.some_env(data), data.draw(st.sampled_from(self.backups))
            refusal, before = self.decide(env, K.RESTORE, "task_in_progress"), env.status
            r = self.call("post", f"{V1}/environments/{env.id}/restore", self.ops,
                          json={"backup_id": source})
            if refusal:
                return self.refused(r, *refusal)
            assert r.status_code == 202, r.text
            self.accepted(env, K.RESTORE, r.json()["id"], before)

        @precondition(lambda self: any(e.task for e in self.envs.values()))
        @rule(data=st.data())
        def cancel(self, data):
            env = self.envs[data.draw(st.sampled_from(
                [i for i, e in self.envs.items() if e.task]))]
            r = self.call("post", f"{V1}/deployments/{env.task.id}/cancel", self.ops)
            if lifecycle.rule(env.task.kind).removes:
                return self.refused(r, 400, "deployment_not_cancellable")
            assert r.status_code == 200, r.text
            self.settle(env, "cancelled")

        # --- rules: what the agent does, and time -------------------------------------------

        @precondition(lambda self: self.agent.connected and self.holding)
        @rule(data=st.data(), outcome=st.sampled_from(["success", "touched", "untouched"]))
        def agent_answers(self, data, outcome):
            command = data.draw(st.sampled_from(list(self.holding)))
            del self.holding[command]
            held = self.agent.held[command]
            self.agent.answer(held, outcome)
            env = self.envs[held.environment_id]
            if env.task and env.task.command == held.command_id:
                self.settle(env, outcome)
            # else: its task was cancelled or timed out: a late answer changes nothing

        @precondition(lambda self: self.agent.connected)
        @rule()
        def agent_goes_away(self):
            self.agent.disconnect()
            self.wait_connected(False)

        @precondition(lambda self: not self.agent.connected)
        @rule()
        def agent_comes_back(self):
            self.agent.connect()
            self.wait_connected(True)
            for env in self.envs.values():
                self.take_command(env)

        @precondition(lambda self: self.agent.connected)
        @rule()
        def agent_restarts(self):
            """Commands it held were cut short: each one's task fails."""
            cut, self.holding = set(self.holding), {}
            assert cut == set(self.agent.held)
            self.agent.restart()
            self.wait_connected(True)
            for env in self.envs.values():
                if env.task and env.task.command in cut:
                    self.settle(env, "touched")
            for env in self.envs.values():
                self.take_command(env)

        @precondition(lambda self: any(e.task for e in self.envs.values()))
        @rule()
        def hours_pass(self):
            """Every task in progress outlives its limit: the reaper fails it."""
            ids = [e.task.id for e in self.envs.values() if e.task]
            for d in Deployment.select().where(Deployment.id.in_(ids)):
                back = dt.timedelta(hours=4)
                Deployment.update(
                    created_at=d.created_at - back,
                    started_at=d.started_at and d.started_at - back,
                    phase_started_at=d.phase_started_at and d.phase_started_at - back,
                ).where(Deployment.id == d.id).execute()
            wait_for(lambda: not Deployment.select().where(
                Deployment.id.in_(ids), Deployment.status.in_(states.DEPLOYMENT_IN_PROGRESS)
            ).exists(), timeout=15, what="the reaper")
            for env in self.envs.values():
                if env.task:
                    self.settle(env, "timed_out")

        # --- after every step -------------------------------------------------------------

        @invariant()
        def the_control_plane_agrees(self):
            if not hasattr(self, "envs"):
                return
            self.statuses_agree()
            self.tasks_have_a_reason()
            self.events_agree()

        def statuses_agree(self):
            def shown():
                out = {}
                for env_id in self.envs:
                    r = self.call("get", f"{P}/environments/{env_id}")
                    out[env_id] = "gone" if r.status_code == 404 else r.json()["status"]
                return out

            want = {i: "gone" if e.status == E.DELETED else e.shown for i, e in self.envs.items()}
            got = []

            def agree():
                got[:] = [shown()]
                return got[0] == want

            wait_for(agree, timeout=10, interval=0.25, what="the statuses the model expects",
                     detail=lambda: f"{got[0]} != {want}")

        def tasks_have_a_reason(self):
            def in_progress():
                out = set()
                for status in states.DEPLOYMENT_IN_PROGRESS:
                    r = self.call("get", f"{V1}/deployments", self.ops, params={
                        "project_id": str(self.project.id), "status": status, "limit": 100})
                    out |= {d["id"] for d in r.json()["data"]}
                return out

            want = {e.task.id for e in self.envs.values() if e.task}
            got = []

            def settled():  # an answer is settled a moment after it is sent
                got[:] = [in_progress()]
                return got[0] == want

            wait_for(settled, timeout=10, interval=0.1, what="the tasks the model has in progress",
                     detail=lambda: f"{got[0]} != {want}")
            for env in self.envs.values():
                if env.task and self.agent.connected:  # else it waits for the agent
                    assert env.task.command in self.agent.held, "a task nobody works on"

        def events_agree(self):
            def got():
                seen = collections.Counter()
                for req in receiver.requests:
                    if req.path.startswith(f"/run-{self.run}/"):
                        seen[signature(json.loads(req.body))] += 1
                return seen

            want = +self.expected
            wait_for(lambda: sum(got().values()) >= sum(want.values()), timeout=10,
                     what="the events the model expects", detail=lambda: f"{got()} != {want}")
            time.sleep(0.15)  # not a wait: and nothing more comes meanwhile
            assert got() == want

    # No shrinking: a live server replays a run with other timings, and hypothesis then
    # reports its own confusion instead of the failure.
    Lifecycle.TestCase.settings = settings(
        max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None, database=None,
        suppress_health_check=list(HealthCheck), phases=(Phase.explicit, Phase.generate),
        verbosity=Verbosity.verbose if os.environ.get("BERTH_MODEL_VERBOSE") else Verbosity.normal)
    run_state_machine_as_test(Lifecycle, settings=Lifecycle.TestCase.settings)


def signature(envelope):
    """What the model says of an event: its name, environment and statuses."""
    name, data = envelope["event"], envelope["data"]
    detail = ()
    if name == "environment.status_changed":
        detail = (data["from"], data["to"])
    elif name.startswith("deploy."):
        detail = (data["kind"],) + ((data["environment_status"],)
                                    if name == "deploy.cancelled" else ())
    return (name, data["environment_id"], *detail)
