"""The stand of the end-to-end backup modules (tests/e2e/backups/test_backup_flow.py,
tests/e2e/backups/test_odoo_flow.py), on each storage backend: the control plane's HTTP
served for real (the agent reaches the transfer API and the local storage's signed
URLs over HTTP), its gateway, a real `berth-agent run` and real containers; the S3
backend is moto's server. Both reach the network through a proxy
(tests/support/tcp_proxy.py) that can cut or stall them at a chosen moment. Also the
helpers that write and read an environment's rows and files, and drive the API."""

import hashlib
import io
import json
import os
import tarfile
import threading
import urllib.request
import uuid

import boto3
import pytest
import zstandard
from werkzeug.serving import make_server

from agent.deploy.environments import Environments, erp_address
from control_plane.models import Project, Server
from control_plane.services import agents as agent_svc
from control_plane.services.accounts import orgs
from tests.conftest import auth
from tests.support.agents import closing, registered_server, wait_for
from tests.support.git_repo import shop_repo
from tests.support.tcp_proxy import TcpProxy

P, V1 = "/api/public/v1", "/api/v1"
PERMISSIONS = ("project.environments.deploy", "project.deployments.cancel")
AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
       "AWS_DEFAULT_REGION": "us-east-1"}


class Stand:
    pass


PAIRED = {("sqlite", "local"), ("postgres", "s3")}  # each database, each storage, once


def paired_only(request):
    """For a flow whose database part and storage part do not meet: the two pairs
    outside PAIRED skipped (called by an autouse fixture, before the stand is made)."""
    params = request.node.callspec.params
    if (params["backend"], params["stand"]) not in PAIRED:
        pytest.skip("each database and each storage run once: sqlite-local, postgres-s3")


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

    peopled(s, world, tmp_path)
    s.root, s.gateway, s.start_agent = tmp_path / "srv", gateway, agents
    # The stand-in runs a triggered cron at once: a runner that does not is seen in 5 s.
    s.agent = agents(s.server, s.credential, env={"BERTH_AGENT_ENV_ROOT": str(s.root),
                                                  "BERTH_AGENT_CRON_CHECK_SECONDS": "5"})
    connected(s)
    s.envs = Environments(docker_client, root=s.root)
    s.created = []
    yield s
    s.proxy.heal()
    for env_id in s.created:
        s.envs.destroy(env_id, True, lambda *a: None)
    s.proxy.close()
    http.shutdown()


def peopled(s, world, tmp_path):
    """An organization with a registered server (`s.credential` its agent's), a
    project on it with an add-on repository, and the keys and user token the flows
    call with."""
    s.org = world.org()
    s.server, s.credential = registered_server(s.org)
    s.project = world.project(s.org, s.server)
    Project.update(git_repo_url=_repo(tmp_path)).where(Project.id == s.project.id).execute()
    s.key = auth(world.key(s.org)[0])
    s.reader = auth(world.key(s.org, "read_only")[0])
    s.user = auth(orgs.issue_user_token(world.user(s.org, permissions=PERMISSIONS).id))
    return s


_closing = closing  # (tests/compat imports it by this name)


def _repo(tmp_path):
    return f"file://{shop_repo(tmp_path)}"


def connected(s):
    wait_for(lambda: str(s.server.id) in s.gateway.sessions
             and agent_svc.is_connected(Server.get_by_id(s.server.id)), timeout=30,
             what="agent connected")


# --- the environment's data -----------------------------------------------------

def psql(s, env_id, sql):
    db = s.envs._container(s.envs._names(env_id)["db"])
    code, out = db.exec_run(["psql", "-X", "-tA", "-U", "odoo", "-d", "odoo",
                             "-v", "ON_ERROR_STOP=1", "-c", sql])
    assert code == 0, out
    return out.decode().strip()


def erp_info(s, env_id):
    """What the environment's ERP serves at /berth/info (its modules, its tables)."""
    address = erp_address(s.envs.docker, s.envs._names(env_id)["erp"])
    with urllib.request.urlopen(f"http://{address}/berth/info", timeout=10) as r:
        return json.load(r)


