"""Backups and restores end to end, on each storage backend: the control plane's
HTTP served for real (the agent reaches the transfer API and the local storage's
signed URLs over HTTP), its gateway, a real `berth-agent run` and real
containers; the S3 backend is moto's server. Both reach the network through a
proxy (tests/tcp_proxy.py) that can cut or stall them at a chosen moment.

One production environment and one staging environment per run: rows and files
written, backed up, changed, restored and read back; the public download fetched
with plain HTTP; production restored into staging; then the faults (busy,
stopped, storage cut mid-upload, the agent killed mid-backup and mid-restore, a
restore that fails and is put back from its safety backup)."""

import hashlib
import json
import os
import threading
import uuid

import boto3
import pytest
import requests
from werkzeug.serving import make_server
from werkzeug.wsgi import ClosingIterator

from agent.environments import Environments
from control_plane.models import Backup, Project, Server
from control_plane.services import agents as agent_svc
from control_plane.services.accounts import orgs
from control_plane.services.backups import transfers
from tests.agent_support import registered_server, wait_for
from tests.conftest import auth
from tests.tcp_proxy import TcpProxy

P, V1 = "/api/public/v1", "/api/v1"
PERMISSIONS = ("project.environments.deploy", "project.deployments.cancel")
AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
       "AWS_DEFAULT_REGION": "us-east-1"}
ORIGINAL = [(1, "invoice 2026/001"), (2, "invoice 2026/002")]
CHANGED = [(1, "invoice 2026/001 (edited)"), (3, "written after the backup")]
BIG = 12 * 1024 * 1024  # incompressible: the filestore goes up in two parts


class Stand:
    pass


@pytest.fixture(params=["local", "s3"])
def stand(request, app, world, agents, gateway, tmp_path, erp_image, postgres_image,
          docker_client, monkeypatch):
    s = Stand()
    s.kind = request.param
    settings = app.extensions["berth"].settings
    settings["ERP_IMAGE"], settings["POSTGRES_IMAGE"] = erp_image, postgres_image
    http = make_server("127.0.0.1", 0, _closing(app), threaded=True)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    if s.kind == "local":  # the storage is the control plane's own HTTP
        s.proxy = TcpProxy(http.server_port)
        public = s.proxy.url
        storage = {"STORAGE_URL": None, "S3_ENDPOINT_URL": None}
    else:
        moto = request.getfixturevalue("moto_s3")
        for name, value in AWS.items():
            monkeypatch.setenv(name, value)
        s.bucket = f"berth-{uuid.uuid4().hex[:12]}"
        s.s3 = boto3.client("s3", endpoint_url=moto.url)
        s.s3.create_bucket(Bucket=s.bucket)
        s.proxy = TcpProxy(moto.port)
        public = f"http://127.0.0.1:{http.server_port}"
        storage = {"STORAGE_URL": f"s3://{s.bucket}/berth", "S3_ENDPOINT_URL": s.proxy.url}
    for target in (settings, app.config):
        target.update(PUBLIC_URL=public, **storage)
    s.settings = settings

    s.org = world.org()
    s.server, s.credential = registered_server(s.org)
    s.project = world.project(s.org, s.server)
    Project.update(git_repo_url=_repo(tmp_path)).where(Project.id == s.project.id).execute()
    s.key = auth(world.key(s.org)[0])
    s.reader = auth(world.key(s.org, "read_only")[0])
    s.user = auth(orgs.issue_user_token(world.user(s.org, permissions=PERMISSIONS).id))
    s.root, s.gateway, s.start_agent = tmp_path / "srv", gateway, agents
    s.agent = agents(s.server, s.credential, env={"BERTH_AGENT_ENV_ROOT": str(s.root)})
    _connected(s)
    s.envs = Environments(docker_client, root=s.root)
    s.created = []
    yield s
    s.proxy.heal()
    for env_id in s.created:
        s.envs.destroy(env_id, True, lambda *a: None)
    s.proxy.close()
    http.shutdown()


def _closing(app):
    """The app with its database connection given back when each request ends: this
    server runs every request on a thread of its own (berth serve's pool reuses them)."""
    db = app.extensions["berth"].db

    def wsgi(environ, start_response):
        return ClosingIterator(app(environ, start_response), [db.close])
    return wsgi


