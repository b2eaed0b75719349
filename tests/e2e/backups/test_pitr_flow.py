"""Restores to a point in time end to end (the stand of tests/support/backup_flow.py,
on local storage and on S3: a real control plane over HTTP, a real `berth-agent
run`, real containers of the ERP stand-in and PostgreSQL archiving its WAL).

Production writes rows and attachments at T1 (before a backup), T2 and T3 (after
it). Restored through the API to a moment between T2 and T3, into a staging copy
and then into production itself, the database holds T1's and T2's rows and not
T3's, the filestore exactly T1's and T2's files (T2's came from the files archived
beside the WAL: no backup holds them), the ERP answers, and the task log names the
base backup and the WAL it used; a drill of that moment passes. A moment outside
the window is a 422 naming it."""

import datetime as dt
import hashlib
import time
import uuid

import pytest

from control_plane.models import Backup, Environment, WalFile
from control_plane.services.backups import policy
from tests.support.backup_flow import (
    V1,
    P,
    attach,
    completed_backup,
    erp_info,
    files,
    finished_backup,
    notes,
    paired_only,
    production_and_staging,
    psql,
    set_notes,
    settled,
    store,
    task_log,
    wal_archive,
)
from tests.support.waiting import wait_for

T1 = {b"%PDF-1.7 invoice T1": "invoice-1.pdf"}
T2 = {b"%PDF-1.7 invoice T2": "invoice-2.pdf"}
T3 = {b"%PDF-1.7 invoice T3": "invoice-3.pdf"}


def _hashed(stored):
    return {path: hashlib.sha256(data).hexdigest() for path, data in stored.items()}


def _restore_at(client, s, env_id, moment, **body):
    return client.post(f"{V1}/environments/{env_id}/restore", headers=s.user,
                       json={"target_time": moment, **body})


def _moment(s, env_id):
    """Now, by the database's clock (UTC)."""
    return dt.datetime.fromisoformat(psql(s, env_id, "SELECT to_char(now() AT TIME ZONE 'UTC', "
                                                     "'YYYY-MM-DD\"T\"HH24:MI:SS.US')"))


def _base(backup_id):
    return Backup.get_by_id(backup_id).manifest["base"]


def _iso(moment):
    return moment.isoformat().replace("+00:00", "Z")


@pytest.fixture(autouse=True)
def _paired(request):
    paired_only(request)


