"""berthctl end to end: the real `berth serve`, a real `berth-agent run` with
real containers (the local test images), and the `berthctl` console script as
a subprocess. One environment is created by `berthctl envs create --wait`;
the other tests use it."""

import datetime as dt
import hashlib
import json
import signal
import subprocess
import sys

import pytest
import requests

from agent.deploy.environments import Environments
from berthctl.output import BLOCKS
from control_plane.app import create_app
from control_plane.models import Project, Server
from control_plane.services.accounts import orgs
from tests.berthctl.conftest import BERTHCTL, berthctl, clean_env, no_traceback
from tests.conftest import World
from tests.support.agents import AgentProcess, registered_server, wait_for
from tests.support.git_repo import shop_repo
from tests.support.serve import Served

P = "/api/public/v1"
PERMISSIONS = ("project.environments.deploy", "project.deployments.cancel")


class Stand:
    """`berth serve`, an organization with a project on a registered server whose
    agent is connected, and the credentials berthctl is given."""

    def __init__(self, tmp, erp_image, postgres_image):
        self.tmp, self.root = tmp, tmp / "srv"
        # Metric history written every second (not every minute): `metrics` has points.
        self.served = Served(tmp / "cp", {"CP_ERP_IMAGE": erp_image, "CP_PROXY_IMAGE": "",
                                          "CP_POSTGRES_IMAGE": postgres_image,
                                          "CP_METRICS_FLUSH_SECONDS": "1"})
        self.agent = None

    def setup(self):
        self.served.start()
        self.app = create_app({"DATA_DIR": str(self.tmp / "cp"), "PROXY_IMAGE": ""})
        self.world = World(self.app)
        self.org = self.world.org()
        self.server, credential = registered_server(self.org)
        self.project = self.world.project(self.org, self.server)
        Project.update(git_repo_url=f"file://{shop_repo(self.tmp)}").where(
            Project.id == self.project.id).execute()
        self.reader = self.key("read_only")
        self.user_token = orgs.issue_user_token(
            self.world.user(self.org, permissions=PERMISSIONS).id)
        self.agent = AgentProcess(self.tmp, self.served.grpc, self.server.id, credential,
                                  env={"BERTH_AGENT_ENV_ROOT": str(self.root),
                                       "BERTH_AGENT_SAMPLE_SECONDS": "1"}).start()
        wait_for(lambda: Server.get_by_id(self.server.id).connected_since is not None,
                 timeout=60, what="the agent connected")

    def key(self, kind="full_access"):
        """A key of its own for each run: full-access keys allow 20 requests a minute."""
        return self.world.key(self.org, kind)[0]

    def env(self, tmp_path, kind="full_access", **extra):
        return clean_env(tmp_path, BERTH_URL=self.served.url, BERTH_API_KEY=self.key(kind),
                         **extra)

    def get(self, path):
        r = requests.get(f"{self.served.url}{P}{path}", timeout=30,
                         headers={"Authorization": f"Bearer {self.reader}"})
        assert r.status_code == 200, r.text
        return r.json()

    def close(self, docker_client):
        if self.agent is not None and self.agent.proc is not None:
            self.agent.kill(signal.SIGTERM)
        if getattr(self.served, "proc", None) is not None and self.served.proc.poll() is None:
            self.served.stop()
        if self.root.is_dir():
            envs = Environments(docker_client, root=self.root)
            for env_dir in self.root.iterdir():
                envs.destroy(env_dir.name, True, lambda *a: None)


@pytest.fixture(scope="module")
def stand(tmp_path_factory, erp_image, postgres_image, docker_client):
    s = Stand(tmp_path_factory.mktemp("berthctl-e2e"), erp_image, postgres_image)
    try:
        s.setup()
        yield s
    finally:
        s.close(docker_client)


@pytest.fixture(scope="module")
def created(stand, tmp_path_factory):
    """`berthctl envs create … --wait`, as a user runs it: (the run, the environment)."""
    tmp = tmp_path_factory.mktemp("create")
    run = berthctl("--output", "json", "envs", "create", str(stand.project.id), "Main",
                   "--wait", env=stand.env(tmp))
    env = json.loads(run.stdout) if run.returncode == 0 else None
    return run, env


