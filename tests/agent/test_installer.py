"""The real installer, run as its install_command says, against a real
`berth serve`: installs into its own virtualenv from the served wheelhouse,
registers, re-runs safely, uninstalls. (Paths point into a temporary directory
so that the host is left as it was; tests/agent/test_install_e2e.py runs it in
a fresh Debian container with the default paths.)"""

import json
import os
import subprocess
import time

import pytest
import requests

from tests.agent_support import wait_for
from tests.serve import BERTH, Served

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
            "BERTH_CONFIG_DIR": str(tmp_path / "etc"), "BERTH_DATA_DIR": str(tmp_path / "var")}


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

    # Running the same line again upgrades and keeps the credential.
    again = _sh(token["install_command"], env)
    assert again.returncode == 0 and "keeping the existing credential" in again.stdout
    assert json.loads(config_file.read_text())["credential"] == config["credential"]

    script = requests.get(served.url + "/install.sh", timeout=10).text
    (tmp_path / "install.sh").write_text(script)
    removed = _sh(f"sh {tmp_path / 'install.sh'} --uninstall", env)
    assert removed.returncode == 0, removed.stderr
    for path in ("opt", "etc", "var", "bin/berth-agent"):
        assert not (tmp_path / path).exists(), path


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
