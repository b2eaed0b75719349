"""End to end, as a customer does it: create a token through the API, paste
its install_command on a fresh Debian system (a container from the local test
image, with the host's Docker socket and network), and the server shows up
connected, reports its metrics, and serves environment metrics and logs."""

import json
import shutil
import subprocess
import uuid

import pytest
import requests

from tests.support.agents import wait_for
from tests.support.serve import BERTH, Served

P = "/api/public/v1"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    s = Served(tmp_path_factory.mktemp("cp-e2e"))
    subprocess.run([BERTH, "wheelhouse"], env=s.env, check=True, capture_output=True)
    boot = s.admin("bootstrap")
    s.org = boot["organization_id"]
    s.key = s.admin("key", "create", "--org", s.org, "--name", "e2e", "--type", "full_access",
                    "--scope", "organization", "--server-registration")["key"]
    s.read_key = s.admin("key", "create", "--org", s.org, "--name", "e2e-ro", "--type",
                         "read_only", "--scope", "organization")["key"]
    s.start()
    yield s
    s.stop()


def api(served, method, path, key=None, **kwargs):
    return requests.request(method, served.url + P + path, timeout=30,
                            headers={"Authorization": f"Bearer {key or served.key}"}, **kwargs)


def test_install_command_on_a_fresh_server(served, docker_client, test_image, labeled_container):
    token = api(served, "POST", "/servers/registration-tokens",
                json={"server_name": "fresh-debian"}).json()
    agent_env = "BERTH_AGENT_CONFIG=/etc/berth-agent/agent.json BERTH_AGENT_DATA_DIR=/var/lib/berth-agent"
    box = docker_client.containers.run(
        test_image, ["sh", "-c", f"{token['install_command']} && {agent_env} exec berth-agent run"],
        detach=True, network_mode="host", name=f"berth-e2e-{uuid.uuid4().hex[:8]}",
        volumes={"/var/run/docker.sock": {"bind": "/var/run/docker.sock", "mode": "rw"}})
    try:
        def listed():  # the read-only key: polling must not use up the full-access key's 20/min
            rows = api(served, "GET", "/servers", served.read_key).json()["data"]
            return next((s for s in rows if s["name"] == "fresh-debian"), None)

        server = wait_for(listed, timeout=240, interval=2, what="server registered")
        tokens = api(served, "GET", "/servers/registration-tokens").json()
        assert [t["status"] for t in tokens if t["token_id"] == token["token_id"]] == ["consumed"]

        def status():
            out = box.exec_run(["sh", "-c", f"{agent_env} berth-agent status"])
            return out.exit_code == 0 and out.output.decode()

        text = wait_for(status, timeout=60, interval=1, what="berth-agent status: connected")
        assert "connected since" in text and server["id"] in text
        assert token["token"] not in box.logs().decode()

        metrics = api(served, "GET", f"/servers/{server['id']}/metrics", served.read_key)
        assert metrics.status_code == 200, metrics.text
        assert metrics.json()["memory_total_bytes"] > 0

        # An environment on that server, with containers carrying the agent's labels.
        project = api(served, "POST", "/projects",
                      json={"name": "e2e", "server_id": server["id"]}).json()
        env_id = _environment(served, project["id"], server["id"])
        erp = labeled_container(env_id, "erp", ["sh", "-c", "echo booted; sleep 600"])
        labeled_container(env_id, "postgres", ["sleep", "600"])
        wait_for(lambda: b"booted" in erp.logs(), timeout=30, what="the ERP's first output")
        m = api(served, "GET", f"/environments/{env_id}/metrics", served.read_key)
        assert m.status_code == 200, m.text
        assert m.json()["erp"]["status"] == "running" and m.json()["postgres"] is not None
        logs = api(served, "GET", f"/environments/{env_id}/runtime-logs", served.read_key)
        assert logs.status_code == 200 and logs.json()["log"] == "booted"

        # The server owner sees the environment and its containers in `berth-agent status`.
        out = box.exec_run(["sh", "-c", f"{agent_env} berth-agent status --json"])
        local = json.loads(out.output.decode())
        assert out.exit_code == 0 and local["connected"] is True
        assert sorted((c["role"], c["state"]) for c in local["environments"][env_id]) == [
            ("erp", "running"), ("postgres", "running")]
        text = box.exec_run(["sh", "-c", f"{agent_env} berth-agent status"]).output.decode()
        assert env_id in text and "erp" in text
    finally:
        box.remove(force=True)


