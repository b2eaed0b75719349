"""The agent installs alone: a customer server gets the agent's dependencies
and none of the control plane's (pip's own resolver decides)."""

import json
import subprocess
import sys
from pathlib import Path

from control_plane import __version__

ROOT = Path(__file__).resolve().parents[1]


def _resolve(target, tmp_path):
    report = tmp_path / "report.json"
    subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
                    "--no-build-isolation", "--quiet", "--report", str(report), target],
                   cwd=ROOT, check=True, capture_output=True)
    return {i["metadata"]["name"].lower() for i in json.loads(report.read_text())["install"]}


def test_agent_install_has_no_control_plane_dependencies(tmp_path):
    names = _resolve(".", tmp_path)
    assert {"grpcio", "protobuf", "psutil", "docker"} <= names
    assert not names & {"flask", "peewee", "boto3", "flask-smorest", "marshmallow", "tornado"}


def test_server_extra_brings_the_control_plane(tmp_path):
    names = _resolve(".[server]", tmp_path)
    assert {"flask", "flask-smorest", "peewee", "tornado", "limits"} <= names


def test_console_scripts_exist():
    bindir = Path(sys.executable).parent
    for script in ("berth", "berth-agent"):
        out = subprocess.run([str(bindir / script), "--version"], capture_output=True, text=True)
        assert out.returncode == 0 and __version__ in out.stdout