def _repo(tmp_path):
    import subprocess

    work, bare = tmp_path / "work", tmp_path / "repo.git"
    (work / "shop").mkdir(parents=True)
    (work / "shop" / "__manifest__.py").write_text('{"name": "Shop", "version": "1.0"}')
    for cmd in (["git", "init", "-q", "--initial-branch=main"],
                ["git", "-c", "user.email=d@example.com", "-c", "user.name=d", "add", "-A"],
                ["git", "-c", "user.email=d@example.com", "-c", "user.name=d", "commit", "-qm",
                 "v1"],
                ["git", "init", "-q", "--bare", str(bare)], ["git", "push", "-q", str(bare), "main"]):
        subprocess.run(cmd, cwd=work, check=True)
    return f"file://{bare}"


def _connected(s):
    wait_for(lambda: str(s.server.id) in s.gateway.sessions
             and agent_svc.is_connected(Server.get_by_id(s.server.id)), timeout=30,
             what="agent connected")


# --- the environment's data -----------------------------------------------------

def _psql(s, env_id, sql):
    db = s.envs._container(s.envs._names(env_id)["db"])
    code, out = db.exec_run(["psql", "-X", "-tA", "-U", "odoo", "-d", "odoo",
                             "-v", "ON_ERROR_STOP=1", "-c", sql])
    assert code == 0, out
    return out.decode().strip()


def set_notes(s, env_id, rows):
    values = ", ".join(f"({i}, '{body}')" for i, body in rows)
    _psql(s, env_id, "CREATE TABLE IF NOT EXISTS notes (id int PRIMARY KEY, body text);"
                     f"DELETE FROM notes; INSERT INTO notes VALUES {values}")


def notes(s, env_id):
    out = _psql(s, env_id, "SELECT id, body FROM notes ORDER BY id")
    return [(int(i), body) for i, body in (line.split("|", 1) for line in out.splitlines())]


def _has_notes(s, env_id):
    db = s.envs._container(s.envs._names(env_id)["db"])
    code, out = db.exec_run(["psql", "-X", "-tA", "-U", "odoo", "-d", "odoo",
                             "-c", "SELECT to_regclass('notes') IS NOT NULL"])
    return code == 0 and out.decode().strip() == "t"


def store(s, env_id):
    return s.root / env_id / "filestore" / "filestore" / "odoo"


def write_files(s, env_id, files):
    """As the ERP writes them: owned by its user."""
    base = store(s, env_id)
    for name, data in files.items():
        path = base / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if data is None:
            path.unlink()
            continue
        path.write_bytes(data)
        for p in (path, *path.relative_to(base).parents):
            os.chown(base / p, 101, 101)


