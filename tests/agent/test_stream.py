"""The agent's stream to the gateway: authentication, durable commands
delivered once and executed at most once, reconnects."""

import subprocess
import sys
import time

import grpc
import pytest

from agent import __version__ as agent_version
from control_plane.gateway.server import Gateway
from control_plane.models import AgentCommand, Server
from control_plane.services import agents as agent_svc
from control_plane.services.tasks import queue
from protocol import wire
from protocol.v1 import agent_pb2 as pb
from protocol.v1 import agent_pb2_grpc as pb_grpc
from tests.support.agents import polled_get, registered_server, wait_for


def connected(server_id):
    return agent_svc.is_connected(Server.get_by_id(server_id))


def _listed(client, raw, server_id):
    from tests.conftest import auth
    rows = polled_get(client, "/api/public/v1/servers", auth(raw))["data"]
    return next(r for r in rows if r["id"] == str(server_id))


def test_agent_connects_and_reports_status(client, world, agents, gateway):
    org = world.org()
    server, credential = registered_server(org)
    raw, _ = world.key(org, "read_only")
    before = _listed(client, raw, server.id)
    assert before["connected"] is False and before["last_seen_at"] is None
    agent = agents(server, credential)
    wait_for(lambda: connected(server.id), what="agent connected")
    listed = _listed(client, raw, server.id)
    assert listed["connected"] is True and listed["last_seen_at"].endswith("Z")
    code, status = wait_for(lambda: (s := agent.status())[1].get("connected") and s,
                            what="status connected")
    assert code == 0
    assert status["server_id"] == str(server.id)
    assert status["grpc_address"] == f"127.0.0.1:{gateway.port}"
    assert status["since"] and status["running"] is True
    row = Server.get_by_id(server.id)
    assert row.agent_version == agent_version and row.hostname
    assert gateway.sessions[str(server.id)].revision == wire.REVISION  # it says its revision
    agent.kill()
    wait_for(lambda: _listed(client, raw, server.id)["connected"] is False, timeout=20, interval=0.5,
             what="GET /servers shows the agent gone")


# A client that connects, says hello, prints the welcome, beats once and waits to be killed.
VANISHING_CLIENT = """
import sys, threading, grpc
from protocol.v1 import agent_pb2 as pb, agent_pb2_grpc as pb_grpc
def messages():
    yield pb.AgentMessage(hello=pb.Hello())
    welcomed.wait()
    yield pb.AgentMessage(heartbeat=pb.Heartbeat())
    threading.Event().wait()
welcomed = threading.Event()
stream = pb_grpc.AgentGatewayStub(grpc.insecure_channel(sys.argv[1])).Connect(
    messages(), metadata=[("authorization", "Bearer " + sys.stdin.readline().strip())])
kind = next(stream).WhichOneof("body")
welcomed.set()
print(kind, flush=True)
threading.Event().wait()
"""


