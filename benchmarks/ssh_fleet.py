"""Benchmark: a fleet of servers reached over SSH, one of them hung.

One real `sshd` on loopback stands for N servers (N server rows at its address,
each with its own SSH connection, its host key pinned at first contact), plus one
server that accepts TCP connections and never answers. What runs on the "servers"
is a stand-in for `berth-agent` (a shell script answering a canned reply, and a
Python loop doing so for `serve`, one a connection as the real one's): every
real server runs its agent on its own CPU, while here all of them would share this
machine's two cores, and the figure wanted is the control plane's. Measured, in the
control plane's process, through the link services use (`Reach.call`, as the HTTP
threads of GET /servers/{id}/metrics call it, one thread per server):

- cold sweep: the first host-metrics read of every server (connections made, host
  keys pinned, each server's `serve` started), reported;
- warm sweep: the same again over the connections held, median of --rounds: the
  time until every healthy server has answered, with the hung one in flight (target
  < 5 s), and the control plane's CPU per sweep;
- the hung server's read ends at the connect timeout, not later;
- the scheduler's check of every server (`check_all`), the first (each agent
  configured, its disk measured: single calls) and the next (its `serve` only).

Prints the figures and PASS, exit 0, or FAIL, exit 1.

    python benchmarks/ssh_fleet.py [--servers 100] [--rounds 5]
"""

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SWEEP_S = 5.0
CONNECT_TIMEOUT = 3


def machine_busy():
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    fields = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return sum(fields) - fields[3] - fields[4], sum(fields)


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def stand_in(root):
    """The `berth-agent` the servers run here: its answers, canned (bytes of the
    same messages the real one prints), whatever the request."""
    from protocol.v1 import agent_pb2 as pb

    metrics = pb.HostMetrics(cpu_percent=12.5, memory_percent=40.0, disk_percent=55.0,
                             memory_used_bytes=3 << 30, memory_total_bytes=8 << 30,
                             disk_used_bytes=40 << 30, disk_total_bytes=80 << 30)
    from protocol import frames

    facts = pb.HostFacts(hostname="fleet", cpu_cores=4, ram_mb=8192, disk_gb=80,
                         agent_version=_version())
    replies = {"live": pb.LiveReply(host_metrics=metrics).SerializeToString(),
               "check": b"".join(frames.pack(part) for part in (
                   facts.SerializeToString(), pb.Heartbeat(metrics=metrics).SerializeToString(),
                   b""))}
    for name, data in replies.items():
        (root / f"{name}.bin").write_bytes(data)
    # `serve` (one a connection, as the real one's): frames in, each answered with
    # the canned reply to its call's name.
    serve = root / "serve.py"
    serve.write_text(f"""import os, struct
replies = {{n: open("{root}/" + n + ".bin", "rb").read() for n in ("live", "check")}}
buf = b""
while True:
    while len(buf) >= 4 and len(buf) - 4 >= struct.unpack(">I", buf[:4])[0]:
        size = struct.unpack(">I", buf[:4])[0]
        name = buf[4:4 + size].partition(b"\\n")[0].decode()
        buf = buf[4 + size:]
        answer = b"\\0" + replies[name]
        os.write(1, struct.pack(">I", len(answer)) + answer)
    chunk = os.read(0, 65536)
    if not chunk:
        break
    buf += chunk
""")
    script = root / "berth-agent"
    script.write_text(f"""#!/bin/sh
# Stand-in for berth-agent (benchmarks/ssh_fleet.py): the canned answer to $1.
[ "$1" = serve ] && exec {sys.executable} -S -I {serve}
cat > /dev/null
case "$1" in
    live|check) exec cat "{root}/$1.bin" ;;
    *) exit 0 ;;
esac
""")
    script.chmod(0o755)
    return script


def _version():
    from control_plane import __version__

    return __version__


