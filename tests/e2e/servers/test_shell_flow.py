"""Shell sessions end to end: the control plane's real HTTP server (its WebSocket), the
real gateway, a real `berth-agent run` and the environment's real ERP container (the
stand-in, which follows `odoo shell`'s contract).

One environment: a command runs and exits with its code, error output apart; an
interactive terminal computes `echo $((6*7))`, is resized and exits; `odoo shell`
counts the partners from a piped script; a session over the server's limit is
refused; a client that goes away leaves nothing running in the container; a ticket
works once; a read-only key cannot open one; every session is in the audit log with
its exit code, and with transcripts on, what it showed is kept. The agent carries a
session's bytes on a WebSocket of its own to the HTTP server, let in once by its
ticket, and on its gRPC stream when that socket cannot open."""

import subprocess
import time

import pytest
import requests
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from agent.deploy.environments import Environments
from control_plane.models import Server
from control_plane.services import agents as agent_svc
from tests.conftest import auth
from tests.support.agents import registered_server, wait_for
from tests.support.shell_client import Shell, open_shell, sessions_carried
from tests.support.shell_client import serve_app as _served

P = "/api/public/v1"
pytestmark = pytest.mark.slow


class Stand:
    pass


@pytest.fixture
def stand(app, world, agents, gateway, tmp_path, erp_image, postgres_image, docker_client):
    settings = app.extensions["berth"].settings
    settings["ERP_IMAGE"], settings["POSTGRES_IMAGE"] = erp_image, postgres_image
    s = Stand()
    s.app, s.settings, s.docker = app, settings, docker_client
    s.url = _served(app)
    s.org = world.org()
    s.server, credential = registered_server(s.org)
    s.project = world.project(s.org, s.server)
    s.raw, _ = world.key(s.org)
    s.key = auth(s.raw)
    s.reader = auth(world.key(s.org, "read_only")[0])
    s.root = tmp_path / "srv"
    s.agent = agents(s.server, credential, env={"BERTH_AGENT_ENV_ROOT": str(s.root)})
    wait_for(lambda: str(s.server.id) in gateway.sessions
             and agent_svc.is_connected(Server.get_by_id(s.server.id)), timeout=30,
             what="agent connected")
    s.envs = Environments(docker_client, root=s.root)
    s.created = []
    yield s
    for env_id in s.created:
        s.envs.destroy(env_id, True, lambda *a: None)


def _running_environment(s):
    r = requests.post(f"{s.url}{P}/projects/{s.project.id}/environments", headers=s.key,
                      json={"name": "Production"}, timeout=30)
    assert r.status_code == 201, r.text
    env_id = r.json()["id"]
    s.created.append(env_id)
    wait_for(lambda: requests.get(f"{s.url}{P}/environments/{env_id}", headers=s.reader,
                                  timeout=10).json()["status"] == "running",
             timeout=240, interval=0.5, what="the environment running")
    return env_id


def _processes(s, env_id):
    container = s.docker.containers.get(s.envs._names(env_id)["erp"])
    return " ".join(" ".join(p) for p in container.top(ps_args="-eo pid,args")["Processes"])


def _sessions(s, env_id):
    return requests.get(f"{s.url}{P}/environments/{env_id}/shell-sessions", headers=s.reader,
                        timeout=10).json()["sessions"]


