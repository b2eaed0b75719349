"""Shell sessions through the balancer of deploy/compose.yaml: a session's client
socket and its agent's own socket land on the same web process (the balancer hashes
the session's id), so the agent's socket carries the bytes of every session, not
about one in two (with round robin over the two web processes, the agent's socket
reached the other one and the session fell back to the relayed stream)."""

import pytest

from tests.support.agents import wait_for
from tests.support.shell_client import open_shell

pytestmark = pytest.mark.slow

SESSIONS = 8  # by chance all on the right process with round robin: 1 in 256
SOCKET = 'berth_shell_sessions_total{via="socket"}'


def _running_environment(stack, org, agents):
    agents, deployed = agents
    agent = agents[0]
    project = stack.api("POST", org["key"], "/projects",
                        {"name": "shells", "server_id": agent.server_id})
    assert project.status_code == 201, (project.text, stack.errors())
    env = stack.api("POST", org["key"], f"/projects/{project.json()['id']}/environments",
                    {"name": "Staging", "environment_type": "staging"})
    assert env.status_code == 201, (env.text, stack.errors())
    env_id = env.json()["id"]
    deployed.append((agent, env_id))
    wait_for(lambda: stack.api("GET", org["read"], f"/environments/{env_id}").json()["status"]
             == "running", timeout=240, interval=1, what="the environment running")
    return env_id


def _carried_by_socket(stack):
    return sum(stack.metric(c, SOCKET, port=8000) for c in stack.containers("web"))


def test_a_sessions_two_sockets_meet_in_one_web_process(stack, org, agents):
    env_id = _running_environment(stack, org, agents)
    key = {"Authorization": f"Bearer {stack.key(org, 'shells')}"}
    before = _carried_by_socket(stack)
    for n in range(SESSIONS):
        r, sh = open_shell(stack.url, key, env_id, tty=False,
                           command=["sh", "-c", f"echo $(({n}*7)); exit {n}"])
        assert r.status_code == 201, r.text
        sh.ended(timeout=60)
        assert (bytes(sh.out), sh.exit_code, sh.error) == (f"{n * 7}\n".encode(), n, None)
    assert _carried_by_socket(stack) == before + SESSIONS
