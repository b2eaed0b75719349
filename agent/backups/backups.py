"""Backups and restores of an environment (the `backup` and `restore` commands).
Taking a backup is taking.py's.

A restore takes a safety backup first, then unpacks the chosen backup's
filestore beside the live one while its dump loads into a database of its own
(both while the ERP still runs), stops the ERP, renames the new database into
the live one's place (the replaced one is dropped afterwards), swaps the
filestore in, starts the ERP and waits for its health; any failure after the
safety backup puts the environment back as it was (nothing touched before the
ERP stops; after, the database from the safety backup and the previous filestore
directory, kept until success). With
`neutralize` (a copy into a non-production environment), the restored database
is neutralised (agent/backups/neutralize.py) before the ERP serves it."""

import contextlib
import json
import os
import secrets
import shutil
import threading
import time

from agent.backups import (
    archive,
    cluster,
    databases,
    exec_stream,
    objects,
    ondisk,
    pitr,
    safe_copy,
    taking,
)
from agent.backups.databases import DB, REPLACED, STAGED
from agent.backups.neutralize import catch_mail, is_neutralized
from agent.backups.neutralize import neutralize as neutralize_database
from agent.backups.transfer import Checked, Transfer
from agent.config import RESTORE_JOURNAL, write_private
from agent.errors import AgentError, engine_errors
from protocol import filestore_objects as fo
from protocol.errors import AgentErrorCode

MANIFEST_MAX = 1024 * 1024
TRASH = "filestore.trash-"  # a previous filestore being deleted (_discard)
DUMP_FILE = "/tmp/berth-restore.dump"  # in the database container, while it loads
MAX_JOBS = 8  # pg_restore's parallel jobs: one per core, up to this
# The rows of each table's COPY data in a plain dump: "<table> <rows>" per table.
COUNT_ROWS = ('/^COPY /{t=$0; sub(/^COPY /, "", t); sub(/ \\(.*\\) FROM stdin;$/, "", t); '
              'n=0; c=1; next} c && /^\\\\\\.$/{print t, n; c=0; next} c{n++}')


class RestoreError(AgentError):
    """`partial_result`: what the failed command still reports (the safety backup it took
    and stored, so that the control plane records it as completed)."""

    code = AgentErrorCode.RESTORE_FAILED

    def __init__(self, message=None, result=None):
        super().__init__(message)
        self.partial_result = result


