"""Benchmark: GET /api/public/v1/projects on `berth serve` while slow clients hold
connections open, side by side with the same load without them.

A real `berth serve` (embedded mode, SQLite in a temporary data dir, default
HTTP settings) serves 20 projects. Legitimate clients (keep-alive connections in
separate processes, read-only keys rotated as in projects_list.py) load it for
--seconds per round. In every other round, a separate process keeps --slow
connections open that send a request line, one header line and then one more
header byte every --trickle seconds, and reconnect whenever the server cuts them
(the header deadline); they open over --ramp seconds, so the cuts and reconnections
come at a steady rate. Rounds alternate so a noisy machine hurts both alike; the
median round of each is reported with PASS/FAIL against the targets (with slow
clients: p99 under 1 s and at least 90% of the undisturbed throughput). Exits 1
on FAIL. Loopback only. As in projects_list.py, the load average at the start
and the server's CPU and context switches per request are printed too.

    python benchmarks/slow_clients.py [--rounds 5] [--seconds 10] [--concurrency 8]
                                      [--slow 1000] [--trickle 1.0] [--ramp 10]
"""

import argparse
import math
import multiprocessing
import os
import resource
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import projects_list as bench  # same directory: setup, load generator, key rotation

P99_TARGET_MS = 1000
RATIO_TARGET = 0.90
PATH = "/api/public/v1/projects"
BERTH = str(Path(sys.executable).with_name("berth"))


# --- slow clients (their own process) -------------------------------------------

