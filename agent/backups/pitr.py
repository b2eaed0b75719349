"""A restore to a point in time (the restore command's `point_in_time`): the base
backup's physical copy recovered in a throwaway PostgreSQL with the archived WAL
after it up to the target time; the filestore made of exactly the files the
recovered database names, from the base backup's map, the maps of the backups
after it and the files archived between backups (the base's files unpack while the
database recovers).

Into the environment the moment is of, with no neutralisation asked, the recovered
cluster itself is swapped in (agent/backups/cluster.py): it is recovered in the
folder of the environment's database volume and continues on a timeline of its own
(one no archived history file of the cluster names, so that its WAL is archived
beside the old timeline's). Otherwise (a copy into another environment, a
neutralised one, a volume that is not a folder here), the recovered database is
dumped and loaded as a stored backup's dump is, and the live cluster keeps its own.

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

from agent.backups import archive, cluster, databases, objects
from agent.backups.databases import DB
from agent.backups.transfer import Checked, Transfer
from agent.deploy import archiving as archiving_setup
from agent.errors import AgentError, engine_errors
from protocol import filestore_objects as fo
from protocol import wal
from protocol.errors import AgentErrorCode

WORK = "pitr"  # in the environment's directory
DATA, WAL_DIR, OUT = "/var/lib/postgresql/data", "/berth-wal", "/berth-out"
FETCHES = 3  # WAL files downloaded at once
RECOVERY_TIMEOUT = 3 * 3600  # seconds the WAL's replay may take
POLL = 0.02  # seconds between looks at the recovery's end
STATUS_POLL = 0.25  # seconds between asking the engine whether the recovery stopped
# In WAL_DIR: the WAL files listed, and a mark there while their downloads go on. A
# file of the list the recovery asks for is waited for until it is there.
EXPECTED, FETCHING = ".expected", ".fetching"
UNPACKED = ".base-unpacked"  # in WAL_DIR: PostgreSQL starts in the throwaway
RESTORE = (f"f={WAL_DIR}/%f; while [ ! -e $f ] && [ -e {WAL_DIR}/{FETCHING} ] && "
           f"grep -qx %f {WAL_DIR}/{EXPECTED}; do sleep 0.02; done; cp $f \"%p\"")
SHORT = "recovery ended before configured recovery target was reached"
REFERENCED = ("SELECT store_fname FROM ir_attachment WHERE store_fname IS NOT NULL "
              "ORDER BY 1")
HAS_ATTACHMENTS = ("SELECT count(*) FROM information_schema.columns WHERE table_name = "
                   "'ir_attachment' AND column_name = 'store_fname'")
READ = 1024 * 1024
LIVE_TIMELINE = ("SELECT system_identifier, timeline_id FROM pg_control_system(), "
                 "pg_control_checkpoint()")


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
        self.referenced, self._early, self._copies = None, None, None
        self._stopped = self._finishing = None  # a swap's work on threads
        self.summary = {"target_time": self.pit["target_time"], "base_backup_id": self.id,
                        "wal": self.range, "wal_files": len(names)}
        if not isinstance(self.manifest.get("base"), dict):
            raise RecoveryError(f"backup {self.id} holds no base backup")
        # Into the environment the moment is of, not neutralised: the cluster is swapped.
        self.in_place = (self.pit.get("environment_id") == self.env_id
                         and not payload.get("neutralize"))
        self.cluster = None

    # --- the database ------------------------------------------------------------

    def stage(self, db, log, alongside=None):
        """The moment recovered beside the live database (its cluster left ready to
        swap in, or its dump loaded as STAGED), the base's files unpacking meanwhile;
        `alongside()` (the filestore's end) once the recovered database is read."""
        n = self.backups.envs._names(self.env_id)
        env_dir = n["dir"]
        self.cluster = self.in_place and cluster.Cluster.of(self.backups.envs, n) or None
        self.summary["cluster_swapped"] = self.cluster is not None
        with ThreadPoolExecutor(1, thread_name_prefix="berth-pitr-files") as early:
            self._early = (env_dir, early.submit(self._unpack_base, env_dir))
            try:
                if self.cluster:  # the filestore's end on a thread, while the ERP stops
                    self._recover_cluster(db, log)
                    self._finishing = _background(alongside, "berth-pitr-files")
                    return
                with self.recovered(log) as (dump, expected):
                    self.backups._load_database(dump, expected, db, log, "restore",
                                                database=databases.STAGED, alongside=alongside)
            finally:
                self._early[1].cancel()

    def swap(self, db, log):
        """The recovered cluster in the live one's place (the ERP stopped)."""
        self._stopped.result()
        self._finishing.result()
        self.cluster.swap(db, log)

    @contextlib.contextmanager
    def recovered(self, log):
        """(the recovered database's dump as a download, its {object, size, sha256}),
        for as long as the block runs; then the throwaway database and files go."""
        work = self.backups.envs._names(self.env_id)["dir"] / WORK
        copy = _Throwaway(self.backups.envs, self.env_id, work)
        copy.remove()
        try:
            container = self._recover(copy, work, work / "pgdata", log)
            dump = self._dump(container, work, log)
            copy.stop()
            yield _LocalFile(dump), {"object": dump.name, **_summed(dump)}
        finally:
            copy.remove()

    def _recover_cluster(self, live, log):
        """The moment recovered in the folder beside the live cluster's; the throwaway
        then stops cleanly and the cluster is tidied (one the environment's database
        starts on) on a thread, while the ERP stops: swap() waits for it."""
        work = self.backups.envs._names(self.env_id)["dir"] / WORK
        copy = _Throwaway(self.backups.envs, self.env_id, work)
        copy.remove()
        self.cluster.discard()
        try:
            self._recover(copy, work, self.cluster.recovered, log, live=live)
            archiving = _archiving(live)
        except BaseException:
            copy.remove()
            self.cluster.discard()
            raise

        def finish():
            try:
                copy.stop()
                _tidy(self.cluster.recovered, archiving)
            finally:
                copy.remove()

        self._stopped = _background(finish, "berth-pitr-stop")

    def _recover(self, copy, work, pgdata, log, live=None):
        """The base unpacked, the throwaway started on it at once and replaying each
        WAL file as its download ends (restore_command waits for the files still
        coming); promoted at the target only once every download checked."""
        with ThreadPoolExecutor(FETCHES, thread_name_prefix="berth-wal-fetch") as pool:
            started = time.monotonic()
            fetching, created = self._prepare(work, pgdata, log, pool, copy, live)
            try:
                container = created.result()
                (work / "wal" / UNPACKED).touch()  # PostgreSQL starts in the throwaway
                log("info", f"the base backup is unpacked ({time.monotonic() - started:.2f} "
                            "s); recovering it in a throwaway database (no network), the WAL "
                            "still downloading")
                for done in fetching:
                    done.result()
            finally:
                for done in fetching:
                    done.cancel()
            log("info", f"the WAL is downloaded and checked ({len(fetching)} files in "
                        f"{time.monotonic() - started:.2f} s)")
        (work / "wal" / FETCHING).unlink()  # a file not there now is not in the archive
        self._wait_recovered(container, pgdata, log)
        self._read(container, log)
        return container

    def _prepare(self, work, pgdata, log, pool, copy, live=None):
        """The recovery's folders: the base unpacked, the history files and the
        settings in place; returns the WAL's downloads and the throwaway's creation,
        under way on `pool`."""
        spool, out = work / "wal", work / "out"
        for path in (pgdata, spool, out):
            path.mkdir(parents=True)
        created = pool.submit(lambda: copy.start(copy.create(pgdata)))
        base = self.manifest["base"]
        log("info", f"point in time {self.pit['target_time']}: base backup {self.id} "
                    f"(from {base.get('start_lsn')}), WAL {self.range} "
                    f"({len(self.pit['wal'])} files)")
        self.backups.progress(phase="restore: fetching the base backup and the WAL",
                              bytes_done=0)
        source = Transfer(self.pit["wal_url"], self.backups.credential)
        for name, sha256 in self.pit.get("history", []):  # read as the recovery starts
            _fetch(source, name, spool / _file(name), stored_sha256=sha256)
        _taken_timelines(spool, int(base["timeline"]), self._newest_timeline(live))
        (spool / EXPECTED).write_text("".join(f"{_file(n)}\n" for n, _ in self.pit["wal"]))
        (spool / FETCHING).touch()
        os.chmod(spool, 0o755)
        # Each WAL file its own download and decompressor, on threads, while the base
        # unpacks here.
        fetching = [pool.submit(_fetch, source, name, spool / _file(name),
                                stored_sha256=sha256) for name, sha256 in self.pit["wal"]]
        try:
            chunks = Checked(self.transfer.download(base["object"]), self.backups._counter())
            archive.unpack(chunks, base.get("compression") or "zstd", pgdata)
            _check(base["object"], base, chunks)
        except BaseException:
            for done in fetching:
                done.cancel()
            raise
        (pgdata / "recovery.signal").touch()
        self._settings(pgdata, target=True)
        for path in (pgdata, out):
            _own_tree(path)
        os.chmod(pgdata, 0o700)
        return fetching, created

    def _newest_timeline(self, live):
        """The newest timeline of the base's cluster known: in the archive, the live
        cluster's (it is that cluster) and in the environment's spool."""
        newest = int(self.pit.get("newest_timeline") or 1)
        if live is not None:
            row = databases.psql(self.backups.api, live, LIVE_TIMELINE, database="postgres")
            system_id, _, timeline = row.partition("|")
            if system_id == str(self.manifest["base"].get("system_identifier")):
                newest = max(newest, int(timeline))
        spool = self.backups.envs._names(self.env_id)["dir"] / archiving_setup.SPOOL_DIR
        for path in spool.glob("*.history") if spool.is_dir() else ():
            newest = max(newest, wal.timeline_of(path.name) or 1)
        return newest

    def _settings(self, pgdata, target):
        # The base's own timeline, not the newest the history files name: a moment of
        # it is recovered (the window is each timeline's run after a base).
        lines = [f"restore_command = '{RESTORE}'",
                 "recovery_target_action = 'promote'",
                 f"recovery_target_timeline = '{int(self.manifest['base']['timeline'])}'"]
        if target:
            lines.append(f"recovery_target_time = '{_postgres_time(self.pit['target_time'])}'")
        (pgdata / "berth-recovery.conf").write_text("\n".join(lines) + "\n")
        conf = pgdata / "postgresql.auto.conf"
        kept = [line for line in (conf.read_text().splitlines() if conf.exists() else [])
                if "berth-recovery.conf" not in line]
        conf.write_text("\n".join([*kept, "include 'berth-recovery.conf'"]) + "\n")

    def _wait_recovered(self, container, pgdata, log):
        """Until the recovered database is promoted; once again to the archive's end
        when it holds no transaction after the target."""
        self.backups.progress(phase="restore: replaying the WAL")
        started, again = time.monotonic(), False
        deadline, looked = started + RECOVERY_TIMEOUT, 0.0
        while time.monotonic() < deadline:
            # PostgreSQL removes recovery.signal as its recovery ends (a look at a file,
            # not an exec); the engine is asked whether it stopped instead, less often.
            ended = not (pgdata / "recovery.signal").exists()
            if ended or time.monotonic() - looked > STATUS_POLL:
                looked = time.monotonic()
                with engine_errors():
                    container.reload()
                    if container.status == "exited":
                        logs = container.logs(tail=30).decode(errors="replace")
                        if SHORT in logs and not again:
                            log("info", "the archive holds no transaction after the target: "
                                        "recovering to its end")
                            self._settings(pgdata, target=False)
                            (pgdata / "recovery.signal").touch()
                            container.start()
                            again = True
                            continue
                        raise RecoveryError(f"the recovery failed: {_last_lines(logs)}")
            if ended:
                with contextlib.suppress(AgentError):
                    if databases.psql(self.backups.api, container,
                                      "SELECT pg_is_in_recovery()", database="postgres") == "f":
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

    def _unpack_base(self, env_dir):
        """The base backup's whole filestore into filestore.new (unpack() then removes
        the attachment files the recovered database does not name)."""
        entries = objects.read_map(self.transfer, self.manifest["filestore"])
        new = _new_filestore(env_dir)
        objects.unpack(self.transfer, None, new, entries=entries, local=self._local(env_dir))
        return entries

    def _local(self, env_dir):
        """The live filestore's files a restore links rather than downloads, read once."""
        if self._copies is None:
            self._copies = objects.local_copies(env_dir / "filestore", env_dir / objects.HASHES)
        return self._copies

    def unpack(self, env_dir, log):
        """The base backup's filestore less the attachments the recovered database
        does not name, plus those it names from other backups' maps and the archive."""
        if self.manifest["filestore"].get("layout") != fo.LAYOUT:
            raise RecoveryError(f"backup {self.id}'s filestore is not kept as objects")
        wanted, new = self.referenced or set(), env_dir / "filestore.new"
        early = self._early and self._early[0] == env_dir and self._early[1]
        entries = early.result() if early else objects.read_map(self.transfer,
                                                                 self.manifest["filestore"])
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
        if early:  # the base's files are there: those not named go
            for entry in fo.files(entries):
                if entry[fo.PATH] not in have:
                    (new / entry[fo.PATH]).unlink(missing_ok=True)
        else:
            new = _new_filestore(env_dir)
        owner = os.stat(new)
        written = objects.unpack(self.transfer, None, new, self.backups._counter(),
                                 entries=packed if early else kept + packed,
                                 local=self._local(env_dir) if early else None)
        written += len(fo.files(kept)) if early else 0
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


def discard_leftovers(envs, journal):
    """What an agent stop left of recoveries (their throwaway database and folder, a
    cluster recovered or replaced beside the live one) removed, in environments with
    no restore left to roll back (no `journal`); returns those it was found in."""
    found = set()
    for env_dir in sorted(p for p in envs.root.iterdir() if p.is_dir()):
        if (env_dir / journal).exists():
            continue
        if (env_dir / WORK).exists():
            _Throwaway(envs, env_dir.name, env_dir / WORK).remove()
            found.add(env_dir.name)
        if cluster.leftovers(envs, envs._names(env_dir.name)):
            found.add(env_dir.name)
    return sorted(found)


class _Throwaway:
    """The recovery's PostgreSQL: the environment's image and settings, no network."""

    def __init__(self, envs, env_id, work):
        self.envs, self.env_id, self.work = envs, env_id, work
        self.live_name = envs._names(env_id)["db"]
        self.name = f"{self.live_name}-pitr"

    def create(self, pgdata):
        """Made and started while the base still unpacks, PostgreSQL waiting in it
        for the mark that the base is unpacked."""
        self.live = self.envs._container(self.live_name)
        if self.live is None:
            raise RecoveryError("the environment has no database container")
        return databases.run_throwaway(self.envs, self.live, self.name, self.env_id, "pitr", {
            str(pgdata): {"bind": DATA, "mode": "rw"},
            str(self.work / "wal"): {"bind": WAL_DIR, "mode": "ro"},
            str(self.work / "out"): {"bind": OUT, "mode": "rw"}}, waits_for=f"{WAL_DIR}/{UNPACKED}")

    def start(self, container):
        with engine_errors():
            container.start()
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
    part = target.with_name(f".{target.name}.part")  # a recovery reads it once whole
    with open(part, "wb") as out:
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
            sha256 and _summed(part)["sha256"] != sha256:
        raise RecoveryError(f"{name} from the archive does not match its checksum")
    part.rename(target)


def _check(name, expected, chunks):
    if (chunks.size, chunks.sha256) != (expected.get("size"), expected.get("sha256")):
        raise RecoveryError(f"{name} in storage does not match its checksum")


def _file(name):
    return name.rsplit("/", 1)[-1].rsplit(".", 1)[0]


def _background(work, name):
    """work() on a thread of its own; its future."""
    pool = ThreadPoolExecutor(1, thread_name_prefix=name)
    try:
        return pool.submit(work)
    finally:
        pool.shutdown(wait=False)


def _new_filestore(env_dir):
    """An empty filestore.new, owned as the live filestore."""
    new, live = env_dir / "filestore.new", env_dir / "filestore"
    shutil.rmtree(new, ignore_errors=True)
    new.mkdir()
    owner = os.stat(live) if live.exists() else os.stat(env_dir)
    os.chown(new, owner.st_uid, owner.st_gid)
    os.chmod(new, 0o755)
    return new


def _taken_timelines(spool, base_timeline, newest):
    """Each timeline after the base's up to `newest` named in the recovery's archive
    (an empty history file where the archive holds none): PostgreSQL gives the
    recovered cluster the first timeline after the last it finds there. Its target
    timeline is the base's, so none of these is read."""
    for timeline in range(base_timeline + 1, newest + 1):
        history = spool / f"{timeline:08X}.history"
        if not history.exists():
            history.touch()


def _archiving(live):
    return databases.psql(live.client.api, live, "SHOW archive_mode", database="postgres") != "off"


def _tidy(pgdata, archiving):
    """A recovered cluster made the environment's: the recovery's settings gone, its
    new timeline's history file marked to archive (the throwaway archived nothing),
    the old timeline's last partial segment gone (all of it is in the archive)."""
    (pgdata / "berth-recovery.conf").unlink(missing_ok=True)
    conf = pgdata / "postgresql.auto.conf"
    if conf.exists():
        kept = [line for line in conf.read_text().splitlines() if "berth-recovery.conf" not in line]
        conf.write_text("".join(f"{line}\n" for line in kept))
    for partial in (pgdata / "pg_wal").glob("*.partial"):
        partial.unlink()
    histories = sorted((pgdata / "pg_wal").glob("*.history"))
    if archiving and histories:
        ready = pgdata / "pg_wal" / "archive_status" / f"{histories[-1].name}.ready"
        ready.touch()
        os.lchown(ready, wal.POSTGRES_UID, wal.POSTGRES_UID)


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
