"""Taking a backup of an environment (the `backup` command's work; restores are
backups.py's).

Streamed to storage through the transfer API: the database (`pg_dump -Fc` in the
environment's PostgreSQL container) and the filestore (the project's objects,
filestore_objects; or a compressed tar from a server whose control plane asks for
it) at once, then, when the environment archives its WAL, a base for it
(`pg_basebackup`), then a manifest. Completing each upload has the control
plane read the object back from storage and compare its size and SHA-256 with
what was sent (the bytes do not travel back here); the stored dump's table of
contents is then read by `pg_restore --list`. Nothing is staged on the server's
disk and at most two parts (transfer.PART_SIZE each) are held in memory."""

import contextlib
import json
import subprocess
import threading
import time

from agent.backups import archive, exec_stream, objects
from agent.backups.databases import DB
from agent.backups.transfer import Buffers
from agent.deploy import archiving
from agent.errors import AgentError, engine_errors
from agent.status import now_iso
from protocol import filestore_objects as fo
from protocol import wal
from protocol.errors import AgentErrorCode

FORMAT = "berth-backup/1"
OBJECTS = {"database": "database.dump", "manifest": "manifest.json"}


class BackupError(AgentError):
    code = AgentErrorCode.BACKUP_FAILED


@contextlib.contextmanager
def database_up(envs, n, log, label):
    """The environment's database container, running while a backup reads it: a
    stopped environment's (its ERP stays stopped) is started for the dump and
    stopped again after, so the environment is left as it was found."""
    db = envs._container(n["db"])
    if db is None:
        raise BackupError("the environment has no database container")
    started = db.status != "running"
    if started:
        with engine_errors():
            db.start()
        log("info", f"{label}: started {db.name} for the dump (the environment is stopped)")
        envs._wait_db(db, log)
    try:
        yield db
    finally:
        if started:
            with engine_errors():
                db.stop(timeout=20)
            log("info", f"{label}: stopped {db.name} again")

def take(backups, payload, n, db, log, label):
    env_id, backup_id = payload["environment_id"], payload["backup_id"]
    transfer = backups._transfer(payload["transfer_url"])
    kind = archive.compression()
    names = {**OBJECTS, "filestore": "filestore" + archive.SUFFIX[kind]}
    started, parts = now_iso(), {}

    counters = _Summed(backups.progress)
    # The two parts upload at once from one pool: the memory bound of one upload.
    pool = Buffers(2, transfer.part_size)

    def upload(what, chunks):
        backups.progress(phase=f"{label}: {what}")
        parts[names[what]] = transfer.upload(names[what], chunks, counters.new(), pool)
        log("info", f"uploaded {names[what]}: {parts[names[what]]['size']} bytes, "
                    f"sha256 {parts[names[what]]['sha256']}, as read back from storage")

    filestore = n["dir"] / "filestore"
    if not filestore.is_dir():
        raise BackupError(f"the environment has no filestore directory ({filestore.name})")
    sizes, facts = {}, {}

    def database():
        log("info", f"{label} {backup_id}: dumping the database")
        upload("database", exec_stream.Exec(backups.api, db.id,
                                            ["pg_dump", "-Fc", "-U", DB, DB],
                                            what="pg_dump").output())
        _list_dump(backups, transfer, db, names["database"], label)
        sizes["database"] = int(backups._psql(db, f"SELECT pg_database_size('{DB}')"))
        facts.update(pg_version=_pg_version(backups, db), modules=_modules(backups, db))
        if archiving.read(n["dir"]):  # its WAL is archived: a base to replay it onto
            facts["base"] = _base_backup(backups, db, upload, names, label, backup_id, log)

    def files():
        if payload.get("filestore_layout") == fo.LAYOUT:  # the project's objects, once
            log("info", f"{label} {backup_id}: the filestore's new objects ({kind})")
            backups.progress(phase=f"{label}: filestore objects")
            layout = objects.back_up(
                transfer, filestore, n["dir"] / objects.HASHES, kind,
                lambda name, chunks, deferred=False: transfer.upload(
                    name, chunks, counters.new(), pool, deferred=deferred), log)
            names["filestore"] = layout["object"]
            parts[layout["object"]] = {k: layout[k] for k in ("size", "sha256")}
            sizes.update(filestore=layout["raw_size"], filestore_layout=layout)
            log("info", f"uploaded {layout['new_objects']} new objects in "
                        f"{len(layout['packs'])} pack(s) ({layout['uploaded_bytes']} bytes) "
                        f"and the map of {layout['files']} files, as read back from storage")
            return
        log("info", f"{label} {backup_id}: archiving the filestore ({kind})")
        sizes["filestore"] = archive.raw_size(filestore)
        upload("filestore", archive.pack(filestore, kind))

    # The dump is the database container's work and the archive the agent's:
    # both at once.
    backups.progress(phase=f"{label}: database", bytes_done=0)
    both(database, files)
    for what in ("database", "filestore"):  # in this order, whichever finished first
        parts[names[what]] = parts.pop(names[what])
    db_size, fs_size = sizes["database"], sizes["filestore"]
    manifest = {
        "format": FORMAT, "environment_id": env_id, "backup_id": backup_id,
        "erp_version": payload.get("erp_version"), "pg_version": facts["pg_version"],
        "git_commit": payload.get("git_commit") or _commit(n["dir"] / "addons"),
        "addon_commits": payload.get("addon_commits") or _addon_commits(n["dir"] / "addons"),
        "modules": facts["modules"],
        "database": {"object": names["database"], **parts[names["database"]],
                     "raw_size": db_size},
        "filestore": sizes.get("filestore_layout") or {
            "object": names["filestore"], **parts[names["filestore"]], "raw_size": fs_size,
            "compression": kind},
        "started_at": started, "finished_at": now_iso()}
    if facts.get("base"):
        manifest["base"] = {"object": names["base"], **parts[names["base"]], **facts["base"]}
    upload("manifest", [json.dumps(manifest, indent=2, sort_keys=True).encode()])
    log("info", f"{label}: verified {', '.join(parts)} in storage")
    return {"database_size": db_size, "filestore_size": fs_size,
            "total_size": db_size + fs_size,
            "compressed_size": sum(p["size"] for p in parts.values())
            + manifest["filestore"].get("uploaded_bytes", 0),
            "verified": True, "manifest": manifest, "parts": parts}

