"""WAL archiving end to end (the stand of tests/support/backup_flow.py, on local
storage and on S3: a real control plane over HTTP, a real `berth-agent run`, a
real PostgreSQL container).

A production environment's PostgreSQL archives its WAL: a finished WAL file
reaches storage, checked, as the very segment the database wrote (its header
names the cluster), and the archive's status says so. When PostgreSQL cannot
archive, the control plane alerts once, and once more when it can again. A
backup holds a base the archived WAL replays onto: recovered by hand to a point
in time, the database holds what was written before it and nothing after."""

import io
import struct
import subprocess
import tarfile
import time

import pytest
import zstandard

from control_plane.models import Backup, Event, WalFile
from control_plane.services.backups import wal
from tests.support.backup_flow import (
    completed_backup,
    deployed,
    psql,
    set_notes,
    stored,
    task_log,
    wait_running,
    wal_archive,
)
from tests.support.waiting import wait_for

SEGMENT_SIZE = 16 * 1024 * 1024
WAL_MAGIC_15 = 0xD110  # PostgreSQL 15's XLOG_PAGE_MAGIC
ROWS = [(i, f"order {i}") for i in range(1, 201)]


def _switched(s, env_id):
    """The WAL file being written, finished now (the rows of `set_notes` in it)."""
    name = psql(s, env_id, "SELECT pg_walfile_name(pg_current_wal_lsn())")
    psql(s, env_id, "SELECT pg_switch_wal()")
    return name


def _stored_file(name):
    return WalFile.select().where(WalFile.name.endswith(f"/{name}.zst"),
                                  WalFile.stored_at.is_null(False)).first()


def _recovered(s, tmp_path, backup, target_time):
    """The backup's base and the archived WAL, recovered by hand as an operator
    would (PostgreSQL's own recovery, `recovery_target_time`) in a container of the
    environment's image with no network: the notes it holds."""
    base = backup.manifest["base"]
    data, wal_dir = tmp_path / "pgdata", tmp_path / "wal"
    data.mkdir(mode=0o700)
    wal_dir.mkdir()
    raw = zstandard.ZstdDecompressor().stream_reader(
        io.BytesIO(stored(s, backup.storage_prefix + base["object"])))
    with tarfile.open(fileobj=raw, mode="r|") as tar:
        tar.extractall(data, filter="fully_trusted")
    for row in WalFile.select().where(WalFile.environment == backup.environment_id,
                                      WalFile.name.startswith(base["system_identifier"] + "/")):
        name = row.name.split("/")[1].removesuffix(".zst")
        (wal_dir / name).write_bytes(zstandard.ZstdDecompressor().decompress(
            stored(s, row.key), max_output_size=SEGMENT_SIZE))
    (data / "recovery.signal").touch()
    with (data / "postgresql.auto.conf").open("a") as conf:
        conf.write(f"restore_command = 'cp /wal/%f %p'\nrecovery_target_time = '{target_time}'\n"
                   "recovery_target_action = 'promote'\n")
    subprocess.run(["chown", "-R", "999:999", str(data)], check=True)
    db = s.envs.docker.containers.run(
        s.settings["POSTGRES_IMAGE"], ["postgres"], detach=True, network_mode="none",
        environment={"POSTGRES_PASSWORD": "x"},
        volumes={str(data): {"bind": "/var/lib/postgresql/data", "mode": "rw"},
                 str(wal_dir): {"bind": "/wal", "mode": "ro"}})
    try:
        def promoted():
            code, out = db.exec_run(["psql", "-X", "-tA", "-U", "odoo", "-d", "odoo", "-c",
                                     "SELECT pg_is_in_recovery()"])
            return code == 0 and out.decode().strip() == "f"
        wait_for(promoted, timeout=90, what="the recovery to end",
                 detail=lambda: db.logs(tail=30).decode(errors="replace"))
        code, out = db.exec_run(["psql", "-X", "-tA", "-U", "odoo", "-d", "odoo", "-c",
                                 "SELECT id FROM notes ORDER BY id"])
        assert code == 0, out
        return [int(i) for i in out.decode().split()]
    finally:
        db.remove(force=True, v=True)


