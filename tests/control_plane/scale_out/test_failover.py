"""deploy/compose.yaml as a stack on a single-node Swarm: 2 web, 2 gateway and 2
scheduler processes on PostgreSQL and Redis, behind HAProxy, with three real agents
dialing the balancer. Requests are answered whichever web process takes them, the
per-key rate limit is counted once across both, live requests (metrics, runtime logs)
and wake-ups reach every agent whichever gateway holds it, a gateway killed with
SIGKILL loses its agents to the other within seconds (deployments in flight complete,
no command runs twice), one stopped with SIGTERM drains, a web process killed under
load fails only the requests it was answering, and a rolling restart of every process
under load fails none."""

import threading
import time
from collections import Counter

import pytest
import requests

from tests.support.agents import wait_for
from tests.support.scale_out import STACK, P, docker

pytestmark = pytest.mark.slow


def test_both_web_processes_answer_behind_the_balancer(stack, org):
    answers = [stack.api("GET", org["read"], "/projects") for _ in range(10)]
    assert [r.status_code for r in answers] == [200] * 10
    assert len(stack.served_by(answers)) == 2  # round robin: each web process took some
    assert stack.api("GET", org["read"], "/../../metrics").status_code == 404  # kept internal


def test_the_per_key_rate_limit_is_counted_once_across_web_processes(stack, org):
    key = stack.key(org, "limited")
    codes = [stack.api("GET", key, "/projects").status_code for _ in range(26)]
    # 20 a minute for a full-access key, shared in Redis: not 20 per process.
    assert codes.count(200) == 20 and codes.count(429) == 6, codes


def test_live_requests_reach_every_agent_whichever_gateway_holds_it(stack, org, agents):
    agents, _ = agents
    for agent in agents:
        r = stack.api("GET", org["read"], f"/servers/{agent.server_id}/metrics")
        assert r.status_code == 200, r.text
        assert r.json()["memory_total_bytes"] > 0


def _settled(stack):
    """Both gateways serving (one a test before stopped is back) and every agent held."""
    wait_for(lambda: stack.gateways_serving(2) and sum(
        stack.agents_held(c) for c in stack.containers("gateway")) == 3,
             timeout=60, interval=0.5, what="two gateways serving, every agent held")


def _back_within(agents, before, seconds):
    """Every agent connected, those the lost gateway held to the other, within `seconds`."""
    def all_back():
        now = {a.server_id: a.status() for a in agents}
        return all(s.get("connected") for s in now.values()) and any(
            s.get("since") != before[i] for i, s in now.items())

    wait_for(all_back, timeout=seconds, interval=0.2,
             what=f"every agent connected again within {seconds} s",
             detail=lambda: [(a.status(), (a.dir / "agent.log").read_text()[-800:])
                             for a in agents])


def test_a_gateway_killed_during_deployments_loses_none(stack, org, agents):
    agents, deployed = agents
    _settled(stack)
    relayed = 'berth_gateway_wakeups_total{via="relay"}'
    gateways = stack.containers("gateway")
    woken_before = sum(stack.metric(c, relayed) for c in gateways)
    envs = []
    for agent in agents:
        project = stack.api("POST", org["key"], "/projects",
                        {"name": f"p-{agent.server_id[:8]}", "server_id": agent.server_id})
        assert project.status_code == 201, (project.text, stack.errors())
        env = stack.api("POST", org["key"], f"/projects/{project.json()['id']}/environments",
                    {"name": "Production", "environment_type": "production"})
        assert env.status_code == 201, (env.text, stack.errors())
        envs.append(env.json()["id"])
        deployed.append((agent, env.json()["id"]))
    # Each deployment's command woke its agent through Redis, whichever gateway holds it
    # (not left to the database poll).
    wait_for(lambda: sum(stack.metric(c, relayed) for c in gateways) >= woken_before + 3,
             timeout=5, interval=0.5, what="three wake-ups relayed")
    before = {a.server_id: a.status()["since"] for a in agents}
    docker("kill", "--signal", "KILL", stack.busiest_gateway())  # mid-deployment

    _back_within(agents, before, 10)

    def finished(env_id):
        status = stack.api("GET", org["read"], f"/environments/{env_id}/status").json()
        task = (status.get("last_deploy") or {}).get("id")
        done = task and stack.api("GET", org["read"], f"/deployments/{task}").json()
        return (task, done) if done and done["status"] in ("completed", "failed") else None

    for env_id in envs:
        task, done = wait_for(lambda env_id=env_id: finished(env_id), timeout=180, interval=1,
                              what="deployment finished")
        assert done["status"] == "completed", done
        log = stack.api("GET", org["read"], f"/environments/{env_id}/logs?task_id={task}"
                   "&lines=1000").json()
        text = log["log"]
        assert text.count("created network") == 1, text  # the command ran once
        assert text.count("started PostgreSQL") == 1, text
        # Runtime logs are read live from the server, whichever gateway now holds it.
        runtime = stack.api("GET", org["read"], f"/environments/{env_id}/runtime-logs?source=postgres")
        assert runtime.status_code == 200, runtime.text
        assert runtime.json()["environment_id"] == env_id and runtime.json()["lines"] > 0