class Backups:
    """`environments`: an agent.deploy.environments.Environments (names, ERP health);
    `progress(**fields)`: what `berth-agent status` shows of the running work."""

    def __init__(self, environments, credential, progress=None):
        self.envs, self.credential = environments, credential
        self.api = environments.docker.api
        self.progress = progress or (lambda **fields: None)

    def _transfer(self, url):
        return Transfer(url, self.credential)

    # --- backup ---------------------------------------------------------------

    def backup(self, payload, log, label="backup"):
        n = self.envs._names(payload["environment_id"])
        with taking.database_up(self.envs, n, log, label) as db:
            return taking.take(self, payload, n, db, log, label)

    def _counter(self):
        return lambda done: self.progress(bytes_done=done)

    # --- restore --------------------------------------------------------------

    def restore(self, payload, log):
        """A backup's restore, or with `import` (agent/backups/odoo_transfer.py) an
        upload's, inspected before anything is touched. A failure that leaves the
        environment as it was found says so (`untouched` in its result)."""
        env_id = payload["environment_id"]
        n = self.envs._names(env_id)
        self.envs.health_timeout = int(payload.get("health_timeout") or self.envs.health_timeout)
        db = self._db_container(n)
        if (n["dir"] / RESTORE_JOURNAL).exists():  # one cut short, not yet rolled back
            self._roll_back(json.loads((n["dir"] / RESTORE_JOURNAL).read_text()), n, db, log)
        _recover_swap(n["dir"])
        try:
            if payload.get("import"):
                from agent.backups.odoo_transfer import ImportSource

                source = ImportSource(self, payload["import"], payload.get("erp_version"), log)
            elif payload.get("point_in_time"):
                source = pitr.Recovered(self, payload, _Stored(self, payload["transfer_url"],
                                                               payload["backup_id"]))
            else:
                source = _Stored(self, payload["transfer_url"], payload["backup_id"])
            safety = self.backup(payload["safety"], log, label="safety backup")
        except Exception as exc:  # refused or failed before anything changed: it says so
            exc.partial_result = {**(getattr(exc, "partial_result", None) or {}),
                                  "untouched": True}
            raise
        log("info", f"safety backup {payload['safety']['backup_id']} taken; "
                    f"restoring {source.name}")
        rollback = {"environment_id": env_id, "safety_transfer_url": payload["safety"]["transfer_url"],
                    "safety_database": safety["manifest"]["database"],
                    "staging": False, "stopped": False, "database": False}
        safety_of_copy = _CopySafety(payload) if payload.get("neutralize") else None
        try:
            self._restore(source, n, db, rollback, log, safety_of_copy)
        except Exception as exc:
            log("error", f"the restore failed: {exc}; putting the safety backup back")
            try:
                self._roll_back(rollback, n, db, log)
            except Exception as again:
                raise RestoreError(f"the restore failed: {exc}; putting the safety backup back "
                                   f"failed too: {again}", result={"safety": safety}) from exc
            raise RestoreError(f"the restore failed: {exc} (the environment was put back as "
                               "it was, from the safety backup)",
                               result={"safety": safety, "untouched": True}) from exc
        (n["dir"] / RESTORE_JOURNAL).unlink(missing_ok=True)  # first: the restore stands
        _discard(n["dir"] / "filestore.old")
        if getattr(source, "cluster", None):
            source.cluster.discard()
        threading.Thread(target=self._drop_quietly, args=(db, REPLACED), daemon=True,
                         name="berth-drop-replaced").start()
        log("info", f"restored {source.name}")
        return {"safety": safety, "restored_from": source.id,
                "neutralized": is_neutralized(self.api, db),
                "safe_copy": safety_of_copy and safety_of_copy.record,
                **({"point_in_time": source.summary} if hasattr(source, "summary") else {})}

    def _restore(self, source, n, db, rollback, log, safety_of_copy=None):
        self.progress(phase="restore: unpacking the filestore", bytes_done=0)
        staged = getattr(source, "staged", False)
        if staged:
            # A stored backup's parts are read independently: the filestore is
            # unpacked while the dump loads into a database of its own, both
            # beside the running ERP, which then stops only for the swap. The dump's
            # copy goes first, alone: the load after it is the longer branch.
            _step(n, rollback, "staging")  # an agent stop from here: the staging undone
            source.stage(db, log, alongside=lambda: source.unpack(n["dir"], log))
            if safety_of_copy:  # the copy is made safe before anything of the live one stops
                self.progress(phase="restore: neutralising the database")
                safety_of_copy.apply(self, rollback["environment_id"], db, STAGED, log)
        else:
            source.unpack(n["dir"], log)
        _step(n, rollback, "stopped")
        self._stop_erp(n, log)
        if getattr(source, "cluster", None):  # a recovered cluster, swapped whole
            _step(n, rollback, "cluster")
            source.swap(db, log)
        elif staged:  # renames only: the replaced database is dropped once the ERP is back
            _step(n, rollback, "database")
            databases.swap_in_staged(self.api, db)
            log("info", "restore: the restored database is in place")
        else:
            _step(n, rollback, "database")
            source.load(db, log)
            if safety_of_copy:  # the ERP is stopped: nothing has used the copy yet
                self.progress(phase="restore: neutralising the database")
                safety_of_copy.apply(self, rollback["environment_id"], db, DB, log)
        if (n["dir"] / "filestore.new").exists():  # a bare dump import brings no filestore
            _swap(n["dir"])
        self._start_erp(rollback["environment_id"], log)

    def put_back(self, pre, taken, log):
        """A deploy's revert: the database as its pre-deploy backup (`pre`, the
        backup command; `taken`, its result) holds it, the ERP stopped."""
        n = self.envs._names(pre["environment_id"])
        db = self._db_container(n)
        self._load_database(self._transfer(pre["transfer_url"]), taken["manifest"]["database"],
                            db, log, "revert")
        log("info", f"the database is back as the pre-deploy backup {pre['backup_id']} held it")
        return {"reverted_to": pre["backup_id"]}

    def _roll_back(self, rollback, n, db, log):
        """The environment as it was before the restore: the database from the
        safety backup if it was touched, the previous filestore if it was swapped."""
        self.progress(phase="rolling back")
        shutil.rmtree(n["dir"] / "filestore.new", ignore_errors=True)
        try:  # a restore's staged database, if any (a swap of clusters stages none)
            if not rollback.get("cluster"):
                databases.drop_staged(self.api, db)
        except Exception as exc:  # the environment comes first; the next restore drops it
            log("warning", f"the staged database {STAGED} was not dropped: {exc}")
        beside = cluster.Cluster.of(self.envs, n)
        if not rollback["stopped"]:
            if beside is not None:
                beside.discard()
            (n["dir"] / RESTORE_JOURNAL).unlink(missing_ok=True)
            log("info", "the environment was not touched")
            return
        self._stop_erp(n, log)
        if rollback.get("cluster") and beside is not None and beside.put_back(log):
            pass  # the cluster the restore replaced, as it was
        elif beside is not None:
            beside.discard()  # a cluster recovered beside, never swapped in
        if rollback["database"]:
            self._load_database(self._transfer(rollback["safety_transfer_url"]),
                                rollback["safety_database"], db, log, "rollback")
        old, live = n["dir"] / "filestore.old", n["dir"] / "filestore"
        if old.exists():  # made by this restore's swap (a stale one is removed first)
            shutil.rmtree(live, ignore_errors=True)
            old.rename(live)
            log("info", "put the previous filestore back")
        self._start_erp(rollback["environment_id"], log)
        (n["dir"] / RESTORE_JOURNAL).unlink(missing_ok=True)

    def resume_interrupted(self, log):
        """Restores that an agent stop cut short (their commands were reported
        failed) rolled back, as a failed restore is; previous filestores whose
        deletion a stop cut short deleted. Returns the environments rolled back."""
        for trash in self.envs.root.glob(f"*/{TRASH}*"):
            shutil.rmtree(trash, ignore_errors=True)
        resumed = []
        for journal in sorted(self.envs.root.glob(f"*/{RESTORE_JOURNAL}")):
            try:
                rollback = json.loads(journal.read_text())
                n = self.envs._names(rollback["environment_id"])
                log("info", f"rolling back the restore into {rollback['environment_id']} "
                            "interrupted by the agent's stop")
                # A swap of whole clusters may have been cut short with the database stopped.
                db = (self.envs._container(n["db"]) if rollback.get("cluster")
                      else self._db_container(n))
                self._roll_back(rollback, n, db, log)
                resumed.append(rollback["environment_id"])
            except Exception as exc:  # the next environment may do better
                log("error", f"rolling back the interrupted restore of {journal.parent.name} "
                             f"failed: {exc}")
        for env_id in pitr.discard_leftovers(self.envs, RESTORE_JOURNAL):
            log("info", f"removed the recovery an agent stop left in {env_id}")
        return resumed

    def _manifest(self, transfer):
        data = bytearray()
        for chunk in transfer.download(taking.OBJECTS["manifest"]):
            data += chunk
            if len(data) > MANIFEST_MAX:
                raise RestoreError("the backup's manifest is too large")
        try:
            manifest = json.loads(data)
        except ValueError as exc:
            raise RestoreError(f"the backup's manifest is not JSON: {exc}") from exc
        if not all(isinstance(manifest, dict) and isinstance(manifest.get(part), dict)
                   and manifest[part].get("object") for part in ("database", "filestore")):
            raise RestoreError("the backup's manifest names no database or filestore object")
        return manifest

    def _unpack(self, transfer, fs, env_dir):
        new, live = ondisk.new_filestore(env_dir), env_dir / "filestore"
        if fs.get("layout") == fo.LAYOUT:
            early = ondisk.Early(new)  # as below: the disk writes files as they come
            try:
                objects.unpack(transfer, fs, new, self._counter(), finished=early.finished,
                               hashes_file=env_dir / objects.HASHES,
                               local=objects.local_copies(live, env_dir / objects.HASHES))
            finally:
                early.close()
            return
        kind = fs.get("compression") or ("gzip" if fs["object"].endswith(".gz") else "zstd")
        chunks = Checked(transfer.download(fs["object"]), self._counter())
        early = ondisk.Early(new)  # the disk writes the first files while the rest unpack
        try:
            archive.unpack(chunks, kind, new, finished=early.finished)
        finally:
            early.close()
        _same(fs["object"], fs, chunks, RestoreError)

    def _load_database(self, transfer, expected, db, log, label, database=DB, alongside=None,
                       count_rows=False):
        """Drop and recreate `database`, copy the dump from storage into the database
        container (DUMP_FILE; checked against the manifest before anything loads), and
        pg_restore it from there with one job per core (restore_jobs()), the file
        removed at its end; `alongside()`, if given, runs on a thread while it loads.

        The copy costs the dump's size on the server's disk for as long as it loads,
        and buys two things: pg_restore works on tables and indexes in parallel only
        from a file, and, reading a file, it no longer waits on each chunk's way from
        storage through the agent and the engine (a chain of processes that a busy
        server schedules slowly, the restore's slowest part when it streamed).
        A restore's staged database is loaded with asynchronous commits: pg_restore
        commits each table, index and constraint on its own (thousands in an ERP's
        database), and each would wait for a flush of the WAL; the rename that puts
        it in place commits synchronously, which flushes all of it first.

        With `count_rows` (a drill), the rows of each table in the dump are counted
        from the file after the load (COPY data is one line per row) and returned:
        {table as pg_dump names it: rows}."""
        self.progress(phase=f"{label}: loading the database", bytes_done=0)
        log("info", f"{label}: recreating the database from {expected['object']}")
        staged = database == STAGED
        started, copied = time.monotonic(), {}
        chunks = Checked(transfer.download(expected["object"]), self._counter())

        def copy():
            try:
                exec_stream.Exec(self.api, db.id, ["sh", "-c", 'cat > "$0"', DUMP_FILE],
                                 stdin=True, what="the dump's copy into the database container"
                                 ).feed(chunks)
                _same(expected["object"], expected, chunks, RestoreError)
            except BaseException:
                with contextlib.suppress(Exception):
                    exec_stream.run(self.api, db.id, ["rm", "-f", DUMP_FILE])
                raise
            copied["in"] = _since(started)

        # The copy and the database's recreation at once (the database a previous
        # restore replaced goes in the same psql: left by an agent stop after it).
        taking.both(copy, lambda: self._recreate_database(
            db, database, also_drop=(REPLACED,) if staged else ()))
        jobs = restore_jobs()

        counted = {}

        def load():
            out = exec_stream.run(self.api, db.id, [
                "sh", "-c", 'pg_restore -U "$1" -d "$2" --no-owner --exit-on-error --jobs="$3"'
                            ' "$0"; code=$?; [ $code = 0 ] && [ "$4" = count ] && '
                            f"pg_restore --data-only -f - \"$0\" | awk '{COUNT_ROWS}'; "
                            'rm -f "$0"; exit $code', DUMP_FILE, DB, database, str(jobs),
                "count" if count_rows else "load"], what="pg_restore",
                environment={"PGOPTIONS": "-c synchronous_commit=off"} if staged else None)
            counted.update((t, int(n)) for t, n in (line.rsplit(" ", 1) for line in
                                                     out.splitlines() if " " in line))
            log("info", f"{label}: the database is loaded ({chunks.size} bytes of dump copied "
                        f"in {copied['in']}, restored by {jobs} jobs; {_since(started)} in all)")

        taking.both(load, alongside or (lambda: None))
        return counted if count_rows else None

    def _recreate_database(self, db, database=DB, also_drop=()):
        databases.recreate(self.api, db, database, also_drop)

    def _drop_quietly(self, db, database):
        """After the task: what an agent stop leaves is dropped by the next restore."""
        with contextlib.suppress(Exception):
            databases.drop(self.api, db, database)

    def _stop_erp(self, n, log):
        erp = self.envs._container(n["erp"])
        if erp is None:
            raise RestoreError("the environment has no ERP container")
        with engine_errors():  # just looked up: its status is current
            if erp.status == "running":
                started = time.monotonic()
                erp.stop(timeout=20)
                log("info", f"stopped {erp.name} ({_since(started)})")

    def _start_erp(self, env_id, log):
        self.progress(phase="starting the ERP")
        self.envs.start_erp(env_id, log)

    # --- helpers --------------------------------------------------------------

    def _db_container(self, n):
        db = self.envs._container(n["db"])
        if db is None or db.status != "running":
            raise taking.BackupError("the environment's database container is not running")
        return db

    def _psql(self, db, *sql, database=DB):
        return databases.psql(self.api, db, *sql, database=database)


