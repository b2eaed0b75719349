"""Servers reached over SSH, against a real `sshd` on loopback (tests/support/sshd.py)
signing in as this machine's user, where `berth-agent` runs one call at a time
with the real Docker engine: added through the public API, the host key pinned
at first contact and a changed one refused until accepted, server metrics with
numbers, environment metrics with states and null figures, a deploy, stop,
backup and delete over SSH with their task logs, a connection cut mid-command
(neither lost nor run twice), and a server that never answers delaying no other."""

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import control_plane
from agent.deploy.environments import Environments
from control_plane.gateway.ssh import SshLink
from control_plane.models import AgentCommand, Project, Server
from control_plane.scheduler import Scheduler, jobs
from control_plane.services.accounts import orgs
from protocol import frames
from protocol.v1 import agent_pb2 as pb
from tests.conftest import auth
from tests.support.agents import AGENT, polled_get, wait_for
from tests.support.git_repo import shop_repo
from tests.support.sshd import Silent, Sshd

P, V1 = "/api/public/v1", "/api/v1"
PERMISSIONS = ("project.environments.deploy", "project.deployments.cancel")


class Stand:
    pass


@pytest.fixture
def ssh(app, world, http_app, tmp_path):
    s = Stand()
    s.berth = app.extensions["berth"]
    s.settings = s.berth.settings
    s.settings.update(SSH_AGENT_PATH=AGENT, SSH_CONNECT_TIMEOUT=3, SSH_CALL_TIMEOUT=15,
                      SSH_CHECK_SECONDS=1, SSH_ALLOW_PRIVATE=True)  # the sshd is on loopback
    s.box = tmp_path / "box"  # the SSH server's agent: config, data, environments
    s.sshd = Sshd(tmp_path / "sshd", env={
        "BERTH_AGENT_CONFIG": s.box / "agent.json", "BERTH_AGENT_DATA_DIR": s.box / "data",
        "BERTH_AGENT_ENV_ROOT": s.box / "srv", "BERTH_AGENT_GIT_PROTOCOLS": "https:ssh:file",
        # Where the installer puts the agent, its link and directories (its defaults on
        # a real server: /opt/berth-agent, /usr/local/bin, /etc, /var/lib, /srv).
        "BERTH_PREFIX": s.box / "opt", "BERTH_BIN_LINK": s.box / "bin" / "berth-agent",
        "BERTH_CONFIG_DIR": s.box, "BERTH_DATA_DIR": s.box / "data",
        "BERTH_ENV_ROOT": s.box / "srv",
        "PATH": f"{Path(sys.executable).parent}:/usr/sbin:/usr/bin:/sbin:/bin"}).start()
    s.org = world.org()
    s.key = auth(world.key(s.org, server_registration=True)[0])
    s.reader = auth(world.key(s.org, "read_only")[0])
    s.world = world
    yield s
    s.berth.ssh.close()
    s.sshd.stop()


def add(client, s, **body):
    """POST /servers for the test's sshd, its public key authorized there, checked."""
    r = client.post(f"{P}/servers", headers=s.key, json={
        "name": "ssh-box", "ssh_host": "127.0.0.1", "ssh_port": s.sshd.port, **body})
    assert r.status_code == 201, r.json
    s.sshd.authorize(r.json["ssh_public_key"])
    s.berth.ssh.check_all().result(30)
    return r.json


def listed(client, s, server_id):
    rows = polled_get(client, f"{P}/servers?limit=100", s.reader)["data"]
    return next(row for row in rows if row["id"] == server_id)


