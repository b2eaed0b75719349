"""Odoo's backup zip through the agent, both ways, against the real engine, the
local ERP and PostgreSQL images and the transfer API's stand-in: a backup
exported as the zip, that zip imported into a second environment, a zip made
by hand imported, bare dumps imported, and hostile uploads refused with the
environment untouched (no safety backup taken, nothing stopped)."""

import io
import json
import subprocess
import tarfile
import uuid
import zipfile

import pytest

from agent.backups import odoo_zip
from agent.backups.backups import Backups
from agent.backups.odoo_transfer import EXPORT_OBJECT, export
from tests.agent.backups import test_backups
from tests.agent.backups.test_backups import CREDENTIAL, NOTES, files, healthy, notes, payload, psql

env, stand_in = test_backups.env, test_backups.stand_in  # the fixtures, shared

QUIET = lambda *a: None  # noqa: E731


@pytest.fixture
def target(env, erp_image, postgres_image):
    """A second environment of the same server, with rows and files of its own."""
    envs = env[0]
    target_id = str(uuid.uuid4())
    envs.deploy({"environment_id": target_id, "erp_image": erp_image,
                 "postgres_image": postgres_image}, QUIET)
    try:
        psql(envs, target_id, "CREATE TABLE notes (id int PRIMARY KEY, body text NOT NULL);"
                              "INSERT INTO notes VALUES (9, 'the target''s own')")
        store = envs.root / target_id / "filestore" / "filestore" / "odoo"
        test_backups.write_files(store, {"own": b"the target's own file"})
        yield target_id, store
    finally:
        envs.destroy(target_id, True, QUIET)


def exported(envs, env_id, stand_in):
    """A backup of the environment, exported; the zip's bytes and the result."""
    job = payload(stand_in, env_id)
    backups = Backups(envs, CREDENTIAL)
    backups.backup(job, QUIET)
    result = export(backups, {**job, "object": EXPORT_OBJECT}, QUIET)
    return stand_in.path(job["backup_id"], EXPORT_OBJECT), result


def import_upload(envs, stand_in, env_id, data, lines=None):
    """Restore the environment from `data` uploaded as an import."""
    import_id = str(uuid.uuid4())
    path = stand_in.path(import_id, "upload")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    job = {"environment_id": env_id, "erp_version": "17.0",
           "import": {"import_id": import_id, "transfer_url": stand_in.transfer_url(import_id),
                      "object": "upload"},
           "safety": payload(stand_in, env_id)}
    log = (lambda level, msg: lines.append((level, msg))) if lines is not None else QUIET
    return Backups(envs, CREDENTIAL).restore(job, log), job