@pytest.mark.parametrize("stand", ["local", "s3"], indirect=True)
def test_production_archives_its_wal_recovers_to_a_point_and_alerts(client, stand, tmp_path):
    """One environment: its WAL reaches storage; rows at T1 (before a backup), T2
    and T3, recovered from the backup's base and the archive to a moment between T2
    and T3, are T1's and T2's; then its archiving fails and recovers, alerted."""
    s = stand
    prod = deployed(client, s, "Production", "production")
    wait_running(client, s, prod)
    assert psql(s, prod, "SHOW archive_mode") == "on"
    assert psql(s, prod, "SHOW archive_timeout") == "30s"

    # 1. A finished WAL file in storage, as the database wrote it.
    set_notes(s, prod, ROWS)
    name = _switched(s, prod)
    row = wait_for(lambda: _stored_file(name), timeout=60, what=f"{name} in storage",
                   detail=lambda: wal_archive(client, s, prod))
    segment = zstandard.ZstdDecompressor().decompress(stored(s, row.key),
                                                      max_output_size=SEGMENT_SIZE)
    system_id = psql(s, prod, "SELECT system_identifier FROM pg_control_system()")
    magic, = struct.unpack_from("<H", segment, 0)
    sysid, = struct.unpack_from("<Q", segment, 24)  # XLogLongPageHeaderData.xlp_sysid
    assert (len(segment), magic, str(sysid)) == (SEGMENT_SIZE, WAL_MAGIC_15, system_id)
    assert row.name == f"{system_id}/{name}.zst"
    assert b"order 200" in segment  # the rows written before the switch
    assert not (s.root / prod / "wal" / name).exists()  # shipped: gone from the spool
    shown = wait_for(lambda: (a := wal_archive(client, s, prod))["status"] == "archiving" and a,
                     timeout=60, what="the agent's report")
    assert shown["files"] >= 1 and shown["newest_file"] >= name and shown["lag_seconds"] < 60

    # 2. A backup's base and the archive, recovered to a point in time.
    set_notes(s, prod, [(1, "T1")])
    done = completed_backup(client, s, prod)
    backup = Backup.get_by_id(done["id"])
    base = backup.manifest["base"]
    assert base["object"] == "base.tar.zst" and base["size"] == backup.parts["base.tar.zst"]["size"]
    assert base["system_identifier"] == system_id
    assert "a base backup of the cluster" in task_log(client, s, prod, str(backup.task_id))
    psql(s, prod, "INSERT INTO notes VALUES (2, 'T2')")
    time.sleep(1.2)
    between = psql(s, prod, "SELECT now()")
    time.sleep(1.2)
    psql(s, prod, "INSERT INTO notes VALUES (3, 'T3')")
    last = _switched(s, prod)
    wait_for(lambda: _stored_file(last), timeout=60, what=f"{last} in storage")
    assert _recovered(s, tmp_path, backup, between) == [1, 2]
    if s.kind == "s3":
        return  # the failure below is the database's, whatever the storage

    # 3. PostgreSQL can no longer write the spool: its archive_command fails, and says so.
    spool = s.root / prod / "wal"
    spool.chmod(0o500)
    try:
        set_notes(s, prod, ROWS[:10])
        failing = _switched(s, prod)
        shown = wait_for(lambda: (a := wal_archive(client, s, prod))["status"] == "failing" and a,
                         timeout=90, what="the archiving failing")
        assert f"archive_command failed on {failing}" in shown["error_message"]
        assert wal.watch() == 1
        alert = Event.get(Event.name == "backup.archiving_failed")
        assert alert.data["environment_id"] == prod
    finally:
        spool.chmod(0o700)
    # PostgreSQL tries again on its own; the file arrives and the alert ends.
    wait_for(lambda: _stored_file(failing), timeout=120, what=f"{failing} in storage")
    wait_for(lambda: wal_archive(client, s, prod)["status"] == "archiving", timeout=60,
             what="the archiving working again")
    assert wal.watch() == 1
    assert Event.select().where(Event.name == "backup.archiving_recovered").count() == 1
