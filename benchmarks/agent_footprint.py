"""Agent footprint: RSS and CPU of a real `berth-agent run` that has been
connected for a while, heartbeating (with host metrics) every 15 s.

    python benchmarks/agent_footprint.py [--minutes 10]

Targets: RSS <= 40 MB, CPU <= 0.5 % of one core, averaged over the window
after a one-minute warm-up."""

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

    from control_plane import migrate, security
    from control_plane.app import create_app
    from control_plane.gateway.server import Gateway
    from control_plane.models import Server
    from control_plane.services import agents
    from control_plane.services.accounts import orgs

    with tempfile.TemporaryDirectory() as tmp:
        app = create_app({"DATA_DIR": tmp, "SECRET_KEY": "bench"})
        migrate.upgrade(app.extensions["berth"].db)
        credential = "agt_live_" + security.random_token(40)
        server = Server.create(organization=orgs.create_org("fp"), name="fp", provider="bench",
                               cpu_cores=1, ram_mb=1, disk_gb=1,
                               agent_credential_hash=security.digest(credential))
        gateway = Gateway()
        port = gateway.start_in_thread("127.0.0.1:0")
        config = Path(tmp) / "agent.json"
        config.write_text(json.dumps({"control_plane": "http://127.0.0.1:1",
                                      "grpc_address": f"127.0.0.1:{port}",
                                      "server_id": str(server.id), "credential": credential}))
        env = {**os.environ, "BERTH_AGENT_CONFIG": str(config),
               "BERTH_AGENT_DATA_DIR": str(Path(tmp) / "data")}
        agent = subprocess.Popen([str(Path(sys.executable).with_name("berth-agent")), "run"],
                                 env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 30
            while not agents.is_connected(Server.get_by_id(server.id)):
                if time.monotonic() > deadline:
                    raise SystemExit("the agent did not connect")
                time.sleep(0.2)
            time.sleep(args.warmup)
            cpu0, t0 = cpu_seconds(agent.pid), time.monotonic()
            peak = 0.0
            while time.monotonic() - t0 < args.minutes * 60:
                time.sleep(5)
                peak = max(peak, rss_mb(agent.pid))
                if agent.poll() is not None:
                    raise SystemExit("the agent exited")
            cpu = (cpu_seconds(agent.pid) - cpu0) / (time.monotonic() - t0) * 100
            rss = rss_mb(agent.pid)
            print(f"agent after {args.minutes:g} min connected (+{args.warmup:g} s warm-up): "
                  f"RSS {rss:.2f} MB (peak {peak:.2f}), CPU {cpu:.3f} % of one core")
            print(f"targets: RSS <= 40 MB {'PASS' if peak <= 40 else 'FAIL'}, "
                  f"CPU <= 0.5 % {'PASS' if cpu <= 0.5 else 'FAIL'}")
        finally:
            agent.terminate()
            agent.wait(15)
            gateway.stop_from_thread()


if __name__ == "__main__":
    main()
