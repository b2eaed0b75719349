"""Benchmark: GET /api/public/v1/projects on PostgreSQL through HAProxy in front of 1, 2
and 4 `berth web` processes (Redis between them for the rate limits), side by side in
one run: rounds alternate between the three balancers, which run together over the
same four processes (one balancer with one backend, one with two, one with four).
Needs `haproxy` (Debian's package) on the PATH; PostgreSQL and Redis as the tests
start them. Same data, keys and load generator as benchmarks/projects_list.py.

    python benchmarks/web_scaling.py [--rounds 3] [--seconds 5] [--concurrency 8]
"""

import argparse
import math
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import projects_list as pl  # noqa: E402

from tests.support.services import free_port  # noqa: E402

LEVELS = (1, 2, 4)
BERTH = str(Path(sys.executable).with_name("berth"))
HAPROXY_CFG = """global
    maxconn 4000
defaults
    mode http
    timeout connect 1s
    timeout client 30s
    timeout server 30s
    option http-keep-alive
"""


def start_web(env, data_dir, i):
    log = open(os.path.join(data_dir, f"web-{i}.log"), "w+")
    proc = subprocess.Popen([BERTH, "web", "--http", "127.0.0.1:0"], env=env,
                            stdout=subprocess.DEVNULL, stderr=log)
    return proc, log, pl.wait_listening(proc, log, f"web {i}", timeout=60)


def cpu_now(webs):
    """(monotonic s, CPU s of the web processes, CPU s of the machine, idle s)."""
    import psutil

    machine = psutil.cpu_times()
    web = sum(sum(w.cpu_times()[:2]) for w in webs)
    return time.monotonic(), web, sum(machine) - machine.idle - machine.iowait, machine.idle


def cores(before, after):
    """Where the round's CPU went, in cores: the web processes, the rest, idle."""
    wall = after[0] - before[0]
    web, busy, idle = ((a - b) / wall for a, b in zip(after[1:], before[1:], strict=True))
    return web, busy - web, idle


def start_balancers(ports, data_dir):
    """One HAProxy process, a frontend per level over the first `level` web ports."""
    cfg, fronts = HAPROXY_CFG, {}
    for level in LEVELS:
        fronts[level] = free_port()
        servers = "\n".join(f"    server w{i} 127.0.0.1:{p}" for i, p in enumerate(ports[:level]))
        cfg += (f"frontend f{level}\n    bind 127.0.0.1:{fronts[level]}\n"
                f"    default_backend b{level}\nbackend b{level}\n    balance roundrobin\n"
                f"{servers}\n")
    return run_haproxy(cfg, data_dir), fronts


def run_haproxy(cfg, data_dir):
    """Debian's HAProxy in the foreground on `cfg` (also used by gateway_failover.py)."""
    path = Path(data_dir) / "haproxy.cfg"
    path.write_text(cfg)
    log = Path(data_dir) / "haproxy.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(["haproxy", "-db", "-f", str(path)], stdout=out, stderr=out)
    time.sleep(1)
    if proc.poll() is not None:
        raise SystemExit(f"haproxy did not start:\n{log.read_text()}")
    return proc


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    if not shutil.which("haproxy"):
        raise SystemExit("haproxy is not installed (apt-get install haproxy)")
    from tests.support.services import Redis

    pg, url = pl.start_postgres()
    redis = Redis()
    tmp = tempfile.mkdtemp(prefix="berth-scale-")
    procs = []
    conc = args.concurrency
    cap = math.ceil(args.seconds * pl.MAX_RATE / conc)
    keys_per_thread = math.ceil(len(LEVELS) * args.rounds * (pl.WARMUP + cap) / pl.KEY_BUDGET)
    try:
        os.environ["CP_DATABASE_URL"] = url  # setup() runs in this process
        _, ro_keys = pl.setup(tmp, keys_per_thread * conc)
        key_slices = [ro_keys[i::conc] for i in range(conc)]
        env = {**os.environ, "CP_DATA_DIR": tmp, "CP_REDIS_URL": redis.url, "CP_SECRET_KEY": pl.SECRET,
               "CP_WHEELHOUSE_AUTO_BUILD": "0", "CP_ACCESS_LOG": "0"}
        ports = []
        for i in range(max(LEVELS)):
            proc, log, port = start_web(env, tmp, i)
            procs.append((proc, log))
            ports.append(port)
        balancer, fronts = start_balancers(ports, tmp)
        import psutil
        webs = [psutil.Process(proc.pid) for proc, _ in procs]
        ctx = multiprocessing.get_context("spawn")
        results = {level: [] for level in LEVELS}
        offset = 0
        for r in range(args.rounds):
            order = LEVELS if r % 2 == 0 else LEVELS[::-1]
            for level in order:
                before = cpu_now(webs)
                res = pl.run_round(ctx, fronts[level], pl.PATHS["berth"], key_slices, offset,
                                   cap, args.seconds)
                web, rest, idle = cores(before, cpu_now(webs))
                offset += pl.WARMUP + cap
                results[level].append(res)
                bad = {s: n for s, n in res[3].items() if s != 200}
                print(f"round {r + 1} web x{level}: {res[0]:.0f} req/s  p50 {res[1]:.1f} ms  "
                      f"p99 {res[2]:.1f} ms  cores: web {web:.2f}, rest {rest:.2f}, idle "
                      f"{idle:.2f}{'  not 200: ' + str(bad) if bad else ''}", flush=True)
        balancer.terminate()
    finally:
        for proc, log in procs:
            proc.terminate()
            proc.wait(10)
            log.close()
        redis.stop()
        pg.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    med = {level: sorted(x[0] for x in rs)[(len(rs) - 1) // 2] for level, rs in results.items()}
    print(f"\nGET /api/public/v1/projects on postgresql through HAProxy, concurrency {conc}, "
          f"median of {args.rounds} rounds x {args.seconds:g} s, {os.cpu_count()} cores")
    for level in LEVELS:
        print(f"web x{level}: {med[level]:6.0f} req/s   {med[level] / med[1]:.2f}x of one process")


if __name__ == "__main__":
    main()
