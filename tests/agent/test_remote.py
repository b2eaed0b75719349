"""`berth-agent exec`, what the control plane runs over SSH for each durable command,
run here as its SSH session would run it (the real command, the message on standard
input, frames on standard output): a command runs once, a second `exec` of it
attaches (a duplicate with the same result), and one whose process vanished
without a result (the server restarted) is answered failed and never run again."""

import json
import os
import subprocess

from protocol import frames
from protocol.v1 import agent_pb2 as pb
from tests.support.agents import AGENT


def run_exec(tmp_path, command):
    env = {**os.environ, "BERTH_AGENT_DATA_DIR": str(tmp_path / "data"),
           "BERTH_AGENT_CONFIG": str(tmp_path / "agent.json")}
    out = subprocess.run([AGENT, "exec"], input=command.SerializeToString(), env=env,
                         capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    parts, rest = frames.split(out.stdout)
    assert rest == b""
    return [pb.AgentMessage.FromString(p) for p in parts]


def test_a_command_runs_once_and_a_second_exec_attaches(tmp_path):
    ping = pb.Command(id="c0ffee01", kind="ping", payload_json="{}")
    first = run_exec(tmp_path, ping)
    assert [m.WhichOneof("body") for m in first] == ["ack", "log", "result"]
    assert first[0].ack.duplicate is False and first[2].result.ok
    again = run_exec(tmp_path, ping)
    assert again[0].ack.duplicate is True
    assert [m.WhichOneof("body") for m in again] == ["ack", "log", "result"]  # the same run
    assert again[2].result.result_json == first[2].result.result_json
    journal = json.loads((tmp_path / "data" / "commands.json").read_text())
    assert journal["c0ffee01"]["state"] == "done"


def test_a_command_whose_process_vanished_is_answered_failed(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    # Started by an earlier exec, whose worker died with the server: no result.
    (data / "commands.json").write_text(json.dumps({"deadbeef": {"state": "started"}}))
    answered = run_exec(tmp_path, pb.Command(id="deadbeef", kind="ping", payload_json="{}"))
    assert answered[0].ack.duplicate is True
    result = answered[-1].result
    assert result.ok is False and "interrupted" in result.error
    journal = json.loads((data / "commands.json").read_text())
    assert journal["deadbeef"]["state"] == "done" and journal["deadbeef"]["ok"] is False