class _Stored:
    """A Berth backup in storage, as a restore's source (its manifest read first)."""

    staged = True  # loaded beside the live database, then swapped in

    def __init__(self, backups, transfer_url, backup_id):
        self.backups, self.id, self.name = backups, backup_id, f"backup {backup_id}"
        self.transfer = backups._transfer(transfer_url)
        self.manifest = backups._manifest(self.transfer)

    def unpack(self, env_dir, log):
        fs = self.manifest["filestore"]
        log("info", f"unpacking {fs['object']} beside the current filestore")
        started = time.monotonic()
        self.backups._unpack(self.transfer, fs, env_dir)
        unpacked = _since(started)
        # On disk before it is swapped in (while the dump still loads): the previous
        # filestore goes once the restore stands, and the engine's stop and start of
        # the ERP, which sync their own state, would otherwise wait behind a gigabyte
        # of the kernel's writeback.
        ondisk.flush(env_dir / "filestore.new")
        log("info", f"restore: the filestore is unpacked ({fs['size']} bytes of archive in "
                    f"{unpacked}, on disk after {_since(started)})")

    def stage(self, db, log, alongside=None):
        """The dump loaded into the STAGED database, the live one untouched;
        `alongside()` runs while it loads (after the dump's copy)."""
        self.backups._load_database(self.transfer, self.manifest["database"], db, log, "restore",
                                    database=STAGED, alongside=alongside)


