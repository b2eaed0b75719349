"""Benchmark: a restore to a point in time against the same recovery by hand
(`pg_basebackup`'s base unpacked, the archived WAL replayed by PostgreSQL with
`recovery_target_time`, the filestore from `tar | zstd`), side by side.

The setup is backup_restore.py's (the real `berth serve` with local storage, a
real `berth-agent run`), with a `production` environment, so that it archives
its WAL and its backups hold a base. It is filled (`--filestore-mb`,
`--database-mb`), backed up, then written to for `--minutes` (rows of about 200
bytes in a loop, as wal_lag.py writes, and new attachment files); the target is
the middle of that. Once the archive's window reaches past it, each round (the
order alternates):
  berth restore    - `POST /api/v1/environments/{id}/restore` with `target_time`
                     until the task completes; the figure is the restore itself,
                     from the log line after the safety backup to the task's end
                     (base and WAL fetched and checked, the WAL replayed in a
                     throwaway PostgreSQL beside the live cluster, the filestore of
                     the moment written, the ERP stopped, the recovered cluster
                     swapped in, the ERP started and healthy); before each round,
                     the base backup of the new timeline the scheduler takes after
                     a restore in place has ended
  baseline restore - from the same objects in the storage directory: the base
                     (`zstd -d | tar -x`) and each WAL file (`zstd -d`) into new
                     folders, PostgreSQL of the same image started on them with
                     `recovery_target_time` until it is promoted, and the filestore
                     (`tar | zstd` of it, made untimed before) unpacked
Target: Berth within 1.5x of the baseline (median of the rounds). Prints both,
the ratio, PASS/FAIL; exits 1 on FAIL.

    python benchmarks/pitr.py [--rounds 5] [--minutes 2] [--json]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from backup_restore import MB, BackupBench  # noqa: E402
from wal_lag import LOAD  # noqa: E402

TARGET = 1.5
DATA = "/var/lib/postgresql/data"


class PitrBench(BackupBench):
    environment_fields = {"environment_type": "production"}
    RESTORING = "taken; restoring the moment"

    def fill(self, filestore_mb, database_mb):
        """backup_restore.py's data, each file an attachment of the database (a
        restore to a moment writes the files its database names)."""
        filled = super().fill(filestore_mb, database_mb)
        store = self.store()
        store.parent.mkdir(exist_ok=True)
        (self.env_dir / "filestore" / "odoo").rename(store)  # where Odoo keeps them
        self.attach([p.relative_to(store).as_posix() for p in store.rglob("*") if p.is_file()])
        return filled

    def store(self):
        return self.env_dir / "filestore" / "filestore" / "odoo"

    def attach(self, names):
        for i in range(0, len(names), 500):
            values = ", ".join(f"('bench', '{n}')" for n in names[i:i + 500])
            self.psql(f"INSERT INTO ir_attachment (name, store_fname) VALUES {values}")

    def storage(self):
        return next(self.tmp.rglob("objects/wal")).parent

    def write_for(self, seconds, files=20):
        """The load for `seconds`; returns the moment in its middle (the database's
        clock, UTC). New attachment files are written meanwhile."""
        self.psql("CREATE TABLE IF NOT EXISTS bench_load (id bigserial PRIMARY KEY, "
                  "at timestamptz, lsn pg_lsn, body text)")
        load = threading.Thread(target=self.psql, args=(LOAD.format(seconds=seconds),))
        load.start()
        store, st = self.store(), (self.env_dir / "filestore").stat()
        moment = None
        for n in range(files):
            data = os.urandom(256 * 1024)
            name = uuid.uuid4().hex
            path = store / name[:2] / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            os.chown(path, st.st_uid, st.st_gid)
            self.attach([f"{name[:2]}/{name}"])
            time.sleep(seconds / files)
            if n == files // 2:
                moment = self.psql("SELECT to_char(now() AT TIME ZONE 'UTC', "
                                   "'YYYY-MM-DD\"T\"HH24:MI:SS.US')")
        load.join()
        self.psql("SELECT pg_switch_wal()")
        return moment

    def reachable(self, moment):
        def reached():
            shown = self.read(f"/environments/{self.env_id}/wal-archive")
            return shown["window_end"] and shown["window_end"] > moment + "Z"
        self._wait(reached, 300, "the archive's window to reach the moment", every=2)

    def idle(self):
        """No task of the environment in progress (after a restore in place, the
        scheduler takes a base backup of the new timeline at once)."""
        def idle():
            with self._db() as db:
                return not db.execute("SELECT count(*) FROM deployment WHERE environment_id "
                                      "= ? AND status IN ('pending', 'running')",
                                      (self.env_id.replace("-", ""),)).fetchone()[0]
        self._wait(idle, 600, "the environment's tasks to end", every=1)

    def berth_pitr(self, moment):
        self.idle()
        self.settle()

        def run():
            task = self._ops("POST", f"/environments/{self.env_id}/restore",
                             json={"target_time": moment + "Z"})
            return task["id"], self._wait(lambda: self._task_done(task["id"]), 1800,
                                          "the restore", every=1)

        (task_id, task), _, _ = self._sampled(run)
        if task["status"] != "completed":
            raise SystemExit(f"the restore failed: {task.get('error_message')}")
        return task_id, self._restore_span(task_id)

    def baseline_pitr(self, out, backup, moment):
        """The same moment recovered by hand from the stored objects; seconds."""
        self.idle()
        work = out / "pitr"
        shutil.rmtree(work, ignore_errors=True)
        storage = self.storage()
        base = next(storage.rglob(f"{backup['id']}*/base.tar.zst"), None) or \
            next(p for p in storage.rglob("base.tar.zst") if backup["id"] in str(p))
        wal = sorted((storage / "wal" / self.env_id).glob("*/0*.zst"))
        self.settle()
        started = time.perf_counter()
        pgdata, wal_dir, files = work / "pgdata", work / "wal", work / "files"
        for d in (pgdata, wal_dir, files):
            d.mkdir(parents=True)
        subprocess.run(f"zstd -d -q -c {base} | tar -C {pgdata} -xf -", shell=True, check=True)
        for path in wal:
            subprocess.run(["zstd", "-d", "-q", str(path), "-o",
                            str(wal_dir / path.name.removesuffix(".zst"))], check=True)
        (pgdata / "recovery.signal").touch()
        with (pgdata / "postgresql.auto.conf").open("a") as conf:
            conf.write(f"restore_command = 'cp /wal/%f \"%p\"'\n"
                       f"recovery_target_time = '{moment.replace('T', ' ')}+00'\n"
                       "recovery_target_action = 'promote'\n")
        subprocess.run(["chown", "-R", "999:999", str(pgdata), str(wal_dir)], check=True)
        pgdata.chmod(0o700)
        db = self.docker.containers.run(
            self.db_container.image.id, ["postgres", "-c", "archive_mode=off"], detach=True,
            network_mode="none", environment={"POSTGRES_PASSWORD": "x"},
            volumes={str(pgdata): {"bind": DATA, "mode": "rw"},
                     str(wal_dir): {"bind": "/wal", "mode": "ro"}})
        try:
            def promoted():
                code, got = db.exec_run(["psql", "-X", "-tA", "-U", "odoo", "-d", "odoo", "-c",
                                         "SELECT pg_is_in_recovery()"])
                return code == 0 and got.decode().strip() == "f"
            self._wait(promoted, 600, "the recovery by hand", every=0.2)
            subprocess.run(f"zstd -d -q -c {out / 'filestore.tar.zst'} | tar -C {files} "
                           "--numeric-owner -xf -", shell=True, check=True)
            took = time.perf_counter() - started
        finally:
            db.remove(force=True, v=True)
            shutil.rmtree(work, ignore_errors=True)
        return took


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--minutes", type=float, default=2.0)
    parser.add_argument("--filestore-mb", type=int, default=200)
    parser.add_argument("--database-mb", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    def say(text):
        if not args.json:
            print(text, file=sys.stderr, flush=True)

    tmp = Path(tempfile.mkdtemp(prefix="berth-pitr-bench-"))
    bench = PitrBench(tmp)
    out = tmp / "baseline"
    out.mkdir()
    times = {"berth": [], "baseline": []}
    try:
        bench.start()
        say(f"production environment {bench.env_id} deployed; filling it")
        fs_bytes, db_bytes = bench.fill(args.filestore_mb, args.database_mb)
        backup, _, _ = bench.berth_backup()
        say(f"filestore {fs_bytes / MB:.0f} MB, database {db_bytes / MB:.0f} MB; backed up; "
            f"writing for {args.minutes:g} min")
        moment = bench.write_for(int(args.minutes * 60))
        subprocess.run(f"tar -C {bench.env_dir / 'filestore'} -cf - . | zstd -T0 -3 -q > "
                       f"{out / 'filestore.tar.zst'}", shell=True, check=True)
        bench.reachable(moment)
        wal_files = len(list((bench.storage() / "wal" / bench.env_id).glob("*/0*.zst")))
        say(f"the moment {moment}Z is in the window ({wal_files} WAL files archived)")
        task_id = None
        for n in range(args.rounds):
            for step in (("berth", "baseline") if n % 2 == 0 else ("baseline", "berth")):
                if step == "berth":
                    task_id, took = bench.berth_pitr(moment)
                else:
                    took = bench.baseline_pitr(out, backup, moment)
                times[step].append(took)
            say(f"round {n + 1}: berth {times['berth'][-1]:.1f} s, "
                f"baseline {times['baseline'][-1]:.1f} s")
        steps = bench.log_lines(task_id)
    finally:
        bench.close()
        shutil.rmtree(tmp, ignore_errors=True)
    berth, base = statistics.median(times["berth"]), statistics.median(times["baseline"])
    ratio = berth / base
    ok = ratio <= TARGET
    result = {"filestore_mb": round(fs_bytes / MB), "database_mb": round(db_bytes / MB),
              "wal_files": wal_files, "berth_seconds": times["berth"],
              "baseline_seconds": times["baseline"], "ratio": round(ratio, 2),
              "target": TARGET, "pass": ok}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print("\n".join(steps))
        print(f"point-in-time restore: berth {berth:.1f} s, by hand {base:.1f} s (medians of "
              f"{args.rounds}): {ratio:.2f}x (target <= {TARGET}x): {'PASS' if ok else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
