"""Benchmark: a shell's keystroke round trip through the gateway, beside a bare
`docker exec -it`'s.

Starts the real `berth serve` (embedded SQLite; its tornado HTTP server holds the
WebSockets, its gateway the agents' streams) and N real `berth-agent run` processes,
one a server. The servers, their projects and one running environment on each are
rows made in the database before the start, as registration and a deploy would
leave them; each environment's ERP container is a stand-in, the ERP test image
running `sleep infinity` under the name the agent looks for. Then S sessions a
server are opened as a client opens them (`POST .../shell-sessions`, then the
WebSocket and its ticket), each running `cat` on a terminal, and beside them as many
bare sessions to the same containers, made as `docker exec -it` makes them (the
engine's API: an exec with a terminal, its socket attached).

In each round, every session of one kind types at once: K keystrokes each, one byte
at a time at R a second (5: a fast typist's steady pace, 60 words a minute, 500 a second
in all; the first at a random point of the first period), each
timed from its send to its echo (the terminal's, as a shell's). The kinds take
turns, the first alternating from round to round (the machine is shared), after the
agents' start-up work has settled (--settle) and an untimed round of each kind
(--warmup: the work two hundred sessions opened at once leave behind). Printed:
p50/p95/p99/max of each kind, their ratios, the CPU a keystroke took in `berth serve`,
the agents, the container engine and the client while each kind typed, how many
sessions the agents carried on their own sockets and how many on their streams, and
the verdict: p99 through the gateway at most 50 ms. Everything it made is removed at the end; exits 1 on FAIL.

    python benchmarks/shell_keystroke.py [--servers 50] [--per-server 2] [--keystrokes 20]
                                         [--rate 5] [--rounds 3] [--settle 15] [--warmup 1]
                                         [--json]
"""

import argparse
import asyncio
import json
import os
import random
import shutil
import string
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker
import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.gateway_fanin import raise_fd_limit  # noqa: E402
from tests.support.agents import AgentProcess  # noqa: E402
from tests.support.serve import Served  # noqa: E402
from tests.support.shell_client import sessions_carried  # noqa: E402

TARGET_P99_MS = 50.0
ERP_IMAGE = "berth-test-erp:latest"
API = "/api/public/v1"
SESSIONS_PER_KEY = 10  # a full-access key may make 20 requests a minute
INPUT, OUTPUT = 0, 1
KEYS = string.ascii_lowercase.encode()
LABEL = "berth.benchmark=shell_keystroke"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


# --- setup -------------------------------------------------------------------------

def make_rows(data_dir, servers, keys):
    """The organization, its keys, and per server its agent credential, a project and
    one running environment: [(server id, credential, environment id)], [keys]."""
    from control_plane.app import create_app
    from control_plane.infra import migrate, security
    from control_plane.models import Environment, Project, Server
    from control_plane.services.accounts import keys as key_svc
    from control_plane.services.accounts import orgs

    app = create_app({"DATA_DIR": str(data_dir)})
    db = app.extensions["berth"].db
    migrate.upgrade(db)
    org = orgs.create_org("shell-bench", server_quota=servers)
    raw_keys = [key_svc.create_key(org.id, f"bench-{i}", "full_access", "organization")[1]
                for i in range(keys)]
    made = []
    for i in range(servers):
        credential = "agt_live_" + security.random_token(40)
        server = Server.create(organization=org, name=f"srv-{i}", provider="byos", cpu_cores=2,
                               ram_mb=2048, disk_gb=20,
                               agent_credential_hash=security.digest(credential))
        project = Project.create(organization=org, name=f"proj-{i}", server=server,
                                 default_branch="main")
        env = Environment.create(project=project, name="Production", status="running",
                                 server=server, is_active=True)
        made.append((str(server.id), credential, str(env.id)))
    db.close()
    return app, made, raw_keys


def all_connected(server_ids):
    from control_plane.models import Server
    from control_plane.services import agents

    rows = Server.select().where(Server.id.in_(server_ids))
    return sum(agents.connected(s.connected_since, s.last_seen_at) for s in rows)


def wait(predicate, timeout, what, every=0.5):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout} s waiting for {what}")
        time.sleep(every)


# --- the two kinds of session ---------------------------------------------------------