def test_the_host_key_is_pinned_at_first_contact_and_a_changed_one_refused(client, ssh):
    s = ssh
    created = add(client, s)
    assert created["connection"] == "ssh" and created["ssh"]["host_key_fingerprint"] is None
    assert created["ssh_public_key"].startswith("ssh-ed25519 ")
    row = listed(client, s, created["id"])
    assert row["reachable"] is True and row["unreachable_since"] is None
    assert row["ssh"]["host_key_fingerprint"] == s.sshd.fingerprint()
    # The facts came over SSH: the server's size is this machine's.
    assert row["cpu_cores"] == os.cpu_count() and row["ram_mb"] > 0
    assert row["agent_version"]

    metrics = client.get(f"{P}/servers/{created['id']}/metrics", headers=s.reader)
    assert metrics.status_code == 200, metrics.json
    m = metrics.json
    assert m["status"] in ("healthy", "warning", "critical")
    assert m["memory_total_bytes"] > 0 and m["disk_total_bytes"] > 0
    assert isinstance(m["cpu_percent"], float) and 0 <= m["memory_percent"] <= 100

    # Someone else answers at the address (or the server was reinstalled).
    pinned = s.sshd.fingerprint()
    s.sshd.new_host_key()
    s.sshd.restart()
    s.berth.ssh.close()
    s.berth.ssh = SshLink(s.settings)  # a control plane restart: no connection held
    refused = client.get(f"{P}/servers/{created['id']}/metrics", headers=s.reader)
    assert refused.status_code == 502 and refused.json["error"] == "metrics_unavailable"
    s.berth.ssh.check_all().result(30)
    row = listed(client, s, created["id"])
    assert row["reachable"] is False and row["unreachable_since"] is not None
    assert row["ssh"]["host_key_fingerprint"] == pinned
    assert row["ssh"]["offered_host_key_fingerprint"] == s.sshd.fingerprint()
    assert "host key" in row["ssh"]["error"]
    # Until an operator accepts the new key, nothing is sent: the next check neither
    # connects nor pins.
    s.berth.ssh.check_all().result(30)
    assert listed(client, s, created["id"])["ssh"]["host_key_fingerprint"] == pinned

    accepted = client.post(f"{P}/servers/{created['id']}/accept-host-key", headers=s.key)
    assert accepted.status_code == 200, accepted.json
    assert accepted.json["ssh"]["host_key_fingerprint"] == s.sshd.fingerprint()
    s.berth.ssh.check_all().result(30)
    assert listed(client, s, created["id"])["reachable"] is True
    again = client.post(f"{P}/servers/{created['id']}/accept-host-key", headers=s.key)
    assert again.status_code == 409
    assert client.get(f"{P}/servers/{created['id']}/metrics",
                      headers=s.reader).status_code == 200


def test_live_reads_of_a_server_whose_host_key_changed_say_how_to_accept_it(client, ssh):
    """Metrics and runtime logs refused for a changed host key say so, with the key
    the server now offers and the ways to accept it: a retry cannot help."""
    s = ssh
    created = add(client, s)
    server_id = created["id"]
    env = s.world.environment(s.world.project(s.org, Server.get_by_id(server_id)))
    s.sshd.new_host_key()
    s.sshd.restart()
    s.berth.ssh.close()
    s.berth.ssh = SshLink(s.settings)  # no connection held: the next one meets the new key
    # The first read finds the new key; the others are refused before any contact.
    for path, code in ((f"{P}/servers/{server_id}/metrics", "metrics_unavailable"),
                       (f"{P}/environments/{env.id}/metrics", "metrics_unavailable"),
                       (f"{P}/environments/{env.id}/runtime-logs", "server_unreachable")):
        r = client.get(path, headers=s.reader)
        assert r.status_code == 502 and r.json["error"] == code, r.json
        message = r.json["message"]
        assert "host key changed" in message and s.sshd.fingerprint() in message, message
        assert f"POST /api/public/v1/servers/{server_id}/accept-host-key" in message
        assert f"berth admin server accept-host-key {server_id}" in message
        assert "Retry in a minute" not in message
    accepted = client.post(f"{P}/servers/{server_id}/accept-host-key", headers=s.key)
    assert accepted.status_code == 200, accepted.json
    assert client.get(f"{P}/servers/{server_id}/metrics", headers=s.reader).status_code == 200


