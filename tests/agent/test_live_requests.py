"""The agent's table of live requests (agent/live.py) and how the daemon answers
from it: every request kind of the protocol has a handler whose answer is the
reply's body of the same name; an unknown kind, an agent error and any other
failure become the reply's error code. (The real requests through the gateway,
the engine and containers: test_live.py.)"""

import queue
import uuid

import pytest

from agent import daemon, live
from agent.config import AgentConfig
from agent.errors import ContainerNotFound, EngineTimeout, EngineUnreachable
from protocol.v1 import agent_pb2 as pb


@pytest.fixture
def agent(tmp_path):
    config = AgentConfig(control_plane="http://127.0.0.1:1", grpc_address="127.0.0.1:1",
                         server_id=str(uuid.uuid4()), credential="agt_live_" + "x" * 40)
    agent = daemon.Agent(config, tmp_path)
    yield agent
    agent.pool.shutdown()


def answer(agent, request):
    outbox = queue.Queue()
    agent._answer(outbox, request)
    return outbox.get_nowait().reply


def test_every_request_kind_has_a_handler_and_a_reply_body_of_its_name():
    kinds = {f.name for f in pb.LiveRequest.DESCRIPTOR.oneofs_by_name["kind"].fields}
    bodies = {f.name for f in pb.LiveReply.DESCRIPTOR.oneofs_by_name["body"].fields}
    assert set(live.HANDLERS) == kinds == {"host_metrics", "container_metrics", "runtime_logs",
                                           "mails"}
    assert kinds <= bodies


def test_a_kind_cannot_have_two_handlers():
    with pytest.raises(ValueError, match="two handlers for the live request kind 'runtime_logs'"):
        live.answers("runtime_logs")(lambda agent, body: None)
    assert live.HANDLERS["runtime_logs"] is live.runtime_logs


def test_the_handler_answers_in_the_body_of_its_name(agent, monkeypatch):
    seen = []

    def logs(agent_, body):
        seen.append((agent_, body.environment_id, body.source, body.lines))
        return pb.RuntimeLogs(log="a\nb", lines=2, truncated=True)

    monkeypatch.setitem(live.HANDLERS, "runtime_logs", logs)
    reply = answer(agent, pb.LiveRequest(correlation_id="c1", runtime_logs=pb.RuntimeLogsRequest(
        environment_id="e1", source="erp", lines=2)))
    assert seen == [(agent, "e1", "erp", 2)]
    assert reply.correlation_id == "c1" and not reply.error_code
    assert reply.WhichOneof("body") == "runtime_logs"
    assert (reply.runtime_logs.log, reply.runtime_logs.lines, reply.runtime_logs.truncated) == (
        "a\nb", 2, True)


def test_only_running_containers_are_reported(agent, monkeypatch):
    stats = {"cpu_percent": 1.5, "memory_used_bytes": 10, "memory_limit_bytes": None,
             "memory_percent": None}

    class Sampler:
        def for_environment(self, environment_id):
            return {"erp": {"status": "running", **stats},
                    "postgres": {"status": "exited", **stats}}

    monkeypatch.setattr(agent, "container_sampler", Sampler)
    reply = answer(agent, pb.LiveRequest(correlation_id="c2", container_metrics=(
        pb.ContainerMetricsRequest(environment_id="e1"))))
    assert not reply.error_code
    assert reply.container_metrics.HasField("erp") and not reply.container_metrics.HasField(
        "postgres")
    assert (reply.container_metrics.erp.cpu_percent,
            reply.container_metrics.erp.memory_used_bytes) == (1.5, 10)


def test_a_request_without_a_kind_is_unavailable(agent):
    reply = answer(agent, pb.LiveRequest(correlation_id="c3"))
    assert (reply.correlation_id, reply.error_code, reply.error_message) == (
        "c3", "unavailable", "unknown request None")
    assert reply.WhichOneof("body") is None


@pytest.mark.parametrize("error, code", [
    (ContainerNotFound("environment e1 has no erp container"), "container_not_found"),
    (EngineUnreachable(), "engine_unreachable"),
    (EngineTimeout(), "engine_timeout"),
    (ValueError("lines must be an integer from 1 to 1000, not 0"), "unavailable"),
])
def test_failures_answer_their_code(agent, monkeypatch, error, code):
    def fails(agent_, body):
        raise error

    monkeypatch.setitem(live.HANDLERS, "host_metrics", fails)
    reply = answer(agent, pb.LiveRequest(correlation_id="c4", host_metrics=pb.HostMetricsRequest()))
    assert (reply.error_code, reply.error_message) == (code, str(error))
    assert reply.WhichOneof("body") is None
