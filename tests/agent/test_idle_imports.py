"""What a connected, idle `berth-agent run` has loaded: what only a command needs
is imported by the handler that runs it, not at start (docs/performance.md,
Memory and CPU: the agent is held within 6 MB of a bare grpcio stream)."""

import json
import sys

from tests.support.agents import AgentProcess, registered_server, wait_for

# Each of these costs from a few hundred kilobytes (http.client) to ~18 MB (docker-py
# with requests and urllib3), and none is needed to hold the stream, heartbeat with host
# metrics, or measure disk usage.
HEAVY = ("docker", "requests", "urllib3", "http.client", "boto3", "botocore", "zstandard",
         "agent.backups", "agent.deploy", "agent.proxy", "agent.metrics.containers",
         "agent.register")

# `berth-agent` as installed (its console entry), with a thread that writes the loaded
# modules beside the status file once the agent is connected, has heartbeaten with
# host metrics and has measured disk usage: its steady state.
WRAPPER = """#!{python}
import json, os, sys, threading, time
from importlib.metadata import entry_points
from pathlib import Path

def watch():
    data = Path(os.environ["BERTH_AGENT_DATA_DIR"])
    while True:
        try:
            state = json.loads((data / "status.json").read_text())
        except (OSError, ValueError):
            state = {{}}
        if all(state.get(k) for k in ("connected", "last_heartbeat", "disk_measured_at")):
            (data / "modules.json").write_text(json.dumps(sorted(sys.modules)))
            return
        time.sleep(0.1)

threading.Thread(target=watch, daemon=True).start()
sys.exit(entry_points(group="console_scripts")["berth-agent"].load()())
"""


def test_a_connected_idle_agent_has_loaded_no_command_modules(world, gateway, tmp_path):
    server, credential = registered_server(world.org())
    wrapper = tmp_path / "berth-agent-watched"
    wrapper.write_text(WRAPPER.format(python=sys.executable))
    wrapper.chmod(0o755)
    # A server with no environments: the engine the tests share may hold other tests'
    # labeled containers, whose figures would rightly load the container sampler. An
    # engine that is not there leaves the heartbeat the same work with no containers.
    agent = AgentProcess(tmp_path, f"127.0.0.1:{gateway.port}", server.id, credential,
                         env={"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"},
                         executable=str(wrapper)).start()
    try:
        modules_file = agent.dir / "data" / "modules.json"
        wait_for(modules_file.exists, timeout=60, interval=0.2, what="the agent's steady state")
        modules = set(json.loads(modules_file.read_text()))
    finally:
        agent.kill()
    assert "agent.daemon" in modules and "psutil" in modules  # it is the running agent
    assert [m for m in HEAVY if m in modules] == []