def test_shell_sessions(stand):
    s = stand
    env_id = _running_environment(s)
    s.settings["SHELL_TRANSCRIPTS"] = True
    carried = sessions_carried(s.url)

    # One command, no terminal: its output, its error output apart, its exit code.
    r, sh = open_shell(s.url, s.key, env_id, tty=False,
                       command=["sh", "-c", "echo $((6*7)); echo oops >&2; exit 3"])
    assert r.status_code == 201, r.text
    assert r.json()["ticket"].startswith("shk_") and r.json()["end_reason"] is None
    sh.ended()
    assert (bytes(sh.out), bytes(sh.err), sh.exit_code) == (b"42\n", b"oops\n", 3)
    assert sh.messages[0]["type"] == "opened"
    first = r.json()["id"]
    # The agent's own socket carried it.
    assert sessions_carried(s.url) == {**carried, "socket": carried["socket"] + 1}

    # The agent's socket is let in once, by the ticket its ShellOpen carried: for
    # anyone else there is no session waiting (404, before any upgrade).
    for token in ("Bearer not-the-ticket", None):
        with pytest.raises(InvalidStatus) as refused:
            connect(f"ws{s.url[4:]}/agent/v1/shell-sessions/{first}/stream", open_timeout=10,
                    additional_headers={"Authorization": token} if token else None)
        assert refused.value.response.status_code == 404

    # The ticket works once.
    again = Shell(s.url, r.json())
    again.ended(timeout=15)
    assert again.error["code"] == "invalid_ticket"

    # An interactive terminal: typed, resized, exited.
    r, sh = open_shell(s.url, s.key, env_id)
    sh.read_until(lambda x: x.messages and x.messages[0]["type"] == "opened")
    sh.send("echo $((6*7))\r")
    sh.output_has("42")
    sh.control(type="resize", rows=40, cols=132)
    sh.send("stty size\r")
    sh.output_has("40 132")
    sh.send("sleep 4246\r")  # Ctrl-C is a byte: the terminal interrupts the sleep
    wait_for(lambda: "sleep 4246" in _processes(s, env_id), timeout=15, what="sleep running")
    sh.send("\x03")
    sh.send("echo after $((1+1))\r")
    sh.output_has("after 2", timeout=10)
    sh.send("exit 5\r")
    sh.ended()
    assert sh.exit_code == 5

    # `odoo shell` on the environment's database, a script piped in.
    r, sh = open_shell(s.url, s.key, env_id, odoo=True, tty=False)
    sh.read_until(lambda x: x.messages)
    sh.send("print('partners', env['res.partner'].search_count([]))\n")
    sh.control(type="eof")
    sh.ended()
    assert sh.exit_code == 0, (bytes(sh.out), bytes(sh.err))
    assert bytes(sh.out).decode().startswith("partners "), bytes(sh.out)

    # At most CP_SHELL_SESSIONS_PER_SERVER open: the next is refused.
    wait_for(lambda: all(x["ended_at"] for x in _sessions(s, env_id)), timeout=10,
             what="the sessions so far recorded as ended")
    s.settings["SHELL_SESSIONS_PER_SERVER"] = 1
    r, held = open_shell(s.url, s.key, env_id)
    assert r.status_code == 201, r.text
    held.read_until(lambda x: x.messages)
    held.send("sleep 4242\r")
    r2, refused = open_shell(s.url, s.key, env_id)
    assert (r2.status_code, r2.json()["error"]) == (409, "shell_limit_reached"), r2.text
    wait_for(lambda: "sleep 4242" in _processes(s, env_id), timeout=15, what="sleep running")

    # The client goes away: nothing it started keeps running.
    held.close()
    wait_for(lambda: "sleep 4242" not in _processes(s, env_id), timeout=20,
             what="the session's processes ended")
    wait_for(lambda: open_shell(s.url, s.key, env_id, command=["true"])[0].status_code == 201,
             timeout=20, what="a session's place freed")
    s.settings["SHELL_SESSIONS_PER_SERVER"] = 5

    # A read-only key may not open one.
    r = requests.post(f"{s.url}{P}/environments/{env_id}/shell-sessions", headers=s.reader,
                      json={}, timeout=10)
    assert r.status_code == 403, r.text

    # The record and the audit log: who, when, the exit code, the transcript.
    listed = _sessions(s, env_id)
    by_id = {x["id"]: x for x in listed}
    assert (by_id[first]["exit_code"], by_id[first]["end_reason"]) == (3, "exited")
    assert by_id[held.opened["id"]]["end_reason"] == "closed"
    one = requests.get(f"{s.url}{P}/environments/{env_id}/shell-sessions/{first}",
                       headers=s.reader, timeout=10).json()
    assert "42" in one["transcript"] and one["command"][0] == "sh"
    time.sleep(0.5)
    events = requests.get(f"{s.url}{P}/audit-events", headers=s.reader, timeout=10,
                          params={"target_id": env_id}).json()["data"]
    closes = [e for e in events if e["action"] == "shell.close"]
    assert any(e["changes"]["session_id"] == first and e["changes"]["exit_code"] == 3
               for e in closes), closes
    assert any(e["action"] == "shell.open" for e in events)


