"""Odoo's backup zip end to end, on each storage backend (the stand of
tests/support/backup_flow.py: a real control plane over HTTP, its gateway, a real
`berth-agent run`, real containers, local storage or moto's S3).

Two environments per run: a completed backup of A exported through the API, the
zip fetched with plain HTTP and checked as Odoo's (`unzip -t`, its members and
manifest), then uploaded in parts as an import of B and restored there: B holds
A's rows and files, neutralised (B is a staging environment). Then a hostile zip (a member that climbs out of the
filestore) uploaded and restored into B: the task fails with the refusal's code,
B's rows and files unchanged and its ERP still healthy."""

import io
import json
import os
import subprocess
import urllib.request
import zipfile

import requests

from agent.deploy.environments import erp_address
from control_plane.models import Backup
from control_plane.services.backups.odoo import PART_MIN
from tests.support.backup_flow import (
    V1,
    P,
    completed_backup,
    files,
    notes,
    production_and_staging,
    psql,
    set_notes,
    settled,
    store,
    write_files,
)

A_ROWS = [(1, "invoice 2026/001"), (2, "customer Ångström & Co")]
B_ROWS = [(7, "staging scratch")]
BIG = PART_MIN + 1024 * 1024  # incompressible: the zip goes up in two parts


def export_zip(client, s, backup_id, tmp_path):
    """The backup exported as a task, its zip fetched with plain HTTP (no auth)."""
    r = client.post(f"{V1}/backups/{backup_id}/export", headers=s.user)
    assert r.status_code == 202, r.json
    assert r.json["kind"] == "export"
    done = settled(client, s, r.json["id"])
    assert done["status"] == "success", done
    r = client.get(f"{V1}/backups/{backup_id}/export", headers=s.user)
    assert r.status_code == 200, r.json
    link = r.json
    assert link["use_streaming"] is (s.kind == "local") and link["filename"].endswith(".zip")
    got = requests.get(link["url"], timeout=120)
    assert got.status_code == 200, got.text[:500]
    assert len(got.content) == link["size"]
    path = tmp_path / link["filename"]
    path.write_bytes(got.content)
    return path


def upload(client, s, env_id, data, filename):
    """An import of the environment: POST imports, a PUT per part to its URL, complete."""
    r = client.post(f"{V1}/environments/{env_id}/imports", headers=s.user,
                    json={"filename": filename})
    assert r.status_code == 201, r.json
    base = f"{V1}/environments/{env_id}/imports/{r.json['import_id']}"
    parts = []
    for n, at in enumerate(range(0, len(data), PART_MIN), start=1):
        r = client.post(f"{base}/parts", headers=s.user, json={"part_number": n})
        assert r.status_code == 200, r.json
        put = requests.put(r.json["url"], data=data[at:at + PART_MIN], timeout=60)
        assert put.status_code == 200, put.text[:500]
        parts.append({"part_number": n, "etag": put.headers["ETag"]})
    r = client.post(f"{base}/complete", headers=s.user, json={"parts": parts})
    assert r.status_code == 200, r.json
    assert (r.json["status"], r.json["size"]) == ("uploaded", len(data))
    return base


def restored(client, s, base):
    r = client.post(f"{base}/restore", headers=s.user)
    assert r.status_code == 202, r.json
    return settled(client, s, r.json["id"])


def erp_healthy(client, s, env_id):
    assert client.get(f"{P}/environments/{env_id}", headers=s.reader).json["status"] == "running"
    address = erp_address(s.envs.docker, s.envs._names(env_id)["erp"])
    with urllib.request.urlopen(f"http://{address}/web/health", timeout=10) as r:
        return r.status == 200


