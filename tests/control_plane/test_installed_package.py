"""The control plane from a built wheel, in a clean virtualenv, with no source tree
in sight: it serves `/install.sh`, builds the agent wheelhouse from its own installed
distribution, and a server installs the agent from that wheelhouse with no index."""

import io
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import requests

from agent import __version__
from tests.support.services import free_port, stop_process
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A plain `python -m venv` with `berth[server]` installed from its wheel."""
    base = tmp_path_factory.mktemp("installed")
    dist = base / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "--wheel-dir", str(dist), str(ROOT)],
                   check=True, capture_output=True, timeout=300)
    [wheel] = dist.glob("berth-*.whl")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check",
                    f"{wheel}[server]"], check=True, capture_output=True, timeout=600)
    return venv, wheel


def _serve(venv, cwd, env):
    port = free_port()
    log = open(cwd / "serve.log", "w")
    env = {**_clean_env(), "CP_PUBLIC_URL": f"http://127.0.0.1:{port}", **env}
    proc = subprocess.Popen([str(venv / "bin" / "berth"), "serve", "--http", f"127.0.0.1:{port}",
                             "--grpc", "127.0.0.1:0"], cwd=cwd, env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    def listening():
        assert proc.poll() is None, "berth serve exited:\n" + (cwd / "serve.log").read_text()
        return re.search(r"listening on http://", (cwd / "serve.log").read_text())

    try:
        wait_for(listening, timeout=60, interval=0.1, what="berth serve listening",
                 detail=(cwd / "serve.log").read_text)
    except AssertionError:
        proc.kill()
        raise
    return proc, f"http://127.0.0.1:{port}", log


def _clean_env():
    """Nothing of this checkout: no PYTHONPATH, no settings from the test run."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("CP_", "PYTHON", "VIRTUAL_ENV"))}


def _built(url):
    """The wheelhouse once served; meanwhile only ever a 503 saying it is being built."""
    r = requests.get(url, timeout=30)
    if r.status_code == 200:
        return r
    assert r.status_code == 503 and r.json()["error"] == "wheelhouse_building", r.text
    return None


def test_an_installed_control_plane_serves_the_installer_and_builds_the_agent_packages(
        installed, tmp_path):
    venv, wheel = installed
    proc, url, log = _serve(venv, tmp_path, {"CP_DATA_DIR": str(tmp_path / "data")})
    try:
        script = requests.get(url + "/install.sh", timeout=10)
        tar = wait_for(lambda: _built(url + "/agent/wheelhouse.tar"), timeout=300,
                       interval=0.5, what="the agent wheelhouse built")
    finally:
        stop_process(proc, log)
    assert script.status_code == 200 and script.text.startswith("#!/bin/sh")
    assert url in script.text and "__BERTH_CONTROL_PLANE__" not in script.text
    assert tar.status_code == 200, tar.text
    assert str(ROOT) not in (tmp_path / "serve.log").read_text()

    # The berth wheel inside is the one that was installed, file for file.
    wheels = tmp_path / "wheels"
    with tarfile.open(fileobj=io.BytesIO(tar.content)) as archive:
        archive.extractall(wheels, filter="data")
    [repacked] = wheels.glob("berth-*.whl")
    assert repacked.name == wheel.name
    assert (sorted(zipfile.ZipFile(repacked).namelist())
            == sorted(zipfile.ZipFile(wheel).namelist()))
    assert zipfile.ZipFile(repacked).testzip() is None

    # A server installs the agent from it, with no index at all.
    agent = tmp_path / "agent-venv"
    subprocess.run([sys.executable, "-m", "venv", str(agent)], check=True)
    subprocess.run([str(agent / "bin" / "pip"), "install", "--quiet", "--no-index",
                    "--find-links", str(wheels), "berth"], check=True, capture_output=True,
                   timeout=300, env=_clean_env())
    out = subprocess.run([str(agent / "bin" / "berth-agent"), "--version"], capture_output=True,
                         text=True, env=_clean_env())
    assert out.returncode == 0 and __version__ in out.stdout
    check = subprocess.run([str(agent / "bin" / "python"), "-c", "import flask"],
                           capture_output=True, env=_clean_env())
    assert check.returncode != 0  # the agent alone: no control plane dependencies


def test_a_wheelhouse_built_at_packaging_time_is_served_at_once(installed, tmp_path):
    """`berth wheelhouse --into DIR` (an image build) reads no settings and makes no
    data dir; a control plane with CP_WHEELHOUSE_DIR=DIR serves it with no build."""
    venv, _ = installed
    built = subprocess.run([str(venv / "bin" / "berth"), "wheelhouse", "--into",
                            str(tmp_path / "wh")], cwd=tmp_path, env=_clean_env(),
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    assert not (tmp_path / "data").exists()
    proc, url, log = _serve(venv, tmp_path, {"CP_DATA_DIR": str(tmp_path / "data"),
                                             "CP_WHEELHOUSE_DIR": str(tmp_path / "wh")})
    try:
        r = requests.get(url + "/agent/wheelhouse.tar", timeout=30)
    finally:
        stop_process(proc, log)
    assert r.status_code == 200, r.text
    assert r.content == (tmp_path / "wh" / "wheelhouse.tar").read_bytes()
    assert "building the agent wheelhouse" not in (tmp_path / "serve.log").read_text()
