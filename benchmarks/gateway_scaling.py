"""Benchmark: agents held with one and with two gateway processes, side by side.

Each round starts `berth gateway` processes (one, then two) on one SQLite database,
with Redis between them and the measuring side, behind Debian's HAProxy (TCP, least
connections, as deploy/haproxy.cfg does); simulated agents (real gRPC clients from
gateway_fanin.py, a TCP connection each) dial the balancer: N for one gateway, 2N for
two. Once every agent is held, live round trips are made as a web process makes them
(RedisRelay: published to whichever gateway holds the agent, the reply read back), to
agents chosen at random. Target: twice the streams at about the same live p99, under
100 ms.

    python benchmarks/gateway_scaling.py [--agents 4500] [--calls 400]

4,500 a gateway by default: the balancer takes two descriptors a connection, and
processes here may have 20,000 (9,000 agents and HAProxy's own fit).
"""

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gateway_fanin as fanin  # noqa: E402
from gateway_failover import held_by, start_balancer, start_gateway  # noqa: E402

from tests.support.services import Redis, free_port, stop_process  # noqa: E402


def live_p99(redis_url, server_ids, calls, concurrency=8):
    from control_plane.agent_link import NotConnected
    from control_plane.gateway.relay import RedisRelay
    from protocol.v1 import agent_pb2 as pb

    relay = RedisRelay(redis_url)
    unanswered = []

    def one(_):
        t0 = time.perf_counter()
        server_id = random.choice(server_ids)
        try:
            reply = relay.call(server_id, pb.LiveRequest(host_metrics=pb.HostMetricsRequest()), 10)
        except (NotConnected, TimeoutError) as exc:
            unanswered.append((server_id, repr(exc)))
            return None
        assert reply.host_metrics.cpu_percent == fanin.CANNED["cpu_percent"]
        return (time.perf_counter() - t0) * 1000

    with ThreadPoolExecutor(concurrency) as pool:
        latencies = sorted(ms for ms in pool.map(one, range(calls)) if ms is not None)
    if unanswered:
        print(f"  {len(unanswered)} of {calls} live requests unanswered, e.g. {unanswered[:3]}")
    return latencies[len(latencies) // 2], latencies[int(len(latencies) * 0.99) - 1], unanswered


def round_with(gateways, creds, redis_url, tmp, args):
    """Start `gateways` processes and len(creds) agents; (held, per gateway, connect s,
    p50, p99); everything stopped again after."""
    env = {**os.environ, "CP_DATA_DIR": tmp, "CP_SECRET_KEY": "bench", "CP_REDIS_URL": redis_url}
    ports = [free_port() for _ in range(gateways)]
    metrics = [free_port() for _ in range(gateways)]
    procs = [start_gateway(env, port, f"{tmp}/gw{gateways}-{i}.log", metrics[i])
             for i, port in enumerate(ports)]
    front = free_port()
    balancer = start_balancer(front, ports, tmp, maxconn=len(creds) + 500)
    workers = []
    try:
        time.sleep(3)  # every gateway checked up before the agents come
        welcomed = fanin.new_counter()
        workers = fanin.spawn_agents(f"127.0.0.1:{front}", creds, welcomed, own_connections=True)
        t0 = time.monotonic()
        while welcomed.value < len(creds) and time.monotonic() - t0 < 600:
            time.sleep(0.5)
        connect_s = time.monotonic() - t0
        time.sleep(args.hold)  # heartbeats flow meanwhile
        per_gateway = [held_by(m) for m in metrics]
        p50, p99, unanswered = live_p99(redis_url, [sid for sid, _ in creds], args.calls)
        return welcomed.value, per_gateway, connect_s, p50, p99, unanswered
    finally:
        for proc in workers:
            proc.terminate()
        for proc in workers:
            proc.join(30)
        stop_process(balancer)
        for proc, log in procs:
            stop_process(proc, log)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=4500, help="agents for one gateway")
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--hold", type=float, default=20, help="seconds held before measuring")
    args = parser.parse_args()
    if not shutil.which("haproxy"):
        raise SystemExit("haproxy is not installed (apt-get install haproxy)")
    fanin.raise_fd_limit()
    tmp = tempfile.mkdtemp(prefix="berth-gw-scaling-")
    redis = Redis()
    try:
        app, creds = fanin.setup(2 * args.agents, tmp)
        rows = []
        for gateways in (1, 2):
            wanted = creds[:gateways * args.agents]
            held, per, connect_s, p50, p99, unanswered = round_with(gateways, wanted, redis.url,
                                                                    tmp, args)
            rows.append((gateways, len(wanted), held, p99, unanswered))
            print(f"{gateways} gateway(s): {held} of {len(wanted)} agents held "
                  f"({' + '.join(map(str, per))}) in {connect_s:.1f} s; "
                  f"live p50 {p50:.1f} ms, p99 {p99:.1f} ms", flush=True)
    finally:
        redis.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    (_, n1, held1, p99_1, lost1), (_, n2, held2, p99_2, lost2) = rows
    ok = held1 == n1 and held2 == n2 and p99_2 < 100 and not lost1 and not lost2
    print(f"\nstreams held: {held2 / max(held1, 1):.2f}x with two gateways; live p99 "
          f"{p99_1:.1f} -> {p99_2:.1f} ms\ntarget: twice the streams at p99 < 100 ms "
          f"{'PASS' if ok else 'FAIL'}")
    del app


if __name__ == "__main__":
    main()
