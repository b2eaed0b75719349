"""The WAL shipper: each environment's finished WAL files (protocol/wal.py), from
its spool folder to backup storage through the control plane's WAL transfer API,
oldest first, each compressed, uploaded, read back and checked by the control
plane, and only then deleted here. A file that fails stays for the next pass:
nothing is skipped, so the archive has no gap the control plane does not see.

Every REPORT_SECONDS, and after each pass that shipped something, the shipper
reports the environment's archiving to the control plane: what waits in the
spool and since when, the newest file shipped, PostgreSQL's own archiver figures
(a failing `archive_command` leaves WAL in the database's volume) and the last
error. The control plane alerts on them (services/backups/wal.py). The daemon
runs a pass every few seconds while an environment archives (agent/daemon.py)."""

import contextlib
import datetime as dt
import logging
import os
import subprocess
import time

from agent.backups import archive, databases, wal_files
from agent.backups.transfer import Transfer, TransferError
from agent.deploy import archiving
from agent.errors import AgentError, engine_errors
from protocol import wal

log = logging.getLogger("berth.agent.wal")
REPORT_SECONDS = 30
SUFFIX = {"zstd": ".zst", "gzip": ".gz"}
KNOWN_BATCH = 100  # files asked about, then shipped, in one go
SYSTEM_ID = "SELECT system_identifier FROM pg_control_system()"
SYSID_AT = 24  # XLogLongPageHeaderData.xlp_sysid: a segment's first page header
ARCHIVER = ("SELECT failed_count, coalesce(last_failed_wal, ''), "
            "coalesce(extract(epoch FROM last_failed_time)::bigint, 0), "
            "coalesce(last_archived_wal, ''), "
            "coalesce(extract(epoch FROM last_archived_time)::bigint, 0) FROM pg_stat_archiver")


