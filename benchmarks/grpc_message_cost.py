"""Benchmark: the CPU one message each way costs on the agent's gRPC stream, alone.

The floor under a shell keystroke's cost (shell_keystroke.py): the gateway's kind of
server (grpc.aio, in a process of its own) echoes each AgentMessage as a
ControlMessage to a client made as the agent makes its stream (the synchronous API,
its requests drawn from a queue). N round trips, `--gap` seconds apart (an
interactive pace) and back to back; printed: the CPU a round trip took in each
process. No target: it says what the protocol's library costs, before Berth's code.

    python benchmarks/grpc_message_cost.py [--round-trips 500] [--gap 0.01]
"""

import argparse
import asyncio
import os
import queue
import subprocess
import sys
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from protocol.v1 import agent_pb2 as pb  # noqa: E402
from protocol.v1 import agent_pb2_grpc as pb_grpc  # noqa: E402


def cpu_seconds(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Echo(pb_grpc.AgentGatewayServicer):
    async def Connect(self, messages, context):  # noqa: N802 - gRPC method name
        async for message in messages:
            yield pb.ControlMessage(shell=pb.ShellFrame(data=message.shell.data))


async def serve():
    server = grpc.aio.server()
    pb_grpc.add_AgentGatewayServicer_to_server(Echo(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    await server.wait_for_termination()


def measure(port, round_trips, gap, server_pid):
    outbox = queue.Queue()

    def requests():
        while (message := outbox.get()) is not None:
            yield message
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        replies = iter(pb_grpc.AgentGatewayStub(channel).Connect(requests()))
        keystroke = pb.AgentMessage(shell=pb.ShellFrame(data=b"x"))
        outbox.put(keystroke)
        next(replies)  # the stream is up
        client, server = time.process_time(), cpu_seconds(server_pid)
        for _ in range(round_trips):
            outbox.put(keystroke)
            next(replies)
            if gap:
                time.sleep(gap)
        client, server = time.process_time() - client, cpu_seconds(server_pid) - server
        outbox.put(None)
    return client / round_trips * 1e3, server / round_trips * 1e3


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--round-trips", type=int, default=500)
    parser.add_argument("--gap", type=float, default=0.01)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve())
        return
    server = subprocess.Popen([sys.executable, __file__, "--serve"], stdout=subprocess.PIPE,
                              text=True)
    try:
        port = int(server.stdout.readline())
        for gap in (args.gap, 0.0):
            client, served = measure(port, args.round_trips, gap, server.pid)
            pace = f"{gap * 1e3:g} ms apart" if gap else "back to back"
            print(f"{args.round_trips} round trips {pace}: CPU a round trip, synchronous "
                  f"client {client:.3f} ms, grpc.aio server {served:.3f} ms")
    finally:
        server.kill()


if __name__ == "__main__":
    main()