def setup(n, root):
    from control_plane.app import create_app
    from control_plane.infra import migrate
    from control_plane.models import Server
    from control_plane.services.accounts import orgs
    from control_plane.services.servers import ssh as ssh_svc
    from tests.support.sshd import Silent, Sshd

    agent = stand_in(root)
    app = create_app({"DATA_DIR": str(root / "cp"), "SECRET_KEY": "bench",
                      "SSH_AGENT_PATH": str(agent), "SSH_ALLOW_PRIVATE": True,
                      "SSH_CONNECT_TIMEOUT": CONNECT_TIMEOUT, "SSH_SESSIONS_TOTAL": 256})
    migrate.upgrade(app.extensions["berth"].db)
    org = orgs.create_org("fleet", n + 10)
    # sshd takes all the fleet's first connections at once (its default MaxStartups
    # would drop some of a burst of 100).
    sshd = Sshd(root / "sshd", env={"PATH": "/usr/bin:/bin"},
                extra=f"MaxStartups {4 * n}\nMaxSessions 64").start()
    sshd.authorize(ssh_svc.org_key(org.id)[0])
    silent = Silent()
    ids = [str(Server.create(organization=org, name=f"s{i}", provider="bench", cpu_cores=4,
                             ram_mb=8192, disk_gb=80, connection="ssh", ssh_host="127.0.0.1",
                             ssh_port=sshd.port, ssh_username="root").id) for i in range(n)]
    hung = str(Server.create(organization=org, name="hung", provider="bench", cpu_cores=1,
                             ram_mb=1, disk_gb=1, connection="ssh", ssh_host="127.0.0.1",
                             ssh_port=silent.port, ssh_username="root").id)
    return app, sshd, silent, ids, hung


def sweep(app, ids, hung, pool):
    """Every server's host metrics at once: (seconds until all healthy ones answered,
    seconds until the hung one gave up, CPU seconds, failures among the healthy)."""
    from control_plane.agent_link import host_metrics

    link = app.extensions["berth"].gateway
    started, cpu = time.perf_counter(), cpu_seconds()

    def one(server_id):
        try:
            reply = host_metrics(link, server_id, 10)
            ok = not reply.error_code and reply.data["memory_total_bytes"] > 0
        except Exception:  # noqa: BLE001 - a failure is counted, whatever it was
            ok = False
        return ok, time.perf_counter() - started

    futures = {i: pool.submit(one, i) for i in [*ids, hung]}
    healthy = [futures[i].result() for i in ids]
    healthy_s, cpu_used = max(t for _, t in healthy), cpu_seconds() - cpu
    hung_ok, hung_s = futures[hung].result()
    return healthy_s, hung_s, cpu_used, sum(1 for ok, _ in healthy if not ok), hung_ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="berth-bench-ssh-"))
    app, sshd, silent, ids, hung = setup(args.servers, root)
    try:
        with app.app_context(), ThreadPoolExecutor(args.servers + 1) as pool:
            before = machine_busy()
            cold = sweep(app, ids, hung, pool)
            after = machine_busy()
            print(f"cold sweep ({args.servers} servers + 1 hung, each one's first contact): "
                  f"healthy answered in {cold[0]:.2f} s, CPU {cold[2]:.2f} s, {cold[3]} failed "
                  f"(the 10 s read timeout); the hung one ended at {cold[1]:.2f} s; the "
                  f"machine's CPUs {(after[0] - before[0]) / max(1, after[1] - before[1]):.0%} busy")
            before = machine_busy()
            warm = [sweep(app, ids, hung, pool) for _ in range(args.rounds)]
            after = machine_busy()
            busy = (after[0] - before[0]) / max(1, after[1] - before[1])
            healthy = statistics.median(w[0] for w in warm)
            cpu = statistics.median(w[2] for w in warm)
            failed = sum(w[3] for w in warm)
            hung_s = max(w[1] for w in warm)
            print(f"warm sweep, median of {args.rounds}: healthy answered in {healthy:.2f} s "
                  f"(target < {SWEEP_S:.0f} s), control-plane CPU {cpu * 1000:.0f} ms a sweep "
                  f"({cpu * 1000 / args.servers:.1f} ms a server), {failed} failed")
            print(f"the hung server's reads ended by {hung_s:.2f} s (connect timeout "
                  f"{CONNECT_TIMEOUT} s)")
            print(f"the machine's CPUs were {busy:.0%} busy during the warm sweeps: the "
                  f"sshd sessions of all {args.servers} simulated servers share its "
                  f"{os.cpu_count()} cores")
            for which in ("first (configures each agent, measures its disk)", "next"):
                started, cpu0 = time.perf_counter(), cpu_seconds()
                checked = app.extensions["berth"].ssh.check_all().result(120)
                print(f"scheduler check of every server, {which}: "
                      f"{time.perf_counter() - started:.2f} s, CPU {cpu_seconds() - cpu0:.2f} s, "
                      f"{sum(1 for e in checked.values() if e is None)} answered")
        # The target is the steady sweep's; the cold one (every server's first contact
        # at once: 100 sshd handshakes on this machine's cores) is reported beside it.
        ok = (healthy < SWEEP_S and failed == 0 and hung_s < CONNECT_TIMEOUT + 2
              and not any(w[4] for w in warm))
        print("PASS" if ok else "FAIL")
        return 0 if ok else 1
    finally:
        app.extensions["berth"].ssh.close()
        sshd.stop()
        silent.close()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