def set_notes(s, env_id, rows):
    values = ", ".join(f"({i}, '{body}')" for i, body in rows)
    psql(s, env_id, "CREATE TABLE IF NOT EXISTS notes (id int PRIMARY KEY, body text);"
                     f"DELETE FROM notes; INSERT INTO notes VALUES {values}")


def notes(s, env_id):
    out = psql(s, env_id, "SELECT id, body FROM notes ORDER BY id")
    return [(int(i), body) for i, body in (line.split("|", 1) for line in out.splitlines())]


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


def attach(s, env_id, files):
    """Files stored as Odoo stores attachments ({content: name}): rows of
    ir_attachment, the files named by their SHA-1 under 2 hex. Returns {path: content}."""
    stored = {}
    for data, name in files.items():
        sha1 = hashlib.sha1(data).hexdigest()
        stored[f"{sha1[:2]}/{sha1}"] = data
        psql(s, env_id, f"INSERT INTO ir_attachment (name, store_fname, checksum, file_size) "
                        f"VALUES ('{name}', '{sha1[:2]}/{sha1}', '{sha1}', {len(data)})")
    write_files(s, env_id, stored)
    return stored


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


def production_and_staging(client, s):
    """Two running environments of the project: (production, staging)."""
    prod = deployed(client, s, "Production", "production")
    staging = deployed(client, s, "Staging", "staging")
    wait_running(client, s, prod)
    wait_running(client, s, staging)
    return prod, staging


def redeploy(client, s, env_id):
    """POST /api/v1/environments/{id}/deploy with force, until the task settles."""
    r = client.post(f"{V1}/environments/{env_id}/deploy", headers=s.user, json={"force": True})
    assert r.status_code == 201, r.json
    return settled(client, s, r.json["deployment"]["id"])


def task_log(client, s, env_id, task_id):
    return client.get(f"{P}/environments/{env_id}/logs?task_id={task_id}&lines=5000",
                      headers=s.reader).json["log"]


def wal_archive(client, s, env_id):
    """GET /api/v1/environments/{id}/wal-archive."""
    r = client.get(f"{V1}/environments/{env_id}/wal-archive", headers=s.user)
    assert r.status_code == 200, r.json
    return r.json


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
    assert b["status"] == "completed", (b["status"], b.get("error_message"))
    return b


def restore(client, s, env_id, backup_id):
    r = client.post(f"{V1}/environments/{env_id}/restore", headers=s.user,
                    json={"backup_id": backup_id})
    assert r.status_code == 202, r.json
    return r.json["id"]


# --- storage, behind the control plane's back -----------------------------------------

def stored(s, key):
    if s.kind == "s3":
        return s.s3.get_object(Bucket=s.bucket, Key=f"berth/{key}")["Body"].read()
    return (s.root.parent / "data" / "storage" / "objects" / key).read_bytes()


def store_over(s, key, data):
    if s.kind == "s3":
        s.s3.put_object(Bucket=s.bucket, Key=f"berth/{key}", Body=data)
    else:
        (s.root.parent / "data" / "storage" / "objects" / key).write_bytes(data)


def spoil_an_object(s, backup):
    """The backup's first filestore pack rewritten in storage with one byte of its
    last object changed: a valid pack still, only the object's hash tells."""
    from control_plane.models import FilestorePack
    from control_plane.services.backups.objects import project_of

    name = backup.manifest["filestore"]["packs"][0]
    row = FilestorePack.get(FilestorePack.project == project_of(backup), FilestorePack.name == name)
    store_over(s, row.key, _changed_inside(stored(s, row.key)))


def _changed_inside(packed):
    plain = bytearray(zstandard.ZstdDecompressor().stream_reader(io.BytesIO(packed)).read())
    with tarfile.open(fileobj=io.BytesIO(bytes(plain))) as tar:
        last = [m for m in tar if m.isfile() and m.size][-1]
    plain[last.offset_data] ^= 1
    return zstandard.ZstdCompressor().compress(bytes(plain))