def test_a_stream_whose_client_is_killed_is_marked_disconnected(world, gateway):
    """Again and again: when a killed client's stream ends, grpc cancels the stream's
    task while the gateway is clearing the connected mark, which must still be cleared."""
    server, credential = registered_server(world.org())
    for attempt in range(12):
        proc = subprocess.Popen([sys.executable, "-c", VANISHING_CLIENT,
                                 f"127.0.0.1:{gateway.port}"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        try:
            proc.stdin.write(credential + "\n")
            proc.stdin.flush()
            assert proc.stdout.readline().strip() == "welcome"
            wait_for(lambda: connected(server.id), what="connected")
            time.sleep(0.5)  # the heartbeat is in
        finally:
            proc.kill()
            proc.wait(10)
        wait_for(lambda: Server.get_by_id(server.id).connected_since is None, timeout=10,
                 what=f"connected mark cleared (attempt {attempt})")


def test_unknown_credential_is_refused(world, gateway):
    with grpc.insecure_channel(f"127.0.0.1:{gateway.port}") as ch:
        stream = pb_grpc.AgentGatewayStub(ch).Connect(
            iter([pb.AgentMessage(hello=pb.Hello())]),
            metadata=[("authorization", "Bearer agt_live_" + "x" * 40)])
        with pytest.raises(grpc.RpcError) as exc:
            list(stream)
    assert exc.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_queued_command_is_delivered_on_connect_and_run_once(world, agents):
    server, credential = registered_server(world.org())
    command = queue.enqueue(server.id, "ping")  # queued while the agent is away
    agent = agents(server, credential)
    done = wait_for(lambda: (c := AgentCommand.get_by_id(command.id)).status == "succeeded" and c,
                    what="command done")
    assert done.result["result"]["pong"] is True and done.attempts == 1
    first = done.result
    # The ack was lost (say): the gateway delivers again after a reconnect.
    AgentCommand.update(status="delivered").where(AgentCommand.id == command.id).execute()
    agent.kill()
    agents(server, credential)
    again = wait_for(lambda: (c := AgentCommand.get_by_id(command.id)).status == "succeeded" and c,
                     timeout=40, what="redelivered command acknowledged")
    assert again.attempts == 2
    assert again.result == first  # the stored result, not a second execution
    assert list(agent.journal()) == [command.id.hex]


def test_command_queued_while_connected_arrives_at_once(world, agents, gateway):
    server, credential = registered_server(world.org())
    agents(server, credential)
    wait_for(lambda: connected(server.id), what="agent connected")
    command = queue.enqueue(server.id, "ping")
    gateway.wake(server.id)
    wait_for(lambda: AgentCommand.get_by_id(command.id).status == "succeeded", timeout=4,
             what="command run without waiting for the poll")


def test_unknown_command_fails_with_reason(world, agents):
    server, credential = registered_server(world.org())
    command = queue.enqueue(server.id, "no-such-thing")
    agents(server, credential)
    done = wait_for(lambda: (c := AgentCommand.get_by_id(command.id)).status == "failed" and c,
                    what="command failed")
    assert "unknown command kind" in done.result["error"]


def test_agent_reconnects_after_gateway_restart(app, world, agents, gateway):
    server, credential = registered_server(world.org())
    agent = agents(server, credential)
    wait_for(lambda: connected(server.id), what="first connection")
    port = gateway.port
    gateway.stop_from_thread()
    wait_for(lambda: agent.status()[1]["connected"] is False, what="agent sees the drop")
    second = Gateway()
    second.start_in_thread(f"127.0.0.1:{port}")
    app.extensions["berth"].gateway = second
    try:
        command = queue.enqueue(server.id, "ping")
        wait_for(lambda: AgentCommand.get_by_id(command.id).status == "succeeded", timeout=45,
                 what="reconnected and command delivered")
        assert agent.status()[0] == 0
    finally:
        second.stop_from_thread()


def test_status_exit_code_when_not_running(tmp_path, world, gateway):
    from tests.support.agents import AgentProcess

    server, credential = registered_server(world.org())
    agent = AgentProcess(tmp_path, f"127.0.0.1:{gateway.port}", server.id, credential)
    code, status = agent.status()
    assert code == 1 and status["connected"] is False and status["running"] is False


def test_tls_gateway(tmp_path, world):
    """With a certificate configured the gateway speaks TLS; the agent verifies it."""
    import json

    import trustme

    from tests.support.agents import AgentProcess

    ca = trustme.CA()
    cert = ca.issue_cert("localhost")
    gw = Gateway(tls=(cert.cert_chain_pems[0].bytes(), cert.private_key_pem.bytes()))
    port = gw.start_in_thread("127.0.0.1:0")
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    server, credential = registered_server(world.org())
    agent = AgentProcess(tmp_path, f"localhost:{port}", server.id, credential,
                         env={"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(ca_file)})
    agent.config.write_text(json.dumps({**json.loads(agent.config.read_text()), "grpc_tls": True}))
    agent.start()
    try:
        wait_for(lambda: connected(server.id), what="agent connected over TLS")
        # A plaintext client cannot talk to it.
        with grpc.insecure_channel(f"localhost:{port}") as ch:
            with pytest.raises(grpc.RpcError):
                pb_grpc.AgentGatewayStub(ch).Register(pb.RegisterRequest(token="x"), timeout=5)
    finally:
        agent.kill()
        gw.stop_from_thread()


class CuttableLink:
    """A TCP relay on loopback between agent and gateway whose connections the
    test can cut at once, as a dropped network would."""

    def __init__(self, target_port):
        import socket
        import threading

        self.target_port, self.conns, self.lock = target_port, [], threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        import socket
        import threading

        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            with self.lock:
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src, dst):
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.close()
                except OSError:
                    pass

    def cut(self):
        import socket

        with self.lock:
            conns, self.conns = self.conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self):
        self.listener.close()
        self.cut()


def test_agent_reconnects_after_the_network_drops(world, agents, gateway):
    link = CuttableLink(gateway.port)
    try:
        server, credential = registered_server(world.org())
        agent = agents(server, credential, address=f"127.0.0.1:{link.port}")
        wait_for(lambda: connected(server.id) and str(server.id) in gateway.sessions,
                 what="connected through the link")
        before = gateway.sessions[str(server.id)]
        link.cut()
        command = queue.enqueue(server.id, "ping")  # queued as the network drops
        wait_for(lambda: gateway.sessions.get(str(server.id)) not in (None, before), timeout=45,
                 what="a new stream after the drop")
        done = wait_for(lambda: (c := AgentCommand.get_by_id(command.id)).status == "succeeded"
                        and c, timeout=45, what="reconnected and command delivered")
        # Delivered once or twice (the first copy may die with the link); run once.
        assert done.attempts in (1, 2) and list(agent.journal()) == [command.id.hex]
        assert agent.status()[0] == 0
    finally:
        link.close()


def test_command_progress_lines_become_the_task_log(world, agents):
    from control_plane.models import Deployment, TaskLogLine

    org = world.org()
    server, credential = registered_server(org)
    env = world.environment(world.project(org, server), "deploying", server=server)
    deployment = Deployment.create(environment=env, project=env.project_id, version=1,
                                   trigger="manual", status="running")
    command = queue.enqueue(server.id, "ping", deployment_id=deployment.id)
    agents(server, credential)
    wait_for(lambda: AgentCommand.get_by_id(command.id).status == "succeeded", what="done")
    lines = wait_for(lambda: list(TaskLogLine.select().where(
        TaskLogLine.deployment == deployment.id).order_by(TaskLogLine.seq)), what="log line")
    assert [(line.seq, line.level) for line in lines] == [(1, "info")]
    assert lines[0].message.startswith("pong from berth-agent")
    # The same line again (a redelivery after a reconnect) is kept once.
    queue.append_logs(server.id, [(command.id.hex, 1, "info", "pong again")])
    assert TaskLogLine.select().where(TaskLogLine.deployment == deployment.id).count() == 1


@pytest.fixture
def slow_poll(monkeypatch):
    from control_plane.gateway import server as gateway_module
    monkeypatch.setattr(gateway_module, "POLL_SECONDS", 3600)


def test_idempotent_action_wakes_the_gateway_after_its_commit(slow_poll, client, world, agents,
                                                              gateway):
    """With X-Idempotency-Key the action runs inside the idempotency transaction; the
    gateway is woken once that committed, so the command goes out at once rather
    than at the fallback poll (made slow here so that only the wake-up can deliver)."""
    from control_plane.models import Project
    from tests.conftest import auth

    org = world.org()
    server, credential = registered_server(org)
    project = Project.create(organization=org, name="p", server=server, default_branch="main")
    env = world.environment(project, "running", server=server)
    raw, _ = world.key(org)
    agents(server, credential)
    wait_for(lambda: connected(server.id), what="agent connected")
    r = client.post(f"/api/public/v1/environments/{env.id}/actions/restart",
                    headers={**auth(raw), "X-Idempotency-Key": "restart-once"})
    assert r.status_code == 202, r.json
    wait_for(lambda: AgentCommand.select().where(AgentCommand.server == server.id,
                                                 AgentCommand.status != "queued").exists(),
             timeout=10, what="command delivered on the wake-up")


def test_agents_racing_with_one_token_over_grpc_get_one_server(client, world, gateway):
    """Six real Register calls at once with the same token: one server, one
    credential; the others are told the token was used."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from tests.conftest import auth

    org = world.org(quota=3)
    raw, _ = world.key(org, server_registration=True)
    token = client.post("/api/public/v1/servers/registration-tokens", headers=auth(raw),
                        json={}).json["token"]
    barrier = threading.Barrier(6)
    facts = pb.HostFacts(hostname="racer", cpu_cores=2, ram_mb=2048, disk_gb=20)

    def register(_):
        with grpc.insecure_channel(f"127.0.0.1:{gateway.port}") as channel:
            stub = pb_grpc.AgentGatewayStub(channel)
            barrier.wait()
            try:
                return stub.Register(pb.RegisterRequest(token=token, facts=facts), timeout=30)
            except grpc.RpcError as exc:
                return exc.code()

    with ThreadPoolExecutor(6) as pool:
        outcomes = list(pool.map(register, range(6)))
    winners = [o for o in outcomes if isinstance(o, pb.RegisterResponse)]
    assert len(winners) == 1, outcomes
    assert [o for o in outcomes if o is not winners[0]] == [grpc.StatusCode.ALREADY_EXISTS] * 5
    assert Server.select().where(Server.organization == org.id).count() == 1
    assert winners[0].credential.startswith("agt_live_")