def test_create_with_wait_streams_the_task_log_and_exits_0(stand, created):
    run, env = created
    assert run.returncode == 0, run.stderr
    no_traceback(run)
    assert env["status"] == "running"
    assert stand.get(f"/environments/{env['id']}")["status"] == "running"
    # The task's log, every line once, in order, as the API holds it (with --output
    # json the log goes to stderr and stdout is only the environment).
    task = stand.get(f"/environments/{env['id']}/status")["last_deploy"]["id"]
    log = stand.get(f"/environments/{env['id']}/logs?task_id={task}&lines=5000")["log"]
    assert log and f"deployment {task}:" in run.stderr
    assert log in run.stderr
    assert run.stderr.count(log.splitlines()[0]) == 1


def test_a_failing_deploy_exits_6_with_the_reason(stand, tmp_path):
    run = berthctl("envs", "create", str(stand.project.id), "Broken", "--branch",
                   "no-such-branch", "--wait", env=stand.env(tmp_path))
    assert run.returncode == 6, (run.stdout, run.stderr)
    no_traceback(run)
    envs = stand.get(f"/projects/{stand.project.id}/environments")
    broken = next(e for e in envs if e["name"] == "Broken")
    task = stand.get(f"/environments/{broken['id']}/status")["last_deploy"]["id"]
    reason = stand.get(f"/deployments/{task}")["error_message"]
    assert reason
    assert f"berthctl: error: Task {task} failed: {reason}" in run.stderr
    assert run.stdout.strip()  # its log lines came before the verdict


def test_an_action_with_wait(stand, created, tmp_path):
    env = created[1]
    run = berthctl("envs", "restart", env["id"], "--wait", env=stand.env(tmp_path))
    assert run.returncode == 0, run.stderr
    no_traceback(run)
    assert "completed" in run.stdout.splitlines()[-1]
    assert stand.get(f"/environments/{env['id']}")["status"] == "running"