@pytest.mark.parametrize("stand", ["local", "s3"], indirect=True)
def test_a_moment_between_two_writes_comes_back_with_its_files(app, client, stand):
    s = stand
    prod, staging = production_and_staging(client, s)
    set_notes(s, prod, [(1, "T1")])
    at_t1 = attach(s, prod, T1)
    backup = completed_backup(client, s, prod)

    # T2: after the backup; its file reaches the archive beside the WAL.
    psql(s, prod, "INSERT INTO notes VALUES (2, 'T2')")
    at_t2 = attach(s, prod, T2)
    (t2_path,) = at_t2
    wait_for(lambda: WalFile.get_or_none(WalFile.path == f"filestore/odoo/{t2_path}",
                                         WalFile.stored_at.is_null(False)),
             timeout=90, what="T2's file archived", detail=lambda: wal_archive(client, s, prod))
    time.sleep(1.2)
    between = _moment(s, prod)
    time.sleep(1.2)
    psql(s, prod, "INSERT INTO notes VALUES (3, 'T3')")
    at_t3 = attach(s, prod, T3)
    (t3_path,) = at_t3
    time.sleep(1.2)
    after = _moment(s, prod)  # no write after it
    wait_for(lambda: WalFile.get_or_none(WalFile.path == f"filestore/odoo/{t3_path}",
                                         WalFile.stored_at.is_null(False)),
             timeout=90, what="T3's file archived")
    psql(s, prod, "SELECT pg_switch_wal()")
    shown = wait_for(lambda: (a := wal_archive(client, s, prod))["window_end"] and
                     a["window_end"] > _iso(after) and a, timeout=90,
                     what="the window reaching past the moments")
    assert shown["window_start"] <= _iso(between)

    # Outside the window: a 422 that names it, and nothing starts.
    early = _restore_at(client, s, staging, _iso(between - dt.timedelta(days=1)),
                        source_environment_id=prod)
    assert early.status_code == 422, early.json
    assert early.json["error"] == "validation_error"
    assert "outside the environment's point-in-time window" in early.json["message"]
    assert early.json["window_start"] == shown["window_start"][:19] + "Z"
    both = client.post(f"{V1}/environments/{staging}/restore", headers=s.user,
                       json={"target_time": _iso(between), "backup_id": backup["id"]})
    assert both.status_code == 422, both.json

    # Into the staging copy, read from production.
    r = _restore_at(client, s, staging, _iso(between), source_environment_id=prod)
    assert r.status_code == 202, r.json
    done = settled(client, s, r.json["id"], timeout=400)
    log = task_log(client, s, staging, r.json["id"])
    assert done["status"] == "success", (done.get("error_message"), log[-3000:])
    assert f"base backup {backup['id']}" in log and "WAL 0000000" in log
    assert [i for i, _ in notes(s, staging)] == [1, 2]
    assert files(s, staging) == _hashed({**at_t1, **at_t2})
    assert erp_info(s, staging)
    assert client.get(f"{P}/environments/{staging}", headers=s.reader).json["status"] == \
        "running"

    # A drill of the moment, in a throwaway copy: it passes, with T1's and T2's files.
    r = client.post(f"{V1}/environments/{prod}/drills", headers=s.user,
                    json={"target_time": _iso(between)})
    assert r.status_code == 202, r.json
    settled(client, s, r.json["id"], timeout=400)
    drills = client.get(f"{P}/environments/{prod}/drills", headers=s.reader).json["items"]
    drill = next(d for d in drills if d["id"] == r.json["id"])
    assert drill["status"] == "passed", (drill, task_log(client, s, prod, r.json["id"])[-3000:])
    assert drill["backup_id"] == backup["id"] and drill["target_time"].startswith(
        _iso(between)[:19])
    assert drill["attachments"] == 2 and drill["restore_seconds"] > 0

    # A moment after the last write (PostgreSQL finds no transaction after it: the
    # recovery goes to the archive's end): T3's rows and file too.
    r = _restore_at(client, s, staging, _iso(after), source_environment_id=prod)
    assert r.status_code == 202, r.json
    done = settled(client, s, r.json["id"], timeout=400)
    assert done["status"] == "success", task_log(client, s, staging, r.json["id"])[-3000:]
    assert [i for i, _ in notes(s, staging)] == [1, 2, 3]
    assert files(s, staging) == _hashed({**at_t1, **at_t2, **at_t3})

    # Into production itself: its safety backup first, then the same moment. Its
    # files are those production holds (linked, not downloaded: content never changes).
    (t1_path,) = at_t1
    inode = (store(s, prod) / t1_path).stat().st_ino
    r = _restore_at(client, s, prod, _iso(between))
    assert r.status_code == 202, r.json
    done = settled(client, s, r.json["id"], timeout=400)
    log = task_log(client, s, prod, r.json["id"])
    assert done["status"] == "success", log[-3000:]
    assert "the recovered cluster is in place" in log  # swapped whole, not loaded
    assert [i for i, _ in notes(s, prod)] == [1, 2]
    assert files(s, prod) == _hashed({**at_t1, **at_t2})
    assert (store(s, prod) / t1_path).stat().st_ino == inode
    assert erp_info(s, prod)

    # Production goes on, on a timeline of its own beside the old one's WAL, and the
    # scheduler takes a base backup of it at once: moments after the restore are in
    # the window, and T4 comes back.
    system_id = _base(backup["id"])["system_identifier"]
    _wrote_on_timeline(s, prod, 4, system_id, 2)
    Environment.update(backup_scheduled_for=dt.datetime(2100, 1, 1)).where(
        Environment.id == prod).execute()  # today's scheduled backup is not what is looked at
    assert client.put(f"{V1}/environments/{prod}/backup-policy", headers=s.user,
                      json={"drills_enabled": False}).status_code == 200  # nor a drill
    [new_base] = policy.run(app.extensions["berth"])
    assert new_base.environment_id == uuid.UUID(prod) and "timeline" in new_base.notes
    assert finished_backup(client, s, prod, str(new_base.id))["status"] == "completed"
    assert _base(new_base.id)["timeline"] == 2
    at_t4 = _moment(s, prod)
    _wrote_on_timeline(s, prod, 5, system_id, 2)
    wait_for(lambda: wal_archive(client, s, prod)["window_end"] > _iso(at_t4), timeout=90,
             what="the window reaching past T4")
    assert policy.run(app.extensions["berth"]) == []  # the new timeline has its base

    # Back before the first restore again: a third timeline (no name of the archive
    # is used twice), then to T4 on the second.
    r = _restore_at(client, s, prod, _iso(between))
    assert r.status_code == 202, r.json
    assert settled(client, s, r.json["id"], timeout=400)["status"] == "success", \
        task_log(client, s, prod, r.json["id"])[-3000:]
    assert [i for i, _ in notes(s, prod)] == [1, 2]
    _wrote_on_timeline(s, prod, 6, system_id, 3)
    r = _restore_at(client, s, prod, _iso(at_t4))
    assert r.status_code == 202, r.json
    assert settled(client, s, r.json["id"], timeout=400)["status"] == "success", \
        task_log(client, s, prod, r.json["id"])[-3000:]
    assert [i for i, _ in notes(s, prod)] == [1, 2, 4]
    assert erp_info(s, prod)


def _wrote_on_timeline(s, env_id, row, system_id, timeline):
    """A row written and its WAL file archived, on `timeline` of the cluster."""
    psql(s, env_id, f"INSERT INTO notes VALUES ({row}, 'T{row}')")
    named = f"{system_id}/{timeline:08X}"
    psql(s, env_id, "SELECT pg_switch_wal()")
    wait_for(lambda: WalFile.select().where(WalFile.environment == env_id,
                                            WalFile.name.startswith(named),
                                            ~WalFile.name.contains(".history"),
                                            WalFile.stored_at.is_null(False)).count(),
             timeout=90, what=f"WAL of timeline {timeline} archived")
