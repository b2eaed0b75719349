"""Agent footprint: RSS and CPU of a real `berth-agent run` that has been
connected for a while, heartbeating (with host metrics) every 15 s, against a
floor measured in the same run on the same machine.

    python benchmarks/agent_footprint.py [--minutes 10] [--warmup 60]

The floor (benchmarks/idle_stream.py) is a bare Python process with the same
grpcio, protobuf and generated stubs holding one idle stream to the same
gateway, heartbeating without metrics: what any agent costs on this machine
before it does anything. The interpreter and grpcio's share of it moves with
the machine (its C library, its Python build), by several megabytes from one
machine to another, so an absolute figure cannot tell a regression from a
different box; the distance to the floor can.

Both run side by side, each with its own server record and credential, and are
sampled every 5 s over the window after the warm-up. Targets: the agent's peak
RSS <= the floor's peak + 6 MB; the agent's CPU <= 0.5 % of one core. Exits 1
on FAIL."""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TICKS = os.sysconf("SC_CLK_TCK")
ABOVE_FLOOR_MB, CPU_PERCENT = 6.0, 0.5


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--warmup", type=float, default=60, help="seconds before measuring")
    args = parser.parse_args()

    from control_plane.app import create_app
    from control_plane.gateway.server import Gateway
    from control_plane.infra import migrate, security
    from control_plane.models import Server
    from control_plane.services import agents
    from control_plane.services.accounts import orgs

    with tempfile.TemporaryDirectory() as tmp:
        app = create_app({"DATA_DIR": tmp, "SECRET_KEY": "bench"})
        migrate.upgrade(app.extensions["berth"].db)
        org = orgs.create_org("fp")

        def server(name):
            credential = "agt_live_" + security.random_token(40)
            record = Server.create(organization=org, name=name, provider="bench", cpu_cores=1,
                                   ram_mb=1, disk_gb=1,
                                   agent_credential_hash=security.digest(credential))
            return record, credential

        gateway = Gateway()
        port = gateway.start_in_thread("127.0.0.1:0")
        (agent_server, credential), (floor_server, floor_credential) = server("fp"), server("floor")
        config = Path(tmp) / "agent.json"
        config.write_text(json.dumps({"control_plane": "http://127.0.0.1:1",
                                      "grpc_address": f"127.0.0.1:{port}",
                                      "server_id": str(agent_server.id),
                                      "credential": credential}))
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        agent = subprocess.Popen(
            [str(Path(sys.executable).with_name("berth-agent")), "run"], **quiet,
            env={**os.environ, "BERTH_AGENT_CONFIG": str(config),
                 "BERTH_AGENT_DATA_DIR": str(Path(tmp) / "data")})
        floor = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("idle_stream.py"))], **quiet,
            env={**os.environ, "BERTH_FLOOR_ADDRESS": f"127.0.0.1:{port}",
                 "BERTH_FLOOR_CREDENTIAL": floor_credential})
        try:
            deadline = time.monotonic() + 30
            while not all(agents.is_connected(Server.get_by_id(s.id))
                          for s in (agent_server, floor_server)):
                if time.monotonic() > deadline:
                    raise SystemExit("the agent or the floor did not connect")
                time.sleep(0.2)
            time.sleep(args.warmup)
            cpu0, t0 = cpu_seconds(agent.pid), time.monotonic()
            peak = {"agent": 0.0, "floor": 0.0}
            while time.monotonic() - t0 < args.minutes * 60:
                time.sleep(5)
                for name, proc in (("agent", agent), ("floor", floor)):
                    if proc.poll() is not None:
                        raise SystemExit(f"the {name} exited")
                    peak[name] = max(peak[name], rss_mb(proc.pid))
            cpu = (cpu_seconds(agent.pid) - cpu0) / (time.monotonic() - t0) * 100
            rss = {"agent": rss_mb(agent.pid), "floor": rss_mb(floor.pid)}
        finally:
            for proc in (agent, floor):
                proc.terminate()
                proc.wait(15)
            gateway.stop_from_thread()
    above = peak["agent"] - peak["floor"]
    passed = {"rss": above <= ABOVE_FLOOR_MB, "cpu": cpu <= CPU_PERCENT}
    print(f"after {args.minutes:g} min connected (+{args.warmup:g} s warm-up):")
    print(f"  floor (grpcio + protobuf, one idle stream): RSS {rss['floor']:.2f} MB "
          f"(peak {peak['floor']:.2f})")
    print(f"  agent: RSS {rss['agent']:.2f} MB (peak {peak['agent']:.2f}), "
          f"CPU {cpu:.3f} % of one core")
    print(f"targets: RSS <= floor + {ABOVE_FLOOR_MB:g} MB ({peak['floor'] + ABOVE_FLOOR_MB:.2f}):"
          f" {above:+.2f} MB {'PASS' if passed['rss'] else 'FAIL'}, "
          f"CPU <= {CPU_PERCENT:g} % {'PASS' if passed['cpu'] else 'FAIL'}")
    sys.exit(0 if all(passed.values()) else 1)


if __name__ == "__main__":
    main()
