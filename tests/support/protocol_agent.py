"""An agent at the protocol level: speaks the stream over real gRPC as an agent
does, sending only what a test gives it."""

import contextlib
import queue
import threading

import grpc

from protocol.v1 import agent_pb2 as pb
from protocol.v1 import agent_pb2_grpc as pb_grpc


class ProtocolAgent:
    """Speaks the stream as an agent does; answers container-metrics requests
    with no containers. Sends only what the test gives it."""

    def __init__(self, port, credential):
        self.outbox = queue.Queue()
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.outbox.put(pb.AgentMessage(hello=pb.Hello(facts=pb.HostFacts(hostname="old"))))
        self.stream = pb_grpc.AgentGatewayStub(self.channel).Connect(
            iter(self.outbox.get, None), metadata=[("authorization", f"Bearer {credential}")])
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        try:
            for message in self.stream:
                if message.WhichOneof("body") == "request":
                    self.outbox.put(pb.AgentMessage(reply=pb.LiveReply(
                        correlation_id=message.request.correlation_id,
                        container_metrics=pb.ContainerMetrics())))
        except grpc.RpcError:
            pass

    def send(self, message):
        self.outbox.put(message)

    def close(self):
        self.outbox.put(None)
        self.stream.cancel()
        self.channel.close()


@contextlib.contextmanager
def placed_environment(world, gateway):
    """An organization's server held by a ProtocolAgent, with a running environment
    on it and a read-only key: yields (org, server, project, env, raw key, agent)."""
    from control_plane.models import Server
    from control_plane.services import agents as agent_svc
    from tests.support.agents import registered_server, wait_for

    org = world.org()
    server, credential = registered_server(org)
    project = world.project(org, server)
    env = world.environment(project, "running", server=server)
    raw, _ = world.key(org, "read_only")
    agent = ProtocolAgent(gateway.port, credential)
    try:
        wait_for(lambda: agent_svc.is_connected(Server.get_by_id(server.id)), what="connected")
        yield org, server, project, env, raw, agent
    finally:
        agent.close()