def _environment(served, project_id, server_id):
    """A running environment put in place directly: creating one through the API
    would also deploy it, and this test starts its own labelled containers."""
    import sqlite3

    env_id = str(uuid.uuid4())
    db = sqlite3.connect(served.env["CP_DATA_DIR"] + "/berth.sqlite3")
    with db:
        db.execute("INSERT INTO environment (id, created_at, project_id, server_id, name, "
                   "environment_type, status, auto_deploy, custom_domain_verified, is_active, "
                   "backup_time, backup_keep_daily, backup_keep_weekly, backup_keep_monthly) "
                   "VALUES (?, datetime('now'), ?, ?, 'prod', 'production', 'running', 0, 0, 1, "
                   "'02:00', 7, 4, 3)",
                   (uuid.UUID(env_id).hex, uuid.UUID(project_id).hex, uuid.UUID(server_id).hex))
    db.close()
    return env_id


# After the installer: which of the unit's ReadWritePaths exist, and whether git does.
REPORT = """
echo ---CALLS--- && cat /tmp/systemctl.calls
echo ---PATHS---
for p in $(sed -n 's/^ReadWritePaths=//p' /etc/systemd/system/berth-agent.service); do
    if [ -e "${p#-}" ]; then echo "present $p"; else echo "missing $p"; fi
done
echo ---GIT--- && command -v git
"""


def test_systemd_unit_is_written_hardened_and_enabled(served, docker_client, test_image,
                                                      tmp_path):
    """systemd cannot run in a test container, so `systemctl` is a fake that
    records its calls (and /run/systemd/system exists); the unit file is real.
    The image is a fresh Debian: no git and no APT package lists."""
    token = api(served, "POST", "/servers/registration-tokens",
                json={"server_name": "with-systemd"}).json()
    fake_systemctl = "#!/bin/sh\necho \"$@\" >> /tmp/systemctl.calls\n"
    script = (f"set -e; mkdir -p /run/systemd/system && printf '%s' '{fake_systemctl}' "
              "> /usr/local/bin/systemctl && chmod +x /usr/local/bin/systemctl && "
              f"{token['install_command']} && cat /etc/systemd/system/berth-agent.service && "
              + REPORT)
    out = docker_client.containers.run(test_image, ["sh", "-c", script], network_mode="host",
                                       remove=True).decode()
    unit, rest = out.split("---CALLS---")
    calls, rest = rest.split("---PATHS---")
    paths, git = rest.split("---GIT---")
    unit = unit[unit.index("[Unit]"):]  # after the installer's own output
    assert "ExecStart=/usr/local/bin/berth-agent run" in unit
    for hardening in ("NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes",
                      "PrivateTmp=yes", "Restart=always"):
        assert hardening in unit
    assert calls.split("\n")[1:4] == ["daemon-reload", "enable berth-agent", "restart berth-agent"]

    # systemd refuses to start a unit (226/NAMESPACE) when a ReadWritePaths entry
    # without "-" is missing: the installer makes them all, before any deploy.
    assert "Environment=BERTH_AGENT_ENV_ROOT=/srv/berth" in unit
    listed = dict(reversed(line.split(" ", 1)) for line in paths.strip().splitlines())
    assert listed == {"/var/lib/berth-agent": "present", "/etc/berth-agent": "present",
                      "/opt/berth-agent": "present",  # an upgrade installs its version there
                      "-/srv/berth": "present",
                      "-/var/run/docker.sock": "missing"}  # optional: Docker may come later
    assert git.strip() == "/usr/bin/git"  # installed after an `apt-get update`

    analyze = shutil.which("systemd-analyze")
    if analyze:  # Debian's systemd package: the unit's syntax, as systemd reads it
        stub = tmp_path / "berth-agent"
        stub.write_text("#!/bin/sh\n")
        stub.chmod(0o755)
        path = tmp_path / "berth-agent.service"
        path.write_text(unit.strip().replace("/usr/local/bin/berth-agent", str(stub)) + "\n")
        r = subprocess.run([analyze, "verify", str(path)], capture_output=True, text=True)
        assert r.returncode == 0 and not (r.stdout + r.stderr).strip(), r.stdout + r.stderr