class Gatewayed:
    """A session through the control plane: its POST, its WebSocket, its ticket."""

    kind = "gateway"

    @classmethod
    async def open(cls, url, key, env_id, posting):
        from websockets.asyncio.client import connect

        def post():
            r = requests.post(f"{url}{API}/environments/{env_id}/shell-sessions",
                              headers={"Authorization": f"Bearer {key}"},
                              json={"command": ["cat"], "tty": True}, timeout=30)
            if r.status_code != 201:
                raise SystemExit(f"opening a shell: {r.status_code} {r.text}")
            return r.json()

        opened = await asyncio.get_running_loop().run_in_executor(posting, post)
        self = cls()
        self.ws = await connect(url.replace("http", "ws", 1) + opened["stream_path"],
                                max_size=None, compression=None, open_timeout=30)
        await self.ws.send(json.dumps({"ticket": opened["ticket"], "rows": 24, "cols": 80}))
        said = json.loads(await asyncio.wait_for(self.ws.recv(), 30))
        if said.get("type") != "opened":
            raise SystemExit(f"the shell did not open: {said}")
        return self

    async def send(self, data):
        await self.ws.send(bytes([INPUT]) + data)

    async def echo(self, data):
        seen = b""
        while data not in seen:
            message = await self.ws.recv()
            if isinstance(message, str):
                raise SystemExit(f"the shell ended: {message}")
            if message[0] == OUTPUT:
                seen += message[1:]

    async def close(self):
        await self.ws.close()


class Bare:
    """`docker exec -it <container> cat`, as the engine's API makes it."""

    kind = "docker exec"

    @classmethod
    async def open(cls, api, container, making):
        def make():
            exec_id = api.exec_create(container, ["cat"], stdin=True, stdout=True, stderr=True,
                                      tty=True, environment={"TERM": "xterm-256color"})["Id"]
            return api.exec_start(exec_id, tty=True, socket=True)

        self = cls()
        self.attached = await asyncio.get_running_loop().run_in_executor(making, make)
        raw = getattr(self.attached, "_sock", self.attached)
        self.sock = raw.dup()  # the event loop's own descriptor of the attached socket
        self.sock.setblocking(False)
        self.reader, self.writer = await asyncio.open_connection(sock=self.sock)
        return self

    async def send(self, data):
        self.writer.write(data)
        await self.writer.drain()

    async def echo(self, data):
        seen = b""
        while data not in seen:
            chunk = await self.reader.read(4096)
            if not chunk:
                raise SystemExit("the bare exec's socket closed")
            seen += chunk

    async def close(self):
        self.writer.close()
        self.attached.close()


# --- typing --------------------------------------------------------------------------

async def typing(session, keystrokes, period, start, out):
    """`keystrokes` bytes at one each `period` from `start` (plus a random phase), each
    timed from its send to its echo; a late one goes at once."""
    loop = asyncio.get_running_loop()
    first = start + random.uniform(0, period)
    for i in range(keystrokes):
        await asyncio.sleep(max(0.0, first + i * period - loop.time()))
        key = KEYS[i % len(KEYS):i % len(KEYS) + 1]
        began = time.perf_counter()
        await session.send(key)
        await asyncio.wait_for(session.echo(key), 30)
        out.append((time.perf_counter() - began) * 1000)


async def phase(sessions, keystrokes, rate):
    """Every session types at once: the round trips in ms."""
    out = []
    for s in sessions:  # one untimed keystroke each: every path is warm
        await s.send(b"#")
    await asyncio.gather(*(asyncio.wait_for(s.echo(b"#"), 30) for s in sessions))
    start = asyncio.get_running_loop().time() + 0.2
    await asyncio.gather(*(typing(s, keystrokes, 1 / rate, start, out) for s in sessions))
    return out