def test_export_then_import_into_another_environment(env, stand_in, target, tmp_path):
    envs, source_id, store = env
    zip_path, result = exported(envs, source_id, stand_in)

    # A whole zip, of Odoo's shape, streamed: what the agent uploaded is what it says.
    check = subprocess.run(["unzip", "-t", str(zip_path)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert result["size"] == zip_path.stat().st_size and result["files"] == len(files(store))
    with zipfile.ZipFile(zip_path) as zf:
        manifest = json.loads(zf.read("manifest.json"))
        names = set(zf.namelist())
        assert zf.read("dump.sql").startswith(b"--\n-- PostgreSQL database dump")
    assert manifest["odoo_dump"] == "1" and manifest["db_name"] == "odoo"
    assert manifest["version"] == "17.0" and manifest["major_version"] == "17.0"
    assert manifest["pg_version"] and "modules" in manifest
    assert {f"filestore/{name}" for name in files(store)} <= names
    assert names - {"dump.sql", "manifest.json"} == {f"filestore/{name}" for name in files(store)}

    target_id, target_store = target
    out, job = import_upload(envs, stand_in, target_id, zip_path.read_bytes())
    assert out["restored_from"] == job["import"]["import_id"]
    assert out["safety"]["verified"] is True  # the target's own data, kept in case
    assert notes(envs, target_id) == notes(envs, source_id)
    assert files(target_store) == files(store)
    assert healthy(envs, target_id)


def test_a_zip_made_by_hand_is_imported(env, stand_in, target):
    envs = env[0]
    target_id, target_store = target
    sql = ("--\n-- PostgreSQL database dump\n--\n\n"
           "CREATE TABLE notes (id int PRIMARY KEY, body text NOT NULL);\n"
           "INSERT INTO notes VALUES (1, 'from elsewhere'), (2, 'and more');\n")
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w") as t:
        for name, data in {"filestore/odoo/aa/aa11": b"one", "filestore/odoo/bb/bb22": b"two"}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    tar.seek(0)
    out = io.BytesIO()
    odoo_zip.write_odoo_zip(out, [sql.encode()], tar,
                               {"version": "17.0", "pg_version": "16", "modules": {"base": "17.0.1.3"}},
                               prefix="filestore/odoo/")
    import_upload(envs, stand_in, target_id, out.getvalue())
    assert notes(envs, target_id) == [(1, "from elsewhere"), (2, "and more")]
    assert set(files(target_store)) == {"aa/aa11", "bb/bb22"}
    assert (target_store / "aa" / "aa11").stat().st_uid == 101  # the ERP's user owns them
    assert healthy(envs, target_id)


def test_bare_dumps_are_imported_and_the_filestore_stays(env, stand_in, target):
    envs, source_id, _ = env
    target_id, target_store = target
    db = envs._container(envs._names(source_id)["db"])
    code, custom = db.exec_run(["pg_dump", "-Fc", "-U", "odoo", "odoo"])
    assert code == 0
    import_upload(envs, stand_in, target_id, custom)
    assert notes(envs, target_id) == NOTES and set(files(target_store)) == {"own"}

    code, plain = db.exec_run(["pg_dump", "-U", "odoo", "--no-owner", "odoo"])
    assert code == 0
    psql(envs, target_id, "DELETE FROM notes")
    import_upload(envs, stand_in, target_id, plain)
    assert notes(envs, target_id) == NOTES and healthy(envs, target_id)


def _zip(members):
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return out.getvalue()


DUMP = b"--\n-- PostgreSQL database dump\n--\nDROP TABLE notes;\n"
HOSTILE = {
    "path traversal": (_zip({"dump.sql": DUMP, "filestore/../../../etc/cron.d/x": b"evil"}),
                       "import_unsafe_member"),
    "zip bomb": (_zip({"dump.sql": DUMP, "filestore/zeros": bytes(64 << 20)}), "import_zip_bomb"),
    "another major version": (_zip({"dump.sql": DUMP, "manifest.json": json.dumps(
        {"odoo_dump": "1", "version": "16.0", "major_version": "16.0"})}),
        "import_version_mismatch"),
    "not a dump": (_zip({"dump.sql": b"DROP TABLE notes;\n"}), "import_not_a_dump"),
    "not an import at all": (b"#!/bin/sh\nrm -rf /\n", "import_unrecognised"),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_a_hostile_import_is_refused_with_the_environment_untouched(env, stand_in, case):
    envs, env_id, store = env
    data, code = HOSTILE[case]
    rows, before = notes(envs, env_id), files(store)
    erp = envs._container(envs._names(env_id)["erp"])
    started = erp.attrs["State"]["StartedAt"]
    lines = []
    with pytest.raises(odoo_zip.ImportRefused, match=code):
        import_upload(envs, stand_in, env_id, data, lines)
    assert notes(envs, env_id) == rows and files(store) == before
    erp.reload()
    assert erp.attrs["State"]["StartedAt"] == started  # never stopped
    assert not any("safety" in msg for _, msg in lines)  # refused before the safety backup
    assert not (store.parent.parent.with_name("filestore.new")).exists()
    assert healthy(envs, env_id)


@pytest.mark.parametrize("damaged", ["database.dump", "filestore.tar.zst"])
def test_an_export_of_a_damaged_backup_uploads_nothing(env, stand_in, damaged):
    envs, env_id, _ = env
    job = payload(stand_in, env_id)
    backups = Backups(envs, CREDENTIAL)
    backups.backup(job, QUIET)
    path = stand_in.path(job["backup_id"], damaged)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(Exception, match="checksum|failed|decompressed"):
        export(backups, {**job, "object": EXPORT_OBJECT}, QUIET)
    assert not stand_in.path(job["backup_id"], EXPORT_OBJECT).exists()  # never completed
