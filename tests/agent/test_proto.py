"""The committed gRPC stubs are exactly what the pinned generator makes from
proto/protocol/v1/agent.proto (so nobody edits generated code, and the .proto is the
contract). The source lives in proto/, outside the Python packages; it is compiled
from there (`-Iproto`), so the name the descriptor records stays
`protocol/v1/agent.proto` and the stubs stay `protocol/v1/agent_pb2*.py`."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE = "protocol/v1/agent.proto"  # under proto/: the name the descriptor records
GENERATED = ("agent_pb2.py", "agent_pb2_grpc.py", "agent_pb2.pyi")


def test_stubs_are_reproducible(tmp_path):
    (tmp_path / "proto/protocol/v1").mkdir(parents=True)
    shutil.copy(ROOT / "proto" / SOURCE, tmp_path / "proto" / SOURCE)
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-Iproto", "--python_out=.",
                    "--grpc_python_out=.", "--pyi_out=.", f"proto/{SOURCE}"],
                   cwd=tmp_path, check=True)
    for name in GENERATED:
        fresh = (tmp_path / "protocol/v1" / name).read_text()
        committed = (ROOT / "protocol/v1" / name).read_text()
        assert fresh == committed, f"{name} is stale: run `make proto`"


def test_the_proto_source_is_outside_the_python_package():
    assert (ROOT / "proto" / SOURCE).is_file()
    assert not list((ROOT / "protocol").rglob("*.proto")), "the .proto source belongs in proto/"


def test_protocol_is_versioned():
    from protocol.v1 import agent_pb2
    assert agent_pb2.DESCRIPTOR.package == "berth.agent.v1"
    assert agent_pb2.DESCRIPTOR.name == SOURCE  # the wire's file name, unchanged
    assert set(agent_pb2.DESCRIPTOR.services_by_name["AgentGateway"].methods_by_name) == {
        "Register", "Connect"}
