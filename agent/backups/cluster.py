"""An environment's database cluster swapped whole: a restore in place to a point in
time recovers the cluster beside the live one, in the folder of the database's
volume (`recovered`, beside `_data`, the folder the engine mounts), then swaps the
folders with the database stopped: `_data` becomes `replaced`, `recovered` becomes
`_data`. Two renames on one file system, whatever the cluster's size; each step
can be undone (`put_back`) until the restore stands, and `replaced` is deleted
after it. When the engine's volume is not such a folder on this server (another
volume driver), the restore loads a dump instead (`Cluster.of` is None).

Before the live cluster stops, what it wrote since its last archived WAL file is
switched out and archived, so that the archive keeps every moment before the
restore too."""

import contextlib
import secrets
import shutil
import threading
import time
from pathlib import Path

from agent.backups import databases
from agent.deploy import db_ready
from agent.errors import AgentError, engine_errors

RECOVERED, REPLACED, DISCARDED = "berth-recovered", "berth-replaced", "berth-discarded"
TRASH = "berth-trash-"  # renamed at once, deleted in the background
STOP_TIMEOUT = 60  # seconds PostgreSQL has for its shutdown checkpoint
READY_TIMEOUT = 120
ARCHIVED_WAIT = 30  # seconds the last WAL file has to be archived before the stop
# One statement: the current WAL file switched out, then waited for until archived.
ARCHIVE_LAST = (
    "DO $$ DECLARE wanted text; until timestamptz := clock_timestamp() + interval "
    f"'{ARCHIVED_WAIT} seconds'; BEGIN "
    "IF current_setting('archive_mode') = 'off' THEN RETURN; END IF; "
    "wanted := pg_walfile_name(pg_switch_wal()); "
    "LOOP PERFORM pg_stat_clear_snapshot(); "  # else the archiver seen is the first look's
    "EXIT WHEN (SELECT coalesce(last_archived_wal, '') FROM pg_stat_archiver) >= wanted; "
    "IF clock_timestamp() > until THEN "
    "RAISE EXCEPTION 'WAL file % not archived within % s', wanted, "
    f"{ARCHIVED_WAIT}; END IF; "
    "PERFORM pg_sleep(0.02); END LOOP; END $$")


class ClusterError(AgentError):
    pass


class Cluster:
    def __init__(self, envs, names, data):
        self.envs, self.names, self.data = envs, names, data
        self.recovered = data.parent / RECOVERED
        self.replaced = data.parent / REPLACED
        self.discarded = data.parent / DISCARDED

    @classmethod
    def of(cls, envs, names):
        """The environment's cluster as folders, or None (no such volume here)."""
        with contextlib.suppress(Exception), engine_errors():
            volume = envs.docker.volumes.get(names["volume"])
            data = Path(volume.attrs.get("Mountpoint") or "")
            # `_data` is missing only while a swap is cut short between its renames.
            if volume.attrs.get("Driver") == "local" and data.name == "_data" and (
                    data.is_dir() or (data.parent / REPLACED).is_dir()):
                return cls(envs, names, data)
        return None

    def swap(self, db, log):
        """The recovered cluster in the live one's place (the ERP stopped); `replaced`
        is this swap's only (discard() ran before the recovery)."""
        if self.replaced.exists() or not self.recovered.is_dir():
            raise ClusterError("the folders beside the live cluster are not as a swap needs")
        self._archive_last(db, log)
        started = time.monotonic()
        with engine_errors():
            db.stop(timeout=STOP_TIMEOUT)
        self.data.rename(self.replaced)
        self.recovered.rename(self.data)
        self._start(db, log)
        log("info", f"restore: the recovered cluster is in place "
                    f"({time.monotonic() - started:.2f} s with the database stopped)")

    def put_back(self, log):
        """The replaced cluster back in place if a swap began (whether it did), the
        database running."""
        db = self.envs._container(self.names["db"])
        began = self.replaced.exists()
        if began:
            if db is not None:
                with engine_errors():
                    db.stop(timeout=STOP_TIMEOUT)
            if self.data.exists():
                _trash(self.discarded)
                self.data.rename(self.discarded)
            self.replaced.rename(self.data)
            log("info", "put the replaced database cluster back")
        self.discard()
        if db is not None:
            with engine_errors():
                db.reload()
            if db.status != "running":
                self._start(db, log)
        return began

    def discard(self):
        """What is beside the live cluster renamed away at once and deleted in the
        background (a later restore never mistakes it for its own); whether any was."""
        found = [_trash(path) for path in (self.recovered, self.replaced, self.discarded)]
        for trash in self.data.parent.glob(f"{TRASH}*"):
            threading.Thread(target=shutil.rmtree, args=(trash,),
                             kwargs={"ignore_errors": True}, daemon=True,
                             name="berth-discard-cluster").start()
        return any(found)

    def _archive_last(self, db, log):
        """The live cluster's current WAL file switched out and archived (waited for at
        most ARCHIVED_WAIT s: a failing archive is an alert of its own)."""
        try:
            databases.psql(db.client.api, db, ARCHIVE_LAST, database="postgres")
        except AgentError as exc:
            log("warning", f"the live cluster's last WAL was not archived: {exc}; "
                           "the restore goes on")

    def _start(self, db, log):
        """The database started and waited for (agent/deploy/db_ready.py)."""
        with engine_errors():
            since = time.time() - 1  # a pid file older is not this start's
            db.start()
            if db_ready.wait_ready(db, READY_TIMEOUT, data=self.data, since=since):
                return
            logs = db.logs(tail=10).decode(errors="replace").strip().splitlines()
        raise ClusterError(f"the database did not start on the swapped cluster: "
                           f"{' | '.join(logs[-4:])}")


def leftovers(envs, names):
    """Folders a restore left beside the environment's cluster: deleted (a swap an agent
    stop cut short is put back first, by the restore's journal)."""
    cluster = Cluster.of(envs, names)
    return bool(cluster and cluster.discard())


def _trash(path):
    if not path.exists():
        return False
    path.rename(path.with_name(TRASH + secrets.token_hex(8)))
    return True