def test_the_host_key_is_pinned_before_our_key_is_authorized_there(client, ssh):
    """First contact pins the key on the connection it keeps, and pins it even when
    signing in is refused (the organization's key not yet in authorized_keys), so
    its fingerprint shows while the operator sets the server up."""
    s = ssh
    r = client.post(f"{P}/servers", headers=s.key, json={
        "name": "not-yet", "ssh_host": "127.0.0.1", "ssh_port": s.sshd.port})
    assert r.status_code == 201, r.json
    s.berth.ssh.check_all().result(30)
    row = listed(client, s, r.json["id"])
    assert row["reachable"] is False and "ermission denied" in row["ssh"]["error"]
    assert row["ssh"]["host_key_fingerprint"] == s.sshd.fingerprint()
    s.sshd.authorize(r.json["ssh_public_key"])
    s.berth.ssh.check_all().result(30)
    assert listed(client, s, r.json["id"])["reachable"] is True


def test_a_host_key_given_up_front_is_the_only_one_accepted(client, ssh, tmp_path):
    s = ssh
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    created = add(client, s, ssh_host_key=other.with_suffix(".pub").read_text())
    row = listed(client, s, created["id"])
    assert row["reachable"] is False
    assert row["ssh"]["offered_host_key_fingerprint"] == s.sshd.fingerprint()
    created = add(client, s, ssh_host_key=s.sshd.public_host_key)
    assert listed(client, s, created["id"])["reachable"] is True


def test_a_server_that_never_answers_delays_no_other(client, ssh):
    s = ssh
    good = add(client, s)
    silent = Silent()
    try:
        r = client.post(f"{P}/servers", headers=s.key, json={
            "name": "hung", "ssh_host": "127.0.0.1", "ssh_port": silent.port})
        hung = r.json
        sweep = s.berth.ssh.check_all()  # the hung server's check is in flight
        started = time.monotonic()
        answer = client.get(f"{P}/servers/{good['id']}/metrics", headers=s.reader)
        assert answer.status_code == 200 and time.monotonic() - started < 3, answer.json
        started = time.monotonic()
        answer = client.get(f"{P}/servers/{hung['id']}/metrics", headers=s.reader)
        assert answer.status_code == 502 and answer.json["error"] == "metrics_unavailable"
        assert time.monotonic() - started < 3 + 2  # its connect timeout, not forever
        outcome = sweep.result(30)
        assert outcome[good["id"]] is None and "no SSH connection" in outcome[hung["id"]]
        row = listed(client, s, hung["id"])
        assert row["reachable"] is False and row["unreachable_since"] is not None
        assert listed(client, s, good["id"])["reachable"] is True
    finally:
        silent.close()


# --- deploys and the rest over SSH -------------------------------------------------------

@pytest.fixture
def over_ssh(ssh, tmp_path, erp_image, postgres_image, docker_client, client):
    s = ssh
    s.settings.update(ERP_IMAGE=erp_image, POSTGRES_IMAGE=postgres_image, SSH_DISK_SECONDS=1)
    s.server = add(client, s)
    s.project = s.world.project(s.org, Server.get_by_id(s.server["id"]))
    Project.update(git_repo_url=_repo(tmp_path)).where(Project.id == s.project.id).execute()
    s.user = auth(orgs.issue_user_token(s.world.user(s.org, permissions=PERMISSIONS).id))
    # The scheduler's job for SSH servers, every second.
    scheduler = Scheduler([j for j in jobs(s.berth) if j.name == "ssh-servers"])
    thread = threading.Thread(target=scheduler.run, daemon=True)
    thread.start()
    s.created = []
    yield s
    scheduler.stop() if hasattr(scheduler, "stop") else scheduler.stopping.set()
    envs = Environments(docker_client, root=s.box / "srv")
    for env_id in s.created:
        envs.destroy(env_id, True, lambda *a: None)


def _repo(tmp_path):
    return f"file://{shop_repo(tmp_path)}"


def _task(client, s, task_id, timeout=180):
    return wait_for(lambda: (t := polled_get(client, f"{P}/deployments/{task_id}", s.reader))
                    ["status"] in ("completed", "failed") and t, timeout=timeout, interval=0.5,
                    what=f"task {task_id}")


def _lines(client, s, env_id, task_id):
    return polled_get(client, f"{P}/environments/{env_id}/logs?task_id={task_id}&lines=5000",
                      s.reader)["log"].splitlines()


