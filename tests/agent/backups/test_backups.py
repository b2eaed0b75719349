"""The agent's backups and restores against the real engine, the local ERP and
PostgreSQL images, and a real HTTP stand-in for the control plane's transfer
API (tests/support/transfer_stand_in.py): rows and files written into a running
environment, backed up, changed, restored, read back."""

import hashlib
import json
import os
import subprocess
import tracemalloc
import urllib.request
import uuid

import pytest

from agent import cli, commands
from agent import status as status_mod
from agent.backups import archive, ondisk, transfer
from agent.backups.backups import Backups, RestoreError
from agent.deploy.commands import PreBackupFailed
from agent.deploy.environments import Environments, erp_address
from agent.status import StatusFile
from tests.support.transfer_stand_in import TransferStandIn
from tests.support.waiting import wait_for

CREDENTIAL = "agt_live_backup-tests"
NOTES = [(1, "invoice 2026/001"), (2, "invoice 2026/002"), (3, "credit note 2026/001")]
BIG = 20 * 1024 * 1024  # incompressible filestore bytes: more than two parts


@pytest.fixture(scope="module")
def env(docker_client, tmp_path_factory, erp_image, postgres_image):
    """One deployed environment with rows in its database and files in its filestore."""
    root = tmp_path_factory.mktemp("srv")
    envs = Environments(docker_client, root=root, health_timeout=60)
    env_id = str(uuid.uuid4())
    envs.deploy({"environment_id": env_id, "erp_image": erp_image,
                 "postgres_image": postgres_image}, lambda *a: None)
    try:
        psql(envs, env_id, "CREATE TABLE notes (id int PRIMARY KEY, body text NOT NULL)")
        set_notes(envs, env_id, NOTES)
        store = root / env_id / "filestore" / "filestore" / "odoo"
        write_files(store, {"ab/abcdef": b"attachment one", "cd/cdef01": b"attachment two",
                            "big/random": os.urandom(BIG)})
        yield envs, env_id, store
    finally:
        envs.destroy(env_id, True, lambda *a: None)


@pytest.fixture
def stand_in(tmp_path):
    server = TransferStandIn(tmp_path / "storage", CREDENTIAL)
    yield server
    server.close()


def psql(envs, env_id, sql):
    db = envs._container(envs._names(env_id)["db"])
    code, out = db.exec_run(["psql", "-X", "-tA", "-U", "odoo", "-d", "odoo",
                             "-v", "ON_ERROR_STOP=1", "-c", sql])
    assert code == 0, out
    return out.decode().strip()


def set_notes(envs, env_id, rows):
    values = ", ".join(f"({i}, '{body}')" for i, body in rows)
    psql(envs, env_id, f"DELETE FROM notes; INSERT INTO notes VALUES {values}")


def notes(envs, env_id):
    out = psql(envs, env_id, "SELECT id, body FROM notes ORDER BY id")
    return [(int(i), body) for i, body in (line.split("|", 1) for line in out.splitlines())]


def write_files(store, files):
    """As the ERP writes them: owned by its user."""
    for name, data in files.items():
        path = store / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        for p in (path, *path.relative_to(store).parents):
            os.chown(store / p, 101, 101)


