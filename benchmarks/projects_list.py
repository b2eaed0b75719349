"""Benchmark: GET /api/public/v1/projects on Berth against a bare Flask app.

Both serve the same 20 rows from the same SQLite file through the same WSGI
server (waitress via control_plane.server.run_http, same thread count), each in
its own process. Rounds alternate between the two so that a noisy machine hurts
both alike; the median round of each is reported, with PASS/FAIL against the
target (Berth at least half the bare app's throughput). Always exits 0.

    python benchmarks/projects_list.py [--rounds 3] [--seconds 5] [--concurrency 8]
"""

import argparse
import http.client
import json
import math
import multiprocessing
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

TARGET = 0.50
SECRET = "bench"
N_PROJECTS = 20
CLIENT_PROCS = 2  # the load generator's own GIL must not be the bottleneck
WARMUP = 10  # requests per client thread before each round is timed
MAX_RATE = 2000  # req/s: a round also stops at seconds * MAX_RATE requests
KEY_BUDGET = 100  # requests per read-only key over the whole run (limit: 120/60 s)
PATHS = {"berth": "/api/public/v1/projects", "bare": "/projects"}


# --- servers (run in their own processes: `--serve berth|bare`) --------------

def berth_app(data_dir):
    from control_plane.app import create_app

    return create_app({"DATA_DIR": data_dir, "SECRET_KEY": SECRET})


def bare_app(data_dir):
    """The floor: Flask, one sqlite3 connection per thread, one query, jsonify."""
    import sqlite3

    from flask import Flask, jsonify

    from control_plane import config

    app = Flask("bare")
    # Same waitress thread count as Berth's (run_http reads it from the config).
    app.config["HTTP_THREADS"] = config.load(
        {"DATA_DIR": data_dir, "SECRET_KEY": SECRET})["HTTP_THREADS"]
    path = os.path.join(data_dir, "berth.sqlite3")
    cols = ("id", "name", "erp_version", "git_repo_url", "default_branch", "server_id",
            "created_at")
    sql = (f"SELECT {', '.join(cols)} FROM project WHERE deleted_at IS NULL "
           "ORDER BY created_at, id LIMIT 20")
    local = threading.local()

    @app.get("/projects")
    def projects():
        if not hasattr(local, "conn"):
            local.conn = sqlite3.connect(path)  # WAL mode is already set on the file
        data = [dict(zip(cols, row, strict=True)) for row in local.conn.execute(sql)]
        return jsonify({"data": data, "pagination": {
            "has_more": False, "next_cursor": None, "total": len(data)}})

    return app


def serve(kind, data_dir):
    from control_plane.server import run_http

    app = berth_app(data_dir) if kind == "berth" else bare_app(data_dir)
    run_http(app, "127.0.0.1", 0)  # prints the bound port to stderr


def start_server(kind, data_dir):
    """Start `--serve kind` in a subprocess; return (process, log file, port)."""
    log = open(os.path.join(data_dir, f"{kind}.log"), "w+")  # closed by the caller
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve", kind,
                             "--data-dir", data_dir], stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        log.seek(0)
        match = re.search(r"listening on http://127\.0\.0\.1:(\d+)", log.read())
        if match:
            return proc, log, int(match.group(1))
        time.sleep(0.05)
    proc.kill()
    log.seek(0)
    tail = log.read()[-2000:]
    log.close()
    raise RuntimeError(f"{kind} server did not start:\n{tail}")


# --- data ---------------------------------------------------------------------

def setup(data_dir, n_keys):
    """Migrate, then 20 projects and n_keys read-only keys. Returns (rw key, ro keys)."""
    from control_plane import migrate
    from control_plane.services import keys, orgs, projects, servers

    app = berth_app(data_dir)
    db = app.extensions["berth"].db
    migrate.upgrade(db)
    org = orgs.create_org("bench")
    server = servers.create_server(name="s", provider="p", cpu_cores=4, ram_mb=8192,
                                   disk_gb=100, org_id=org.id)
    rw, rw_raw = keys.create_key(org.id, "bench-rw", "full_access", "organization")
    for i in range(N_PROJECTS):
        projects.create_project(rw, name=f"project-{i:02d}", server_id=server.id)
    ro = [keys.create_key(org.id, f"ro{i}", "read_only", "organization")[1]
          for i in range(n_keys)]
    db.close()
    return rw_raw, ro


# --- load generator -----------------------------------------------------------