class _CopySafety:
    """A restore's neutralisation as the payload asks it: `odoo neutralize`, then the
    profile's clearing and checks and the anonymisation (safe_copy.py); `record`:
    what ran."""

    def __init__(self, payload):
        self.profile = payload.get("neutralize_profile") or "standard"
        self.anonymize = bool(payload.get("anonymize"))
        self.mail = payload.get("mail")  # the server's mail catcher, if it has one
        self.record = None

    def apply(self, backups, env_id, db, database, log):
        neutralize_database(backups.envs, env_id, database, log)
        self.record = safe_copy.make_safe(backups.api, db, database, profile=self.profile,
                                          anonymize=self.anonymize, log=log)
        if self.mail:  # after the checks: they want no live mail server but the dummy
            catch_mail(backups.api, db, database, self.mail, log)


def restore_jobs():
    """pg_restore's jobs: one per core of the server, at most MAX_JOBS."""
    return max(1, min(os.cpu_count() or 1, MAX_JOBS))


def _since(started):
    """The seconds since `started` (time.monotonic()), for a progress line."""
    return f"{time.monotonic() - started:.2f} s"


def _same(name, expected, chunks, error):
    if (chunks.size, chunks.sha256) != (expected["size"], expected["sha256"]):
        raise error(f"{name} in storage does not match its checksum: {chunks.size} bytes, "
                    f"sha256 {chunks.sha256}; expected {expected['size']} bytes, "
                    f"sha256 {expected['sha256']}")