def slow_clients(port, n, trickle, ramp, hold, held, cuts, stop):
    """While `hold` is set, keep n connections trickling header bytes; reopen each one
    the server closes. `held`/`cuts`: shared counters (open now, closed by the server).
    One thread and a selector: the attacker's own CPU is not what is measured."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, n + 256)), hard))
    head = f"GET {PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ".encode()
    sel = selectors.DefaultSelector()
    socks, turn = [], 0
    tick = 0.01
    per_tick = max(1, round(n * tick / trickle))  # each socket gets a byte every `trickle` s
    # Opened over `ramp` seconds (one header deadline): the server's cuts, and so the
    # reconnections, come at a steady rate, as they settle to with a persistent attacker.
    opens_per_tick = max(1, round(n * tick / ramp))

    def drop(sock):
        sel.unregister(sock)
        sock.close()
        socks.remove(sock)

    while not stop.is_set():
        # Readable means the server closed it (or, unexpectedly, answered): reopen.
        for key, _ in sel.select(timeout=tick):
            drop(key.fileobj)
            with cuts.get_lock():
                cuts.value += 1
        if not hold.is_set():
            for sock in list(socks):
                drop(sock)
        for _ in range(min(n - len(socks), opens_per_tick) if hold.is_set() else 0):
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
                sock.setblocking(False)
                sock.send(head)
            except OSError:
                break
            sel.register(sock, selectors.EVENT_READ)
            socks.append(sock)
        for _ in range(min(per_tick, len(socks))):
            turn = (turn + 1) % len(socks)
            try:
                socks[turn].send(b"a")
            except OSError:
                pass  # closed by the server: the selector reports it
        held.value = len(socks)


# --- the server -------------------------------------------------------------------

def start_serve(data_dir):
    # No agent wheelhouse build in the background: it would load the machine.
    env = {**os.environ, "CP_DATA_DIR": data_dir, "CP_SECRET_KEY": bench.SECRET,
           "CP_WHEELHOUSE_AUTO_BUILD": "0"}
    env.pop("CP_DATABASE_URL", None)  # embedded mode: SQLite in the data dir
    log = open(os.path.join(data_dir, "serve.log"), "w+")  # closed by the caller
    proc = subprocess.Popen([BERTH, "serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    return proc, log, bench.wait_listening(proc, log, "berth serve", timeout=60)


def line(name, r, cost=None):
    text = f"{name:<9}: {r[0]:.0f} req/s  p50 {r[1]:.1f} ms  p99 {r[2]:.1f} ms"
    return text + (bench.cost_text(cost) if cost is not None else "")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="of each kind")
    parser.add_argument("--seconds", type=float, default=10.0, help="per round")
    parser.add_argument("--concurrency", type=int, default=8, help="client threads in all")
    parser.add_argument("--slow", type=int, default=1000, help="slow connections")
    parser.add_argument("--trickle", type=float, default=1.0, help="seconds between bytes")
    parser.add_argument("--ramp", type=float, default=10.0,
                        help="seconds over which the slow connections open (default: "
                             "the default header deadline)")
    args = parser.parse_args()

    conc = args.concurrency
    cap = math.ceil(args.seconds * bench.MAX_RATE / conc)
    # As projects_list.py: each thread rotates through its own keys, round i from index
    # i * (WARMUP + cap), so no key is sent more than KEY_BUDGET requests (no 429).
    keys_per_thread = math.ceil(2 * args.rounds * (bench.WARMUP + cap) / bench.KEY_BUDGET)
    ctx = multiprocessing.get_context("spawn")
    tmp = tempfile.mkdtemp(prefix="berth-bench-")
    server = slow = None
    hold, stop = ctx.Event(), ctx.Event()
    held, cuts = ctx.Value("i", 0), ctx.Value("i", 0)
    rounds = {"alone": [], "slow": []}
    costs = {"alone": [], "slow": []}
    load = bench.load_line()
    print(load, flush=True)
    try:
        print(f"setup: {bench.N_PROJECTS} projects, {keys_per_thread * conc} read-only keys ...",
              flush=True)
        os.environ.pop("CP_DATABASE_URL", None)
        _, ro_keys = bench.setup(tmp, keys_per_thread * conc)
        key_slices = [ro_keys[i::conc] for i in range(conc)]
        server = start_serve(tmp)
        slow = ctx.Process(target=slow_clients,
                           args=(server[2], args.slow, args.trickle, args.ramp, hold, held, cuts,
                                 stop))
        slow.start()
        for i in range(2 * args.rounds):
            kind = ("alone", "slow")[(i + i // 2) % 2]  # alone, slow, slow, alone, ...
            if kind == "slow":
                hold.set()
                deadline = time.monotonic() + args.ramp + 30
                while held.value < args.slow and time.monotonic() < deadline:
                    time.sleep(0.1)
                cuts_before, held_before = cuts.value, held.value
            meter, t = bench.Meter(server[0].pid), time.monotonic()
            cpu = meter.read()[0]
            r, cost = meter.measure(bench.run_round, ctx, server[2], PATH, key_slices,
                                    i * (bench.WARMUP + cap), cap, args.seconds)
            cpu = (meter.read()[0] - cpu) / (time.monotonic() - t)
            rounds[kind].append(r)
            costs[kind].append(cost)
            # How much CPU the server got: a shared machine can starve it in any round.
            # Its cost per request (with slow clients: theirs included) beside it.
            extra = f"{bench.cost_text(cost)}  server CPU {cpu:.0%} of a core"
            if kind == "slow":
                extra += (f"; {held_before} slow connections held at the start, "
                          f"{held.value} at the end, {cuts.value - cuts_before} cut "
                          "by the server and reopened")
                hold.clear()
                while held.value and time.monotonic() < deadline + 60:
                    time.sleep(0.1)
            print(f"round {i + 1} {line(kind, r)}{extra}", flush=True)
    finally:
        stop.set()
        hold.clear()
        if slow is not None:
            slow.join(30)
            if slow.is_alive():
                slow.terminate()
        if server is not None:
            server[0].terminate()
            try:
                server[0].wait(timeout=30)
            except subprocess.TimeoutExpired:
                server[0].kill()
                server[0].wait()
            server[1].close()
        shutil.rmtree(tmp, ignore_errors=True)

    med = {k: sorted(rs, key=lambda r: r[0])[(len(rs) - 1) // 2] for k, rs in rounds.items()}
    p99 = max(r[2] for r in rounds["slow"])  # the worst round, not the median
    bad = {s: n for rs in rounds.values() for r in rs for s, n in r[3].items() if s != 200}
    ratio = med["slow"][0] / med["alone"][0]
    ok = ratio >= RATIO_TARGET and p99 < P99_TARGET_MS and not bad
    print(f"\nGET {PATH}, {bench.N_PROJECTS} rows, concurrency {conc}, median of "
          f"{args.rounds} rounds x {args.seconds:g} s each; slow: {args.slow} connections "
          f"trickling a header byte every {args.trickle:g} s; {load}")
    for kind in ("alone", "slow"):
        print(line(kind, med[kind], bench.median_cost(costs[kind])))
    print(f"ratio    : {ratio:.2f} (target >= {RATIO_TARGET:.2f}); worst p99 with slow clients "
          f"{p99:.1f} ms (target < {P99_TARGET_MS} ms)"
          + (f"; non-200 answers: {bad}" if bad else ""))
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