class Shipper:
    def __init__(self, environments, credential, docker, clock=time.time):
        """`docker()`: the engine's client (asked for only to read the database)."""
        self.envs, self.credential, self.clock = environments, credential, clock
        self.docker = docker
        self.kind = archive.compression()
        self.reported = {}  # environment id: when its last report went
        self.clusters = {}  # environment id: (database container id, system identifier)
        self.files_at = {}  # environment id: when its filestore was last looked at

    def run_once(self):
        root = self.envs.root
        for env_dir in sorted(root.iterdir()) if root.is_dir() else ():
            settings = archiving.read(env_dir)
            if not settings:
                continue
            try:
                self.ship(env_dir.name, env_dir, settings)
            except Exception:  # noqa: BLE001  (one environment's trouble stops no other's)
                log.exception("shipping the WAL of %s failed", env_dir.name)

    def ship(self, env_id, env_dir, settings):
        transfer = Transfer(settings["transfer_url"], self.credential)
        spool = env_dir / archiving.SPOOL_DIR
        shipped, error = [], None
        waiting = _waiting(spool)
        if waiting:
            try:
                shipped, error = self._ship(transfer, env_id, waiting)
            except (AgentError, OSError, subprocess.SubprocessError) as exc:
                error = str(exc)
            if error:
                log.warning("shipping the WAL of %s failed: %s", env_id, error)
        now = self.clock()
        if now - self.files_at.get(env_id, 0) >= wal_files.FILES_SECONDS:
            self.files_at[env_id] = now
            try:
                _, files_error = wal_files.ship(
                    transfer, env_dir, lambda *a: self._upload(transfer, *a),
                    SUFFIX[self.kind], now)
            except (AgentError, OSError, subprocess.SubprocessError) as exc:
                files_error = str(exc)
            if files_error:
                log.warning("archiving the new filestore files of %s failed: %s", env_id,
                            files_error)
                error = error or f"filestore: {files_error}"
        if shipped or error or now - self.reported.get(env_id, 0) >= REPORT_SECONDS:
            done = set(shipped)  # what is left: the pass's own listing, less what it sent
            self._report(transfer, env_id, [p for p in waiting if p.name not in done],
                         shipped, error, now)

    def _ship(self, transfer, env_id, waiting):
        """The waiting files in order, up to the first that fails; those the control
        plane holds already (sent before a crash, or copied again by PostgreSQL) are
        only dropped. Returns (shipped, error)."""
        suffix, named = SUFFIX[self.kind], []
        for path in waiting[:KNOWN_BATCH]:
            try:
                named.append((path, f"{self._system_id(env_id, path)}/{path.name}{suffix}"))
            except (AgentError, OSError) as exc:  # this one waits, and those after it
                if not named:
                    return [], f"{path.name}: {exc}"
                break
        stored = set(transfer.call("known", {"objects": [n for _, n in named]})["stored"])
        shipped = []
        for path, name in named:
            if name not in stored:
                try:
                    self._upload(transfer, path, name)
                except (AgentError, OSError, subprocess.SubprocessError) as exc:
                    return shipped, f"{path.name}: {exc}"
            path.unlink(missing_ok=True)
            shipped.append(path.name)
        return shipped, None

    def _upload(self, transfer, path, name, fields=None):
        """The file compressed and uploaded; a WAL file with when PostgreSQL finished
        it (its spool copy's time: the end of a point-in-time window)."""
        with path.open("rb") as source:
            mtime = os.fstat(source.fileno()).st_mtime
            done = subprocess.run(archive._compressor(self.kind), stdin=source,
                                  capture_output=True, check=False, timeout=120)
        if done.returncode != 0:
            raise AgentError(f"compressing failed: {done.stderr.decode(errors='replace')[-500:]}")
        transfer.upload(name, [done.stdout], fields=fields or {"archived_at": _iso(mtime)})

    def _system_id(self, env_id, path):
        """The identifier of the database cluster that wrote `path`: WAL file names
        repeat in a cluster made again (an environment destroyed and deployed anew).
        A segment says it in its first page's header (read there: the database may be
        stopped); a history or backup label file is the running cluster's."""
        if len(path.name) == 24:
            with path.open("rb") as f:
                header = f.read(SYSID_AT + 8)
            if len(header) == SYSID_AT + 8:
                return str(int.from_bytes(header[SYSID_AT:], "little"))
        db = self._db(env_id)
        if self.clusters.get(env_id, (None,))[0] != db.id:
            with engine_errors():
                found = databases.psql(db.client.api, db, SYSTEM_ID, database="postgres")
            if not found.isdigit():
                raise AgentError(f"the database's system identifier reads {found!r}")
            self.clusters[env_id] = (db.id, found)
        return self.clusters[env_id][1]

    def _db(self, env_id):
        with engine_errors():
            return self.docker().containers.get(self.envs._names(env_id)["db"])

    def _report(self, transfer, env_id, waiting, shipped, error, now):
        oldest = None
        if waiting:
            with contextlib.suppress(OSError):
                oldest = waiting[0].stat().st_mtime
        body = {"pending": len(waiting), "oldest_pending_at": _iso(oldest),
                "shipped": len(shipped), "newest_shipped": shipped[-1] if shipped else None,
                "error": error and error[:1000], "archiver": self._archiver(env_id)}
        try:
            transfer.call("status", body)
        except TransferError as exc:
            log.warning("reporting the WAL archiving of %s failed: %s", env_id, exc)
            return
        self.reported[env_id] = now

    def _archiver(self, env_id):
        """PostgreSQL's archiver figures, or None while its database is not up."""
        try:
            db = self._db(env_id)
            row = databases.psql(db.client.api, db, ARCHIVER, database="postgres")
        except Exception:  # noqa: BLE001  (stopped, being made again: no figures)
            return None
        failed, failed_wal, failed_at, archived_wal, archived_at = (row.split("|") + [""] * 5)[:5]
        return {"failed_count": int(failed or 0), "last_failed_wal": failed_wal or None,
                "last_failed_at": _iso(int(failed_at or 0) or None),
                "last_archived_wal": archived_wal or None,
                "last_archived_at": _iso(int(archived_at or 0) or None)}


def _waiting(spool):
    """The finished WAL files in the spool, oldest first (a timeline's history file
    comes before the segments that follow it)."""
    found = []
    try:
        for path in spool.iterdir():
            if wal.is_file_name(path.name):
                found.append((path.stat().st_mtime_ns, path.name, path))
    except OSError:  # no spool yet, or a file shipped meanwhile: the next pass sees
        pass
    return [path for *_, path in sorted(found)]


def _iso(epoch):
    if epoch is None:
        return None
    return dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat().replace("+00:00", "Z")

