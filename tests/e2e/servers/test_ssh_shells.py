"""Shell sessions on a server reached over SSH, end to end: the control plane's real
HTTP server (its WebSocket), a real `sshd` on loopback where `berth-agent shell`
runs, and the environment's real ERP container, deployed over SSH.

One environment: a command without a terminal exits with its code, its error output
apart; an interactive terminal computes `echo $((6*7))`, is resized and exits with
its code; a client that goes away, with a terminal or without, and a connection
lost leave nothing running in the container."""

import pytest
import requests

from agent.deploy.environments import Environments
from tests.e2e.servers.test_shell_flow import _served
from tests.e2e.servers.test_ssh_servers import add, over_ssh, ssh  # noqa: F401 (fixtures)
from tests.support.agents import polled_get, wait_for
from tests.support.shell_client import open_shell

pytestmark = pytest.mark.slow
P = "/api/public/v1"


def _running_environment(client, s):
    r = client.post(f"{P}/projects/{s.project.id}/environments", headers=s.key,
                    json={"name": "Production"})
    assert r.status_code == 201, r.json
    env_id = r.json["id"]
    s.created.append(env_id)
    # Polled with the read-only key: the full-access one's requests open the sessions.
    wait_for(lambda: polled_get(client, f"{P}/environments/{env_id}", s.reader)["status"]
             == "running", timeout=240, interval=1, what="the environment running")
    return env_id


def _processes(container):
    return " ".join(" ".join(p) for p in container.top(ps_args="-eo pid,args")["Processes"])


def test_shell_sessions_over_ssh(app, client, over_ssh, backend,  # noqa: F811
                                docker_client):
    if backend != "sqlite":
        pytest.skip("the flow runs once; the SSH link does not depend on the database")
    s = over_ssh
    url = _served(app)
    env_id = _running_environment(client, s)
    container = docker_client.containers.get(
        Environments(docker_client, root=s.box / "srv")._names(env_id)["erp"])

    # One command, no terminal: its output, its error output apart, its exit code.
    r, sh = open_shell(url, s.key, env_id, tty=False,
                       command=["sh", "-c", "echo $((6*7)); echo oops >&2; exit 3"])
    assert r.status_code == 201, r.text
    sh.ended()
    assert sh.messages[0]["type"] == "opened", sh.messages
    assert (bytes(sh.out), bytes(sh.err), sh.exit_code) == (b"42\n", b"oops\n", 3)

    # Its standard input, to its end.
    r, sh = open_shell(url, s.key, env_id, tty=False, command=["sh", "-c", "wc -l"])
    sh.send("one\ntwo\n")
    sh.control(type="eof")
    sh.ended()
    assert (bytes(sh.out).strip(), sh.exit_code) == (b"2", 0)

    # An interactive terminal: typed, resized, exited.
    r, sh = open_shell(url, s.key, env_id)  # its size: the client's, 24 x 80
    sh.read_until(lambda x: x.messages and x.messages[0]["type"] == "opened")
    sh.output_has("$ ")  # the prompt: the shell reads what is typed
    sh.send("echo $((6*7))\r")
    sh.output_has("42")
    sh.send("stty size\r")
    sh.output_has("24 80")
    sh.control(type="resize", rows=40, cols=132)
    sh.send("stty size\r")
    sh.output_has("40 132")
    sh.send("exit 4\r")
    sh.ended()
    assert sh.exit_code == 4, sh.messages

    # The client goes away: nothing it started keeps running, terminal or not.
    r, held = open_shell(url, s.key, env_id)
    held.output_has("$ ")
    held.send("sleep 4242\r")
    r, piped = open_shell(url, s.key, env_id, tty=False, command=["sleep", "4243"])
    piped.read_until(lambda x: x.messages)
    wait_for(lambda: all(f"sleep {n}" in _processes(container) for n in (4242, 4243)),
             timeout=15, what="both sleeps running")
    held.close()
    piped.close()
    wait_for(lambda: "sleep 424" not in _processes(container), timeout=20,
             what="the sessions' processes ended")
    # The shells' own connection closes with the last of them.
    shells_apart = (s.server["id"], "shells")
    wait_for(lambda: shells_apart not in s.berth.ssh.sessions.connections, timeout=10,
             what="the shells' connection closed")

    # The connection is lost: the client is told, and nothing keeps running there.
    r, cut = open_shell(url, s.key, env_id)
    cut.output_has("$ ")
    cut.send("sleep 4244\r")
    wait_for(lambda: "sleep 4244" in _processes(container), timeout=15, what="sleep running")
    s.sshd.drop_connections()
    cut.ended()
    assert cut.error["code"] == "server_unreachable", cut.messages
    assert "connection" in cut.error["message"], cut.error
    wait_for(lambda: "sleep 4244" not in _processes(container), timeout=20,
             what="the lost session's processes ended")

    listed = requests.get(f"{url}{P}/environments/{env_id}/shell-sessions", headers=s.key,
                          timeout=10).json()["sessions"]
    by_id = {x["id"]: x for x in listed}
    assert by_id[held.opened["id"]]["end_reason"] == "closed"
