"""The real installer, run as its install_command says, against a real
`berth serve`: installs into its own virtualenv from the served wheelhouse,
registers, re-runs safely, uninstalls. (Paths point into a temporary directory
so that the host is left as it was; tests/e2e/servers/test_install_e2e.py runs it in
a fresh Debian container with the default paths.)"""

import functools
import glob
import http.server
import io
import json
import os
import platform
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest
import requests

from tests.support.agents import wait_for
from tests.support.serve import BERTH, Served

P = "/api/public/v1"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    data = tmp_path_factory.mktemp("cp")
    s = Served(data)
    subprocess.run([BERTH, "wheelhouse"], env=s.env, check=True, capture_output=True)
    boot = s.admin("bootstrap")
    s.key = s.admin("key", "create", "--org", boot["organization_id"], "--name", "installer",
                    "--type", "full_access", "--scope", "organization",
                    "--server-registration")["key"]
    s.start()
    yield s
    s.stop()


def _token(served, **body):
    r = requests.post(served.url + P + "/servers/registration-tokens", json=body,
                      headers={"Authorization": f"Bearer {served.key}"}, timeout=10)
    assert r.status_code == 201, r.text
    return r.json()


def _env(tmp_path):
    return {**os.environ, "BERTH_PREFIX": str(tmp_path / "opt"),
            "BERTH_BIN_LINK": str(tmp_path / "bin" / "berth-agent"),
            "BERTH_CONFIG_DIR": str(tmp_path / "etc"), "BERTH_DATA_DIR": str(tmp_path / "var"),
            "BERTH_ENV_ROOT": str(tmp_path / "srv")}