def test_deploy_stop_backup_and_delete_over_ssh(client, over_ssh, backend, docker_client,
                                                caplog):
    if backend != "sqlite":
        pytest.skip("the flow runs once; the SSH rows above run on both databases")
    s = over_ssh
    # Measured at the first check (nothing deployed yet), then not for an hour: the
    # deploy's own measurement is what shows its disk use below.
    s.settings["SSH_DISK_SECONDS"] = 3600
    r = client.post(f"{P}/projects/{s.project.id}/environments", headers=s.key,
                    json={"name": "Production", "environment_type": "production"})
    assert r.status_code == 201, r.json
    env_id = r.json["id"]
    s.created.append(env_id)
    task_id = polled_get(client, f"{P}/environments/{env_id}/status",
                         s.reader)["last_deploy"]["id"]

    # The connection is cut while the deploy runs: the next pass sends the command
    # again, and the agent attaches to the run instead of starting another.
    wait_for(lambda: len(_lines(client, s, env_id, task_id)) >= 2, timeout=120, interval=0.3,
             what="the deploy under way")
    caplog.set_level("INFO", logger="berth.ssh")
    s.sshd.drop_connections()
    done = _task(client, s, task_id)
    assert done["status"] == "completed", done
    command = AgentCommand.get(AgentCommand.deployment == task_id)
    # Sent again after the cut, and acknowledged as already started there.
    assert f"command {command.id.hex} was already started there" in caplog.text
    journal = json.loads((s.box / "data" / "commands.json").read_text())
    assert journal[command.id.hex]["state"] == "done" and journal[command.id.hex]["ok"] is True
    # What its one run wrote there: log lines numbered 1..n once, then one result.
    out, rest = frames.split((s.box / "data" / "ssh-commands" / f"{command.id.hex}.out")
                             .read_bytes())
    written = [pb.AgentMessage.FromString(f) for f in out]
    assert rest == b"" and [m.WhichOneof("body") for m in written][-1] == "result"
    seqs = [m.log.seq for m in written if m.HasField("log")]
    assert seqs == list(range(1, len(seqs) + 1)) and sum(m.HasField("result") for m in written) == 1
    lines = _lines(client, s, env_id, task_id)
    assert len(lines) == len(set(lines)) and len(lines) >= 3  # each line once

    env = polled_get(client, f"{P}/environments/{env_id}", s.reader)
    assert env["status"] == "running"
    metrics = polled_get(client, f"{P}/environments/{env_id}/metrics", s.reader)
    assert metrics["erp"]["status"] == "running" and metrics["postgres"]["status"] == "running"
    assert metrics["erp"]["cpu_percent"] is None and metrics["erp"]["memory_used_bytes"] is None
    logs = polled_get(client, f"{P}/environments/{env_id}/runtime-logs?source=erp", s.reader)
    assert logs["lines"] >= 1
    # The disk use, measured over SSH once the deploy succeeded (as an agent's meter
    # wakes after one), not at the next interval.
    disk = wait_for(lambda: (d := polled_get(client, f"{P}/environments/{env_id}/metrics",
                                             s.reader)["disk"])["database_bytes"] and d,
                    timeout=60, interval=1, what="disk measured")
    assert disk["database_bytes"] > 0 and disk["addons_bytes"] > 0 and disk["measured_at"]

    stop = client.post(f"{P}/environments/{env_id}/actions/stop", headers=s.key)
    assert stop.status_code == 202, stop.json
    assert _task(client, s, stop.json["task_id"])["status"] == "completed"
    metrics = polled_get(client, f"{P}/environments/{env_id}/metrics", s.reader)
    assert metrics["erp"] == {"status": "stopped", "cpu_percent": None, "memory_used_bytes": None,
                              "memory_limit_bytes": None, "memory_percent": None}
    start = client.post(f"{P}/environments/{env_id}/actions/start", headers=s.key)
    assert _task(client, s, start.json["task_id"])["status"] == "completed"

    backup = client.post(f"{V1}/environments/{env_id}/backups", headers=s.user, json={})
    assert backup.status_code == 202, backup.json
    finished = wait_for(lambda: (b := next(
        x for x in polled_get(client, f"{P}/environments/{env_id}/backups?page_size=100",
                              s.reader)["items"] if x["id"] == backup.json["id"]))["status"]
        in ("completed", "failed") and b, timeout=180, interval=0.5, what="backup")
    assert finished["status"] == "completed", finished

    # Destroy waits for the server's answer (the command's result, over SSH).
    r = client.delete(f"{V1}/deployments/environment/{env_id}/destroy", headers=s.user)
    assert r.status_code == 200, r.json
    assert (r.json["deleted_containers"], r.json["deleted_database"]) == (2, True)
    label = {"label": f"berth.environment_id={env_id}"}
    assert docker_client.containers.list(all=True, filters=label) == []


