"""Odoo's own backup zip (agent/backups/odoo_zip.py) moved through the transfer API,
both ways.

Export (the `export` command): a completed backup's objects are read from
storage and written back as one more object of that backup,
`odoo-export.zip`: the custom-format dump becomes plain SQL through
`pg_restore -f -` in the environment's PostgreSQL container, the filestore
archive is decompressed and its database's directory copied under
`filestore/`. Everything streams: at most a part (transfer.PART_SIZE) and a few
chunks are in memory, nothing is staged on the server's disk.

Import (an import source of the `restore` command): the uploaded object
(Odoo's zip, a custom-format `.dump` or a plain `.sql`) is read through a
RangeFile over its download URL and inspected before anything is touched;
then the restore loads its dump.sql with psql (or the dump with pg_restore)
and extracts its filestore safely."""

import contextlib
import os
import queue
import shutil
import socket
import threading

from agent.backups import archive, exec_stream, objects, odoo_zip
from agent.backups.odoo_zip import ImportRefused, RangeFile
from agent.backups.transfer import Checked
from agent.errors import AgentError
from protocol import filestore_objects as fo
from protocol.errors import AgentErrorCode

EXPORT_OBJECT = "odoo-export.zip"
FILESTORE_PREFIX = "filestore/odoo/"  # the database's filestore in the ERP's data directory
BUFFER = 1 << 20  # zip bytes gathered before they are handed to the uploader
QUEUED = 4  # buffers waiting for the uploader at most


class ExportError(AgentError):
    code = AgentErrorCode.EXPORT_FAILED


# --- export -------------------------------------------------------------------

def export(backups, payload, log):
    """Write `odoo-export.zip` of the backup `payload["backup_id"]`; returns
    {object, size, sha256, dump_size, files, filestore_size, skipped}."""
    n = backups.envs._names(payload["environment_id"])
    db = backups._db_container(n)
    transfer = backups._transfer(payload["transfer_url"])
    manifest = backups._manifest(transfer)
    name = payload.get("object") or EXPORT_OBJECT
    log("info", f"exporting backup {payload['backup_id']} as Odoo's zip ({name})")
    backups.progress(phase="export: writing the zip", bytes_done=0)
    dump = _plain_sql(backups.api, db.id, _checked(transfer, manifest["database"]))
    fs = manifest["filestore"]
    if fs.get("layout") == fo.LAYOUT:  # composed from the project's objects
        tar = objects.tar_stream(transfer, fs)
    else:
        kind = fs.get("compression") or ("gzip" if fs["object"].endswith(".gz") else "zstd")
        tar = archive.Decompressed(_checked(transfer, fs), kind, ExportError)
    summary = {}

    def write(out):
        version = payload.get("erp_version") or manifest.get("erp_version")
        summary.update(odoo_zip.write_odoo_zip(
            out, dump, tar, {**manifest, "db_name": "odoo", "version": version},
            prefix=FILESTORE_PREFIX))

    try:
        stored = transfer.upload(name, _produced(write), backups._counter())
    finally:
        tar.close()
    log("info", f"uploaded {name}: {stored['size']} bytes ({summary['files']} files, "
                f"{summary['dump_size']} bytes of SQL)")
    return {"object": name, **stored, **summary}


def _checked(transfer, expected):
    """An object's bytes from storage; at their end, their size and SHA-256
    compared with the backup's manifest (raising, so the zip is cut short)."""
    chunks = Checked(transfer.download(expected["object"]))
    yield from chunks
    if (chunks.size, chunks.sha256) != (expected.get("size"), expected.get("sha256")):
        raise ExportError(f"{expected['object']} in storage does not match its checksum")


def _plain_sql(api, container_id, custom_dump):
    """pg_restore's plain SQL of a custom-format dump, made in the container: the
    dump goes in on a thread while the SQL comes out; a failure on either side
    raises at the end (so that the zip is cut short, never finished)."""
    ex = exec_stream.Exec(api, container_id, ["pg_restore", "--no-owner", "-f", "-"], stdin=True,
                          what="pg_restore -f -")
    failed = []

    def feed():
        try:
            for chunk in custom_dump:
                ex.raw.sendall(chunk)
        except BaseException as exc:  # noqa: BLE001  (reported by the reader)
            failed.append(exc)
        with contextlib.suppress(OSError):
            ex.raw.shutdown(socket.SHUT_WR)

    feeder = threading.Thread(target=feed, name="berth-export-dump", daemon=True)
    feeder.start()
    try:
        yield from ex.frames()
    except OSError as exc:
        raise exec_stream.ExecFailed(f"pg_restore -f -: the engine's stream broke: {exc}") from exc
    finally:
        ex.close()
        feeder.join(exec_stream.IDLE_TIMEOUT)
    if failed:
        raise ExportError(f"reading the backup's dump failed: {failed[0]}")
    ex.check()