def hostile_zip(major_version):
    """Odoo's layout, a dump that would empty the table, and a member that climbs
    out of the filestore."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("dump.sql", "--\n-- PostgreSQL database dump\n--\n\nDELETE FROM notes;\n")
        zf.writestr("manifest.json", json.dumps({
            "odoo_dump": "1", "db_name": "evil", "version": major_version,
            "major_version": major_version, "pg_version": "16", "modules": {}}))
        zf.writestr("filestore/ab/harmless", b"harmless")
        zf.writestr("filestore/../../../../escaped", b"climbed out")
    return out.getvalue()


def test_odoo_zip_export_then_import(client, stand, tmp_path):
    s = stand
    a, b = production_and_staging(client, s)
    set_notes(s, a, A_ROWS)
    installed = psql(s, a, "SELECT name, coalesce(latest_version, '') FROM ir_module_module"
                           " WHERE state = 'installed' ORDER BY name")  # the ERP's own
    modules = dict(line.split("|", 1) for line in installed.splitlines())
    assert modules
    big = os.urandom(BIG)
    write_files(s, a, {"ab/abcdef": b"attachment one", "cd/cdef01": b"attachment two",
                       "ef/big": big})
    set_notes(s, b, B_ROWS)
    write_files(s, b, {"99/only-in-b": b"staging file"})
    a_files = files(s, a)
    bk = completed_backup(client, s, a)
    row = Backup.get_by_id(bk["id"])

    # 1. Exported: Odoo's zip, whole by `unzip -t` and by zipfile.
    path = export_zip(client, s, bk["id"], tmp_path)
    tested = subprocess.run(["unzip", "-t", str(path)], capture_output=True, text=True)
    assert tested.returncode == 0 and "No errors detected" in tested.stdout, tested.stdout
    with zipfile.ZipFile(path) as zf:
        assert zf.testzip() is None
        names = set(zf.namelist())
        assert {"dump.sql", "manifest.json", "filestore/ab/abcdef", "filestore/cd/cdef01",
                "filestore/ef/big"} <= names
        assert all(n in ("dump.sql", "manifest.json") or n.startswith("filestore/")
                   for n in names)
        manifest = json.loads(zf.read("manifest.json"))
        assert manifest["odoo_dump"] == "1" and manifest["db_name"] == "odoo"
        version = row.manifest["erp_version"] or "17.0"
        assert manifest["version"] == version and manifest["major_version"] == "17.0"
        assert manifest["pg_version"] == row.manifest["pg_version"] and manifest["pg_version"]
        assert manifest["modules"] == modules
        dump = zf.read("dump.sql").decode()
        assert dump.startswith("--\n-- PostgreSQL database dump")
        assert "CREATE TABLE public.notes" in dump and "customer Ångström & Co" in dump
        assert zf.read("filestore/ab/abcdef") == b"attachment one"
        assert zf.read("filestore/ef/big") == big

    # 2. Imported into B through the imports protocol: B holds A's rows and files.
    base = upload(client, s, b, path.read_bytes(), path.name)
    done = restored(client, s, base)
    assert done["status"] == "success", done
    assert client.get(base, headers=s.user).json["status"] == "restored"
    assert notes(s, b) == A_ROWS and files(s, b) == a_files
    assert erp_healthy(client, s, b)
    # a copy of production in staging: neutralised before it served
    assert psql(s, b, "SELECT value FROM ir_config_parameter"
                      " WHERE key = 'database.is_neutralized'") == "true"
    assert client.get(f"{P}/environments/{b}", headers=s.reader).json["neutralized"] is True

    # 3. A hostile zip: refused with its code, B untouched, its ERP healthy.
    set_notes(s, b, B_ROWS)
    before = files(s, b)
    base = upload(client, s, b, hostile_zip("17.0"), "hostile.zip")
    done = restored(client, s, base)
    assert done["status"] == "failed" and "import_unsafe_member" in done["error_message"], done
    imp = client.get(base, headers=s.user).json
    assert imp["status"] == "failed" and imp["task_id"] == done["id"]
    assert Backup.get(Backup.task == done["id"]).status == "failed"  # no safety backup taken
    assert notes(s, b) == B_ROWS and files(s, b) == before
    assert not (store(s, b) / "ab" / "harmless").exists()
    assert not [p for p in s.root.rglob("escaped")]
    assert erp_healthy(client, s, b)
