"""An agent at the protocol level: speaks the stream over real gRPC as an agent
does, sending only what a test gives it."""

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
