"""Gateway fan-in: how many connected agents one gateway process holds while
live-metrics round trips stay under 100 ms at p99.

Simulated agents are real gRPC clients (grpc.aio, one channel and one stream
each, heartbeats every 15 s, answering live requests) in worker processes; the
gateway runs as `berth serve` runs it, on its own event loop inside the
process that calls it. Usage:

    python benchmarks/gateway_fanin.py [--levels 2500,5000,10000] [--calls 300]

The simulated heartbeats carry host metrics, as real ones do, and the fleet alerts'
job and the servers' version check run every 15 s beside the streams.
"""

import argparse
import asyncio
import multiprocessing as mp
import random
import resource
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from control_plane.agent_link import Plain

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PER_PROCESS = 1250
TARGET = 10000  # agents one gateway process holds at live p99 < 100 ms
CANNED = dict(cpu_percent=12.5, memory_percent=40.0, disk_percent=55.0,
              memory_used_bytes=3 << 30, memory_total_bytes=8 << 30, disk_used_bytes=40 << 30,
              disk_total_bytes=80 << 30, network_rx_bytes_per_second=1000.0,
              network_tx_bytes_per_second=500.0, container_count=4, containers_running=4)


def raise_fd_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def rss_mb(pid="self"):
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


# --- simulated agents (worker processes) -----------------------------------

def run_agents(address, creds, welcomed, own_connections=False):
    """`welcomed` counts the streams currently held (welcomed, not yet dropped).
    gRPC shares one connection among a process's channels to the same address;
    `own_connections` gives each simulated agent its own, as real agents (one a
    server) have: a balancer in between then sees one connection an agent."""
    import grpc

    from protocol.v1 import agent_pb2 as pb
    from protocol.v1 import agent_pb2_grpc as pb_grpc

    raise_fd_limit()
    reply_body = pb.HostMetrics(**CANNED)

    async def agent(server_id, credential, environments=()):
        """Like the real agent: reconnect after any drop, backoff with jitter."""
        attempt = 0
        while True:
            try:
                await session(server_id, credential, environments)
                attempt = 0
            except Exception:
                attempt += 1
            await asyncio.sleep(random.uniform(0, min(30, 2 ** attempt)))

    async def session(server_id, credential, environments):
        options = [("grpc.use_local_subchannel_pool", 1)] if own_connections else []
        async with grpc.aio.insecure_channel(address, options=options) as channel:
            outbox = asyncio.Queue()
            await outbox.put(pb.AgentMessage(hello=pb.Hello(facts=pb.HostFacts(
                hostname=f"sim-{server_id[:8]}", agent_version="bench"))))

            async def outgoing():
                while True:
                    yield await outbox.get()

            async def heartbeats():
                metrics = pb.HostMetrics(**CANNED)
                stats = [pb.EnvironmentStats(  # its environments' containers, if it has any
                    environment_id=env_id, erp_cpu_percent=3.5, erp_memory_used_bytes=300 << 20,
                    postgres_cpu_percent=0.5, postgres_memory_used_bytes=120 << 20)
                    for env_id in environments]
                await asyncio.sleep(random.uniform(0, 15))
                while True:
                    # As a real agent's: its host's metrics (the fleet alerts follow them).
                    await outbox.put(pb.AgentMessage(heartbeat=pb.Heartbeat(
                        sent_at_unix_ms=int(time.time() * 1000), metrics=metrics,
                        environments=stats)))
                    await asyncio.sleep(15)

            call = pb_grpc.AgentGatewayStub(channel).Connect(
                outgoing(), metadata=(("authorization", f"Bearer {credential}"),))
            beats = asyncio.create_task(heartbeats())
            held = False
            try:
                async for message in call:
                    kind = message.WhichOneof("body")
                    if kind == "welcome":
                        held = True
                        with welcomed.get_lock():
                            welcomed.value += 1
                    elif kind == "request":
                        await outbox.put(pb.AgentMessage(reply=pb.LiveReply(
                            correlation_id=message.request.correlation_id,
                            host_metrics=reply_body)))
            finally:
                beats.cancel()
                if held:
                    with welcomed.get_lock():
                        welcomed.value -= 1

    async def main():
        # Dropped streams leave grpc's request tasks behind; not the gateway's concern.
        asyncio.get_running_loop().set_exception_handler(lambda loop, context: None)
        # Each (server id, credential[, environment ids]).
        await asyncio.gather(*(agent(*cred) for cred in creds))

    asyncio.run(main())


def spawn_agents(address, creds, welcomed, own_connections=False):
    """Worker processes of PER_PROCESS simulated agents each, dialing `address`."""
    ctx = mp.get_context("spawn")  # never fork a process in which gRPC runs
    workers = []
    for start in range(0, len(creds), PER_PROCESS):
        proc = ctx.Process(target=run_agents, daemon=True,
                           args=(address, creds[start:start + PER_PROCESS], welcomed,
                                 own_connections))
        proc.start()
        workers.append(proc)
    return workers


