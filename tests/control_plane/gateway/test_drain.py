"""`berth gateway` on SIGTERM drains: it takes no new streams, ends the ones it holds
(its agents reconnect elsewhere at once), clears their connected marks and exits 0;
a command queued meanwhile is delivered on the agent's next stream, once."""

import os
import signal
import subprocess

import pytest

from control_plane.models import Server
from control_plane.services.tasks import queue
from tests.support.agents import registered_server, wait_for
from tests.support.serve import BERTH
from tests.support.services import free_port

pytestmark = pytest.mark.slow


def _gateway(env, port, log_path):
    log = open(log_path, "w")
    proc = subprocess.Popen([BERTH, "gateway", "--grpc", f"127.0.0.1:{port}"], env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    wait_for(lambda: "gateway listening" in log_path.read_text(), timeout=30,
             what="gateway started")
    return proc, log


def test_sigterm_hands_the_agents_back_and_loses_no_command(app, world, tmp_path, agents):
    env = {**os.environ, "CP_DATA_DIR": app.config["DATA_DIR"], "CP_SECRET_KEY": "test-secret",
           **({"CP_DATABASE_URL": app.config["DATABASE_URL"]} if app.config["DATABASE_URL"] else {})}
    server, credential = registered_server(world.org())
    port = free_port()
    first, first_log = _gateway(env, port, tmp_path / "first.log")
    agent = agents(server, credential, address=f"127.0.0.1:{port}")
    wait_for(lambda: agent.status()[1].get("connected"), timeout=30, what="agent connected")
    since = agent.status()[1]["since"]

    first.send_signal(signal.SIGTERM)
    assert first.wait(15) == 0
    first_log.close()
    text = (tmp_path / "first.log").read_text()
    assert "1 agent stream(s) handed back" in text and "Traceback" not in text
    assert Server.get_by_id(server.id).connected_since is None  # cleared, not left stale

    command = queue.enqueue(server.id, "routes")  # queued while no gateway holds the agent
    second, second_log = _gateway(env, port, tmp_path / "second.log")  # "another gateway"
    try:
        wait_for(lambda: agent.status()[1].get("connected")
                 and agent.status()[1]["since"] != since, timeout=15, what="agent back")
        wait_for(lambda: queue_status(command.id) in ("succeeded", "failed"), timeout=30,
                 what="the queued command completed")
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(15)
        second_log.close()
    assert command.id.hex in agent.journal()  # delivered on the new stream and run


def queue_status(command_id):
    from control_plane.models import AgentCommand

    return AgentCommand.get_by_id(command_id).status