def files(store):
    return {str(p.relative_to(store)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(store.rglob("*")) if p.is_file()}


def payload(stand_in, env_id):
    backup_id = str(uuid.uuid4())
    return {"environment_id": env_id, "backup_id": backup_id,
            "transfer_url": stand_in.transfer_url(backup_id),
            "objects": ["database.dump", "filestore.tar.zst", "manifest.json"],
            "erp_version": "17.0"}


def dump_copies(envs, env_id):
    """The restore's copies of a dump left in the database container (none once it ends)."""
    db = envs._container(envs._names(env_id)["db"])
    code, out = db.exec_run(["sh", "-c", "ls /tmp/*.dump 2>/dev/null; true"])
    return out.decode().split()


def healthy(envs, env_id):
    address = erp_address(envs.docker, envs._names(env_id)["erp"])
    with urllib.request.urlopen(f"http://{address}/web/health", timeout=10) as r:
        return r.status == 200


def test_backup_then_restore_brings_rows_and_files_back(env, stand_in):
    envs, env_id, store = env
    phases = []
    backups = Backups(envs, CREDENTIAL, lambda **f: phases.append(f.get("phase")))
    before, lines = files(store), []
    job = payload(stand_in, env_id)

    tracemalloc.start()
    try:
        result = backups.backup(job, lambda level, msg: lines.append((level, msg)))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    # The objects are in storage, and what the manifest and result say of them is true.
    manifest = result["manifest"]
    stored = {name: stand_in.path(job["backup_id"], name)
              for name in ("database.dump", "filestore.tar.zst", "manifest.json")}
    for name, path in stored.items():
        data = path.read_bytes()
        assert result["parts"][name] == {"size": len(data),
                                         "sha256": hashlib.sha256(data).hexdigest()}
    assert json.loads(stored["manifest.json"].read_bytes()) == manifest
    assert manifest["format"] == "berth-backup/1" and manifest["backup_id"] == job["backup_id"]
    assert manifest["database"]["object"] == "database.dump"
    assert manifest["database"]["sha256"] == result["parts"]["database.dump"]["sha256"]
    assert manifest["filestore"]["compression"] == "zstd"
    assert manifest["filestore"]["sha256"] == result["parts"]["filestore.tar.zst"]["sha256"]
    assert manifest["filestore"]["raw_size"] >= BIG
    assert manifest["erp_version"] == "17.0" and manifest["pg_version"].startswith("15")
    assert manifest["modules"] == {"base": "17.0"}  # the ERP stand-in's module table
    assert result["verified"] is True
    assert result["total_size"] == result["database_size"] + result["filestore_size"]
    assert result["compressed_size"] == sum(p.stat().st_size for p in stored.values())
    assert any("verified" in msg for _, msg in lines)
    assert "backup: verifying database.dump" in phases

    # The dump is one pg_restore can read, as stored.
    db = envs._names(env_id)["db"]
    with open(stored["database.dump"], "rb") as fh:
        listed = subprocess.run(["docker", "exec", "-i", db, "pg_restore", "--list"], stdin=fh,
                                capture_output=True, text=True)
    assert listed.returncode == 0 and "TABLE DATA public notes" in listed.stdout

    # Bounded memory: no part over 8 MiB, the filestore in several, a small peak.
    assert max(stand_in.part_sizes) <= transfer.PART_SIZE
    assert len(stand_in.part_sizes) >= 5
    assert peak < 16 * 1024 * 1024, peak

    # Change rows and files, then restore.
    set_notes(envs, env_id, [(1, "changed"), (9, "added later")])
    (store / "ab" / "abcdef").unlink()
    write_files(store, {"cd/cdef01": b"rewritten", "ef/new": b"a file added later"})
    changed = files(store)
    safety = payload(stand_in, env_id)
    out = backups.restore({"environment_id": env_id, "backup_id": job["backup_id"],
                           "transfer_url": job["transfer_url"], "safety": safety,
                           "health_timeout": 60}, lambda *a: None)

    assert notes(envs, env_id) == NOTES
    assert files(store) == before
    assert {p.stat().st_uid for p in store.rglob("*")} == {101}
    assert (store.parent.parent).stat().st_uid == 101  # the filestore directory itself
    assert not (store.parent.parent.with_name("filestore.old")).exists()
    assert not (store.parent.parent.with_name("filestore.new")).exists()
    # The previous filestore is deleted in the background.
    wait_for(lambda: not list(store.parent.parent.parent.glob("filestore.trash-*")), timeout=30,
             interval=0.1, what="the previous filestore deleted")
    assert healthy(envs, env_id)
    assert dump_copies(envs, env_id) == []
    assert out["restored_from"] == job["backup_id"] and out["safety"]["verified"] is True
    # The safety backup holds the state the restore replaced.
    assert out["safety"]["manifest"]["backup_id"] == safety["backup_id"]
    for name, part in out["safety"]["parts"].items():
        data = stand_in.path(safety["backup_id"], name).read_bytes()
        assert part["sha256"] == hashlib.sha256(data).hexdigest()
    assert changed != before


def test_a_corrupt_dump_leaves_the_environment_as_it_was(env, stand_in):
    envs, env_id, store = env
    backups = Backups(envs, CREDENTIAL)
    job = payload(stand_in, env_id)
    backups.backup(job, lambda *a: None)
    dump = stand_in.path(job["backup_id"], "database.dump")
    data = dump.read_bytes()
    dump.write_bytes(data[:len(data) // 2] + os.urandom(len(data) - len(data) // 2))

    current_rows = [(1, "kept"), (4, "written after the backup")]
    set_notes(envs, env_id, current_rows)
    write_files(store, {"ef/after": b"written after the backup"})
    current_files = files(store)
    lines = []
    with pytest.raises(RestoreError, match="put back") as failed:
        backups.restore({"environment_id": env_id, "backup_id": job["backup_id"],
                         "transfer_url": job["transfer_url"], "safety": payload(stand_in, env_id),
                         "health_timeout": 60}, lambda level, msg: lines.append((level, msg)))

    # The dump is checked against its manifest before anything of it loads, and its
    # copy in the database container removed.
    assert "database.dump in storage does not match its checksum" in str(failed.value)
    assert dump_copies(envs, env_id) == []
    # The failed command still reports the safety backup it stored and verified.
    assert failed.value.partial_result["safety"]["verified"] is True
    assert notes(envs, env_id) == current_rows
    assert files(store) == current_files
    assert healthy(envs, env_id)
    assert any(level == "error" for level, _ in lines)
    # The dump loads into a database of its own beside the running ERP: a bad one
    # fails there, so the live database was never dropped, nor the ERP stopped.
    assert any("the environment was not touched" in msg for _, msg in lines)
    assert not any(msg.startswith(("stopped ", "rollback:")) for _, msg in lines)
    assert psql(envs, env_id, "SELECT count(*) FROM pg_database "
                              "WHERE datname = 'odoo_restore'") == "0"


def test_a_corrupt_filestore_archive_fails_before_anything_is_touched(env, stand_in):
    envs, env_id, store = env
    backups = Backups(envs, CREDENTIAL)
    job = payload(stand_in, env_id)
    backups.backup(job, lambda *a: None)
    stand_in.path(job["backup_id"], "filestore.tar.zst").write_bytes(b"not an archive")
    rows, current = notes(envs, env_id), files(store)
    erp = envs._container(envs._names(env_id)["erp"])
    started = erp.attrs["State"]["StartedAt"]

    with pytest.raises(RestoreError, match="decompressed"):
        backups.restore({"environment_id": env_id, "backup_id": job["backup_id"],
                         "transfer_url": job["transfer_url"], "safety": payload(stand_in, env_id)},
                        lambda *a: None)
    assert notes(envs, env_id) == rows and files(store) == current
    erp.reload()
    assert erp.attrs["State"]["StartedAt"] == started  # never stopped
    assert not (store.parent.parent.with_name("filestore.new")).exists()


def test_storage_failing_mid_upload_fails_the_backup(env, stand_in):
    envs, env_id, _ = env
    # The dump and the archive upload at once: each part's every attempt fails.
    stand_in.fail_puts = 2 * transfer.PUT_ATTEMPTS
    job = payload(stand_in, env_id)
    with pytest.raises(transfer.TransferError, match="HTTP 500"):
        Backups(envs, CREDENTIAL).backup(job, lambda *a: None)
    assert not stand_in.path(job["backup_id"], "database.dump").exists()


def test_an_object_storage_did_not_keep_as_sent_fails_the_backup(env, stand_in):
    """Completing an upload reads the object back where it is stored: one byte
    changed there and the backup fails, naming the object."""
    envs, env_id, _ = env
    stand_in.mangle.add("filestore.tar.zst")
    job = payload(stand_in, env_id)
    with pytest.raises(transfer.TransferError, match="filestore.tar.zst.*does not match"):
        Backups(envs, CREDENTIAL).backup(job, lambda *a: None)


def test_a_stopped_database_is_started_for_the_dump_and_stopped_again(env, stand_in,
                                                                      docker_client):
    """A stopped environment is backed up (its data is what a redeploy would put at
    risk), and left as it was found."""
    envs, env_id, _ = env
    db = envs._container(envs._names(env_id)["db"])
    db.stop()
    try:
        lines = []
        done = Backups(envs, CREDENTIAL).backup(payload(stand_in, env_id),
                                                lambda level, line: lines.append(line))
        assert done["verified"] is True
        assert any("started" in line and "for the dump" in line for line in lines)
        db.reload()
        assert db.status == "exited"
    finally:
        envs.start(env_id, lambda *a: None)
        envs._wait_db(envs._container(envs._names(env_id)["db"]), lambda *a: None)


def test_a_previous_filestore_left_by_a_stop_is_deleted_at_the_next_start(tmp_path,
                                                                          docker_client):
    trash = tmp_path / "e-1" / "filestore.trash-0123456789abcdef"
    (trash / "ab").mkdir(parents=True)
    (trash / "ab" / "abcdef").write_bytes(b"old")
    (tmp_path / "e-1" / "filestore").mkdir()
    envs = Environments(docker_client, root=tmp_path)
    assert Backups(envs, CREDENTIAL).resume_interrupted(lambda *a: None) == []
    assert not trash.exists() and (tmp_path / "e-1" / "filestore").exists()


def test_status_shows_a_running_backup(tmp_path, monkeypatch):
    status = StatusFile(tmp_path / "status.json")
    status.operation("backup b-1", kind="backup", environment_id="e-1", backup_id="b-1",
                     started_at="2026-11-23T20:00:00Z", phase="backup: database", bytes_done=0)
    status.operation("backup b-1", bytes_done=3 * 1024 * 1024)  # throttled, kept in memory
    status.operation("backup b-1", phase="backup: filestore")
    state = json.loads((tmp_path / "status.json").read_text())
    op = state["operations"]["backup b-1"]
    assert op["phase"] == "backup: filestore" and op["bytes_done"] == 3 * 1024 * 1024
    text = cli._render({**state, "running": True, "environments": {}})
    assert "backup:" in text and "backup b-1: backup: filestore, 3.0 MB" in text
    status.end_operation("backup b-1")
    assert json.loads((tmp_path / "status.json").read_text())["operations"] == {}


@pytest.mark.parametrize("kind", ["zstd", "gzip"])
def test_the_filestore_archive_round_trips(tmp_path, kind):
    source, target = tmp_path / "source", tmp_path / "target"
    write_files(source, {"a/one": b"one" * 1000, "b/c/two": os.urandom(3 * archive.CHUNK)})
    target.mkdir()
    archive.unpack(archive.pack(source, kind), kind, target)
    assert files(target) == files(source)
    assert (target / "b" / "c" / "two").stat().st_uid == 101
    assert archive.raw_size(source) == 3000 + 3 * archive.CHUNK


def test_an_unpack_reads_an_archive_that_arrives_in_odd_pieces(tmp_path):
    """tar reads 1 MiB records (archive.READ_RECORD); a download's pieces reach it
    through the decompressor in any size, and it reblocks them."""
    source, target = tmp_path / "source", tmp_path / "target"
    write_files(source, {"a/one": os.urandom(3 * archive.CHUNK + 7), "b/two": b"two" * 4001,
                         "three": b""})
    data = b"".join(archive.pack(source, "zstd"))
    target.mkdir()

    def pieces():
        at, sizes = 0, (1, 511, 513, 4095, 65537, 1048577)
        for n in range(len(data)):
            if at >= len(data):
                return
            yield data[at:at + sizes[n % len(sizes)]]
            at += sizes[n % len(sizes)]

    archive.unpack(pieces(), "zstd", target)
    assert files(target) == files(source)


def test_the_filestore_archive_keeps_tars_default_records(tmp_path):
    """A backup's archive is written in tar's default 10 KiB records: an agent of an
    earlier release reads it with them, and its tar stops at the archive's end mark;
    padding past a record would leave the decompressor a closed pipe, a failed restore."""
    source, target = tmp_path / "source", tmp_path / "target"
    write_files(source, {"a/one": b"one" * 1000, "b/two": os.urandom(archive.CHUNK)})
    target.mkdir()
    data = b"".join(archive.pack(source, "zstd"))
    comp = subprocess.Popen(["zstd", "-d", "-q", "-c"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)
    tar = subprocess.Popen(["tar", "-C", str(target), "-xf", "-"], stdin=comp.stdout)
    comp.stdout.close()
    try:
        comp.stdin.write(data)
        comp.stdin.close()
    except BrokenPipeError:
        pass
    assert (comp.wait(timeout=60), tar.wait(timeout=60)) == (0, 0)
    assert files(target) == files(source)


def test_an_unpack_names_each_member_it_finished_for_the_early_sync(tmp_path):
    """While tar unpacks, the restore fsyncs each member tar has moved past
    (ondisk.Early): every member is named once; a FIFO, a link to a file outside and
    names outside the target are not opened (a FIFO's open would hang the restore)."""
    source, target, outside = tmp_path / "source", tmp_path / "target", tmp_path / "outside"
    write_files(source, {"a/one": b"one" * 1000, "b/c/two two": os.urandom(3 * archive.CHUNK),
                         "three": b""})
    outside.write_bytes(b"not the filestore's")
    os.mkfifo(source / "a" / "pipe")
    os.mkfifo(tmp_path / "fifo")
    (source / "link").symlink_to(outside)
    target.mkdir()
    named, early = [], ondisk.Early(target)

    def finished(name):
        named.append(name)
        early.finished(name)

    try:
        archive.unpack(archive.pack(source, "zstd"), "zstd", target, finished=finished)
        for name in (b"../fifo", b"../outside", os.fsencode(tmp_path / "fifo"), b"a/missing"):
            early.finished(name)
    finally:
        early.close()  # returns: no thread waits on a FIFO
    assert sorted(named) == sorted([b"./", b"./a/", b"./a/one", b"./a/pipe", b"./b/",
                                    b"./b/c/", b"./b/c/two two", b"./three", b"./link"])
    assert files(target) == files(source)
    ondisk.flush(target)  # the certain pass: files and directories, the FIFO left alone


def test_without_zstd_the_filestore_is_gzipped(env, stand_in, monkeypatch):
    envs, env_id, _ = env
    monkeypatch.setattr(archive, "compression", lambda: "gzip")
    job = payload(stand_in, env_id)
    result = Backups(envs, CREDENTIAL).backup(job, lambda *a: None)
    assert result["manifest"]["filestore"]["object"] == "filestore.tar.gz"
    assert result["manifest"]["filestore"]["compression"] == "gzip"
    assert set(result["parts"]) == {"database.dump", "filestore.tar.gz", "manifest.json"}
    assert stand_in.path(job["backup_id"], "filestore.tar.gz").exists()


class _Config:
    credential = CREDENTIAL


class _Agent:
    """What a command handler uses of the daemon's Agent."""

    def __init__(self, docker_client, status):
        self.docker_client, self.status, self.config = docker_client, status, _Config()

    def docker(self):
        return self.docker_client


def test_the_backup_command_shows_its_progress_in_the_status_file(env, stand_in, docker_client,
                                                                  tmp_path, monkeypatch):
    envs, env_id, _ = env
    monkeypatch.setenv("BERTH_AGENT_ENV_ROOT", str(envs.root))
    monkeypatch.setattr(status_mod, "OPERATION_WRITE_S", 0)  # every byte count written
    seen = []

    class Recording(StatusFile):
        def _write(self):
            seen.append(json.loads(json.dumps(self.state.get("operations") or {})))
            super()._write()

    status = Recording(tmp_path / "status.json")
    job = payload(stand_in, env_id)
    result = commands.run(_Agent(docker_client, status), "backup", job, lambda *a: None)
    assert result["verified"] is True
    key = f"backup {job['backup_id']}"
    phases = [ops[key]["phase"] for ops in seen if key in ops]
    assert phases[0] == "starting" and "backup: filestore" in phases
    assert any(ops[key]["bytes_done"] > 0 for ops in seen if key in ops)
    assert json.loads((tmp_path / "status.json").read_text())["operations"] == {}


def test_a_restore_cut_short_by_an_agent_stop_is_rolled_back_when_it_returns(env, stand_in,
                                                                             monkeypatch):
    envs, env_id, store = env
    job = payload(stand_in, env_id)
    Backups(envs, CREDENTIAL).backup(job, lambda *a: None)
    current_rows = [(5, "written after the backup")]
    set_notes(envs, env_id, current_rows)
    write_files(store, {"ef/late": b"written after the backup"})
    current_files = files(store)

    def killed(self, n, log):  # the agent dies where the ERP would start again
        raise SystemExit("killed")

    monkeypatch.setattr(Backups, "_start_erp", killed)
    with pytest.raises(SystemExit):
        Backups(envs, CREDENTIAL).restore(
            {"environment_id": env_id, "backup_id": job["backup_id"],
             "transfer_url": job["transfer_url"], "safety": payload(stand_in, env_id)},
            lambda *a: None)
    journal = envs.root / env_id / ".restore.json"
    assert journal.exists() and CREDENTIAL not in journal.read_text()
    assert notes(envs, env_id) != current_rows  # the backup's rows were loaded
    monkeypatch.undo()

    lines = []
    assert Backups(envs, CREDENTIAL).resume_interrupted(
        lambda level, msg: lines.append((level, msg))) == [env_id]
    assert notes(envs, env_id) == current_rows
    assert files(store) == current_files
    assert healthy(envs, env_id) and not journal.exists()
    assert not (store.parent.parent.with_name("filestore.old")).exists()


def test_a_backup_restores_into_another_environment(env, stand_in, erp_image, postgres_image):
    """How a staging copy of production is made."""
    envs, source_id, store = env
    job = payload(stand_in, source_id)
    Backups(envs, CREDENTIAL).backup(job, lambda *a: None)
    source_rows, source_files = notes(envs, source_id), files(store)
    target_id = str(uuid.uuid4())
    envs.deploy({"environment_id": target_id, "erp_image": erp_image,
                 "postgres_image": postgres_image}, lambda *a: None)
    try:
        out = Backups(envs, CREDENTIAL).restore(
            {"environment_id": target_id, "backup_id": job["backup_id"],
             "transfer_url": job["transfer_url"], "safety": payload(stand_in, target_id)},
            lambda *a: None)
        assert out["safety"]["manifest"]["environment_id"] == target_id
        assert notes(envs, target_id) == source_rows
        assert files(envs.root / target_id / "filestore" / "filestore" / "odoo") == source_files
        assert healthy(envs, target_id)
    finally:
        envs.destroy(target_id, True, lambda *a: None)


def _erp_container(envs, env_id):
    erp = envs._container(envs._names(env_id)["erp"])
    return erp.id, erp.attrs["State"]["StartedAt"]


def test_a_deploy_whose_pre_deploy_backup_fails_touches_nothing(env, stand_in, docker_client,
                                                                erp_image, postgres_image,
                                                                tmp_path, monkeypatch):
    envs, env_id, store = env
    monkeypatch.setenv("BERTH_AGENT_ENV_ROOT", str(envs.root))
    before, rows = _erp_container(envs, env_id), notes(envs, env_id)
    stand_in.fail_puts = 2 * transfer.PUT_ATTEMPTS  # both parts' every attempt
    job = {"environment_id": env_id, "erp_image": erp_image, "postgres_image": postgres_image,
           "pre_backup": payload(stand_in, env_id)}
    agent = _Agent(docker_client, StatusFile(tmp_path / "status.json"))
    with pytest.raises(PreBackupFailed, match="nothing was deployed") as failed:
        commands.run(agent, "deploy", job, lambda *a: None)
    assert failed.value.partial_result == {"untouched": True}  # the daemon reports it
    assert _erp_container(envs, env_id) == before and healthy(envs, env_id)
    assert notes(envs, env_id) == rows


def test_a_redeploy_takes_its_pre_deploy_backup_first(env, stand_in, docker_client, erp_image,
                                                     postgres_image, tmp_path, monkeypatch):
    envs, env_id, store = env
    monkeypatch.setenv("BERTH_AGENT_ENV_ROOT", str(envs.root))
    rows, lines = notes(envs, env_id), []
    pre = payload(stand_in, env_id)
    job = {"environment_id": env_id, "erp_image": erp_image, "postgres_image": postgres_image,
           "pre_backup": pre}
    agent = _Agent(docker_client, StatusFile(tmp_path / "status.json"))
    result = commands.run(agent, "deploy", job, lambda level, msg: lines.append(msg))
    assert result["pre_backup"]["verified"] is True and result["erp_container"]
    assert stand_in.path(pre["backup_id"], "database.dump").stat().st_size > 0
    taken = next(i for i, m in enumerate(lines) if "pre-deploy backup" in m and "taken" in m)
    assert taken < next(i for i, m in enumerate(lines) if "environment is up" in m)
    assert healthy(envs, env_id) and notes(envs, env_id) == rows


def test_a_recovery_left_by_a_stop_is_removed_at_the_next_start(tmp_path, docker_client,
                                                                 postgres_image):
    """A restore to a point in time cut short: its throwaway database (no network) and
    its folder go when the agent starts again."""
    envs = Environments(docker_client, root=tmp_path)
    env_id = f"e-{uuid.uuid4().hex[:8]}"
    work = tmp_path / env_id / "pitr" / "pgdata"
    work.mkdir(parents=True)
    left = docker_client.containers.run(postgres_image, ["sleep", "600"], detach=True,
                                        name=f"{envs._names(env_id)['db']}-pitr",
                                        network_mode="none")
    try:
        lines = []
        assert Backups(envs, CREDENTIAL).resume_interrupted(
            lambda level, msg: lines.append(msg)) == []
        assert not (tmp_path / env_id / "pitr").exists()
        assert envs._container(left.name) is None
        assert any(env_id in line for line in lines)
    finally:
        if envs._container(left.name) is not None:
            left.remove(force=True)
