"""The committed gRPC stubs are exactly what the pinned generator makes from
protocol/v1/agent.proto (so nobody edits generated code, and the .proto is the
contract)."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ("agent_pb2.py", "agent_pb2_grpc.py", "agent_pb2.pyi")


def test_stubs_are_reproducible(tmp_path):
    (tmp_path / "protocol/v1").mkdir(parents=True)
    shutil.copy(ROOT / "protocol/v1/agent.proto", tmp_path / "protocol/v1/agent.proto")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I.", "--python_out=.",
                    "--grpc_python_out=.", "--pyi_out=.", "protocol/v1/agent.proto"],
                   cwd=tmp_path, check=True)
    for name in GENERATED:
        fresh = (tmp_path / "protocol/v1" / name).read_text()
        committed = (ROOT / "protocol/v1" / name).read_text()
        assert fresh == committed, f"{name} is stale: run `make proto`"


def test_protocol_is_versioned():
    from protocol.v1 import agent_pb2
    assert agent_pb2.DESCRIPTOR.package == "berth.agent.v1"
    assert set(agent_pb2.DESCRIPTOR.services_by_name["AgentGateway"].methods_by_name) == {
        "Register", "Connect"}