def test_a_gateway_stopped_with_sigterm_drains(stack, org, agents):
    agents, _ = agents
    _settled(stack)
    victim = stack.busiest_gateway()
    held = stack.agents_held(victim)
    before = {a.server_id: a.status()["since"] for a in agents}
    docker("stop", "--time", "30", victim)
    state = docker("inspect", "--format", "{{.State.ExitCode}}", victim).stdout.strip()
    assert state == "0"
    assert f"{held} agent stream(s) handed back" in docker("logs", victim).stderr
    _back_within(agents, before, 10)


def test_a_killed_gateway_loses_its_agents_to_the_other_within_seconds(stack, org, agents):
    agents, _ = agents
    _settled(stack)
    before = {a.server_id: a.status()["since"] for a in agents}
    docker("kill", "--signal", "KILL", stack.busiest_gateway())

    _back_within(agents, before, 10)
    moved = [a for a in agents if a.status()["since"] != before[a.server_id]]
    assert moved  # those the killed gateway held, now on the survivor
    for agent in agents:  # and reachable there, through any web process
        r = stack.api("GET", org["read"], f"/servers/{agent.server_id}/metrics")
        assert r.status_code == 200, r.text


class Load:
    """Clients asking GET /projects, each at most 100 times a minute on a keep-alive
    connection (under the 120 of its read-only key, however long the load lasts),
    recording what failed and when."""

    def __init__(self, stack, org, clients=10):
        self.keys = [stack.key(org, f"load-{i}", "read_only") for i in range(clients)]
        self.url = stack.url + P + "/projects"
        self.failures, self.statuses, self.done = [], Counter(), threading.Event()
        self.answered = []  # when each answer came (monotonic)

    def _run(self, key):
        session = requests.Session()
        while not self.done.is_set():
            try:
                r = session.get(self.url, timeout=15, headers={"Authorization": f"Bearer {key}"})
                self.statuses[r.status_code] += 1
                self.answered.append(time.monotonic())
                if r.status_code != 200:
                    self.failures.append((time.monotonic(), r.status_code, r.text[:200]))
            except requests.RequestException as exc:
                self.failures.append((time.monotonic(), "error", repr(exc)))
            time.sleep(0.6)

    def __enter__(self):
        self.threads = [threading.Thread(target=self._run, args=(k,)) for k in self.keys]
        for thread in self.threads:
            thread.start()
        return self

    def rounds_after(self, moment):
        """How many times every client was answered after `moment`."""
        return sum(at > moment for at in self.answered) // len(self.keys)

    def __exit__(self, *exc):
        self.done.set()
        for thread in self.threads:
            thread.join(30)


def test_a_web_process_killed_under_load_fails_only_what_it_was_answering(stack, org):
    with Load(stack, org) as load:
        wait_for(lambda: load.rounds_after(0) >= 3, timeout=30, what="the load under way")
        killed_at = time.monotonic()
        docker("kill", "--signal", "KILL", stack.containers("web")[0])
        # Answers well past the moment it died: any failure it causes later shows.
        wait_for(lambda: load.rounds_after(killed_at + 5) >= 3, timeout=60, interval=0.5,
                 what="three rounds of answers from 5 s after the kill")
    # At most the requests in flight on it (one a client), all in the moment it died.
    assert len(load.failures) <= len(load.keys), (load.failures, dict(load.statuses))
    assert all(at - killed_at < 3 for at, *_ in load.failures), load.failures
    assert load.statuses[200] > 100


def test_a_rolling_restart_of_every_process_under_load_fails_no_request(stack, org, agents):
    """Each service's tasks replaced one by one (start-first), as an upgrade does, while
    clients keep asking: every request is answered, and every agent is held again."""
    agents, _ = agents
    with Load(stack, org) as load:
        for service in ("web", "gateway", "scheduler"):
            docker("service", "update", "--force", "--detach=true", f"{STACK}_{service}")
            wait_for(lambda service=service: _converged(service), timeout=180, interval=1,
                     what=f"{service} replaced")
    assert not load.failures, (load.failures[:5], dict(load.statuses))
    assert load.statuses[200] > 100
    wait_for(lambda: all(a.status().get("connected") for a in agents), timeout=10,
             interval=0.5, what="every agent held again")


def _converged(service):
    state = docker("service", "inspect", "--format", "{{if .UpdateStatus}}{{.UpdateStatus.State}}"
                   "{{end}}", f"{STACK}_{service}").stdout.strip()
    return state == "completed"