def client_proc(port, path, key_slices, offset, cap, seconds, barrier, out):
    """One client process: a thread per key slice, each on a keep-alive connection."""
    def worker(keys):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        seq = offset  # this round's own stretch of the key rotation (see main)
        lat, statuses = [], Counter()

        def one(record):
            nonlocal seq, conn
            headers = {"Authorization": f"Bearer {keys[seq % len(keys)]}"}
            seq += 1
            t = time.perf_counter()
            try:
                conn.request("GET", path, headers=headers)
                resp = conn.getresponse()
                resp.read()
                status = resp.status
            except (OSError, http.client.HTTPException):
                status = "error"
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            if record:
                lat.append(time.perf_counter() - t)
                statuses[status] += 1

        for _ in range(WARMUP):
            one(False)
        barrier.wait(timeout=120)  # every thread starts timing together
        t0 = time.perf_counter()
        while len(lat) < cap and time.perf_counter() - t0 < seconds:
            one(True)
        elapsed = time.perf_counter() - t0
        conn.close()
        return lat, statuses, elapsed

    with ThreadPoolExecutor(len(key_slices)) as pool:
        out.put(list(pool.map(worker, key_slices)))


def run_round(ctx, port, path, key_slices, offset, cap, seconds):
    """Returns (req/s, p50 ms, p99 ms, status counts) for one timed round."""
    barrier = ctx.Barrier(len(key_slices) + 1)
    out = ctx.Queue()
    procs = [ctx.Process(target=client_proc,
                         args=(port, path, key_slices[i::CLIENT_PROCS], offset, cap, seconds,
                               barrier, out))
             for i in range(min(CLIENT_PROCS, len(key_slices)))]
    try:
        for p in procs:
            p.start()
        barrier.wait(timeout=120)
        results = [r for _ in procs for r in out.get(timeout=seconds + 120)]
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
    lat = [x for r in results for x in r[0]]
    statuses = sum((r[1] for r in results), Counter())
    q = statistics.quantiles(lat, n=100, method="inclusive")
    return len(lat) / max(r[2] for r in results), q[49] * 1000, q[98] * 1000, statuses


def line(name, r):
    return f"{name:<6} : {r[0]:.0f} req/s  p50 {r[1]:.1f} ms  p99 {r[2]:.1f} ms"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0, help="per round")
    parser.add_argument("--concurrency", type=int, default=8, help="client threads in all")
    parser.add_argument("--serve", choices=PATHS, help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve(args.serve, args.data_dir)  # a server subprocess, see start_server

    conc = args.concurrency
    cap = math.ceil(args.seconds * MAX_RATE / conc)  # timed requests per thread per round
    # Each thread rotates through its own keys, round i from index i * (WARMUP + cap): over
    # the run no key is sent more than KEY_BUDGET requests, so Berth never answers 429.
    keys_per_thread = math.ceil(args.rounds * (WARMUP + cap) / KEY_BUDGET)
    ctx = multiprocessing.get_context("spawn")  # clients share no state with this process
    tmp = tempfile.mkdtemp(prefix="berth-bench-")
    servers = []
    try:
        print(f"setup: {N_PROJECTS} projects, {keys_per_thread * conc} read-only keys ...",
              flush=True)
        rw_key, ro_keys = setup(tmp, keys_per_thread * conc)
        key_slices = [ro_keys[i::conc] for i in range(conc)]
        ports = {}
        for kind in PATHS:
            proc, log, ports[kind] = start_server(kind, tmp)
            servers.append((proc, log))
        for kind, path in PATHS.items():  # both must answer the same 20 rows
            conn = http.client.HTTPConnection("127.0.0.1", ports[kind], timeout=10)
            conn.request("GET", path, headers={"Authorization": f"Bearer {rw_key}"})
            resp = conn.getresponse()
            body = json.loads(resp.read())
            conn.close()
            assert resp.status == 200 and len(body["data"]) == N_PROJECTS, (kind, body)

        rounds = {kind: [] for kind in PATHS}
        for i in range(args.rounds):
            # Alternate which app goes first, so neither always runs on a warmer box.
            order = list(PATHS) if i % 2 == 0 else list(PATHS)[::-1]
            for kind in order:
                r = run_round(ctx, ports[kind], PATHS[kind], key_slices,
                              i * (WARMUP + cap), cap, args.seconds)
                rounds[kind].append(r)
                print(f"round {i + 1} {line(kind, r)}", flush=True)
    finally:
        for proc, log in servers:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()
        shutil.rmtree(tmp, ignore_errors=True)

    med = {kind: sorted(rs, key=lambda r: r[0])[(len(rs) - 1) // 2]
           for kind, rs in rounds.items()}
    bad = {kind: {s: n for r in rs for s, n in r[3].items() if s != 200}
           for kind, rs in rounds.items()}
    ratio = med["berth"][0] / med["bare"][0]
    verdict = "PASS" if ratio >= TARGET else "FAIL"
    if any(bad.values()):
        verdict = f"INVALID RUN (non-200 responses: {bad})"
    print(f"\nGET /api/public/v1/projects, {N_PROJECTS} rows, concurrency {conc}, "
          f"median of {args.rounds} rounds x {args.seconds:g} s")
    print(line("berth", med["berth"]))
    print(line("bare", med["bare"]))
    print(f"ratio  : {ratio:.2f} (target >= {TARGET:.2f}) {verdict}")


if __name__ == "__main__":
    main()
    sys.exit(0)
