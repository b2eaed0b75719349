"""Benchmark: GET /api/public/v1/projects on Berth against a bare Flask app.

Both serve the same 20 rows from the same database through the same HTTP
server (control_plane.http_server.run_http, same thread count), each in its own
process: on SQLite (one file), on PostgreSQL (a throwaway cluster, or an empty
database at --postgres-url / CP_BENCH_POSTGRES_URL), or both, one after the
other. The bare app runs the same query on one driver connection per thread
(sqlite3, psycopg2). Each round gives each app --seconds of load in --slices
slices, the apps taking turns slice by slice (one second each by default), so that
a noisy machine hurts both alike: a noisy spell of a few seconds falls on both
apps' slices, where it fell on one app's whole round when the apps took turns
round by round. The median round of each is reported, with PASS/FAIL
against the target (Berth at least 0.75 of the bare app's throughput). Exits 1
when any database FAILs. Each round and each summary also print what a request
cost the server process (CPU and context switches of all its threads, from
/proc) and, on a throwaway PostgreSQL cluster, its backends' CPU; the run starts
by printing the machine's load average, since the target must hold on a shared
machine too. Before the timed rounds each app serves an untimed warm-up round
(--warmup seconds): a server's first seconds (its caches filling, its first full
garbage collection) are not its steady state, and without it Berth's first round,
always the first of the run, also took whatever the machine was still finishing.

Both servers run on the first CPU the run may use, and the load generators on the
others (--no-pin: wherever the scheduler puts them; other work on the machine
shares every CPU either way). A server's threads pass the interpreter lock to each
other several times a request; spread over two CPUs, each pass wakes a thread on
the other one, and what a request costs then depends on where the scheduler put
the threads at that moment: with a core kept busy, a server's CPU per request
varied by 31-45 µs (standard deviation over 1 s turns) unpinned against 5-17
pinned, and a run's ratio went wherever the bare app's luck took it.

    python benchmarks/projects_list.py [--database sqlite|postgres|both] [--rounds 3]
                                       [--seconds 5] [--slices 5] [--concurrency 8]
                                       [--warmup 3] [--no-pin]
"""

import argparse
import glob
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

TARGET = 0.75
SECRET = "bench"
N_PROJECTS = 20
CLIENT_PROCS = 2  # the load generator's own GIL must not be the bottleneck
WARMUP = 10  # requests per client thread before each slice is timed
MAX_RATE = 2000  # req/s: a stretch of load also stops at seconds * MAX_RATE requests
KEY_BUDGET = 100  # requests per read-only key over the whole run (limit: 120/60 s)
PATHS = {"berth": "/api/public/v1/projects", "bare": "/projects"}


# --- servers (run in their own processes: `--serve berth|bare`) --------------

def settings(data_dir):
    """Berth's settings; the database is CP_DATABASE_URL when set (PostgreSQL)."""
    from control_plane.infra import config

    return config.load({"DATA_DIR": data_dir, "SECRET_KEY": SECRET})


def berth_app(data_dir):
    from control_plane.app import create_app

    return create_app({"DATA_DIR": data_dir, "SECRET_KEY": SECRET})


def bare_app(data_dir):
    """The floor: Flask, one driver connection per thread, one query, jsonify."""
    from flask import Flask, jsonify

    app = Flask("bare")
    conf = settings(data_dir)
    # Same server thread count as Berth's (run_http reads it from the config).
    app.config["HTTP_THREADS"] = conf["HTTP_THREADS"]
    url = conf["DATABASE_URL"]
    if url:
        import psycopg2

        def connect():
            conn = psycopg2.connect(url)
            conn.autocommit = True  # as Berth's: no transaction around a read
            return conn
    else:
        import sqlite3

        def connect():  # WAL mode is already set on the file
            return sqlite3.connect(os.path.join(data_dir, "berth.sqlite3"))
    cols = ("id", "name", "erp_version", "git_repo_url", "default_branch", "server_id",
            "created_at")
    sql = (f"SELECT {', '.join(cols)} FROM project WHERE deleted_at IS NULL "
           "ORDER BY created_at, id LIMIT 20")
    local = threading.local()

    @app.get("/projects")
    def projects():
        if not hasattr(local, "conn"):
            local.conn = connect()
        cursor = local.conn.cursor()
        cursor.execute(sql)
        data = [dict(zip(cols, row, strict=True)) for row in cursor.fetchall()]
        return jsonify({"data": data, "pagination": {
            "has_more": False, "next_cursor": None, "total": len(data)}})

    return app