def _base_backup(backups, db, upload, names, label, backup_id, log):
    """A physical copy of the environment's cluster (`pg_basebackup`, a tar
    compressed by the server), for its archived WAL to be replayed onto. It
    needs the WAL from before it began (`start_lsn`) to after it ended
    (`end_lsn`); PostgreSQL has those archived when it returns."""
    log("info", f"{label} {backup_id}: a base backup of the cluster, for its archived WAL")
    names["base"] = wal.BASE_OBJECT
    start = backups._psql(db, "SELECT pg_current_wal_lsn()")
    upload("base", exec_stream.Exec(backups.api, db.id, [
        "pg_basebackup", "-U", DB, "-D", "-", "-F", "tar", "-X", "none", "-c", "fast",
        "--no-manifest", "--compress=server-zstd:1"], what="pg_basebackup").output())
    row = backups._psql(db, "SELECT pg_current_wal_lsn(), system_identifier, timeline_id "
                         "FROM pg_control_system(), pg_control_checkpoint()")
    end, system_id, timeline = row.split("|")
    return {"start_lsn": start, "end_lsn": end, "system_identifier": system_id,
            "timeline": int(timeline), "compression": "zstd"}

def _list_dump(backups, transfer, db, name, label):
    """The stored dump's table of contents read by `pg_restore --list`, to know
    that it is a dump; the download stops where pg_restore stops reading."""
    backups.progress(phase=f"{label}: verifying {name}")
    exec_stream.Exec(backups.api, db.id, ["pg_restore", "--list"], stdin=True,
                     what="pg_restore --list of the stored dump").feed(
        transfer.download(name), to_end=False)

def _pg_version(backups, db):
    version = backups._psql(db, "SHOW server_version")
    return version.split()[0] if version else None

def _modules(backups, db):
    """{name: version} of the installed modules, or None before the ERP made its tables."""
    if backups._psql(db, "SELECT to_regclass('ir_module_module') IS NOT NULL") != "t":
        return None
    rows = backups._psql(db, "SELECT name, coalesce(latest_version, '') FROM ir_module_module"
                          " WHERE state = 'installed' ORDER BY name")
    return dict(line.split("|", 1) for line in rows.splitlines() if "|" in line)


def both(first, second):
    """`second` on a thread while `first` runs here; both run to their end, then
    the error that happened first, if any, is raised (a storage cut fails both)."""
    failed = []

    def run(part):
        try:
            part()
        except BaseException as exc:  # re-raised below, in the caller's thread
            failed.append((time.monotonic(), exc))

    thread = threading.Thread(target=run, args=(second,), name="berth-both",
                              daemon=True)
    thread.start()
    run(first)
    thread.join()
    if failed:
        raise min(failed, key=lambda f: f[0])[1]


class _Summed:
    """One `bytes_done` for `berth-agent status` from several streams' own counts."""

    def __init__(self, progress):
        self.progress, self.done, self.lock = progress, [], threading.Lock()

    def new(self):
        with self.lock:
            self.done.append(0)
            i = len(self.done) - 1

        def report(done):
            with self.lock:
                self.done[i] = done
                total = sum(self.done)
            self.progress(bytes_done=total)
        return report


def _git_head(path):
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=30)
        if out.returncode == 0:
            return out.stdout.strip()
    return None


def _commit(addons):
    return _git_head(addons) if (addons / ".git").exists() else None


def _addon_commits(addons):
    from agent.deploy.environments import ADDON_REPOS

    repos = addons / ADDON_REPOS
    if not repos.is_dir():
        return {}
    return {p.name: _git_head(p) for p in sorted(repos.iterdir()) if (p / ".git").exists()}
