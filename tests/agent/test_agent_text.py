"""Text an agent reports (task-log lines, a result's error and JSON) may hold what
no database stores, such as a NUL from a container's output: it is kept with
those characters replaced, the same on both databases, and the task still ends."""

import json

import grpc
import pytest

from control_plane.models import Environment, Server
from control_plane.services import agents as agent_svc
from protocol.v1 import agent_pb2 as pb
from tests.conftest import auth
from tests.support.agents import registered_server, wait_for
from tests.support.protocol_agent import ProtocolAgent

P = "/api/public/v1"


class FailingAgent(ProtocolAgent):
    """Answers each command with a log line and a failed result, both carrying a
    NUL and a lone surrogate (escaped in the result's JSON, as json.dumps writes it)."""

    def _serve(self):
        try:
            for message in self.stream:
                self._answer(message)
        except grpc.RpcError:
            pass  # the test closed the stream

    def _answer(self, message):
        if message.WhichOneof("body") == "command":
            cid = message.command.id
            self.send(pb.AgentMessage(ack=pb.CommandAck(command_id=cid)))
            self.send(pb.AgentMessage(log=pb.TaskLog(command_id=cid, seq=1, level="error",
                                                     message="pg said: bad\x00byte")))
            self.send(pb.AgentMessage(result=pb.CommandResult(
                command_id=cid, ok=False, error="exit\x00 1",
                result_json=json.dumps({"output": "a\x00b\ud800c"}))))


@pytest.fixture
def setup(world, gateway):
    org = world.org()
    server, credential = registered_server(org)
    env = world.environment(world.project(org, server), "running", server=server)
    raw, _ = world.key(org)
    agent = FailingAgent(gateway.port, credential)
    wait_for(lambda: agent_svc.is_connected(Server.get_by_id(server.id)), what="connected")
    yield env, raw
    agent.close()


def test_unstorable_agent_text_is_kept_replaced_and_the_task_ends(client, setup):
    env, raw = setup
    r = client.post(f"{P}/environments/{env.id}/actions/restart", headers=auth(raw))
    assert r.status_code == 202, r.json
    task = r.json["task_id"]

    def ended():
        t = client.get(f"{P}/deployments/{task}", headers=auth(raw)).json
        return t if t["status"] not in ("queued", "pending", "running") else None

    t = wait_for(ended, what="the task to end")
    assert t["status"] == "failed"
    assert "\x00" not in json.dumps(t)
    logs = client.get(f"{P}/environments/{env.id}/logs", headers=auth(raw),
                      query_string={"task_id": task}).json
    assert "pg said: bad\ufffdbyte" in json.dumps(logs, ensure_ascii=False)
    assert Environment.get_by_id(env.id).status == "error"