def serve(kind, data_dir, cpu=None):
    from control_plane.http_server import run_http

    if cpu is not None:  # before any thread starts: they all inherit it
        os.sched_setaffinity(0, {cpu})

    app = berth_app(data_dir) if kind == "berth" else bare_app(data_dir)
    run_http(app, "127.0.0.1", 0)  # prints the bound port to stderr


def start_server(kind, data_dir, env, cpu=None):
    """Start `--serve kind` in a subprocess (on CPU `cpu` alone, when given); return
    (process, log file, port)."""
    log = open(os.path.join(data_dir, f"{kind}.log"), "w+")  # closed by the caller
    where = ["--cpu", str(cpu)] if cpu is not None else []
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve", kind,
                             "--data-dir", data_dir, *where], stdout=subprocess.DEVNULL,
                            stderr=log, env=env)
    return proc, log, wait_listening(proc, log, kind, timeout=30)


def wait_listening(proc, log, what, timeout):
    """The port a server subprocess prints it listens on (its stderr goes to `log`);
    kills it and raises with the log's tail if it does not start in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        log.seek(0)
        match = re.search(r"listening on http://127\.0\.0\.1:(\d+)", log.read())
        if match:
            return int(match.group(1))
        time.sleep(0.05)
    proc.kill()
    log.seek(0)
    tail = log.read()[-2000:]
    log.close()
    raise RuntimeError(f"{what} did not start:\n{tail}")


# --- what the servers cost (Linux: /proc) ---------------------------------------

CLK_TCK = os.sysconf("SC_CLK_TCK")


def load_line():
    """The machine's load when a run starts: the ratio is judged under other work too."""
    one, five, fifteen = os.getloadavg()
    return (f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores "
            "at the start")


def proc_usage(pids):
    """(CPU seconds, context switches) used so far by these processes: all their
    threads, and their children that have been waited for. A process gone is 0."""
    cpu = switches = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        cpu += sum(int(x) for x in fields[11:15]) / CLK_TCK  # utime stime cutime cstime
        for status in glob.glob(f"/proc/{pid}/task/*/status"):
            try:
                with open(status) as f:
                    # voluntary (waits: the GIL, I/O) and not (preempted)
                    switches += sum(int(ln.split()[1]) for ln in f if "ctxt_switches" in ln)
            except OSError:
                pass
    return cpu, switches


def children_of(pid):
    """The processes whose parent is `pid` (a PostgreSQL server's backends)."""
    found = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.split("/")[2]))
    return found


class Meter:
    """CPU and context switches of a server process (and of the database's backends,
    when it is a PostgreSQL server whose postmaster is known) over one round."""

    def __init__(self, server_pid, postmaster_pid=None):
        self.server, self.postmaster = server_pid, postmaster_pid

    def read(self):
        db = (proc_usage(children_of(self.postmaster))[0]
              if self.postmaster is not None else None)
        return (*proc_usage([self.server]), db)

    def used(self, run, *args):
        """Runs run(*args); returns (its result, what the server used meanwhile: CPU
        seconds, context switches, database CPU)."""
        before = self.read()
        r = run(*args)
        after = self.read()
        return r, tuple(None if b is None else a - b for a, b in zip(after, before, strict=True))

    def measure(self, run, *args):
        """Runs run(*args) (a round: run_round's result); returns (that result, the
        server's cost per request)."""
        r, used = self.used(run, *args)
        return r, per_request(used, r[4])


def per_request(used, n):
    """What a server used, per request it answered (the untimed first ones too)."""
    return tuple(None if u is None else u / n for u in used)


def cost_text(cost):
    cpu, cs, db = cost
    text = f"  CPU {cpu * 1e6:.0f} us/req  {cs:.1f} switches/req"
    if db is not None:
        text += f"  database CPU {db * 1e6:.0f} us/req"
    return text


# --- data ---------------------------------------------------------------------

def setup(data_dir, n_keys):
    """Migrate, then 20 projects and n_keys read-only keys. Returns (rw key, ro keys)."""
    from control_plane.infra import migrate
    from control_plane.services.accounts import keys, orgs
    from control_plane.services.projects import projects
    from control_plane.services.servers import servers

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
    db.close_all() if hasattr(db, "close_all") else db.close()
    return rw_raw, ro


# --- load generator -----------------------------------------------------------

def placement(pin):
    """(the servers' CPU, the load generators' CPUs), or (None, None) unpinned: with
    `pin` and at least two CPUs, the servers take the first and the clients the rest."""
    cpus = sorted(os.sched_getaffinity(0)) if pin and hasattr(os, "sched_getaffinity") else []
    return (cpus[0], set(cpus[1:])) if len(cpus) >= 2 else (None, None)