def new_counter():
    """The shared count of streams held, for `spawn_agents`."""
    return mp.get_context("spawn").Value("i", 0)


# --- the measuring side ------------------------------------------------------

def setup(n, data_dir, database_url=None):
    from control_plane.app import create_app
    from control_plane.infra import migrate, security
    from control_plane.infra.db import database
    from control_plane.models import Server
    from control_plane.services.accounts import orgs

    app = create_app({"DATA_DIR": data_dir, "SECRET_KEY": "bench",
                      **({"DATABASE_URL": database_url} if database_url else {})})
    migrate.upgrade(app.extensions["berth"].db)
    org = orgs.create_org("fan-in", server_quota=n)
    creds, rows = [], []
    for i in range(n):
        credential = "agt_live_" + security.random_token(40)
        rows.append({"organization": org.id, "name": f"sim-{i}", "provider": "bench",
                     "cpu_cores": 2, "ram_mb": 2048, "disk_gb": 20,
                     "agent_credential_hash": security.digest(credential)})
        creds.append(credential)
    with database.atomic():
        for start in range(0, n, 500):
            Server.insert_many(rows[start:start + 500]).execute()
    ids = {s.name: str(s.id) for s in Server.select(Server.id, Server.name)}
    return app, [(ids[f"sim-{i}"], creds[i]) for i in range(n)]


def fleet_jobs(app, stop):
    """What runs beside the streams in `berth serve`: the fleet alerts' job and the
    server list's version check (agent_behind), every 15 s, until `stop`."""
    from control_plane.models import Server
    from control_plane.services import agents
    from control_plane.services.servers import alerts

    settings = app.extensions["berth"].settings

    def run():
        while not stop.wait(15):
            alerts.sweep(Plain(settings))
            for (version,) in Server.select(Server.agent_version).tuples():
                agents.behind(version)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def live_round_trips(gateway, server_ids, calls, concurrency=8):
    from protocol.v1 import agent_pb2 as pb

    def one(_):
        sid = random.choice(server_ids)
        t0 = time.perf_counter()
        reply = gateway.call(sid, pb.LiveRequest(host_metrics=pb.HostMetricsRequest()), 10)
        assert reply.host_metrics.cpu_percent == CANNED["cpu_percent"]
        return (time.perf_counter() - t0) * 1000

    with ThreadPoolExecutor(concurrency) as pool:
        latencies = sorted(pool.map(one, range(calls)))
    return latencies[len(latencies) // 2], latencies[int(len(latencies) * 0.99) - 1]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--levels", default="2500,5000,10000")
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--hold", type=float, default=20, help="seconds at each level")
    parser.add_argument("--own-connections", action="store_true",
                        help="a TCP connection a simulated agent (default: gRPC shares one "
                             "among a worker process's agents)")
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    print(f"file descriptors allowed: {raise_fd_limit()}")

    from control_plane.gateway.server import Gateway

    with tempfile.TemporaryDirectory() as data_dir:
        app, creds = setup(max(levels), data_dir)
        gateway = Gateway()
        port = gateway.start_in_thread("127.0.0.1:0")
        baseline = rss_mb()
        welcomed = new_counter()
        workers, started, results = [], 0, []
        stop = threading.Event()
        fleet_jobs(app, stop)
        try:
            for level in levels:
                workers += spawn_agents(f"127.0.0.1:{port}", creds[started:level], welcomed,
                                        args.own_connections)
                started = max(started, level)
                t0 = time.monotonic()
                while (welcomed.value < level or len(gateway.sessions) < level) \
                        and time.monotonic() - t0 < 300:
                    time.sleep(0.5)
                connect_s = time.monotonic() - t0
                time.sleep(args.hold)  # heartbeats flow meanwhile
                held = len(gateway.sessions)
                p50, p99 = live_round_trips(gateway, [sid for sid, _ in creds[:level]], args.calls)
                results.append((level, held, p50, p99, rss_mb(), connect_s))
                print(f"N={level:5d} held={held:5d} live p50 {p50:6.1f} ms  p99 {p99:6.1f} ms  "
                      f"RSS {rss_mb():7.1f} MB (baseline {baseline:.1f})  connect {connect_s:5.1f} s",
                      flush=True)
        finally:
            stop.set()
            for proc in workers:
                proc.terminate()
            gateway.stop_from_thread()
    ok = [r for r in results if r[1] >= r[0] and r[3] < 100]
    best = max((r[0] for r in ok), default=0)
    rss = next((r[4] for r in results if r[0] == best), 0)
    print(f"\nlargest N held with live p99 < 100 ms: {best} (target >= {TARGET}) "
          f"{'PASS' if best >= TARGET else 'FAIL'}; gateway process RSS at that N: {rss:.0f} MB")
    del app


if __name__ == "__main__":
    main()