def _step(n, rollback, step):
    """Record, durably and before doing it, how far a restore goes."""
    rollback[step] = True
    write_private(n["dir"] / RESTORE_JOURNAL, json.dumps(rollback))


def _swap(env_dir):
    """The unpacked filestore in, the previous one kept as filestore.old until success."""
    old = env_dir / "filestore.old"
    shutil.rmtree(old, ignore_errors=True)
    (env_dir / "filestore").rename(old)
    (env_dir / "filestore.new").rename(env_dir / "filestore")


def _discard(path):
    """`path` renamed aside at once and deleted in the background, so that a restore
    does not wait for a large filestore's deletion; what an agent stop leaves of
    it is deleted at the next start (Backups.resume_interrupted)."""
    trash = path.with_name(TRASH + secrets.token_hex(8))
    try:
        path.rename(trash)
    except FileNotFoundError:
        return
    threading.Thread(target=shutil.rmtree, args=(trash,), kwargs={"ignore_errors": True},
                     name="berth-discard", daemon=True).start()


def _recover_swap(env_dir):
    """What an interrupted swap left: the filestore back in its place, leftovers gone."""
    live, old = env_dir / "filestore", env_dir / "filestore.old"
    if not live.exists() and old.exists():
        old.rename(live)
    shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(env_dir / "filestore.new", ignore_errors=True)