def cpu_seconds(pid):
    """User and system CPU of process `pid` so far (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def engine_pids():
    """The container engine's daemons (their CPU is both kinds' cost)."""
    pids = []
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() in ("dockerd", "containerd"):
                pids.append(comm.parent.name)
        except OSError:
            continue
    return pids


def summary(values):
    return {"n": len(values), "p50": percentile(values, 50), "p95": percentile(values, 95),
            "p99": percentile(values, 99), "max": max(values)}


async def measure(args, url, envs, keys, api, names, processes):
    posting, making = ThreadPoolExecutor(8), ThreadPoolExecutor(8)
    slots = [env_id for _, _, env_id in envs for _ in range(args.per_server)]
    through = await asyncio.gather(*(
        Gatewayed.open(url, keys[i // SESSIONS_PER_KEY], env_id, posting)
        for i, env_id in enumerate(slots)))
    bare = await asyncio.gather(*(Bare.open(api, names[env_id], making) for env_id in slots))
    print(f"{len(through)} sessions through the gateway and {len(bare)} bare ones open",
          file=sys.stderr)
    got = {Gatewayed.kind: [], Bare.kind: []}
    cpu = {kind: dict.fromkeys(processes, 0.0) for kind in got}

    def used():
        return {name: sum(cpu_seconds(pid) for pid in pids) for name, pids in processes.items()}
    try:
        for sessions in [through, bare] * args.warmup:  # the sessions' first bytes: untimed
            await phase(sessions, args.keystrokes, args.rate)
        for r in range(args.rounds):
            order = [through, bare] if r % 2 == 0 else [bare, through]
            for sessions in order:
                kind = sessions[0].kind
                before = used()
                times = await phase(sessions, args.keystrokes, args.rate)
                for name, seconds in used().items():
                    cpu[kind][name] += seconds - before[name]
                got[kind] += times
                s = summary(times)
                print(f"round {r + 1} {kind:>11}: p50 {s['p50']:6.1f}  p95 {s['p95']:6.1f}  "
                      f"p99 {s['p99']:6.1f}  max {s['max']:6.1f} ms", file=sys.stderr)
    finally:
        for s in through + bare:
            try:
                await s.close()
            except Exception:
                pass
        posting.shutdown()
        making.shutdown()
    return got, {kind: {name: seconds * 1000 / len(got[kind]) for name, seconds in by.items()}
                 for kind, by in cpu.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", type=int, default=50)
    parser.add_argument("--per-server", type=int, default=2)
    parser.add_argument("--keystrokes", type=int, default=20, help="per session and round")
    # A fast typist's steady pace (60 words a minute), every session at once.
    parser.add_argument("--rate", type=float, default=5.0, help="keystrokes a second")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--settle", type=float, default=15.0,
                        help="seconds between the agents' connecting and the first round")
    parser.add_argument("--warmup", type=int, default=1,
                        help="untimed rounds after the sessions open (each kind types)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    print(f"load average at the start: {os.getloadavg()[0]:.1f}", file=sys.stderr)
    raise_fd_limit()
    client = docker.from_env(timeout=120)
    try:
        client.images.get(ERP_IMAGE)
    except docker.errors.ImageNotFound:
        raise SystemExit(f"{ERP_IMAGE} is missing: run scripts/build-test-images.sh") from None

    from agent.deploy.environments import Environments

    tmp = Path(tempfile.mkdtemp(prefix="berth-shell-bench-"))
    sessions = args.servers * args.per_server
    served, agents = None, []
    try:
        _, envs, keys = make_rows(tmp / "cp", args.servers,
                                  -(-sessions // SESSIONS_PER_KEY))
        naming = Environments(client, root=tmp / "srv")
        names = {env_id: naming._names(env_id)["erp"] for _, _, env_id in envs}
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda name: client.containers.run(
                ERP_IMAGE, ["sleep", "infinity"], entrypoint=[], name=name, detach=True,
                labels=dict([LABEL.split("=")])), names.values()))
        served = Served(tmp / "cp", {"CP_PROXY_IMAGE": "", "CP_ERP_IMAGE": ERP_IMAGE,
                                     "CP_SHELL_SESSIONS_PER_SERVER": str(args.per_server)})
        served.start(timeout=60)
        for server_id, credential, _ in envs:
            agents.append(AgentProcess(tmp, served.grpc, server_id, credential, env={
                "BERTH_AGENT_ENV_ROOT": str(tmp / "srv")}).start())
        started = time.monotonic()
        wait(lambda: all_connected([s for s, _, _ in envs]) == len(envs), 300,
             "the agents to connect")
        print(f"{len(envs)} agents connected in {time.monotonic() - started:.0f} s; "
              f"{args.settle:g} s for their start-up work", file=sys.stderr)
        time.sleep(args.settle)
        processes = {"berth serve": [served.proc.pid], "agents": [a.proc.pid for a in agents],
                     "engine": engine_pids(), "client": [os.getpid()]}
        got, cpu = asyncio.run(measure(args, served.url, envs, keys, client.api, names,
                                       processes))
        carried = sessions_carried(served.url)
    finally:
        for agent in agents:
            agent.kill()
        if served is not None:
            served.stop()
        for container in client.containers.list(all=True, filters={"label": LABEL}):
            container.remove(force=True)
        shutil.rmtree(tmp, ignore_errors=True)

    report = {kind: summary(times) for kind, times in got.items()}
    g, b = report[Gatewayed.kind], report[Bare.kind]
    ok = g["p99"] <= TARGET_P99_MS
    report.update(ratio={p: g[p] / b[p] for p in ("p50", "p95", "p99")}, cpu_ms_a_keystroke=cpu,
                  sessions_carried=carried, target_p99_ms=TARGET_P99_MS, passed=ok)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"keystroke round trip, {sessions} sessions over {args.servers} agents, "
              f"{args.keystrokes} keystrokes a session a round at {args.rate:g}/s, "
              f"{args.rounds} rounds ({g['n']} timed each):")
        for kind, s in ((Gatewayed.kind, g), (Bare.kind, b)):
            print(f"  {kind:>11}: p50 {s['p50']:6.1f}  p95 {s['p95']:6.1f}  p99 {s['p99']:6.1f}"
                  f"  max {s['max']:6.1f} ms")
        print(f"  the agents carried the sessions' bytes on: their own socket "
              f"{carried['socket']}, their stream {carried['stream']}")
        for kind, by in cpu.items():
            print(f"  CPU a keystroke, {kind:>11}: " + ", ".join(
                f"{name} {ms:.2f} ms" for name, ms in by.items()))
        r = report["ratio"]
        print(f"  gateway / docker exec: p50 {r['p50']:.2f}, p95 {r['p95']:.2f}, "
              f"p99 {r['p99']:.2f}; target p99 <= {TARGET_P99_MS:.0f} ms through the gateway: "
              f"{'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