def test_sessions_end_at_their_limits_and_with_the_agents_stream(stand, gateway):
    """Idle too long, or the agent's stream lost: the client is told why, the record
    says so, and what ran is hung up by the agent. Without the agent's own socket its
    stream carries the bytes."""
    s = stand
    env_id = _running_environment(s)

    # The control plane's public address does not reach this server (or another web
    # process holds the session): the agent's socket does not open, and the session's
    # bytes go on its gRPC stream, input and output, to the exit code.
    carried = sessions_carried(s.url)
    url, s.settings["PUBLIC_URL"] = s.settings["PUBLIC_URL"], "http://127.0.0.1:9"
    try:
        r, sh = open_shell(s.url, s.key, env_id, tty=False,
                           command=["sh", "-c", "read x; echo got $x; exit 4"])
        sh.send("it\n")
        sh.ended()
    finally:
        s.settings["PUBLIC_URL"] = url
    assert (bytes(sh.out), sh.exit_code) == (b"got it\n", 4)
    assert sessions_carried(s.url) == {**carried, "stream": carried["stream"] + 1}

    # Typed before the agent said `opened`: it waits for it, nothing is lost.
    r, sh = open_shell(s.url, s.key, env_id, tty=False, command=["cat"])
    sh.send("early\n")
    sh.output_has("early")
    sh.control(type="close")
    sh.ended()
    assert sh.exit_code is None and sh.error is None

    s.settings["SHELL_IDLE_SECONDS"] = 2
    r, sh = open_shell(s.url, s.key, env_id, command=["sleep", "4244"])
    sh.ended(timeout=30)
    assert sh.error["code"] == "shell_idle_timeout", sh.messages
    wait_for(lambda: "sleep 4244" not in _processes(s, env_id), timeout=20, what="hung up")
    s.settings["SHELL_IDLE_SECONDS"] = 900

    # The agent's own socket lost mid-session (reset under it): the client is told,
    # and what ran is hung up.
    r, sh = open_shell(s.url, s.key, env_id, tty=False, command=["sleep", "4247"])
    sh.read_until(lambda x: x.messages)
    wait_for(lambda: "sleep 4247" in _processes(s, env_id), timeout=15, what="sleep running")
    _reset_the_agents_sockets(s)
    sh.ended(timeout=30)
    assert sh.error["code"] == "server_unreachable", sh.messages
    wait_for(lambda: "sleep 4247" not in _processes(s, env_id), timeout=20,
             what="the session hung up")

    r, sh = open_shell(s.url, s.key, env_id, command=["sleep", "4245"])
    sh.read_until(lambda x: x.messages)
    wait_for(lambda: "sleep 4245" in _processes(s, env_id), timeout=15, what="sleep running")
    held = gateway.sessions[str(s.server.id)]
    gateway.loop.call_soon_threadsafe(held.outbox.put_nowait, None)  # the stream ends
    sh.ended(timeout=30)
    assert sh.error["code"] == "server_unreachable", sh.messages
    wait_for(lambda: "sleep 4245" not in _processes(s, env_id), timeout=20,
             what="the agent hung up the sessions of its lost stream")

    def ends():  # (recorded as the socket closes: read until every one is)
        return {x["command"][0] + x["command"][-1]: x["end_reason"]
                for x in _sessions(s, env_id)}
    wait_for(lambda: None not in ends().values(), timeout=10, what="every end recorded")
    assert ends() == {"shread x; echo got $x; exit 4": "exited", "catcat": "closed",
                      "sleep4244": "idle", "sleep4247": "disconnected",
                      "sleep4245": "disconnected"}


def _reset_the_agents_sockets(s):
    """Abort the agent process's connections to the HTTP server (`ss -K`): its shell
    sockets, as a network that drops them would."""
    port = s.url.rsplit(":", 1)[1]
    listed = subprocess.run(["ss", "-tnpH", "state", "established", "dport", "=", f":{port}"],
                            capture_output=True, text=True, check=True).stdout
    mine = [line.split()[2] for line in listed.splitlines() if f"pid={s.agent.proc.pid}," in line]
    assert mine, listed
    for local in mine:
        subprocess.run(["ss", "-K", "-tn", "src", local, "dport", "=", f":{port}"],
                       capture_output=True, check=True)

