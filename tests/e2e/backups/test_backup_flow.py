"""Backups and restores end to end, on each storage backend (and each database, paired:
sqlite-local, postgres-s3): the control plane's
HTTP served for real (the agent reaches the transfer API and the local storage's
signed URLs over HTTP), its gateway, a real `berth-agent run` and real
containers; the S3 backend is moto's server. Both reach the network through a
proxy (tests/support/tcp_proxy.py) that can cut or stall them at a chosen moment.

One production environment and one staging environment per run: rows and files
written, backed up, changed, restored and read back; the public download fetched
with plain HTTP; production restored into staging; then the faults (busy,
stopped, storage cut mid-upload, the agent killed mid-backup and mid-restore, a
restore that fails and is put back from its safety backup)."""

import hashlib
import io
import json
import os
import tarfile

import pytest
import requests

from control_plane.agent_link import Plain
from control_plane.models import Backup, Environment
from control_plane.services.backups import objects, transfers
from tests.support.agents import wait_for
from tests.support.backup_flow import (
    V1,
    P,
    backup,
    completed_backup,
    connected,
    files,
    finished_backup,
    listed,
    notes,
    paired_only,
    production_and_staging,
    psql,
    restore,
    set_notes,
    settled,
    write_files,
)

ORIGINAL = [(1, "invoice 2026/001"), (2, "invoice 2026/002")]
CHANGED = [(1, "invoice 2026/001 (edited)"), (3, "written after the backup")]
BIG = 12 * 1024 * 1024  # incompressible: the filestore goes up in two parts
STAGED_COUNT = "SELECT count(*) FROM pg_database WHERE datname = 'odoo_restore'"


def open_uploads(s, b):
    """The multipart uploads storage still holds for the backup's objects (its own,
    and the filestore packs it was uploading for its project)."""
    row = Backup.get_by_id(b["id"])
    prefixes = (row.storage_prefix, f"objects/{objects.project_of(row)}/")
    if s.kind == "s3":
        listing = s.s3.list_multipart_uploads(Bucket=s.bucket, Prefix="berth/")
        return [u["Key"] for u in listing.get("Uploads", [])
                if u["Key"].removeprefix("berth/").startswith(prefixes)]
    uploads = s.root.parent / "data" / "storage" / "uploads"
    return [d.name for d in uploads.iterdir()
            if (d / "key").exists() and (d / "key").read_text().startswith(prefixes)
            ] if uploads.is_dir() else []


def left_running(s, env_id):
    """Commands in the environment's database container as an agent's stop mid-restore
    can leave them, started detached: clients that keep connecting to the staged
    database (a pg_restore's workers) and one that makes it again once it is gone (a
    psql recreating it). Their exec ids."""
    api = s.envs.docker.api
    db = s.envs._container(s.envs._names(env_id)["db"])
    for_seconds = 'end=$(($(date +%s) + {})); while [ "$(date +%s)" -lt "$end" ]; do {}; done'
    connect = for_seconds.format(8, "psql -X -q -U odoo -d odoo_restore "
                                    "-c 'SELECT pg_sleep(0.05)' >/dev/null 2>&1")
    create = for_seconds.format(30, "psql -X -q -U odoo -d postgres -c "
                                    "'CREATE DATABASE odoo_restore' >/dev/null 2>&1 && exit; "
                                    "sleep 0.1")
    ids = [api.exec_create(db.id, ["sh", "-c", cmd])["Id"] for cmd in (connect, connect, create)]
    for i in ids:
        api.exec_start(i, detach=True)
    return ids


# --- the flow ---------------------------------------------------------------------

@pytest.fixture(autouse=True)
def _paired(request):
    """Each database and each storage once: what is stored where does not depend on
    which database the control plane keeps its rows in."""
    paired_only(request)