def test_a_private_address_is_refused_unless_allowed(client, ssh):
    """A customer's server is no way into the control plane's own network."""
    s = ssh
    s.settings["SSH_ALLOW_PRIVATE"] = False
    created = add(client, s)
    row = listed(client, s, created["id"])
    assert row["reachable"] is False and row["ssh"]["host_key_fingerprint"] is None
    assert "private or local address (127.0.0.1)" in row["ssh"]["error"]
    s.settings["SSH_ALLOW_PRIVATE"] = True
    s.berth.ssh.check_all().result(30)
    assert listed(client, s, created["id"])["reachable"] is True


@pytest.fixture
def wheelhouse(agent_wheelhouse):
    return agent_wheelhouse


def installed_over_ssh(client, s, wheelhouse):
    """An SSH server whose agent the control plane installed (its first checks)."""
    link = s.box / "bin" / "berth-agent"
    s.settings.update(WHEELHOUSE_DIR=str(wheelhouse), SSH_AGENT_PATH=str(link))
    created = add(client, s)
    assert listed(client, s, created["id"])["reachable"] is False  # installing meanwhile

    def installed():
        s.berth.ssh.check_all().result(60)
        return listed(client, s, created["id"])["reachable"]
    wait_for(installed, timeout=600, interval=2, what="the agent installed over SSH")
    return created, link


def test_the_agent_is_installed_over_ssh_from_the_wheelhouse(client, ssh, wheelhouse):
    """A server with no agent: the first check finds none and installs it from the
    control plane's wheelhouse, over the SSH connection (the server downloads nothing)."""
    s = ssh
    s.settings.update(PUBLIC_URL="http://127.0.0.1:9")  # unreachable: nothing is fetched
    created, link = installed_over_ssh(client, s, wheelhouse)
    assert link.resolve() == s.box / "opt" / "venv" / "bin" / "berth-agent"
    row = listed(client, s, created["id"])
    assert row["agent_version"] and row["ssh"]["error"] is None
    assert not any(Path("/var/tmp").glob("berth-install*"))  # the upload is removed
    assert client.get(f"{P}/servers/{created['id']}/metrics", headers=s.reader).status_code == 200


def test_a_crash_loop_is_seen_at_the_checks(client, ssh, labeled_container):
    """What an agent's heartbeat says, an SSH server says at its checks."""
    from control_plane.models import Event

    s = ssh
    created = add(client, s)
    server = Server.get_by_id(created["id"])
    env = s.world.environment(s.world.project(s.org, server), server=server)
    labeled_container(env.id, "postgres", ["sh", "-c", "exit 3"],
                      restart_policy={"Name": "always"})

    def reported():
        s.berth.ssh.check_all().result(60)
        return Event.select().where(Event.name == "environment.crash_loop").first()
    event = wait_for(reported, timeout=60, interval=1, what="environment.crash_loop")
    assert event.data["environment_id"] == str(env.id) and event.data["role"] == "postgres"
    assert event.data["connection"] == "ssh"