def test_logs_follow_ends_cleanly_on_sigint(stand, created, tmp_path):
    env = created[1]
    # Run as from a terminal, where Ctrl-C reaches it: a test run started in the
    # background ignores SIGINT, and an ignored signal stays ignored across exec.
    as_in_a_terminal = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                        "os.execv(sys.argv[1], sys.argv[1:])")
    def reads():  # the runtime-logs requests the control plane has answered (a line each)
        return sum(f"/environments/{env['id']}/runtime-logs" in line
                   for line in stand.served.log_path.read_text().splitlines())

    before = reads()
    proc = subprocess.Popen([sys.executable, "-c", as_in_a_terminal, BERTHCTL, "logs", env["id"],
                             "-f", "--source", "postgres", "--interval", "1"],
                            env=stand.env(tmp_path, "read_only"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()  # postgres always says something when it starts
        assert first, proc.stderr.read() if proc.poll() is not None else "no output"
        wait_for(lambda: reads() >= before + 2 or proc.poll() is not None, timeout=30,
                 what="a second read of the logs")
        assert proc.poll() is None, "it stopped following on its own"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode in (0, 130), err
    assert "Traceback" not in err
    assert "KeyboardInterrupt" not in err


def test_json_output_of_lists_parses(stand, created, tmp_path):
    env = stand.env(tmp_path, "read_only")
    run = berthctl("--output", "json", "envs", "list", "--project", str(stand.project.id),
                   env=env)
    assert run.returncode == 0, run.stderr
    assert created[1]["id"] in [e["id"] for e in json.loads(run.stdout)]
    run = berthctl("--output", "json", "projects", "list", env=env)
    assert [p["id"] for p in json.loads(run.stdout)] == [str(stand.project.id)]
    table = berthctl("envs", "list", env=env)
    assert table.returncode == 0 and created[1]["id"] in table.stdout


def test_metrics_sparklines(stand, created, tmp_path):
    env_id = created[1]["id"]
    wait_for(lambda: any((p["erp_memory_used_bytes"] or {}).get("avg") for p in stand.get(
        f"/environments/{env_id}/metrics/history?step=1m&from=" +
        (dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    )["points"]), timeout=90, interval=1, what="a minute of the environment's metrics")
    run = berthctl("metrics", env_id, env=stand.env(tmp_path, "read_only"))
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()[1:]
    assert [line[:11].strip() for line in lines] == ["ERP CPU", "ERP memory", "DB CPU",
                                                     "DB memory"]
    spark, summary = lines[1][12:72], lines[1][72:]  # one block a minute of the hour
    assert set(spark) <= {" ", *BLOCKS} and set(spark) & set(BLOCKS), run.stdout
    assert summary.startswith("  now ") and "iB" in summary, run.stdout

    run = berthctl("metrics", "--server", str(stand.server.id),
                   env=stand.env(tmp_path, "read_only"))
    assert run.returncode == 0, run.stderr
    assert [line.split()[0] for line in run.stdout.splitlines()[1:]] == ["CPU", "Memory", "Disk"]


def test_rollback_with_wait(stand, created, tmp_path):
    env_id = created[1]["id"]
    env = stand.env(tmp_path, BERTH_USER_TOKEN=stand.user_token)
    run = berthctl("--output", "json", "envs", "redeploy", env_id, "--wait", env=env)
    assert run.returncode == 0, run.stderr
    current = json.loads(run.stdout)["task_id"]
    run = berthctl("--output", "json", "envs", "rollback", env_id, "--wait", env=env)
    assert run.returncode == 0, run.stderr
    task = json.loads(run.stdout)
    assert task["trigger"] == "rollback" and task["status"] == "completed"
    # Back to the deployment before the redeploy: the environment's first.
    ops = requests.get(f"{stand.served.url}/api/v1/deployments", timeout=30, params={
        "project_id": str(stand.project.id), "limit": 100},
        headers={"Authorization": f"Bearer {stand.user_token}"}).json()["data"]
    by_id = {d["id"]: d for d in ops}
    assert by_id[task["task_id"]]["rollback_from_id"] != current
    assert by_id[by_id[task["task_id"]]["rollback_from_id"]]["version"] == 1
    # Without a user token the operations API is not reached: the message says what to do.
    run = berthctl("envs", "rollback", env_id, env=stand.env(tmp_path))
    assert run.returncode == 3 and "BERTH_USER_TOKEN" in run.stderr


def test_backup_create_and_download_exact_bytes(stand, created, tmp_path):
    env_id = created[1]["id"]
    env = stand.env(tmp_path, BERTH_USER_TOKEN=stand.user_token)
    run = berthctl("--output", "json", "backups", "create", env_id, "--comment", "cli",
                   "--wait", env=env)
    assert run.returncode == 0, run.stderr
    backup = json.loads(run.stdout)
    assert backup["status"] == "completed" and backup["notes"] == "cli"

    out = tmp_path / "dl"
    run = berthctl("backups", "download", backup["id"], "-o", str(out),
                   env=stand.env(tmp_path, "read_only"))
    assert run.returncode == 0, run.stderr
    no_traceback(run)
    urls = stand.get(f"/backups/{backup['id']}/download")
    files = sorted(out.iterdir())
    assert len(files) == 3 and not [f for f in files if f.name.startswith(".")]
    for part in ("database", "filestore", "manifest"):
        served = requests.get(urls[f"{part}_url"], timeout=60)
        assert served.status_code == 200
        [path] = [f for f in files if f.name.startswith(f"backup-{backup['id']}-{part}")]
        assert hashlib.sha256(path.read_bytes()).hexdigest() == \
            hashlib.sha256(served.content).hexdigest(), part

    # One part, to a named file.
    single = tmp_path / "db.dump"
    run = berthctl("backups", "download", backup["id"], "--part", "database", "-o",
                   str(single), env=stand.env(tmp_path, "read_only"))
    assert run.returncode == 0, run.stderr
    assert single.read_bytes() == requests.get(urls["database_url"], timeout=60).content

    listed = berthctl("--output", "json", "backups", "list", env_id,
                      env=stand.env(tmp_path, "read_only"))
    assert backup["id"] in [b["id"] for b in json.loads(listed.stdout)["items"]]


def test_a_drill_with_wait_and_the_drills_listed(stand, created, tmp_path):
    env_id = created[1]["id"]
    env = stand.env(tmp_path, BERTH_USER_TOKEN=stand.user_token)
    run = berthctl("--output", "json", "backups", "create", env_id, "--wait", env=env)
    assert run.returncode == 0, run.stderr
    backup = json.loads(run.stdout)
    run = berthctl("--output", "json", "backups", "drill", env_id, "--backup", backup["id"],
                   "--wait", env=env)
    assert run.returncode == 0, run.stderr
    no_traceback(run)
    drill = json.loads(run.stdout)  # the drill as listed once it ended; its log on stderr
    assert (drill["status"], drill["backup_id"]) == ("passed", backup["id"])
    assert drill["restore_seconds"] > 0 and "drill: the copy is removed" in run.stderr
    listed = berthctl("backups", "drills", env_id, env=stand.env(tmp_path, "read_only"))
    assert listed.returncode == 0, listed.stderr
    [row] = [line for line in listed.stdout.splitlines() if drill["id"] in line]
    assert "passed" in row and f"{drill['restore_seconds']:.1f} s" in row
    # Not production, its backups not scheduled: its WAL is not archived, and says so.
    shown = berthctl("backups", "wal", env_id, env=stand.env(tmp_path, "read_only"))
    assert shown.returncode == 0, shown.stderr
    assert "status: off" in shown.stdout.splitlines() and "enabled: no" in shown.stdout
    assert stand.get(f"/environments/{env_id}")["status"] == "running"


def test_backup_create_without_a_user_token_says_so(stand, created, tmp_path):
    run = berthctl("backups", "create", created[1]["id"], env=stand.env(tmp_path))
    assert run.returncode == 3
    assert "user token" in run.stderr
    no_traceback(run)


def test_shell_runs_a_command_and_exits_with_its_code(stand, created, tmp_path):
    env = created[1]
    run = berthctl("shell", env["id"], "--", "sh", "-c", "echo $((6*7)); echo oops >&2; exit 3",
                   env=stand.env(tmp_path), timeout=120)
    assert (run.returncode, run.stdout, run.stderr) == (3, "42\n", "oops\n")


def test_shell_odoo_runs_a_piped_script(stand, created, tmp_path):
    env = created[1]
    run = berthctl("shell", env["id"], "--odoo", env=stand.env(tmp_path), timeout=120,
                   input="print('partners', env['res.partner'].search_count([]))\n")
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("partners ") and run.stdout.split()[1].isdigit(), run.stdout


def test_shell_on_a_terminal_is_interactive(stand, created, tmp_path):
    """On a terminal: raw mode, what is typed reaches the container's shell, the
    window's size is the remote one, the exit code is the shell's."""
    import fcntl
    import os
    import pty
    import struct
    import termios
    import time

    env = created[1]
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 111, 0, 0))
    proc = subprocess.Popen([BERTHCTL, "shell", env["id"]], stdin=slave, stdout=slave,
                            stderr=slave, env=stand.env(tmp_path), start_new_session=True)
    os.close(slave)
    out = bytearray()

    def read_until(token, timeout=60):
        deadline = time.monotonic() + timeout
        while token not in out:
            assert time.monotonic() < deadline, f"{token!r} not seen: {bytes(out)!r}"
            try:
                out.extend(os.read(master, 4096))
            except OSError:
                raise AssertionError(f"{token!r} not seen: {bytes(out)!r}") from None

    try:
        time.sleep(1)  # typed before the session opened, it would wait for it anyway
        os.write(master, b"echo $((6*7)); stty size\r")
        read_until(b"42")
        read_until(b"33 111")
        os.write(master, b"exit 7\r")
        assert proc.wait(60) == 7, bytes(out)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)


def test_shell_refused_for_a_read_only_key(stand, created, tmp_path):
    run = berthctl("shell", created[1]["id"], "--", "true", env=stand.env(tmp_path, "read_only"))
    assert run.returncode == 3, run.stderr
    no_traceback(run)
