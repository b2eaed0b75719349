"""The floor for benchmarks/agent_footprint.py: a bare Python process with the
agent's grpcio and protobuf (and its generated stubs) holding one idle stream to
a gateway, as an agent does: Hello, then a heartbeat (no host metrics) every
interval the Welcome names, and nothing else. Nothing of `agent` is imported.

    BERTH_FLOOR_ADDRESS=host:port BERTH_FLOOR_CREDENTIAL=agt_live_… python idle_stream.py

(The credential comes by the environment: it never goes in argv.)"""

import os
import queue
import sys
import threading
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from protocol import wire  # noqa: E402
from protocol.v1 import agent_pb2 as pb  # noqa: E402
from protocol.v1 import agent_pb2_grpc as pb_grpc  # noqa: E402

# The agent's channel options (agent/daemon.py), copied: importing them would load `agent`.
CHANNEL_OPTIONS = [
    ("grpc.keepalive_time_ms", 60_000),
    ("grpc.keepalive_timeout_ms", 20_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
]


def main():
    outbox = queue.Queue()
    outbox.put(pb.AgentMessage(hello=pb.Hello(
        facts=pb.HostFacts(hostname="floor", cpu_cores=1, ram_mb=1, disk_gb=1),
        revision=wire.REVISION)))

    def requests():
        while True:
            yield outbox.get()

    def beat(every):
        while True:
            outbox.put(pb.AgentMessage(heartbeat=pb.Heartbeat(
                sent_at_unix_ms=int(time.time() * 1000))))
            time.sleep(every or 15)

    with grpc.insecure_channel(os.environ["BERTH_FLOOR_ADDRESS"], options=CHANNEL_OPTIONS) as ch:
        stream = pb_grpc.AgentGatewayStub(ch).Connect(requests(), metadata=[
            ("authorization", f"Bearer {os.environ['BERTH_FLOOR_CREDENTIAL']}")])
        for message in stream:
            if message.WhichOneof("body") == "welcome":
                threading.Thread(target=beat, args=(message.welcome.heartbeat_seconds,),
                                 daemon=True).start()


if __name__ == "__main__":
    main()