def _produced(write):
    """The bytes `write(out)` writes, as chunks for Transfer.upload: the writer
    runs on a thread, a few buffers ahead at most. Its failure raises here,
    before the upload is completed; the upload's failure stops the writer."""
    chunks, stop, done = queue.Queue(QUEUED), threading.Event(), object()

    class Out:
        def __init__(self):
            self.buf = bytearray()

        def write(self, data):
            if stop.is_set():
                raise ExportError("the upload stopped")
            self.buf += data
            if len(self.buf) >= BUFFER:
                self.flush()
            return len(data)

        def flush(self):
            if self.buf:
                chunks.put(bytes(self.buf))
                self.buf = bytearray()

    def run():
        out = Out()
        try:
            write(out)
            out.flush()
            chunks.put(done)
        except BaseException as exc:  # noqa: BLE001  (raised on the reading side)
            chunks.put(exc)

    writer = threading.Thread(target=run, name="berth-export-zip", daemon=True)
    writer.start()
    try:
        while (item := chunks.get()) is not done:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while writer.is_alive():  # unblock a writer waiting on a full queue
            with contextlib.suppress(queue.Empty):
                chunks.get(timeout=0.1)
        writer.join()


# --- import -------------------------------------------------------------------

class ImportSource:
    """An uploaded import, as a restore's source. Built (and so inspected) before
    the restore's safety backup: a refused upload raises ImportRefused, its
    code in the message, and nothing of the environment is touched."""

    def __init__(self, backups, spec, erp_version, log):
        self.backups, self.spec = backups, spec
        self.transfer = backups._transfer(spec["transfer_url"])
        self.object = spec.get("object") or "upload"
        self.file = RangeFile(self.transfer.download_url(self.object))
        try:
            self.info = odoo_zip.inspect_import(self.file, erp_version)
        except ImportRefused as exc:
            self.file.close()
            raise ImportRefused(f"{exc.code}: {exc}") from exc
        log("info", f"the import is {_describe(self.info)}")

    @property
    def id(self):
        return self.spec.get("import_id") or self.object

    @property
    def name(self):
        return f"import {self.id}"

    def unpack(self, env_dir, log):
        """A zip's filestore extracted into filestore.new (the ERP's data
        directory), to be swapped in; a bare dump brings none (the current
        filestore stays)."""
        if self.info["kind"] != "zip":
            log("info", "a bare dump brings no filestore: the current one stays")
            return
        log("info", "extracting the import's filestore beside the current one")
        new, live = env_dir / "filestore.new", env_dir / "filestore"
        shutil.rmtree(new, ignore_errors=True)
        st = os.stat(live) if live.exists() else None
        uid, gid = (st.st_uid, st.st_gid) if st else (None, None)
        new.mkdir()
        (new / "filestore").mkdir()
        if st is not None:
            for path in (new, new / "filestore"):
                os.chown(path, uid, gid)
                os.chmod(path, st.st_mode & 0o7777)
        try:
            with odoo_zip.open_zip(self.file) as zf:
                odoo_zip.extract_filestore(zf, new / FILESTORE_PREFIX, uid, gid)
        except BaseException:
            shutil.rmtree(new, ignore_errors=True)
            raise

    def load(self, db, log):
        """The database recreated, then the import's dump loaded into it."""
        backups, kind = self.backups, self.info["kind"]
        backups.progress(phase="import: loading the database", bytes_done=0)
        backups._recreate_database(db)
        log("info", f"import: loading the database from the {kind}")
        if kind == "dump":
            cmd, chunks = [*_PG_RESTORE], self.transfer.download(self.object)
        elif kind == "sql":
            cmd, chunks = [*_PSQL], self.transfer.download(self.object)
        else:
            zf = odoo_zip.open_zip(self.file)
            cmd, chunks = [*_PSQL], _closing(odoo_zip.iter_member(zf, odoo_zip.DUMP), zf)
        counted = Checked(chunks, backups._counter())
        exec_stream.Exec(backups.api, db.id, cmd, stdin=True, what=cmd[0]).feed(counted)
        log("info", f"import: the database is loaded ({counted.size} bytes of dump)")

    def close(self):
        self.file.close()


_PSQL = ["psql", "-X", "-q", "-U", "odoo", "-d", "odoo", "-v", "ON_ERROR_STOP=1",
         "-o", "/dev/null"]
_PG_RESTORE = ["pg_restore", "-U", "odoo", "-d", "odoo", "--no-owner", "--exit-on-error"]


def _closing(chunks, zf):
    try:
        yield from chunks
    finally:
        zf.close()


def _describe(info):
    if info["kind"] != "zip":
        return f"a {'custom-format dump' if info['kind'] == 'dump' else 'plain SQL dump'} " \
               f"of {info['size']} bytes"
    return (f"an Odoo backup zip (version {info.get('major_version') or 'unknown'}): "
            f"{info['dump_size']} bytes of SQL, {info['files']} files")