def _sh(command, env, timeout=300):
    return subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_install_register_rerun_uninstall(served, tmp_path):
    token = _token(served, server_name="installer-box")
    env = _env(tmp_path)
    first = _sh(token["install_command"], env)
    assert first.returncode == 0, first.stdout + first.stderr
    assert token["token"] not in first.stdout + first.stderr  # never echoed

    config_file = tmp_path / "etc" / "agent.json"
    assert oct(config_file.stat().st_mode & 0o777) == "0o600"
    assert (tmp_path / "srv").is_dir()  # the environments' root, before any deploy
    config = json.loads(config_file.read_text())
    assert config["credential"].startswith("agt_live_") and config["grpc_address"] == served.grpc

    listed = requests.get(served.url + P + "/servers", headers={"X-API-Key": served.key},
                          timeout=10).json()["data"]
    assert [s["name"] for s in listed if s["id"] == config["server_id"]] == ["installer-box"]

    # The installed agent runs and connects.
    agent_env = {**env, "BERTH_AGENT_CONFIG": str(config_file),
                 "BERTH_AGENT_DATA_DIR": str(tmp_path / "var")}
    agent = subprocess.Popen([str(tmp_path / "bin" / "berth-agent"), "run"], env=agent_env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        status = wait_for(lambda: subprocess.run(
            [str(tmp_path / "bin" / "berth-agent"), "status"], env=agent_env,
            capture_output=True, text=True).returncode == 0, what="installed agent connected")
        assert status
    finally:
        agent.terminate()
        agent.wait(15)

    # Running the same line again replaces the agent's code, even at the same
    # version number, and keeps the credential.
    [installed] = map(Path, glob.glob(str(tmp_path / "opt/venv/lib/python3*/site-packages/"
                                            "agent/cli.py")))
    original = installed.read_text()
    installed.write_text("raise SystemExit('stale agent code')\n")
    again = _sh(token["install_command"], env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "keeping the existing credential" in again.stdout
    assert installed.read_text() == original
    assert json.loads(config_file.read_text())["credential"] == config["credential"]

    script = requests.get(served.url + "/install.sh", timeout=10).text
    (tmp_path / "install.sh").write_text(script)
    (tmp_path / "srv" / "some-environment").mkdir()
    removed = _sh(f"sh {tmp_path / 'install.sh'} --uninstall", env)
    assert removed.returncode == 0, removed.stderr
    for path in ("opt", "etc", "var", "bin/berth-agent"):
        assert not (tmp_path / path).exists(), path
    # Environments' data is the customer's: kept; an empty root goes.
    assert (tmp_path / "srv" / "some-environment").is_dir() and "kept" in removed.stdout
    (tmp_path / "srv" / "some-environment").rmdir()
    assert _sh(f"sh {tmp_path / 'install.sh'} --uninstall", env).returncode == 0
    assert not (tmp_path / "srv").exists()


def test_bad_token_fails_clearly_and_creates_nothing(served, tmp_path):
    token = _token(served)
    forged = token["install_command"].replace(token["token"], "srt_live_" + "x" * 40)
    before = requests.get(served.url + P + "/servers", headers={"X-API-Key": served.key},
                          timeout=10).json()["pagination"]["total"]
    r = _sh(forged, _env(tmp_path))
    assert r.returncode != 0 and "registration" in r.stderr
    time.sleep(0.2)
    after = requests.get(served.url + P + "/servers", headers={"X-API-Key": served.key},
                         timeout=10).json()["pagination"]["total"]
    assert after == before


def test_script_is_posix_and_runs_nothing_when_truncated(served, tmp_path):
    script = requests.get(served.url + "/install.sh", timeout=10).text
    assert script.rstrip().endswith('main "$@"')
    assert served.url.split(":")[0] in script  # the default control plane is filled in
    if subprocess.run(["which", "dash"], capture_output=True).returncode == 0:
        assert subprocess.run(["dash", "-n"], input=script, text=True).returncode == 0
    for cut in (len(script) // 3, len(script) // 2, len(script) - 20):
        subprocess.run(["sh"], input=script[:cut], text=True, capture_output=True,
                       env={**_env(tmp_path), "BERTH_TOKEN": "srt_live_" + "x" * 40})
        assert not (tmp_path / "opt").exists() and not (tmp_path / "etc").exists()


def _functions(script):
    """The installer's functions, without the call to main."""
    body = script.rstrip()
    assert body.endswith('main "$@"')
    return body[: -len('main "$@"')]


def test_missing_git_is_installed_after_one_apt_get_update(tmp_path):
    """Fresh images have no package lists: `apt-get install` alone finds nothing."""
    script = (Path(__file__).parents[2] / "install" / "install.sh").read_text()
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "apt-get").write_text('#!/bin/sh\necho "$*" >> "$CALLS"\n')
    (fake / "apt-get").chmod(0o755)
    calls = tmp_path / "calls"
    # PATH holds the fake apt-get only, so git is "missing".
    r = subprocess.run(["/bin/sh", "-c", _functions(script) + "need_git && apt_install other"],
                       env={"PATH": str(fake), "CALLS": str(calls)}, capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert calls.read_text().splitlines() == [
        "update -qq", "install -y -qq git", "install -y -qq other"]  # update once, first


def test_missing_zstd_is_installed_for_backups(tmp_path):
    script = (Path(__file__).parents[2] / "install" / "install.sh").read_text()
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "apt-get").write_text('#!/bin/sh\necho "$*" >> "$CALLS"\n')
    (fake / "apt-get").chmod(0o755)
    calls = tmp_path / "calls"
    r = subprocess.run(["/bin/sh", "-c", _functions(script) + "need_zstd"],
                       env={"PATH": str(fake), "CALLS": str(calls)}, capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert calls.read_text().splitlines() == ["update -qq", "install -y -qq zstd"]
    assert "installing zstd" in r.stdout


@pytest.mark.parametrize("mismatch", ["python", "arch"])
def test_a_wheelhouse_for_another_python_or_cpu_is_refused_before_installing(tmp_path, mismatch):
    arch = platform.machine()
    here = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    other_arch = "aarch64" if arch == "x86_64" else "x86_64"
    tag, plat = ("cp39", arch) if mismatch == "python" else (here, other_arch)
    wheels = ["berth-0.1.0-py3-none-any.whl",
              f"psutil-7.2.2-cp36-abi3-manylinux2014_{arch}.whl",
              f"grpcio-1.85.1-{tag}-{tag}-manylinux2014_{plat}.manylinux_2_17_{plat}.whl"]
    site = tmp_path / "site"
    (site / "agent").mkdir(parents=True)
    with tarfile.open(site / "agent" / "wheelhouse.tar", "w") as tar:
        for name in wheels:
            info = tarfile.TarInfo(name)
            tar.addfile(info, io.BytesIO(b""))
    handler = functools.partial(_QuietHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        script = (Path(__file__).parents[2] / "install" / "install.sh").read_text()
        (tmp_path / "install.sh").write_text(script)
        env = {**_env(tmp_path), "BERTH_TOKEN": "srt_live_" + "x" * 40,
               "BERTH_CONTROL_PLANE": f"http://127.0.0.1:{httpd.server_port}"}
        r = _sh(f"sh {tmp_path / 'install.sh'}", env, timeout=60)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert r.returncode != 0
    assert "built for another Python version or CPU architecture" in r.stderr
    assert wheels[2] in r.stderr and f"on {arch}" in r.stderr  # what, and what this server has
    for path in ("opt", "etc", "var", "srv", "bin"):
        assert not (tmp_path / path).exists(), path  # nothing installed


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass
