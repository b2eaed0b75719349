"""A restore to a point in time (the restore command's `point_in_time`): the base
backup's physical copy recovered in a throwaway PostgreSQL with the archived WAL
after it up to the target time, then dumped and loaded as a stored backup's dump
is (the live cluster keeps its own history and archive); the filestore made of
exactly the files the recovered database names, from the base backup's map, the
maps of the backups after it and the files archived between backups.

The throwaway database runs the environment's own image with no network, in
`pitr/` of the environment's directory; it and its files are removed at the end,
also on failure. When the archive holds no transaction after the target, the
recovery stops short of it (PostgreSQL refuses that) and is made again to the end
of the archive: the same database, as nothing committed in between."""

import contextlib
import datetime as dt
import hashlib
import os
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from agent.backups import archive, databases, objects
from agent.backups.databases import DB
from agent.backups.transfer import Checked, Transfer
from agent.errors import AgentError, engine_errors
from protocol import filestore_objects as fo
from protocol import wal
from protocol.errors import AgentErrorCode

WORK = "pitr"  # in the environment's directory
DATA, WAL_DIR, OUT = "/var/lib/postgresql/data", "/berth-wal", "/berth-out"
FETCHES = 3  # WAL files downloaded at once
RECOVERY_TIMEOUT = 3 * 3600  # seconds the WAL's replay may take
POLL = 0.5
SHORT = "recovery ended before configured recovery target was reached"
REFERENCED = ("SELECT store_fname FROM ir_attachment WHERE store_fname IS NOT NULL "
              "ORDER BY 1")
HAS_ATTACHMENTS = ("SELECT count(*) FROM information_schema.columns WHERE table_name = "
                   "'ir_attachment' AND column_name = 'store_fname'")
READ = 1024 * 1024


class RecoveryError(AgentError):
    code = AgentErrorCode.RESTORE_FAILED


class Recovered:
    """The restore's source: the base backup (`transfer_url`, `backup_id`) and the
    archive (`point_in_time`), as agent/backups/backups.py's _Stored is one backup."""

    staged = True

    def __init__(self, backups, payload, base):
        """`base`: the base backup, as a stored backup's restore reads it."""
        self.backups, self.pit = backups, payload["point_in_time"]
        self.env_id, self.base = payload["environment_id"], base
        self.transfer, self.manifest = self.base.transfer, self.base.manifest
        self.id = self.base.id
        names = [n for n, _ in self.pit["wal"]]
        self.range = f"{_file(names[0])}..{_file(names[-1])}" if names else "none"
        self.name = (f"the moment {self.pit['target_time']} (base backup {self.id}, "
                     f"WAL {self.range})")
        self.referenced = None
        self.summary = {"target_time": self.pit["target_time"], "base_backup_id": self.id,
                        "wal": self.range, "wal_files": len(names)}
        if not isinstance(self.manifest.get("base"), dict):
            raise RecoveryError(f"backup {self.id} holds no base backup")

    # --- the database ------------------------------------------------------------

    def stage(self, db, log, alongside=None):
        with self.recovered(log) as (dump, expected):
            self.backups._load_database(dump, expected, db, log, "restore",
                                        database=databases.STAGED, alongside=alongside)

    @contextlib.contextmanager
    def recovered(self, log):
        """(the recovered database's dump as a download, its {object, size, sha256}),
        for as long as the block runs; then the throwaway database and files go."""
        work = self.backups.envs._names(self.env_id)["dir"] / WORK
        copy = _Throwaway(self.backups.envs, self.env_id, work)
        copy.remove()
        try:
            self._prepare(work, log)
            container = copy.start(log)
            self._wait_recovered(container, work, log)
            self._read(container, log)
            dump = self._dump(container, work, log)
            copy.stop()
            yield _LocalFile(dump), {"object": dump.name, **_summed(dump)}
        finally:
            copy.remove()

    def _prepare(self, work, log):
        pgdata, spool, out = work / "pgdata", work / "wal", work / "out"
        for path in (pgdata, spool, out):
            path.mkdir(parents=True)
        base = self.manifest["base"]
        log("info", f"point in time {self.pit['target_time']}: base backup {self.id} "
                    f"(from {base.get('start_lsn')}), WAL {self.range} "
                    f"({len(self.pit['wal'])} files)")
        self.backups.progress(phase="restore: fetching the base backup and the WAL",
                              bytes_done=0)
        source = Transfer(self.pit["wal_url"], self.backups.credential)
        # The WAL comes down on threads while the base unpacks here (each file its own
        # download and decompressor).
        with ThreadPoolExecutor(FETCHES, thread_name_prefix="berth-wal-fetch") as pool:
            fetched = [pool.submit(_fetch, source, name, spool / _file(name),
                                   stored_sha256=sha256) for name, sha256 in self.pit["wal"]]
            try:
                chunks = Checked(self.transfer.download(base["object"]),
                                 self.backups._counter())
                archive.unpack(chunks, base.get("compression") or "zstd", pgdata)
                _check(base["object"], base, chunks)
            finally:
                for done in fetched:
                    done.cancel()
            for done in fetched:
                done.result()
        (pgdata / "recovery.signal").touch()
        self._settings(pgdata, target=True)
        for path in (pgdata, spool, out):
            _own_tree(path)
        os.chmod(pgdata, 0o700)

    def _settings(self, pgdata, target):
        lines = [f"restore_command = 'cp {WAL_DIR}/%f \"%p\"'",
                 "recovery_target_action = 'promote'"]
        if target:
            lines.append(f"recovery_target_time = '{_postgres_time(self.pit['target_time'])}'")
        (pgdata / "berth-recovery.conf").write_text("\n".join(lines) + "\n")
        conf = pgdata / "postgresql.auto.conf"
        kept = [line for line in (conf.read_text().splitlines() if conf.exists() else [])
                if "berth-recovery.conf" not in line]
        conf.write_text("\n".join([*kept, "include 'berth-recovery.conf'"]) + "\n")

    def _wait_recovered(self, container, work, log):
        """Until the recovered database is promoted; once again to the archive's end
        when it holds no transaction after the target."""
        self.backups.progress(phase="restore: replaying the WAL")
        started, again = time.monotonic(), False
        deadline = started + RECOVERY_TIMEOUT
        while time.monotonic() < deadline:
            with engine_errors():
                container.reload()
                if container.status == "exited":
                    logs = container.logs(tail=30).decode(errors="replace")
                    if SHORT in logs and not again:
                        log("info", "the archive holds no transaction after the target: "
                                    "recovering to its end")
                        self._settings(work / "pgdata", target=False)
                        (work / "pgdata" / "recovery.signal").touch()
                        container.start()
                        again = True
                        continue
                    raise RecoveryError(f"the recovery failed: {_last_lines(logs)}")
            with contextlib.suppress(AgentError):
                if databases.psql(self.backups.api, container, "SELECT pg_is_in_recovery()",
                                  database="postgres") == "f":
                    log("info", f"recovered in {time.monotonic() - started:.1f} s")
                    return
            time.sleep(POLL)
        raise RecoveryError(f"the recovery did not end within {RECOVERY_TIMEOUT} s")

    def _read(self, container, log):
        """What the recovered database says: its last transaction, its attachments."""
        api = self.backups.api
        last = databases.psql(api, container, "SELECT coalesce(to_char("
                              "pg_last_xact_replay_timestamp() AT TIME ZONE 'UTC', "
                              "'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'), '')", database="postgres")
        self.summary["last_transaction_at"] = last or None
        log("info", f"the last transaction replayed committed at {last or 'no time recorded'}")
        self.referenced = set()
        if databases.psql(api, container, HAS_ATTACHMENTS) == "1":
            self.referenced = {f"{wal.FILESTORE_DIR}{DB}/{name}" for name in
                               databases.psql(api, container, REFERENCED).splitlines() if name}

    def _dump(self, container, work, log):
        self.backups.progress(phase="restore: dumping the recovered database")
        started = time.monotonic()
        with engine_errors():
            code, out = container.exec_run(
                ["pg_dump", "-U", DB, "-d", DB, "-Fc", "-Z", "0", "-f", f"{OUT}/database.dump"])
        if code != 0:
            raise RecoveryError(f"pg_dump of the recovered database failed: "
                                f"{out.decode(errors='replace')[-500:]}")
        dump = work / "out" / "database.dump"
        log("info", f"the recovered database is dumped ({dump.stat().st_size} bytes in "
                    f"{time.monotonic() - started:.1f} s)")
        return dump

    # --- the filestore -------------------------------------------------------------

    def unpack(self, env_dir, log):
        """The base backup's filestore less the attachments the recovered database
        does not name, plus those it names from other backups' maps and the archive."""
        if self.manifest["filestore"].get("layout") != fo.LAYOUT:
            raise RecoveryError(f"backup {self.id}'s filestore is not kept as objects")
        entries = objects.read_map(self.transfer, self.manifest["filestore"])
        wanted = self.referenced or set()
        by_path = {e[fo.PATH]: e for e in fo.files(entries)}
        for other in self.pit["maps"]:
            if not wanted - by_path.keys():
                break
            transfer = self.backups._transfer(other["transfer_url"])
            for entry in fo.files(objects.read_map(transfer, other["filestore"])):
                by_path.setdefault(entry[fo.PATH], entry)
        archived = {path: name for path, name in self.pit["files"]}
        kept = [e for e in entries if e[fo.HASH] is None
                or not e[fo.PATH].startswith(wal.FILESTORE_DIR) or e[fo.PATH] in wanted]
        have = {e[fo.PATH] for e in kept}
        packed = [by_path[p] for p in sorted(wanted - have) if p in by_path]
        fetched = sorted(p for p in wanted - have - by_path.keys() if p in archived)
        missing = sorted(wanted - have - by_path.keys() - set(fetched))
        new, live = env_dir / "filestore.new", env_dir / "filestore"
        shutil.rmtree(new, ignore_errors=True)
        new.mkdir()
        owner = os.stat(live) if live.exists() else os.stat(env_dir)
        os.chown(new, owner.st_uid, owner.st_gid)
        os.chmod(new, 0o755)
        written = objects.unpack(self.transfer, None, new, self.backups._counter(),
                                 entries=kept + packed)
        source = Transfer(self.pit["wal_url"], self.backups.credential)
        for path in fetched:
            target = new / path
            _makedirs(target.parent, new, owner)
            _fetch(source, archived[path], target, sha256=_file(archived[path]))
            os.chown(target, owner.st_uid, owner.st_gid)
        _own_made_dirs(new, owner)
        self.summary.update(files=written + len(fetched), files_from_archive=len(fetched),
                            missing_files=len(missing))
        log("info", f"the filestore at the target: {len(wanted)} attachment files named, "
                    f"{len(wanted) - len(missing)} written ({len(packed)} from other "
                    f"backups, {len(fetched)} from the archive)")
        if missing:
            log("warning", f"{len(missing)} attachment files the recovered database names "
                           f"are in no backup or archive, e.g. {missing[0]}")


def discard_leftovers(envs):
    """What an agent stop left of recoveries (their throwaway database and folder)
    removed; returns the environments it was found in."""
    found = []
    for work in sorted(envs.root.glob(f"*/{WORK}")):
        _Throwaway(envs, work.parent.name, work).remove()
        found.append(work.parent.name)
    return found


class _Throwaway:
    """The recovery's PostgreSQL: the environment's image and settings, no network."""

    def __init__(self, envs, env_id, work):
        self.envs, self.env_id, self.work = envs, env_id, work
        self.live_name = envs._names(env_id)["db"]
        self.name = f"{self.live_name}-pitr"

    def start(self, log):
        self.live = self.envs._container(self.live_name)
        if self.live is None:
            raise RecoveryError("the environment has no database container")
        container = databases.run_throwaway(self.envs, self.live, self.name, self.env_id, "pitr", {
            str(self.work / "pgdata"): {"bind": DATA, "mode": "rw"},
            str(self.work / "wal"): {"bind": WAL_DIR, "mode": "ro"},
            str(self.work / "out"): {"bind": OUT, "mode": "rw"}})
        log("info", "recovering the base backup in a throwaway database (no network)")
        return container

    def stop(self):
        if (container := self.envs._container(self.name)) is not None:
            with contextlib.suppress(AgentError), engine_errors():
                container.stop(timeout=30)

    def remove(self):
        if (container := self.envs._container(self.name)) is not None:
            with contextlib.suppress(AgentError), engine_errors():
                container.remove(force=True, v=True)
        shutil.rmtree(self.work, ignore_errors=True)


class _LocalFile:
    """A file on this server read as the transfer API's download is."""

    def __init__(self, path):
        self.path = path

    def download(self, name):
        with open(self.path, "rb") as f:
            while chunk := f.read(READ):
                yield chunk


def _summed(path):
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(READ):
            digest.update(chunk)
            size += len(chunk)
    return {"size": size, "sha256": digest.hexdigest()}


def _fetch(source, name, target, stored_sha256=None, sha256=None):
    """An archived object downloaded and decompressed into `target`, checked: as
    stored (`stored_sha256`, a WAL file's) or as decompressed (`sha256`, a filestore
    file's, its name)."""
    kind = "gzip" if name.endswith(".gz") else "zstd"
    chunks = Checked(source.download(name))
    with open(target, "wb") as out:
        done = subprocess.Popen(archive._compressor(kind, decompress=True),
                                stdin=subprocess.PIPE, stdout=out, stderr=subprocess.PIPE)
        try:
            for chunk in chunks:
                done.stdin.write(chunk)
        except BrokenPipeError:
            pass  # its exit code says why
        finally:
            done.stdin.close()
            err = done.stderr.read().decode(errors="replace")[-200:]
            done.wait()
    if done.returncode != 0:
        raise RecoveryError(f"{name} from the archive does not decompress: {err}")
    if stored_sha256 and chunks.sha256 != stored_sha256 or \
            sha256 and _summed(target)["sha256"] != sha256:
        raise RecoveryError(f"{name} from the archive does not match its checksum")


def _check(name, expected, chunks):
    if (chunks.size, chunks.sha256) != (expected.get("size"), expected.get("sha256")):
        raise RecoveryError(f"{name} in storage does not match its checksum")


def _file(name):
    return name.rsplit("/", 1)[-1].rsplit(".", 1)[0]


def _own_tree(path):
    for root, dirs, files in os.walk(path):
        for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
            os.lchown(name, wal.POSTGRES_UID, wal.POSTGRES_UID)


def _makedirs(path, top, owner):
    missing = []
    while not path.exists() and path != top:
        missing.append(path)
        path = path.parent
    for directory in reversed(missing):
        directory.mkdir()
        os.chown(directory, owner.st_uid, owner.st_gid)


def _own_made_dirs(top, owner):
    """Folders made for files no map listed with theirs, the ERP's like the rest (it
    writes new attachments into them)."""
    for root, dirs, _ in os.walk(top):
        for name in dirs:
            path = os.path.join(root, name)
            if os.lstat(path).st_uid == 0 and owner.st_uid != 0:
                os.chown(path, owner.st_uid, owner.st_gid)


def _postgres_time(iso):
    """An ISO 8601 moment as recovery_target_time takes it (it refuses the 'T' form)."""
    moment = dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone(dt.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f+00")


def _last_lines(logs):
    return " | ".join(line.strip() for line in logs.strip().splitlines()[-6:])
