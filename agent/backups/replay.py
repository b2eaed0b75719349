"""The WAL replayed: a base backup's physical copy recovered in a throwaway
PostgreSQL (the environment's own image, no network) with the archived WAL after
it, up to a target time. The throwaway starts while the base unpacks (PostgreSQL
in it waits for the unpack's mark), and replays each WAL file as its download
ends: restore_command waits for a listed file still coming, and the promotion
counts only once every download has been checked. When the archive holds no
transaction after the target, the recovery stops short of it (PostgreSQL refuses
that) and is made again to the end of the archive: the same database, as nothing
committed in between."""

import contextlib
import datetime as dt
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor

from agent.backups import archive, databases
from agent.backups.pitr_files import RecoveryError, fetch, file_name
from agent.backups.transfer import Checked, Transfer
from agent.deploy import archiving as archiving_setup
from agent.errors import AgentError, engine_errors
from protocol import wal

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
LIVE_TIMELINE = ("SELECT system_identifier, timeline_id FROM pg_control_system(), "
                 "pg_control_checkpoint()")



class Replay:
    """The replay of one restore's moment: `pit` (the restore command's
    `point_in_time`) from `base` (the base backup, as a stored backup's restore
    reads it)."""

    def __init__(self, backups, env_id, pit, base, wal_range):
        self.backups, self.env_id, self.pit, self.range = backups, env_id, pit, wal_range
        self.transfer, self.manifest, self.id = base.transfer, base.manifest, base.id

    def run(self, copy, work, pgdata, log, live=None):
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
            fetch(source, name, spool / file_name(name), stored_sha256=sha256)
        _taken_timelines(spool, int(base["timeline"]), self._newest_timeline(live))
        (spool / EXPECTED).write_text("".join(f"{file_name(n)}\n" for n, _ in self.pit["wal"]))
        (spool / FETCHING).touch()
        os.chmod(spool, 0o755)
        # Each WAL file its own download and decompressor, on threads, while the base
        # unpacks here.
        fetching = [pool.submit(fetch, source, name, spool / file_name(name),
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


class Throwaway:
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


def _check(name, expected, chunks):
    if (chunks.size, chunks.sha256) != (expected.get("size"), expected.get("sha256")):
        raise RecoveryError(f"{name} in storage does not match its checksum")


def _taken_timelines(spool, base_timeline, newest):
    """Each timeline after the base's up to `newest` named in the recovery's archive
    (an empty history file where the archive holds none): PostgreSQL gives the
    recovered cluster the first timeline after the last it finds there. Its target
    timeline is the base's, so none of these is read."""
    for timeline in range(base_timeline + 1, newest + 1):
        history = spool / f"{timeline:08X}.history"
        if not history.exists():
            history.touch()


def tidy(pgdata, archiving):
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


def _postgres_time(iso):
    """An ISO 8601 moment as recovery_target_time takes it (it refuses the 'T' form)."""
    moment = dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone(dt.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f+00")


def _last_lines(logs):
    return " | ".join(line.strip() for line in logs.strip().splitlines()[-6:])
