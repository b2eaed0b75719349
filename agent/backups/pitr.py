"""A restore to a point in time (the restore command's `point_in_time`): the base
backup's physical copy recovered in a throwaway PostgreSQL with the archived WAL
after it up to the target time (agent/backups/replay.py); the filestore made of
exactly the files the recovered database names (agent/backups/pitr_files.py).

Into the environment the moment is of, with no neutralisation asked, the recovered
cluster itself is swapped in (agent/backups/cluster.py): it is recovered in the
folder of the environment's database volume and continues on a timeline of its own
(one no archived history file of the cluster names, so that its WAL is archived
beside the old timeline's). Otherwise (a copy into another environment, a
neutralised one, a volume that is not a folder here), the recovered database is
dumped and loaded as a stored backup's dump is, and the live cluster keeps its own.

The throwaway database works in `pitr/` of the environment's directory; it and
its files are removed at the end, also on failure."""

import contextlib
import time
from concurrent.futures import ThreadPoolExecutor

from agent.backups import cluster, databases, replay
from agent.backups.databases import DB
from agent.backups.pitr_files import MomentFilestore, RecoveryError, file_name, summed
from agent.backups.replay import Replay, Throwaway
from agent.errors import engine_errors
from protocol import wal

WORK = "pitr"  # in the environment's directory
REFERENCED = ("SELECT store_fname FROM ir_attachment WHERE store_fname IS NOT NULL "
              "ORDER BY 1")
HAS_ATTACHMENTS = ("SELECT count(*) FROM information_schema.columns WHERE table_name = "
                   "'ir_attachment' AND column_name = 'store_fname'")
READ = 1024 * 1024


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
        self.range = f"{file_name(names[0])}..{file_name(names[-1])}" if names else "none"
        self.name = (f"the moment {self.pit['target_time']} (base backup {self.id}, "
                     f"WAL {self.range})")
        self.referenced = None
        self.files = MomentFilestore(backups, self.pit, self.transfer, self.manifest, self.id)
        self.replay = Replay(backups, self.env_id, self.pit, base, self.range)
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
        with ThreadPoolExecutor(1, thread_name_prefix="berth-pitr-files") as pool:
            early = self.files.begin(env_dir, pool)
            try:
                if self.cluster:  # the filestore's end on a thread, while the ERP stops
                    self._recover_cluster(db, log)
                    self._finishing = _background(alongside, "berth-pitr-files")
                    return
                with self.recovered(log) as (dump, expected):
                    self.backups._load_database(dump, expected, db, log, "restore",
                                                database=databases.STAGED, alongside=alongside)
            finally:
                early.cancel()

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
        copy = Throwaway(self.backups.envs, self.env_id, work)
        copy.remove()
        try:
            container = self._recover(copy, work, work / "pgdata", log)
            dump = self._dump(container, work, log)
            copy.stop()
            yield _LocalFile(dump), {"object": dump.name, **summed(dump)}
        finally:
            copy.remove()

    def _recover_cluster(self, live, log):
        """The moment recovered in the folder beside the live cluster's; the throwaway
        then stops cleanly and the cluster is tidied (one the environment's database
        starts on) on a thread, while the ERP stops: swap() waits for it."""
        work = self.backups.envs._names(self.env_id)["dir"] / WORK
        copy = Throwaway(self.backups.envs, self.env_id, work)
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
                replay.tidy(self.cluster.recovered, archiving)
            finally:
                copy.remove()

        self._stopped = _background(finish, "berth-pitr-stop")

    def _recover(self, copy, work, pgdata, log, live=None):
        container = self.replay.run(copy, work, pgdata, log, live)
        self._read(container, log)
        return container

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
                ["pg_dump", "-U", DB, "-d", DB, "-Fc", "-Z", "0", "-f", f"{replay.OUT}/database.dump"])
        if code != 0:
            raise RecoveryError(f"pg_dump of the recovered database failed: "
                                f"{out.decode(errors='replace')[-500:]}")
        dump = work / "out" / "database.dump"
        log("info", f"the recovered database is dumped ({dump.stat().st_size} bytes in "
                    f"{time.monotonic() - started:.1f} s)")
        return dump

    # --- the filestore ------------------------------------------------------------

    def unpack(self, env_dir, log):
        """filestore.new as it was at the target (agent/backups/pitr_files.py)."""
        self.summary.update(self.files.unpack(env_dir, self.referenced or set(), log))


def discard_leftovers(envs, journal):
    """What an agent stop left of recoveries (their throwaway database and folder, a
    cluster recovered or replaced beside the live one) removed, in environments with
    no restore left to roll back (no `journal`); returns those it was found in."""
    found = set()
    for env_dir in sorted(p for p in envs.root.iterdir() if p.is_dir()):
        if (env_dir / journal).exists():
            continue
        if (env_dir / WORK).exists():
            Throwaway(envs, env_dir.name, env_dir / WORK).remove()
            found.add(env_dir.name)
        if cluster.leftovers(envs, envs._names(env_dir.name)):
            found.add(env_dir.name)
    return sorted(found)


class _LocalFile:
    """A file on this server read as the transfer API's download is."""

    def __init__(self, path):
        self.path = path

    def download(self, name):
        with open(self.path, "rb") as f:
            while chunk := f.read(READ):
                yield chunk


def _background(work, name):
    """work() on a thread of its own; its future."""
    pool = ThreadPoolExecutor(1, thread_name_prefix=name)
    try:
        return pool.submit(work)
    finally:
        pool.shutdown(wait=False)


def _archiving(live):
    return databases.psql(live.client.api, live, "SHOW archive_mode", database="postgres") != "off"


