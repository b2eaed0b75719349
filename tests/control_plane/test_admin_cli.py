"""`berth admin …` through the real console script: one JSON object on stdout
with the documented keys and exit 0; errors on stderr with exit code 1."""

import json
import os
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.conftest import auth

# A console script started per command (an interpreter and the app each time): out of
# the fast lane, in `make test`.
pytestmark = pytest.mark.slow

BERTH = str(Path(sys.executable).parent / "berth")
P = "/api/public/v1"


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    # Only CP_DATA_DIR: the secret is generated into the data dir, the database
    # is the SQLite file there. The in-process app below reads the same settings.
    for name in list(os.environ):
        if name.startswith("CP_"):
            monkeypatch.delenv(name)
    path = tmp_path / "data"
    monkeypatch.setenv("CP_DATA_DIR", str(path))
    return path


def run(data_dir, *args, stdin=""):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CP_") or k == "CP_DNS_RESOLVER"}
    env["CP_DATA_DIR"] = str(data_dir)
    return subprocess.run([BERTH, "admin", *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=60, input=stdin)


def ok(data_dir, *args, keys=None, stdin=""):
    """Runs a command that must succeed; returns its one JSON object."""
    return ok_with_stdout(data_dir, *args, keys=keys, stdin=stdin)[0]


def ok_with_stdout(data_dir, *args, keys=None, stdin=""):
    proc = run(data_dir, *args, stdin=stdin)
    assert proc.returncode == 0, proc.stderr
    decoder = json.JSONDecoder()
    text = proc.stdout.strip()
    obj, end = decoder.raw_decode(text)
    assert text[end:].strip() == "", f"more than one JSON value on stdout: {proc.stdout!r}"
    assert proc.stdout.count("\n") == 1
    assert isinstance(obj, dict)
    if keys is not None:
        assert set(obj) == set(keys), obj
    return obj, proc.stdout


def fails(data_dir, *args, stdin=""):
    """Runs a command that must fail: exit 1, a message on stderr, nothing on stdout."""
    proc = run(data_dir, *args, stdin=stdin)
    assert proc.returncode == 1, (args, proc.stdout, proc.stderr)
    assert proc.stdout == "", args
    assert proc.stderr.strip(), args
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.stderr


class InProcess:
    """The app the CLI would serve, on the same data dir, in this process."""

    def __init__(self):
        from control_plane.app import create_app
        self.app = create_app({})  # settings from CP_DATA_DIR only, like the CLI
        self.client = self.app.test_client()

    def close(self):
        self.app.extensions["berth"].db.close()


@pytest.fixture
def in_process(data_dir):
    made = []

    def make():
        made.append(InProcess())
        return made[-1]

    yield make
    for app in made:
        app.close()


def test_bootstrap_once_and_generated_secret(data_dir, in_process):
    first = ok(data_dir, "bootstrap", keys={"created", "organization_id", "key_id", "key",
                                            "user_id", "email", "password"})
    assert first["created"] is True
    assert first["key"].startswith("svc_live_rw_")
    assert first["key_id"].startswith("key_")
    uuid.UUID(first["organization_id"])
    secret = data_dir / "secret_key"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert secret.read_text().strip()

    assert ok(data_dir, "bootstrap") == {"created": False}
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600

    # The bootstrap key works against the app that reads the same data dir.
    app = in_process()
    assert app.app.config["SECRET_KEY"] == secret.read_text().strip()
    r = app.client.get(f"{P}/projects", headers=auth(first["key"]))
    assert r.status_code == 200 and r.headers["X-API-Key-Id"] == first["key_id"]
    # It is an organization-scoped full-access key with both capabilities.
    assert app.client.get(f"{P}/support/tickets", headers=auth(first["key"])).status_code == 200
    # The first console user signs in with the password printed (once).
    r = app.client.post("/sign-in", data={"email": first["email"], "password": first["password"]},
                        headers={"Origin": "http://localhost"})
    assert r.status_code == 303 and "berth_session=ses_" in r.headers["Set-Cookie"]
    # A password read from stdin replaces it and ends its sessions; nothing in argv.
    ended = ok(data_dir, "user", "password", first["user_id"], stdin="a new long password\n",
               keys={"id", "sessions_ended"})
    assert ended["sessions_ended"] == 1
    assert app.client.get("/projects").status_code == 302  # signed out
    r = app.client.post("/sign-in", data={"email": first["email"],
                                          "password": "a new long password"},
                        headers={"Origin": "http://localhost"})
    assert r.status_code == 303
    assert "12 to 1024 characters" in fails(data_dir, "user", "password", first["user_id"],
                                            stdin="short\n")
    assert ok(data_dir, "user", "totp-off", first["user_id"]) == {
        "id": first["user_id"], "totp": False}
    assert ok(data_dir, "user", "access", first["user_id"], "read_only")["access"] == "read_only"
    assert ok(data_dir, "user", "sign-out", first["user_id"])["sessions_ended"] == 1


def test_orgs_users_and_keys(data_dir, in_process):
    org = ok(data_dir, "org", "create", "--name", "Acme", keys={"id", "name", "server_quota"})
    assert org["name"] == "Acme" and org["server_quota"] == 10
    uuid.UUID(org["id"])
    small = ok(data_dir, "org", "create", "--name", "Small", "--server-quota", "3")
    assert small["server_quota"] == 3 and small["id"] != org["id"]

    user = ok(data_dir, "user", "create", "--org", org["id"], "--name", "Ann",
              "--email", "ann@example.com", "--permission", "project.environments.deploy",
              "--permission", "project.deployments.cancel",
              keys={"id", "name", "email", "permissions"})
    assert (user["name"], user["email"]) == ("Ann", "ann@example.com")
    assert sorted(user["permissions"]) == ["project.deployments.cancel",
                                           "project.environments.deploy"]
    token = ok(data_dir, "user", "token", user["id"], keys={"token"})["token"]
    assert isinstance(token, str) and len(token) >= 32

    key_keys = {"id", "key", "type", "scope"}
    ro = ok(data_dir, "key", "create", "--org", org["id"], "--name", "reader",
            "--type", "read_only", "--scope", "organization", "--support-tickets", keys=key_keys)
    assert ro["key"].startswith("svc_live_ro_") and ro["id"].startswith("key_")
    assert (ro["type"], ro["scope"]) == ("read_only", "organization")
    rw = ok(data_dir, "key", "create", "--org", org["id"], "--name", "writer",
            "--type", "full_access", "--scope", "organization", "--server-registration",
            "--owner", user["id"], "--expires-at", "2999-01-01T00:00:00Z", keys=key_keys)
    assert rw["key"].startswith("svc_live_rw_")
    assert (rw["type"], rw["scope"]) == ("full_access", "organization")
    expired = ok(data_dir, "key", "create", "--org", org["id"], "--name", "old",
                 "--type", "read_only", "--scope", "organization",
                 "--expires-at", "2001-02-03T04:05:06Z", keys=key_keys)

    # A project, made through the API with the CLI-made key, for a project-scoped key.
    server = ok(data_dir, "server", "create", "--name", "box", "--provider", "hetzner",
                "--cpu-cores", "4", "--ram-mb", "8192", "--disk-gb", "100", "--org", org["id"])
    app = in_process()
    r = app.client.post(f"{P}/projects", headers=auth(rw["key"]),
                        json={"name": "shop", "server_id": server["id"]})
    assert r.status_code == 201, r.json
    project_id = r.json["id"]
    scoped = ok(data_dir, "key", "create", "--org", org["id"], "--name", "scoped",
                "--type", "read_only", "--scope", "project", "--project", project_id,
                keys=key_keys)
    assert (scoped["type"], scoped["scope"]) == ("read_only", "project")
    assert ok(data_dir, "key", "revoke", scoped["id"]) == {"revoked": True}

    body, listed = ok_with_stdout(data_dir, "key", "list", "--org", org["id"], keys={"keys"})
    entries = {k["id"]: k for k in body["keys"]}
    assert set(entries) == {ro["id"], rw["id"], expired["id"], scoped["id"]}
    for entry in entries.values():
        assert set(entry) == {"id", "name", "prefix", "type", "scope", "status", "expires_at"}
    assert {k: v["status"] for k, v in entries.items()} == {
        ro["id"]: "active", rw["id"]: "active", expired["id"]: "expired",
        scoped["id"]: "revoked"}
    assert entries[ro["id"]]["expires_at"] is None
    assert entries[rw["id"]]["expires_at"].startswith("2999-01-01T00:00:00")
    assert entries[expired["id"]]["expires_at"].startswith("2001-02-03T04:05:06")
    assert entries[scoped["id"]]["scope"] == "project"
    assert entries[rw["id"]]["name"] == "writer" and entries[rw["id"]]["type"] == "full_access"
    for made in (ro, rw, expired, scoped):
        prefix = entries[made["id"]]["prefix"]
        assert made["key"].startswith(prefix) and len(prefix) < len(made["key"])
        assert made["key"] not in listed
    # The other organization's list is empty.
    assert ok(data_dir, "key", "list", "--org", small["id"]) == {"keys": []}

    # The keys behave as the list says.
    assert app.client.get(f"{P}/projects", headers=auth(ro["key"])).status_code == 200
    assert app.client.get(f"{P}/support/tickets", headers=auth(ro["key"])).status_code == 200
    r = app.client.get(f"{P}/projects", headers=auth(expired["key"]))
    assert r.status_code == 401 and r.json["error"] == "key_expired"
    r = app.client.get(f"{P}/projects", headers=auth(scoped["key"]))
    assert r.status_code == 401 and r.json["error"] == "key_revoked"

    assert ok(data_dir, "user", "delete", user["id"]) == {"deleted": True}
    fails(data_dir, "user", "delete", user["id"])
    fails(data_dir, "user", "token", user["id"])
    # Keys the deleted user created can no longer write.
    r = app.client.post(f"{P}/projects", headers=auth(rw["key"]),
                        json={"name": "again", "server_id": server["id"]})
    assert r.status_code == 409 and r.json["error"] == "key_has_no_owner"


def test_servers_tickets_releases_end_to_end(data_dir, in_process):
    org = ok(data_dir, "org", "create", "--name", "Ops")["id"]
    own = ok(data_dir, "server", "create", "--name", "own-1", "--provider", "hetzner",
             "--region", "fsn1", "--cpu-cores", "8", "--ram-mb", "16384", "--disk-gb", "200",
             "--org", org)
    shared = ok(data_dir, "server", "create", "--name", "pool-1", "--provider", "aws",
                "--cpu-cores", "2", "--ram-mb", "4096", "--disk-gb", "50", "--shared")
    for made in (own, shared):
        assert "id" in made
        uuid.UUID(made["id"])
    assert own["id"] != shared["id"]
    common = ["--name", "x", "--provider", "p", "--cpu-cores", "1", "--ram-mb", "1",
              "--disk-gb", "1"]
    fails(data_dir, "server", "create", *common)
    fails(data_dir, "server", "create", *common, "--org", org, "--shared")

    t = ok(data_dir, "ticket", "create", "--org", org, "--subject", "Disk full",
           "--description", "The disk is full.", "--priority", "high", "--server", own["id"],
           keys={"id", "ticket_number"})
    assert t["ticket_number"]
    customer = ok(data_dir, "ticket", "comment", t["id"], "--author", "Dana",
                  "--content", "Please help", keys={"id"})
    staff = ok(data_dir, "ticket", "comment", t["id"], "--author", "Carol Staffer",
               "--content", "Resized the disk.", "--from-support", keys={"id"})
    ok(data_dir, "ticket", "comment", t["id"], "--author", "Carol Staffer",
       "--content", "NOTE-internal-only", "--internal", keys={"id"})

    assert ok(data_dir, "release", "add", "--version", "1.10.0", "--date", "2024-03-01",
              "--title", "Ten", "--highlight", "Faster", "--highlight", "Smaller",
              "--added", "Servers API", "--fixed", "Login bug", "--fixed", "Typo") == \
        {"version": "1.10.0"}
    assert ok(data_dir, "release", "add", "--version", "1.9.0", "--date", "2024-02-01",
              "--title", "Nine") == {"version": "1.9.0"}
    fails(data_dir, "release", "add", "--version", "1.10.0", "--date", "2024-04-01",
          "--title", "dup")
    for bad in ("1.2", "v1.2.3", "01.2.3"):
        fails(data_dir, "release", "add", "--version", bad, "--date", "2024-04-01",
              "--title", "bad")
    fails(data_dir, "release", "add", "--version", "1.11.0", "--date", "2024-99-01",
          "--title", "bad date")

    raw = ok(data_dir, "key", "create", "--org", org, "--name", "support", "--type",
             "read_only", "--scope", "organization", "--support-tickets")["key"]
    app = in_process()
    servers = app.client.get(f"{P}/servers", headers=auth(raw)).json["data"]
    assert {s["id"] for s in servers} == {own["id"], shared["id"]}
    own_entry = next(s for s in servers if s["id"] == own["id"])
    assert (own_entry["name"], own_entry["region"], own_entry["cpu_cores"]) == ("own-1", "fsn1", 8)

    detail = app.client.get(f"{P}/support/tickets/{t['id']}", headers=auth(raw))
    assert detail.status_code == 200
    assert (detail.json["ticket_number"], detail.json["priority"], detail.json["server_id"]) == \
        (t["ticket_number"], "high", own["id"])
    assert [(c["id"], c["author_name"], c["from_support"]) for c in detail.json["comments"]] == \
        [(customer["id"], "Dana", False), (staff["id"], "Berth Support", True)]
    assert "NOTE-internal-only" not in detail.get_data(as_text=True)

    changelog = app.client.get(f"{P}/changelog", headers=auth(raw)).json
    assert [e["version"] for e in changelog["entries"]] == ["1.10.0", "1.9.0"]
    assert changelog["entries"][0] == {
        "version": "1.10.0", "date": "2024-03-01", "title": "Ten",
        "highlights": ["Faster", "Smaller"],
        "categories": {"added": ["Servers API"], "fixed": ["Login bug", "Typo"]}}
    assert changelog["entries"][1]["categories"] == {}


def test_errors_exit_1_with_message_on_stderr(data_dir):
    org = ok(data_dir, "org", "create", "--name", "E")["id"]
    missing = str(uuid.uuid4())
    fails(data_dir, "user", "create", "--org", missing, "--name", "n", "--email", "e@x.test")
    fails(data_dir, "key", "create", "--org", missing, "--name", "k", "--type", "read_only",
          "--scope", "organization")
    fails(data_dir, "ticket", "create", "--org", missing, "--subject", "s", "--description", "d")
    fails(data_dir, "user", "token", "not-a-uuid")
    fails(data_dir, "user", "create", "--org", "not-a-uuid", "--name", "n", "--email", "e")
    fails(data_dir, "key", "create", "--org", org, "--name", "k", "--type", "read_only",
          "--scope", "project")  # no --project
    fails(data_dir, "key", "create", "--org", org, "--name", "k", "--type", "read_only",
          "--scope", "organization", "--expires-at", "tomorrow")
    fails(data_dir, "key", "revoke", "key_0000000000000000")
    fails(data_dir, "ticket", "create", "--org", org, "--subject", "s", "--description", "d",
          "--project", missing)
    fails(data_dir, "ticket", "create", "--org", org, "--subject", "s", "--description", "d",
          "--status", "bogus")
    fails(data_dir, "ticket", "comment", missing, "--author", "a", "--content", "c")
    # Nothing half-made: the organization still has no keys.
    assert ok(data_dir, "key", "list", "--org", org) == {"keys": []}


def test_key_delete_removes_only_revoked_or_expired_keys(data_dir, in_process):
    org = ok(data_dir, "org", "create", "--name", "D")["id"]

    def make(name, *extra):
        return ok(data_dir, "key", "create", "--org", org, "--name", name, "--type", "read_only",
                  "--scope", "organization", *extra)

    active, revoked = make("active"), make("revoked")
    expired = make("expired", "--expires-at", "2001-02-03T04:05:06Z")
    assert ok(data_dir, "key", "revoke", revoked["id"]) == {"revoked": True}

    assert ok(data_dir, "key", "delete", revoked["id"]) == {"deleted": True}
    assert ok(data_dir, "key", "delete", expired["id"]) == {"deleted": True}
    # An active key must be revoked first (key_active): it stays.
    assert "revoke" in fails(data_dir, "key", "delete", active["id"])
    listed = ok(data_dir, "key", "list", "--org", org)["keys"]
    assert [(k["id"], k["status"]) for k in listed] == [(active["id"], "active")]
    fails(data_dir, "key", "delete", revoked["id"])  # already gone: not found

    app = in_process()
    assert app.client.get(f"{P}/projects", headers=auth(active["key"])).status_code == 200
    for gone in (revoked, expired):
        r = app.client.get(f"{P}/projects", headers=auth(gone["key"]))
        assert r.status_code == 401 and r.json["error"] == "invalid_api_key"


def test_custom_domains_added_verified_and_removed(data_dir, in_process, loopback_dns,
                                                   monkeypatch):
    loopback_dns.clear()
    org = ok(data_dir, "org", "create", "--name", "Domains")["id"]
    server = ok(data_dir, "server", "create", "--name", "s", "--provider", "p", "--cpu-cores",
                "2", "--ram-mb", "4096", "--disk-gb", "50", "--org", org)["id"]
    raw = ok(data_dir, "key", "create", "--org", org, "--name", "k", "--type", "full_access",
             "--scope", "organization")["key"]
    app = in_process()
    project = app.client.post(f"{P}/projects", headers=auth(raw),
                              json={"name": "p", "server_id": server}).json
    env = app.client.post(f"{P}/projects/{project['id']}/environments", headers=auth(raw),
                          json={"name": "e"}).json["id"]
    monkeypatch.setenv("CP_DNS_RESOLVER", loopback_dns.address)  # run() passes it on
    keys = {"domain", "environment_id", "status", "verification", "created_at", "verified_at",
            "checked_at", "check_error"}
    added = ok(data_dir, "domain", "add", "--environment", env, "ERP.example.io", keys=keys)
    assert (added["domain"], added["status"]) == ("erp.example.io", "pending")
    assert "no TXT record" in fails(data_dir, "domain", "verify", "--environment", env,
                                    "erp.example.io")
    loopback_dns.txt(added["verification"]["txt"]["name"],
                     added["verification"]["txt"]["value"])
    verified = ok(data_dir, "domain", "verify", "--environment", env, "erp.example.io",
                  keys=keys)
    assert verified["status"] == "verified" and verified["verified_at"].endswith("Z")
    got = app.client.get(f"{P}/environments/{env}", headers=auth(raw)).json
    assert got["url"] == "https://erp.example.io"
    assert [d["domain"] for d in ok(data_dir, "domain", "list", "--environment", env,
                                    keys={"items"})["items"]] == ["erp.example.io"]
    fails(data_dir, "domain", "add", "--environment", env, "erp.example.io")  # in use
    fails(data_dir, "domain", "add", "--environment", env, "x.localhost")
    assert ok(data_dir, "domain", "remove", "--environment", env, "erp.example.io") == {
        "removed": "erp.example.io", "environment_id": env}
    fails(data_dir, "domain", "remove", "--environment", env, "erp.example.io")
    loopback_dns.clear()


def test_configuration_set_and_shown_secret_from_stdin(data_dir, in_process):
    org = ok(data_dir, "org", "create", "--name", "Config")["id"]
    server = ok(data_dir, "server", "create", "--name", "s", "--provider", "p", "--cpu-cores",
                "2", "--ram-mb", "4096", "--disk-gb", "50", "--org", org)["id"]
    raw = ok(data_dir, "key", "create", "--org", org, "--name", "k", "--type", "full_access",
             "--scope", "organization")["key"]
    app = in_process()
    project = app.client.post(f"{P}/projects", headers=auth(raw),
                              json={"name": "p", "server_id": server}).json
    env = app.client.post(f"{P}/projects/{project['id']}/environments", headers=auth(raw),
                          json={"name": "e"}).json["id"]
    change = ("config", "set", "--environment", env, "--var", "A=1", "--secret-var",
              "API_TOKEN", "--erp-option", "workers=4", "--pg-setting", "work_mem=8MB")
    # The first deployment is still queued: refused, nothing stored.
    assert "pending or running" in fails(data_dir, *change, stdin="s3cr3t-value\n")
    assert ok(data_dir, "config", "show", "--environment", env)["variables"] == []
    with app.app.app_context():
        from control_plane.models import Deployment
        from control_plane.services.tasks import engine
        first = Deployment.get(Deployment.environment == env).id
        engine.on_ack(first)
        engine.on_result(first, True, {}, None)

    assert "standard input" in run(data_dir, *change).stderr  # no line for the secret
    out = ok(data_dir, *change, stdin="s3cr3t-value\n", keys={"configuration", "deployment"})
    assert (out["deployment"]["trigger"], out["deployment"]["status"]) == (
        "config_update", "pending")
    shown = ok(data_dir, "config", "show", "--environment", env,
               keys={"environment_id", "variables", "erp_options", "postgres_settings",
                     "updated_at"})
    assert shown == out["configuration"]
    assert shown["variables"] == [{"name": "A", "secret": False, "value": "1"},
                                  {"name": "API_TOKEN", "secret": True, "value": None}]
    assert (shown["erp_options"], shown["postgres_settings"]) == (
        {"workers": 4}, {"work_mem": "8MB"})
    assert "Not an allowed key" in fails(data_dir, "config", "set", "--environment", env,
                                         "--erp-option", "admin_passwd=x")


def test_an_ssh_server_from_the_cli(data_dir):
    org = ok(data_dir, "org", "create", "--name", "Ops")["id"]
    made = ok(data_dir, "server", "create", "--name", "s", "--provider", "hetzner", "--org", org,
              "--ssh-host", "203.0.113.9", "--ssh-port", "2200", "--ssh-username", "deploy")
    assert (made["connection"], made["ssh_host"], made["ssh_port"], made["ssh_username"]) == (
        "ssh", "203.0.113.9", 2200, "deploy")
    assert made["ssh_public_key"].startswith("ssh-ed25519 ") and made["host_key_fingerprint"] is None
    # The organization's key is made once: a second server shows the same one.
    second = ok(data_dir, "server", "create", "--name", "t", "--provider", "p", "--org", org,
                "--ssh-host", "203.0.113.10")
    assert second["ssh_public_key"] == made["ssh_public_key"]
    fails(data_dir, "server", "create", "--name", "x", "--provider", "p", "--shared",
          "--ssh-host", "203.0.113.9")
    fails(data_dir, "server", "create", "--name", "x", "--provider", "p", "--org", org,
          "--ssh-host", "not a host")
    fails(data_dir, "server", "create", "--name", "x", "--provider", "p", "--org", org)
    fails(data_dir, "server", "accept-host-key", made["id"])  # it offered no other key
    plain = ok(data_dir, "server", "create", "--name", "p", "--provider", "p", "--org", org,
               "--cpu-cores", "1", "--ram-mb", "1", "--disk-gb", "1")
    fails(data_dir, "server", "install-agent", plain["id"])  # not an SSH server


def test_agents_list_and_upgrade(data_dir):
    org = ok(data_dir, "org", "create", "--name", "Fleet")["id"]
    made = ok(data_dir, "server", "create", "--name", "a", "--provider", "p", "--org", org,
              "--cpu-cores", "1", "--ram-mb", "1", "--disk-gb", "1")
    listed = ok(data_dir, "agents", "list", keys={"version", "servers"})
    (row,) = listed["servers"]
    assert set(row) == {"id", "name", "connection", "agent_version", "agent_behind",
                        "connected", "upgrade"}
    assert (row["id"], row["agent_version"], row["upgrade"]) == (made["id"], None, None)
    asked = ok(data_dir, "agents", "upgrade", "--all", keys={"version", "queued", "skipped"})
    assert asked["queued"] == [] and asked["skipped"] == [
        {"server_id": made["id"], "reason": "never_connected"}]
    assert ok(data_dir, "agents", "upgrade", "--server", made["id"])["skipped"][0][
        "reason"] == "never_connected"
    assert "No server has that id" in fails(data_dir, "agents", "upgrade", "--server",
                                            str(uuid.uuid4()))
    usage = run(data_dir, "agents", "upgrade")  # neither --server nor --all
    assert usage.returncode == 1 and "--server ID" in usage.stderr and usage.stdout == ""


def test_admin_changes_are_the_operators_in_the_audit_log(data_dir, in_process):
    org = ok(data_dir, "org", "create", "--name", "Audited")
    reader = ok(data_dir, "key", "create", "--org", org["id"], "--name", "reader",
                "--type", "read_only", "--scope", "organization")
    app = in_process()
    r = app.client.get(f"{P}/audit-events", headers=auth(reader["key"]))
    assert r.status_code == 200, r.json
    events = r.json["data"]
    assert [e["action"] for e in events] == ["api_key.create", "organization.create"]
    for event in events:
        assert event["actor"]["type"] == "operator" and event["actor"]["id"]
        assert event["source_ip"] == "local"
    assert events[0]["target_id"] == reader["id"]
    assert events[0]["changes"]["name"] == "reader"
    assert reader["key"] not in r.get_data(as_text=True)