def client_proc(port, path, key_slices, offset, cap, seconds, barrier, out, cpus=None):
    """One client process: a thread per key slice, each on a keep-alive connection."""
    if cpus:
        os.sched_setaffinity(0, cpus)
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


def run_slice(ctx, port, path, key_slices, offset, cap, seconds, cpus=None):
    """One stretch of load: (latencies, status counts, seconds timed, requests sent in
    all: the untimed first ones too, the server answered them). `cpus`: where the
    client processes run (see placement)."""
    barrier = ctx.Barrier(len(key_slices) + 1)
    out = ctx.Queue()
    procs = [ctx.Process(target=client_proc,
                         args=(port, path, key_slices[i::CLIENT_PROCS], offset, cap, seconds,
                               barrier, out, cpus))
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
    return (lat, sum((r[1] for r in results), Counter()), max(r[2] for r in results),
            len(lat) + WARMUP * len(key_slices))


def run_round(ctx, port, path, key_slices, offset, cap, seconds, cpus=None):
    """One stretch of load, summed up (see summary)."""
    return summary([run_slice(ctx, port, path, key_slices, offset, cap, seconds, cpus)])


def summary(slices):
    """(req/s, p50 ms, p99 ms, status counts, requests sent) of a round's slices."""
    lat = [x for s in slices for x in s[0]]
    q = statistics.quantiles(lat, n=100, method="inclusive")
    return (len(lat) / sum(s[2] for s in slices), q[49] * 1000, q[98] * 1000,
            sum((s[1] for s in slices), Counter()), sum(s[3] for s in slices))


def line(name, r):
    return f"{name:<6} : {r[0]:.0f} req/s  p50 {r[1]:.1f} ms  p99 {r[2]:.1f} ms"


def start_postgres():
    """A throwaway cluster, as the tests start one (tests/support/services.py)."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from tests.support.services import Postgres

    pg = Postgres().start()
    return pg, pg.create_database("berth_bench")


def postmaster_pid(pg):
    with open(os.path.join(pg.dir, "data", "postmaster.pid")) as f:
        return int(f.readline())


def bench_database(args, database, url, where, postmaster=None):
    """Set up, serve and load both apps on one database; returns each app's rounds,
    each a (round result, per-request cost) pair. `where`: placement()'s answer.
    `postmaster`: the PostgreSQL server's pid, when it is known (its backends' CPU
    is counted too)."""
    conc = args.concurrency
    seconds = args.seconds / args.slices
    cap = math.ceil(seconds * MAX_RATE / conc)  # timed requests per thread per slice
    warm_cap = math.ceil(args.warmup * MAX_RATE / conc)
    # Each thread rotates through its own keys, the warm-up first, then slice after slice,
    # each WARMUP + cap further on: over the run no key is sent more than KEY_BUDGET
    # requests, so Berth never answers 429.
    warm = WARMUP + warm_cap if args.warmup > 0 else 0
    keys_per_thread = math.ceil((warm + args.rounds * args.slices * (WARMUP + cap))
                                / KEY_BUDGET)
    ctx = multiprocessing.get_context("spawn")  # clients share no state with this process
    server_cpu, client_cpus = where
    tmp = tempfile.mkdtemp(prefix="berth-bench-")
    # The URL reaches the servers in their environment, never in argv.
    env = {k: v for k, v in os.environ.items() if k != "CP_DATABASE_URL"}
    if url:
        env["CP_DATABASE_URL"] = url
    saved = os.environ.pop("CP_DATABASE_URL", None)
    servers = []
    try:
        print(f"{database}: setup: {N_PROJECTS} projects, {keys_per_thread * conc} read-only "
              "keys ...", flush=True)
        if url:  # for setup(), in this process
            os.environ["CP_DATABASE_URL"] = url
        rw_key, ro_keys = setup(tmp, keys_per_thread * conc)
        key_slices = [ro_keys[i::conc] for i in range(conc)]
        ports, meters = {}, {}
        for kind in PATHS:
            proc, log, ports[kind] = start_server(kind, tmp, env, server_cpu)
            servers.append((proc, log))
            meters[kind] = Meter(proc.pid, postmaster)
        for kind, path in PATHS.items():  # both must answer the same 20 rows
            conn = http.client.HTTPConnection("127.0.0.1", ports[kind], timeout=10)
            conn.request("GET", path, headers={"Authorization": f"Bearer {rw_key}"})
            resp = conn.getresponse()
            body = json.loads(resp.read())
            conn.close()
            assert resp.status == 200 and len(body["data"]) == N_PROJECTS, (kind, body)

        if warm:  # untimed
            for kind, path in PATHS.items():
                run_slice(ctx, ports[kind], path, key_slices, 0, warm_cap, args.warmup,
                          client_cpus)
        rounds = {kind: [] for kind in PATHS}
        offset = warm
        for i in range(args.rounds):
            parts = {kind: [] for kind in PATHS}
            used = {kind: [] for kind in PATHS}
            for j in range(args.slices):
                # Alternate which app goes first, so neither always runs on a warmer box.
                order = list(PATHS) if (i * args.slices + j) % 2 == 0 else list(PATHS)[::-1]
                for kind in order:
                    part, use = meters[kind].used(run_slice, ctx, ports[kind], PATHS[kind],
                                                  key_slices, offset, cap, seconds,
                                                  client_cpus)
                    parts[kind].append(part)
                    used[kind].append(use)
                offset += WARMUP + cap
            for kind in PATHS:
                r = summary(parts[kind])
                total = [None if None in u else sum(u) for u in zip(*used[kind], strict=True)]
                cost = per_request(total, r[4])
                rounds[kind].append((r, cost))
                print(f"{database} round {i + 1} {line(kind, r)}{cost_text(cost)}",
                      flush=True)
    finally:
        os.environ.pop("CP_DATABASE_URL", None)
        if saved is not None:
            os.environ["CP_DATABASE_URL"] = saved
        for proc, log in servers:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return rounds


def median_cost(costs):
    """Each per-request figure's median over the rounds (None stays None)."""
    return tuple(None if c[0] is None else statistics.median(c) for c in zip(*costs, strict=True))