def test_an_ssh_server_switches_to_a_resident_agent(client, app, ssh, wheelhouse, gateway):
    """One call installs the resident agent over SSH; from then on the server is
    reached through its agent's stream."""
    s = ssh
    created, link = installed_over_ssh(client, s, wheelhouse)
    r = client.post(f"{P}/servers/{created['id']}/install-agent", headers=s.key)
    assert r.status_code == 202, r.json
    wait_for(lambda: listed(client, s, created["id"])["connection"] == "agent", timeout=600,
             interval=1, what="the resident agent installed")
    config = json.loads((s.box / "agent.json").read_text())
    assert config["grpc_address"] == f"127.0.0.1:{gateway.port}"
    assert config["server_id"] == created["id"]
    # No systemd here (the installer says how to start the agent): started as its unit does.
    env = {**os.environ, "BERTH_AGENT_CONFIG": str(s.box / "agent.json"),
           "BERTH_AGENT_DATA_DIR": str(s.box / "data"),
           "BERTH_AGENT_ENV_ROOT": str(s.box / "srv")}
    agent = subprocess.Popen([str(link), "run"], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: listed(client, s, created["id"])["connected"], timeout=60,
                 interval=0.5, what="the resident agent connected")
        row = listed(client, s, created["id"])
        assert row["reachable"] is True and row["ssh"] is None
        assert client.get(f"{P}/servers/{created['id']}/metrics",
                          headers=s.reader).status_code == 200
        again = client.post(f"{P}/servers/{created['id']}/install-agent", headers=s.key)
        assert again.status_code == 409
    finally:
        agent.terminate()
        agent.wait(15)


def test_a_host_name_is_resolved_at_the_configured_resolver(client, ssh, loopback_dns):
    """As custom domains' checks: CP_DNS_RESOLVER answers for SSH servers' names too."""
    s = ssh
    s.settings["DNS_RESOLVER"] = loopback_dns.address
    loopback_dns.a("box.fleet.test", "127.0.0.1")
    created = add(client, s, ssh_host="box.fleet.test")
    assert listed(client, s, created["id"])["reachable"] is True
    missing = add(client, s, ssh_host="nowhere.fleet.test")
    assert "no address" in listed(client, s, missing["id"])["ssh"]["error"]


def test_a_call_without_input_closes_the_remote_standard_input(client, ssh, tmp_path):
    """A `berth-agent` that reads its standard input before answering (as `live` and
    `exec` do) gets its end at once when a call sends nothing: the check is not left
    waiting out its timeout."""
    s = ssh
    answer = tmp_path / "check.bin"
    facts = pb.HostFacts(hostname="h", cpu_cores=1, ram_mb=1, disk_gb=1,
                         agent_version=control_plane.__version__)
    answer.write_bytes(b"".join(frames.pack(part) for part in (
        facts.SerializeToString(), pb.Heartbeat().SerializeToString(), b"")))
    reader = tmp_path / "berth-agent"
    reader.write_text("#!/bin/sh\n[ \"$1\" = serve ] && exit 2  # an agent without it\n"
                      "cat > /dev/null\n"
                      f'[ "$1" = check ] && exec cat {answer}\nexit 0\n')
    reader.chmod(0o755)
    s.settings["SSH_AGENT_PATH"] = str(reader)
    started = time.monotonic()
    created = add(client, s)
    assert time.monotonic() - started < 5  # the call timeout is 15 s here
    assert listed(client, s, created["id"])["reachable"] is True


def _serving(box):
    """Pids of `berth-agent serve` processes run for this test's sshd."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            env = (proc / "environ").read_bytes()
        except OSError:
            continue
        if b"serve" in argv and str(box).encode() in env:
            pids.append(int(proc.name))
    return pids


def test_checks_and_live_reads_share_one_serve_process(client, ssh):
    """No Python is started a call: one `berth-agent serve` a connection answers the
    checks and live reads, and it ends with the connection."""
    s = ssh
    created = add(client, s)
    for _ in range(3):
        s.berth.ssh.check_all().result(30)
        r = client.get(f"{P}/servers/{created['id']}/metrics", headers=s.reader)
        assert r.status_code == 200 and r.json["memory_total_bytes"] > 0, r.json
    (pid,) = wait_for(lambda: _serving(s.box), timeout=10, what="the serve process")
    s.berth.ssh.check_all().result(30)
    assert _serving(s.box) == [pid]
    s.berth.ssh.close()
    wait_for(lambda: not _serving(s.box), timeout=10, what="serve ended with the connection")
