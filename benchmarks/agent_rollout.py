"""Agent upgrade rollout: 100 agents behind the control plane's version upgraded by
one request, with at most CP_AGENT_UPGRADE_CONCURRENCY (10) restarting at once.

The gateway and the rollout job (`agent-upgrades`, every 5 s as the scheduler runs
it) are the real ones; the agents are simulated (real gRPC clients in a worker
process, as in gateway_fanin.py): on an `upgrade` command each acknowledges it,
drops its stream, "restarts" for 1 to 3 s (what a real exec into a new virtualenv
and its imports take), connects again with the new version and answers the
command, as the real agent answers it from its journal. Installing the new version
(a download and a pip install before the restart) is not simulated: it holds no
rollout slot's restart. Usage:

    python benchmarks/agent_rollout.py [--agents 100] [--concurrency 10]
"""

import argparse
import asyncio
import multiprocessing as mp
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

from control_plane.agent_link import Plain

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.gateway_fanin import raise_fd_limit, setup  # noqa: E402

OLD = "0.2.0.dev1"


def run_agents(address, creds, restarting, most, upgraded):
    """Simulated agents; `restarting` counts those between dropping their stream
    for an upgrade and being welcomed in their new version, `most` its peak."""
    import grpc

    from protocol import wire
    from protocol.v1 import agent_pb2 as pb
    from protocol.v1 import agent_pb2_grpc as pb_grpc

    raise_fd_limit()

    def count(by):
        with restarting.get_lock():
            restarting.value += by
            most.value = max(most.value, restarting.value)

    async def agent(server_id, credential):
        state = {"version": OLD, "done": {}, "restarting": False}
        while True:
            upgrade = await session(server_id, credential, state)
            if upgrade is None:
                await asyncio.sleep(random.uniform(0.5, 2))
                continue
            state["restarting"] = True
            count(+1)
            await asyncio.sleep(random.uniform(1, 3))  # exec, imports, a new channel
            state["version"] = upgrade

    async def session(server_id, credential, state):
        async with grpc.aio.insecure_channel(address) as channel:
            outbox = asyncio.Queue()
            await outbox.put(pb.AgentMessage(hello=pb.Hello(revision=wire.REVISION, facts=(
                pb.HostFacts(hostname=f"sim-{server_id[:8]}", agent_version=state["version"])))))

            async def outgoing():
                while True:
                    yield await outbox.get()

            async def heartbeats():  # as a real agent's, every 15 s (else it counts as gone)
                while True:
                    await asyncio.sleep(15)
                    await outbox.put(pb.AgentMessage(heartbeat=pb.Heartbeat(
                        sent_at_unix_ms=int(time.time() * 1000))))

            call = pb_grpc.AgentGatewayStub(channel).Connect(
                outgoing(), metadata=(("authorization", f"Bearer {credential}"),))
            beats = asyncio.create_task(heartbeats())
            try:
                return await answer(call, outbox, state)
            finally:
                beats.cancel()

    async def answer(call, outbox, state):
        """The stream's messages until an upgrade restarts it: the version to restart into."""
        async for message in call:
            kind = message.WhichOneof("body")
            if kind == "welcome" and state["restarting"]:
                state["restarting"] = False
                count(-1)
                with upgraded.get_lock():
                    upgraded.value += 1
            elif kind == "command":
                command = message.command
                if command.id in state["done"]:  # asked again on the new stream
                    await outbox.put(pb.AgentMessage(ack=pb.CommandAck(
                        command_id=command.id, duplicate=True)))
                    await outbox.put(pb.AgentMessage(result=state["done"][command.id]))
                    continue
                await outbox.put(pb.AgentMessage(ack=pb.CommandAck(command_id=command.id)))
                payload = wire.payload(command)
                state["done"][command.id] = pb.CommandResult(
                    command_id=command.id, ok=True, result_json="{}")
                await asyncio.sleep(0.05)  # the ack on its way, then the exec
                call.cancel()
                return payload["version"]
        return None

    async def main():
        asyncio.get_running_loop().set_exception_handler(lambda loop, context: None)
        await asyncio.gather(*(agent(sid, cred) for sid, cred in creds))

    asyncio.run(main())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--verbose", action="store_true", help="the rollout's state each turn")
    args = parser.parse_args()
    raise_fd_limit()

    from control_plane import __version__
    from control_plane.gateway.server import Gateway
    from control_plane.models import AgentUpgrade, Server
    from control_plane.scheduler import UPGRADE_SECONDS
    from control_plane.services.servers import upgrades

    ctx = mp.get_context("spawn")
    restarting, most, upgraded = (ctx.Value("i", 0) for _ in range(3))
    with tempfile.TemporaryDirectory() as data_dir:
        app, creds = setup(args.agents, data_dir)
        settings = app.extensions["berth"].settings
        settings.update(AGENT_UPGRADE_CONCURRENCY=args.concurrency, PUBLIC_URL="http://bench")
        Path(data_dir, "wheelhouse.tar").write_bytes(b"simulated")  # its sha256 is sent
        gateway = Gateway()
        port = gateway.start_in_thread("127.0.0.1:0")
        worker = ctx.Process(target=run_agents, daemon=True, args=(
            f"127.0.0.1:{port}", creds, restarting, most, upgraded))
        worker.start()
        try:
            t0 = time.monotonic()
            while Server.select().where(Server.agent_version == OLD).count() < args.agents:
                time.sleep(0.5)
                assert time.monotonic() - t0 < 120, "the simulated agents did not connect"
            asked = upgrades.request()
            cpu0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
            turns = 0
            while AgentUpgrade.select().where(AgentUpgrade.status == "succeeded").count() \
                    < len(asked["queued"]) and time.monotonic() - t0 < 600:
                upgrades.roll_out(Plain(settings, gateway))
                turns += 1
                if args.verbose:
                    counts = {}
                    for (status,) in AgentUpgrade.select(AgentUpgrade.status).tuples():
                        counts[status] = counts.get(status, 0) + 1
                    print(f"{time.monotonic() - t0:5.1f} s {counts} restarting "
                          f"{restarting.value}", flush=True)
                time.sleep(UPGRADE_SECONDS)
            elapsed = time.monotonic() - t0
            cpu1 = resource.getrusage(resource.RUSAGE_SELF)
            done = AgentUpgrade.select().where(AgentUpgrade.status == "succeeded").count()
            current = Server.select().where(Server.agent_version == __version__).count()
        finally:
            worker.terminate()
            gateway.stop_from_thread()
    cpu_ms = (cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime) * 1000
    ok = done == args.agents and current == args.agents and most.value <= args.concurrency
    print(f"agents {args.agents}: queued {len(asked['queued'])}, upgraded {done} "
          f"(connected in the new version: {current}) in {elapsed:.1f} s, {turns} job turns; "
          f"at most {most.value} restarting at once (limit {args.concurrency}); "
          f"control plane CPU {cpu_ms / max(done, 1):.1f} ms an upgrade "
          f"{'PASS' if ok else 'FAIL'}")


if __name__ == "__main__":
    main()