def test_backups_end_to_end(client, stand):
    s = stand
    prod, staging = production_and_staging(client, s)
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
    assert hashlib.sha256(got["database"].content).hexdigest() == manifest["database"]["sha256"]
    assert len(got["database"].content) == manifest["database"]["size"]
    # The filestore: kept as objects of the project, downloaded as one tar composed
    # from them, holding every file.
    assert manifest["filestore"]["layout"] == "objects"
    assert manifest["filestore"]["files"] >= len(original_files)
    with tarfile.open(fileobj=io.BytesIO(got["filestore"].content)) as tar:
        inside = {m.name.removeprefix("filestore/odoo/"): hashlib.sha256(
            tar.extractfile(m).read()).hexdigest() for m in tar
            if m.isfile() and m.name.startswith("filestore/odoo/")}
    assert inside == original_files
    for bad in (299, 86401):
        r = client.get(f"{P}/backups/{b['id']}/download?expires_in={bad}", headers=s.reader)
        assert r.status_code == 422, bad

    # 2b. The project's objects, once: a backup after 1 % of a hundred files changed
    # uploads only the one new object.
    write_files(s, prod, {f"{i:02x}/bulk{i}": os.urandom(10_000) for i in range(100)})
    full = Backup.get_by_id(completed_backup(client, s, prod)["id"]).manifest["filestore"]
    assert (full["new_objects"], full["new_bytes"]) == (100, 1_000_000), full
    write_files(s, prod, {"00/bulk0": os.urandom(10_000)})
    again = Backup.get_by_id(completed_backup(client, s, prod)["id"]).manifest["filestore"]
    assert (again["new_objects"], again["new_bytes"]) == (1, 10_000), again
    assert again["uploaded_bytes"] < 0.02 * full["uploaded_bytes"], (again, full)
    assert again["files"] == full["files"] and set(full["packs"]) < set(again["packs"])

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
    # The copy's files are the project's objects already: its backup uploads none.
    copy = Backup.get_by_id(completed_backup(client, s, staging)["id"]).manifest["filestore"]
    assert copy["new_objects"] == 0 and copy["uploaded_bytes"] == 0, copy

    # 5. Refused: a busy environment, a backup not completed, a never deployed one.
    pending = backup(client, s, staging)
    r = client.post(f"{V1}/environments/{staging}/backups", headers=s.user, json={})
    assert r.status_code == 409 and r.json["error"] == "task_in_progress"
    r = client.get(f"{P}/backups/{pending['id']}/download", headers=s.reader)
    assert r.status_code == 400 and r.json["error"] == "backup_not_completed"
    assert finished_backup(client, s, staging, pending["id"])["status"] == "completed"
    Environment.update(status="pending").where(Environment.id == staging).execute()
    r = client.post(f"{V1}/environments/{staging}/backups", headers=s.user, json={})
    assert r.status_code == 409 and r.json["error"] == "environment_not_ready"
    Environment.update(status="running").where(Environment.id == staging).execute()

    # 6. The storage goes away mid-upload: the backup fails with the reason, its
    # open upload is aborted once storage is back, and nothing is downloadable.
    write_files(s, prod, {"big/random": os.urandom(BIG)})
    s.proxy.trip(BIG // 3, "cut")
    cut = finished_backup(client, s, prod, backup(client, s, prod)["id"])
    assert cut["status"] == "failed" and cut["error_message"], cut
    # The dump and the archive upload at once: the cut may reach either first.
    assert "database.dump" in cut["error_message"] or "packs/" in cut["error_message"]
    left_open = list(Backup.get_by_id(cut["id"]).uploads)
    assert left_open and all(n == "database.dump" or n.startswith("packs/")
                             for n in left_open), left_open
    s.proxy.heal()
    assert open_uploads(s, cut)
    assert transfers.abort_unfinished(Plain(s.settings)) >= 1
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
    connected(s)
    done = settled(client, s, hung["task_id"], timeout=60)
    assert done["status"] == "failed" and "restart" in done["error_message"], done
    hung = listed(client, s, prod, hung["id"])
    assert hung["status"] == "failed" and "restart" in hung["error_message"]

    # 8. The agent killed mid-restore (its dump hanging while it loads into the
    # staged database beside the running ERP): when it returns, the staging is
    # undone, the environment was never touched and the restore task has failed.
    write_files(s, prod, {"big/random": None})
    set_notes(s, prod, CHANGED)
    before = files(s, prod)
    journal = s.root / prod / ".restore.json"
    task = restore(client, s, prod, b["id"])
    wait_for(lambda: journal.exists(), timeout=180, interval=0.01, what="restore under way")
    assert json.loads(journal.read_text())["staging"]
    s.proxy.trip(0, "stall")
    wait_for(lambda: s.proxy.tripped, timeout=60, what="the staging's downloads stalled")
    assert not json.loads(journal.read_text())["stopped"]
    wait_for(lambda: psql(s, prod, STAGED_COUNT) == "1", timeout=60, what="the staged database")
    s.agent.kill()
    s.proxy.heal()
    left = left_running(s, prod)  # what a stop leaves running in the database container
    s.agent.start()
    connected(s)
    done = settled(client, s, task, timeout=60)
    assert done["status"] == "failed" and "restart" in done["error_message"], done
    wait_for(lambda: not journal.exists(), timeout=180, interval=0.5, what="staging undone")
    wait_for(lambda: not any(s.envs.docker.api.exec_inspect(i)["Running"] for i in left),
             timeout=60, what="the commands left running")
    assert notes(s, prod) == CHANGED and files(s, prod) == before
    assert not (s.root / prod / "filestore.new").exists()
    assert psql(s, prod, STAGED_COUNT) == "0"
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