def files(s, env_id):
    base = store(s, env_id)
    return {str(p.relative_to(base)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(base.rglob("*")) if p.is_file()}


# --- the API ----------------------------------------------------------------------

def deployed(client, s, name, environment_type="development"):
    env = client.post(f"{P}/projects/{s.project.id}/environments", headers=s.key,
                      json={"name": name, "environment_type": environment_type}).json
    s.created.append(env["id"])
    return env["id"]


def wait_running(client, s, env_id):
    wait_for(lambda: client.get(f"{P}/environments/{env_id}", headers=s.reader).json["status"]
             in ("running", "failed", "error"), timeout=180, interval=0.5,
             what="environment deployed")
    assert client.get(f"{P}/environments/{env_id}", headers=s.reader).json["status"] == "running"


def settled(client, s, task_id, timeout=180):
    return wait_for(lambda: (d := client.get(f"{V1}/deployments/{task_id}", headers=s.user)
                             .json)["status"] in ("success", "failed", "cancelled") and d,
                    timeout=timeout, interval=0.3, what=f"task {task_id} settled")


def backup(client, s, env_id, **body):
    r = client.post(f"{V1}/environments/{env_id}/backups", headers=s.user, json=body)
    assert r.status_code == 202, r.json
    return r.json


def listed(client, s, env_id, backup_id):
    items = client.get(f"{P}/environments/{env_id}/backups?page_size=100",
                       headers=s.reader).json["items"]
    return next(b for b in items if b["id"] == backup_id)


def finished_backup(client, s, env_id, backup_id):
    return wait_for(lambda: (b := listed(client, s, env_id, backup_id))["status"]
                    in ("completed", "failed", "cancelled") and b, timeout=180, interval=0.3,
                    what=f"backup {backup_id} finished")


def completed_backup(client, s, env_id, **body):
    b = finished_backup(client, s, env_id, backup(client, s, env_id, **body)["id"])
    assert b["status"] == "completed", b
    return b


def restore(client, s, env_id, backup_id):
    r = client.post(f"{V1}/environments/{env_id}/restore", headers=s.user,
                    json={"backup_id": backup_id})
    assert r.status_code == 202, r.json
    return r.json["id"]


def open_uploads(s, b):
    """The multipart uploads storage still holds for the backup's objects."""
    row = Backup.get_by_id(b["id"])
    if s.kind == "s3":
        listing = s.s3.list_multipart_uploads(Bucket=s.bucket, Prefix=f"berth/{row.storage_prefix}")
        return [u["Key"] for u in listing.get("Uploads", [])]
    uploads = s.root.parent / "data" / "storage" / "uploads"
    return [d.name for d in uploads.iterdir()
            if (d / "key").exists() and (d / "key").read_text().startswith(row.storage_prefix)
            ] if uploads.is_dir() else []


# --- the flow ---------------------------------------------------------------------

def test_backups_end_to_end(client, stand):
    s = stand
    prod = deployed(client, s, "Production", "production")
    staging = deployed(client, s, "Staging", "staging")
    wait_running(client, s, prod)
    wait_running(client, s, staging)
    set_notes(s, prod, ORIGINAL)
    write_files(s, prod, {"ab/abcdef": b"attachment one", "cd/cdef01": b"attachment two"})
    original_files = files(s, prod)

    # 1. A backup, verified in storage; the manifest names the deployed commit.
    b = completed_backup(client, s, prod, comment="before the changes")
    assert b["is_verified"] is True and b["verified_at"] and b["notes"] == "before the changes"
    assert all(b[k] > 0 for k in ("database_size", "filestore_size", "total_size",
                                  "compressed_size"))
    row = Backup.get_by_id(b["id"])
    deploy = client.get(f"{P}/environments/{prod}/status", headers=s.reader).json["last_deploy"]
    commit = client.get(f"{P}/deployments/{deploy['id']}", headers=s.reader).json["git_commit"]
    assert row.manifest["git_commit"] == commit and len(commit) == 40
    assert row.manifest["addon_commits"] == {}

    # 2. The public download: plain HTTP, no auth; the bytes match the manifest.
    r = client.get(f"{P}/backups/{b['id']}/download", headers=s.reader)
    assert r.status_code == 200, r.json
    urls = r.json
    assert urls["use_streaming"] is (s.kind == "local")
    got = {name: requests.get(urls[f"{name}_url"], timeout=60)
           for name in ("database", "filestore", "manifest")}
    assert all(g.status_code == 200 for g in got.values())
    manifest = json.loads(got["manifest"].content)
    assert hashlib.sha256(got["manifest"].content).hexdigest() == \
        row.parts["manifest.json"]["sha256"]
    for name in ("database", "filestore"):
        assert hashlib.sha256(got[name].content).hexdigest() == manifest[name]["sha256"]
        assert len(got[name].content) == manifest[name]["size"]
    for bad in (299, 86401):
        r = client.get(f"{P}/backups/{b['id']}/download?expires_in={bad}", headers=s.reader)
        assert r.status_code == 422, bad

    # 3. Changed, then restored: the original rows and files are back; the safety
    # backup holds the changed state, its notes naming the restore.
    set_notes(s, prod, CHANGED)
    write_files(s, prod, {"ab/abcdef": b"edited", "ef/late": b"written after", "cd/cdef01": None})
    assert files(s, prod) != original_files
    task = restore(client, s, prod, b["id"])
    done = settled(client, s, task)
    assert done["status"] == "success", done
    assert notes(s, prod) == ORIGINAL and files(s, prod) == original_files
    safety = [x for x in client.get(f"{P}/environments/{prod}/backups", headers=s.reader)
              .json["items"] if x["notes"] and task in x["notes"]]
    assert len(safety) == 1 and safety[0]["status"] == "completed" and safety[0]["is_verified"]
    assert b["id"] in safety[0]["notes"]
    held = Backup.get_by_id(safety[0]["id"]).manifest  # the changed state, not the backup's
    assert held["filestore"]["sha256"] != manifest["filestore"]["sha256"]
    assert client.get(f"{P}/environments/{prod}", headers=s.reader).json["status"] == "running"

    # 4. Production restored into staging: a staging copy of production.
    set_notes(s, staging, [(9, "staging only")])
    done = settled(client, s, restore(client, s, staging, b["id"]))
    assert done["status"] == "success", done
    assert notes(s, staging) == ORIGINAL and files(s, staging) == original_files

    # 5. Refused: a busy environment, a backup not completed, a stopped environment.
    pending = backup(client, s, staging)
    r = client.post(f"{V1}/environments/{staging}/backups", headers=s.user, json={})
    assert r.status_code == 409 and r.json["error"] == "task_in_progress"
    r = client.get(f"{P}/backups/{pending['id']}/download", headers=s.reader)
    assert r.status_code == 400 and r.json["error"] == "backup_not_completed"
    assert finished_backup(client, s, staging, pending["id"])["status"] == "completed"
    r = client.post(f"{P}/environments/{staging}/actions/stop", headers=s.key)
    assert settled(client, s, r.json["task_id"])["status"] == "success"
    r = client.post(f"{V1}/environments/{staging}/backups", headers=s.user, json={})
    assert r.status_code == 409 and r.json["error"] == "environment_not_ready"

    # 6. The storage goes away mid-upload: the backup fails with the reason, its
    # open upload is aborted once storage is back, and nothing is downloadable.
    write_files(s, prod, {"big/random": os.urandom(BIG)})
    s.proxy.trip(BIG // 3, "cut")
    cut = finished_backup(client, s, prod, backup(client, s, prod)["id"])
    assert cut["status"] == "failed" and cut["error_message"], cut
    assert "filestore" in cut["error_message"]
    assert list(Backup.get_by_id(cut["id"]).uploads) == ["filestore.tar.zst"]  # left open
    s.proxy.heal()
    assert open_uploads(s, cut)
    assert transfers.abort_unfinished(s.settings) >= 1
    assert open_uploads(s, cut) == [] and Backup.get_by_id(cut["id"]).uploads == {}
    r = client.get(f"{P}/backups/{cut['id']}/download", headers=s.reader)
    assert r.status_code == 400 and r.json["error"] == "backup_not_completed"

    # 7. The agent killed mid-backup (its upload hanging): when it comes back, the
    # backup and its task are failed, never running for ever.
    s.proxy.trip(BIG // 3, "stall")
    hung = backup(client, s, prod)
    wait_for(lambda: s.proxy.tripped, timeout=120, what="upload under way")
    s.agent.kill()
    s.proxy.heal()
    s.agent.start()
    _connected(s)
    done = settled(client, s, hung["task_id"], timeout=60)
    assert done["status"] == "failed" and "restart" in done["error_message"], done
    hung = listed(client, s, prod, hung["id"])
    assert hung["status"] == "failed" and "restart" in hung["error_message"]

    # 8. The agent killed mid-restore (the database dropped, its dump hanging):
    # when it returns, the environment is put back from the safety backup and the
    # restore task has failed.
    write_files(s, prod, {"big/random": None})
    set_notes(s, prod, CHANGED)
    before = files(s, prod)
    journal = s.root / prod / ".restore.json"
    task = restore(client, s, prod, b["id"])
    wait_for(lambda: journal.exists(), timeout=180, interval=0.01, what="restore under way")
    s.proxy.trip(0, "stall")
    wait_for(lambda: journal.exists() and json.loads(journal.read_text())["database"],
             timeout=60, interval=0.05, what="the database step")
    wait_for(lambda: not _has_notes(s, prod), timeout=60, what="the database recreated")
    s.agent.kill()
    s.proxy.heal()
    s.agent.start()
    _connected(s)
    done = settled(client, s, task, timeout=60)
    assert done["status"] == "failed" and "restart" in done["error_message"], done
    wait_for(lambda: not journal.exists(), timeout=180, interval=0.5, what="rolled back")
    assert notes(s, prod) == CHANGED and files(s, prod) == before
    assert client.get(f"{P}/environments/{prod}", headers=s.reader).json["status"] == "running"

    # 9. A restore that fails (the backup's dump spoiled in storage): the environment
    # is put back from the safety backup, which is listed as completed.
    spoiled = Backup.get_by_id(pending["id"])
    key = spoiled.storage_prefix + "database.dump"
    garbage = b"not a dump" * 1000
    if s.kind == "s3":
        s.s3.put_object(Bucket=s.bucket, Key=f"berth/{key}", Body=garbage)
    else:
        (s.root.parent / "data" / "storage" / "objects" / key).write_bytes(garbage)
    task = restore(client, s, prod, pending["id"])
    done = settled(client, s, task)
    assert done["status"] == "failed" and "put back" in done["error_message"], done
    assert notes(s, prod) == CHANGED and files(s, prod) == before
    safety = [x for x in client.get(f"{P}/environments/{prod}/backups", headers=s.reader)
              .json["items"] if x["notes"] and task in x["notes"]]
    assert len(safety) == 1 and safety[0]["status"] == "completed" and safety[0]["is_verified"]
    assert client.get(f"{P}/environments/{prod}", headers=s.reader).json["status"] == "running"
