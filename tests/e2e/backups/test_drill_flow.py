"""Restore drills end to end (the stand of tests/support/backup_flow.py, on local
storage and on S3: a real control plane over HTTP, a real `berth-agent run`, real
containers of the ERP stand-in and PostgreSQL).

A production environment with rows and stored attachments is backed up; a drill
restores that backup into a throwaway copy (its own database container without a
network, an ERP nothing routes to), proves it (rows per table, the copy's health,
every attachment's checksum) and removes it, the environment serving on. A drill
of a backup whose object was changed in storage fails and alerts; so does one of
a backup whose attachment's file is missing."""


import pytest

from control_plane.models import Backup, Event
from tests.support.backup_flow import (
    V1,
    P,
    attach,
    completed_backup,
    deployed,
    notes,
    psql,
    set_notes,
    settled,
    spoil_an_object,
    task_log,
    wait_running,
)

ROWS = [(i, f"invoice 2026/{i:03d}") for i in range(1, 41)]
FILES = {b"%PDF-1.7 invoice 1": "invoice-1.pdf", b"\x89PNG logo": "logo.png"}


def _drill(client, s, env_id, **body):
    r = client.post(f"{V1}/environments/{env_id}/drills", headers=s.user, json=body)
    assert r.status_code == 202, r.json
    settled(client, s, r.json["id"], timeout=300)
    drills = client.get(f"{P}/environments/{env_id}/drills", headers=s.reader).json["items"]
    return next(d for d in drills if d["id"] == r.json["id"])


def _no_copy_left(s, env_id):
    names = {c.name for c in s.envs.docker.containers.list(all=True, ignore_removed=True)}
    n = s.envs._names(env_id)
    assert not {f"{n['db']}-drill", f"{n['erp']}-drill"} & names
    assert not (n["dir"] / "drill").exists()


def _event(name):
    return Event.select().where(Event.name == name).order_by(Event.created_at.desc()).first()


@pytest.mark.parametrize("stand", ["local", "s3"], indirect=True)
def test_a_drill_proves_a_backup_and_fails_on_one_spoiled(client, stand):
    s = stand
    prod = deployed(client, s, "Production", "production")
    wait_running(client, s, prod)
    set_notes(s, prod, ROWS)
    attach(s, prod, FILES)
    backup = completed_backup(client, s, prod)["id"]
    erp = s.envs._container(s.envs._names(prod)["erp"])

    # 1. A healthy backup: proven, the copy gone, the environment untouched.
    drill = _drill(client, s, prod)
    assert drill["status"] == "passed", drill
    assert drill["backup_id"] == backup and drill["attachments"] == 2
    assert drill["tables"] >= 10 and drill["rows"] >= len(ROWS)
    assert 0 < drill["restore_seconds"] < 300
    log = task_log(client, s, prod, drill["id"])
    assert "each table's rows as many as the dump's" in log
    assert "2 stored attachments present, each hashing right" in log
    assert "checked the copy: nothing live" in log  # neutralised and checked, as a copy is
    event = _event("backup.drill_completed")
    assert event.data["task_id"] == drill["id"] and event.data["attachments"] == 2
    _no_copy_left(s, prod)
    assert notes(s, prod) == ROWS
    assert psql(s, prod, "SELECT count(*) FROM ir_mail_server") == "0"  # not neutralised
    assert s.envs._container(erp.name).id == erp.id  # the same ERP container, serving
    assert client.get(f"{P}/environments/{prod}", headers=s.reader).json["status"] == "running"

    # 2. An attachment's file missing from the backup: the drill fails and says which.
    psql(s, prod, "INSERT INTO ir_attachment (name, store_fname, checksum) VALUES "
                  "('lost.pdf', 'ab/ab' || repeat('0', 38), 'ab' || repeat('0', 38))")
    lost = completed_backup(client, s, prod)["id"]
    drill = _drill(client, s, prod, backup_id=lost)
    assert drill["status"] == "failed", drill
    assert f"attachment file ab/ab{'0' * 38} is missing" in drill["error_message"]
    assert drill["tables"] >= 10 and drill["restore_seconds"] > 0
    _no_copy_left(s, prod)

    # 3. An object of the first backup's filestore changed in storage (its pack still
    # a valid archive): the drill fails and alerts.
    spoil_an_object(s, Backup.get_by_id(backup))
    drill = _drill(client, s, prod, backup_id=backup)
    assert drill["status"] == "failed" and "filestore" in drill["error_message"], drill
    event = _event("backup.drill_failed")
    assert event.data["task_id"] == drill["id"] and event.data["error_message"]
    _no_copy_left(s, prod)
    assert notes(s, prod) == ROWS
    assert client.get(f"{P}/environments/{prod}", headers=s.reader).json["status"] == "running"
