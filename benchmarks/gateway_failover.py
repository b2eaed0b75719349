"""Benchmark: how fast simulated agents come back after a gateway is killed.

Two `berth gateway` processes on one SQLite database behind Debian's HAProxy (TCP,
least connections, health checks every second, sessions cut when a gateway is marked
down, as deploy/haproxy.cfg does), N simulated agents (real gRPC clients from
gateway_fanin.py, reconnecting with the agent's backoff) dialing the balancer. One
gateway is killed with SIGKILL; the held-stream count is sampled every 20 ms until
every agent is held again. Reports the time until 50 %, 99 % and all of the dropped
agents were back, and the highest reconnect rate in any 100 ms (the backoff's jitter
spreads them: no thundering herd). Target: p99 under 10 s.

    python benchmarks/gateway_failover.py [--agents 1000]
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gateway_fanin as fanin  # noqa: E402
from web_scaling import run_haproxy  # noqa: E402

from tests.support.services import free_port, stop_process  # noqa: E402

BERTH = str(Path(sys.executable).with_name("berth"))


def held_by(metrics_port):
    from urllib.request import urlopen

    text = urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    [line] = [ln for ln in text.splitlines() if ln.startswith("berth_gateway_agents_connected ")]
    return int(float(line.split()[1]))


def start_gateway(env, port, log_path, metrics_port):
    log = open(log_path, "w")
    proc = subprocess.Popen([BERTH, "gateway", "--grpc", f"127.0.0.1:{port}",
                             "--metrics", f"127.0.0.1:{metrics_port}"], env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while "gateway listening" not in Path(log_path).read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"gateway did not start:\n{Path(log_path).read_text()}")
        time.sleep(0.1)
    return proc, log


def start_balancer(front, backends, data_dir, maxconn=8000):
    servers = "\n".join(f"    server gw{i} 127.0.0.1:{p} check inter 1s fall 2 rise 1 "
                        "on-marked-down shutdown-sessions"
                        for i, p in enumerate(backends))
    cfg = (f"global\n    maxconn {maxconn}\ndefaults\n    mode tcp\n    timeout connect 1s\n"
           f"    timeout client 6h\n    timeout server 6h\n"
           f"frontend grpc\n    bind 127.0.0.1:{front}\n    default_backend gateways\n"
           f"backend gateways\n    balance leastconn\n    retries 3\n    option redispatch 1\n"
           f"{servers}\n")
    return run_haproxy(cfg, data_dir)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=1000)
    args = parser.parse_args()
    if not shutil.which("haproxy"):
        raise SystemExit("haproxy is not installed (apt-get install haproxy)")
    fanin.raise_fd_limit()
    tmp = tempfile.mkdtemp(prefix="berth-failover-")
    procs, workers = [], []
    try:
        app, creds = fanin.setup(args.agents, tmp)
        env = {**os.environ, "CP_DATA_DIR": tmp, "CP_SECRET_KEY": "bench"}
        ports = [free_port(), free_port()]
        metrics = [free_port(), free_port()]
        gateways = [start_gateway(env, port, f"{tmp}/gw{i}.log", metrics[i])
                    for i, port in enumerate(ports)]
        procs += gateways
        front = free_port()
        balancer = start_balancer(front, ports, tmp)
        time.sleep(3)  # both gateways checked up before the agents come
        welcomed = fanin.new_counter()
        workers += fanin.spawn_agents(f"127.0.0.1:{front}", creds, welcomed, own_connections=True)
        t0 = time.monotonic()
        while welcomed.value < args.agents and time.monotonic() - t0 < 300:
            time.sleep(0.2)
        print(f"{welcomed.value} agents held through the balancer in "
              f"{time.monotonic() - t0:.1f} s", flush=True)
        time.sleep(5)
        held = [held_by(m) for m in metrics]
        print(f"held per gateway: {held[0]} and {held[1]}", flush=True)

        gateways[0][0].send_signal(signal.SIGKILL)
        killed = time.monotonic()
        samples = []  # (seconds after the kill, held)
        while time.monotonic() - killed < 60:
            samples.append((time.monotonic() - killed, welcomed.value))
            if len(samples) > 50 and samples[-1][1] == args.agents and \
                    min(h for _, h in samples) < args.agents:
                break
            time.sleep(0.02)
        balancer.terminate()
    finally:
        for proc in workers:
            proc.terminate()
        for proc, log in procs:
            stop_process(proc, log)
        shutil.rmtree(tmp, ignore_errors=True)

    low = min(h for _, h in samples)
    dropped = args.agents - low
    at_low = next(t for t, h in samples if h == low)

    def back(fraction):
        need = low + fraction * dropped
        return next((t for t, h in samples if t >= at_low and h >= need), None)

    rate = 0
    for t, _ in samples:  # the most agents welcomed again within any 100 ms
        window = [hh for tt, hh in samples if t - 0.1 <= tt <= t]
        rate = max(rate, window[-1] - window[0])
    p50, p99, p100 = back(0.5), back(0.99), back(1.0)

    def fmt(v):
        return f"{v:.1f} s" if v is not None else "not back within 60 s"

    print(f"gateway killed: {dropped} of {args.agents} agents dropped (lowest held at "
          f"{at_low:.1f} s)\nback after the kill: 50 % {fmt(p50)}, 99 % {fmt(p99)}, "
          f"all {fmt(p100)}\nmost reconnects in 100 ms: {rate} ({rate * 10}/s)\n"
          f"target: p99 < 10 s {'PASS' if p99 is not None and p99 < 10 else 'FAIL'}")
    del app


if __name__ == "__main__":
    main()