def report(database, args, rounds, load):
    """Prints the summary; returns True on PASS."""
    med = {kind: sorted((r for r, _ in rs), key=lambda r: r[0])[(len(rs) - 1) // 2]
           for kind, rs in rounds.items()}
    cost = {kind: median_cost([c for _, c in rs]) for kind, rs in rounds.items()}
    bad = {kind: {s: n for r, _ in rs for s, n in r[3].items() if s != 200}
           for kind, rs in rounds.items()}
    ratio = med["berth"][0] / med["bare"][0]
    verdict = "PASS" if ratio >= TARGET else "FAIL"
    if any(bad.values()):
        verdict = f"INVALID RUN (non-200 responses: {bad})"
    print(f"\nGET /api/public/v1/projects on {database}, {N_PROJECTS} rows, concurrency "
          f"{args.concurrency}, median of {args.rounds} rounds x {args.seconds:g} s "
          f"(in {args.slices} turns); {load}")
    for kind in PATHS:  # the server's figures: the median of the rounds' own
        print(line(kind, med[kind]) + cost_text(cost[kind]))
    print(f"ratio  : {ratio:.2f} (target >= {TARGET:.2f}) {verdict}", flush=True)
    return verdict == "PASS"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--postgres-url", default=os.environ.get("CP_BENCH_POSTGRES_URL"),
                        help="an empty database (default: a throwaway cluster)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0, help="per round and app")
    parser.add_argument("--slices", type=int, default=5,
                        help="turns each app takes in a round (the apps alternate)")
    parser.add_argument("--concurrency", type=int, default=8, help="client threads in all")
    parser.add_argument("--warmup", type=float, default=3.0,
                        help="seconds of untimed load per app before the rounds (0: none)")
    parser.add_argument("--no-pin", dest="pin", action="store_false",
                        help="let the scheduler place servers and clients (default: the "
                             "servers on the first CPU, the load generators on the others)")
    parser.add_argument("--serve", choices=PATHS, help=argparse.SUPPRESS)
    parser.add_argument("--cpu", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.slices < 1:
        parser.error("--slices must be at least 1")
    if args.serve:
        serve(args.serve, args.data_dir, args.cpu)  # a server subprocess, see start_server
        return 0

    where = server_cpu, client_cpus = placement(args.pin)
    load = load_line() + ("; unpinned" if server_cpu is None else
                          f"; servers on CPU {server_cpu}, load generators on CPUs "
                          f"{','.join(map(str, sorted(client_cpus)))}")
    print(load, flush=True)
    results = {}
    if args.database in ("sqlite", "both"):
        results["sqlite"] = bench_database(args, "sqlite", None, where)
    if args.database in ("postgres", "both"):
        pg, url = (None, args.postgres_url) if args.postgres_url else start_postgres()
        try:
            results["postgresql"] = bench_database(
                args, "postgresql", url, where,
                postmaster_pid(pg) if pg is not None else None)
        finally:
            if pg is not None:
                pg.stop()
    passed = [report(database, args, rounds, load) for database, rounds in results.items()]
    return 0 if all(passed) else 1


if __name__ == "__main__":
    sys.exit(main())
