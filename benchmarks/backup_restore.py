"""Benchmark: backup and restore of an environment against `tar | zstd` and
`pg_dump` / `pg_restore` of the same data, side by side.

The setup is the whole product path, nothing stood in: the real `berth serve`
(embedded SQLite, its gateway, local storage under its data directory), a real
`berth-agent run` registered with a registration token, an environment deployed
through the public API on the local test images (as benchmarks/deploy_time.py
does). The environment is then filled: a filestore of about half compressible
text-like files and half random ones, sizes spread log-uniformly from 2 KB to
8 MB, written into the environment's filestore directory; a database grown with
`generate_series` through psql in its PostgreSQL container until
`pg_database_size` reaches the target.

Each round (the order of Berth and baseline alternates between rounds; the
machine is shared; before each operation, untimed, the writes the one before left
to the kernel are put on disk and PostgreSQL takes a checkpoint, so that none
pays for another's: the baseline leaves about a gigabyte to the writeback):
  berth backup    - `POST /api/v1/environments/{id}/backups` on the operations
                    surface until the backup is `completed`: the agent's pg_dump
                    streamed over the engine socket, the filestore hashed and
                    packed (tar | zstd) as objects of the project, both uploaded
                    in parts over HTTP to the control plane's signed storage URLs;
                    each object read back and hashed by the control plane where
                    it is stored (every file in a pack too), and the stored
                    dump's table of contents listed by `pg_restore --list`. Each
                    round's is a full backup: before it, the control plane's
                    record of the project's objects is cleared in its SQLite
  baseline backup - `pg_dump -Fc > file` inside the PostgreSQL container, and
                    `tar -cf - . | zstd -T0 -3 > file` of the filestore, on the
                    same disk
  berth restore   - `POST /api/v1/environments/{id}/restore` of that backup until
                    the task is `completed`. A restore takes a safety backup
                    first; the figure compared is the restore itself, from the
                    task-log line after the safety backup to the task's end
                    (filestore downloaded and unpacked while the dump is copied
                    into the PostgreSQL container and pg_restore'd from there into
                    a database of its own, ERP stopped, databases renamed,
                    filestore swapped, ERP started and healthy); the whole task is
                    shown too, and `--steps` the agent's task log, which gives
                    each phase's time
  baseline restore- `zstd -d | tar -x` into a new directory, and `pg_restore`
                    of the dump file into a new database in the same container

Throughput is (database size + filestore size) / time. The agent's RSS is
sampled (psutil, every 20 ms) during each Berth operation; its growth is the
peak less the RSS just before. Targets: Berth within 1.5x of the baseline's
time for backup and for restore (median of the rounds), agent RSS growth
under 30 MB (the largest of the rounds). Then new files of 1 % of the filestore's
bytes are written and a second backup taken: its filestore's part (task log, from
its start to its objects and map uploaded) must take at most 10 % of the last
full backup's, and upload at most 2 % of its bytes. Then one restore drill of the last backup
(`POST /api/v1/environments/{id}/drills`): its time to restore, printed; it must
pass. Exits 1 on FAIL.

    python benchmarks/backup_restore.py [--rounds 3] [--small] [--json]
"""

import argparse
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from deploy_time import Bench  # noqa: E402

MB = 1024 * 1024
TARGET_RATIO, TARGET_RSS_MB = 1.5, 30.0
# A second backup after a 1 % change, against a full one: its filestore's time, its bytes.
TARGET_SECOND_TIME, TARGET_SECOND_BYTES = 0.10, 0.02
# Seconds between the script's looks at a running task: each is a request the
# control plane answers on the machine being measured. Berth's times are the
# control plane's own records (the task's creation to its end), not when a look
# saw the end.
WAIT_POLL = 0.5
OPS = "/api/v1"


class MachineCPU:
    """The whole machine's busy CPU seconds (every process: the control plane, the
    agent, the engine, PostgreSQL, zstd and tar) from `mark()` to `took()`, each
    kept in `spans`, and by whose processes (`groups`: a process that ended counts
    for the one that waited for it: tar and zstd for the agent, what the engine
    ran in a container for the engine); on 2 cores, what an operation costs
    bounds how short it can be."""

    def __init__(self):
        self.spans, self.groups, self.start, self.roles = [], [], None, {}

    @staticmethod
    def busy():
        cpu = psutil.cpu_times()
        return cpu.user + cpu.nice + cpu.system + getattr(cpu, "irq", 0) + getattr(
            cpu, "softirq", 0)

    def _group(self, pid, name):
        if pid in self.roles:
            return self.roles[pid]
        if name.startswith(("dockerd", "containerd", "runc", "docker-")):
            return "engine"
        if name.startswith(("postgres", "pg_")):
            return "postgres"
        return "other"

    def _processes(self):
        found = {}
        for p in psutil.process_iter(["name", "cpu_times"]):
            t = p.info["cpu_times"]
            if t is not None:
                found[p.pid] = (self._group(p.pid, p.info["name"] or ""),
                                t.user + t.system + t.children_user + t.children_system)
        return found

    def mark(self):
        self.before = self._processes()
        self.start = self.busy()

    def took(self):
        self.spans.append(self.busy() - self.start)
        groups = {}
        for pid, (group, cpu) in self._processes().items():
            groups[group] = groups.get(group, 0) + cpu - self.before.get(pid, (None, 0))[1]
        self.groups.append(groups)


machine_cpu = MachineCPU()


class BackupBench(Bench):
    RESTORING = "taken; restoring backup"  # the task-log line a restore's figure starts at
    def start(self):
        super().start()
        with self._db() as db:
            org = str(uuid.UUID(db.execute("SELECT id FROM organization").fetchone()[0]))
        user = self.served.admin("user", "create", "--org", org, "--name", "bench",
                                 "--email", "bench@example.com",
                                 "--permission", "project.environments.deploy")
        self.user_token = self.served.admin("user", "token", user["id"])["token"]
        self.env_id, _, _ = self.deploy(0)
        self.env_dir = self.tmp / "srv" / self.env_id
        self.db_container = self.docker.containers.get(
            f"berth-{self.env_id.replace('-', '')[:12]}-db")
        self.agent_ps = psutil.Process(self.agent.pid)
        machine_cpu.roles = {self.agent.pid: "agent", self.served.proc.pid: "control plane"}
        return self

    def _ops(self, method, path, **kwargs):
        import requests

        r = requests.request(method, self.served.url + OPS + path, timeout=30,
                             headers={"Authorization": f"Bearer {self.user_token}"}, **kwargs)
        if r.status_code >= 400:
            raise SystemExit(f"{method} {OPS}{path}: {r.status_code} {r.text}")
        return r.json()

    def psql(self, sql):
        out = self.db_container.exec_run(["psql", "-X", "-q", "-t", "-A", "-U", "odoo", "-d",
                                          "odoo", "-v", "ON_ERROR_STOP=1", "-c", sql])
        if out.exit_code:
            raise SystemExit(f"psql failed: {out.output.decode(errors='replace')}")
        return out.output.decode().strip()

    def settle(self):
        """Before each measured operation, Berth's or the baseline's, untimed: the
        writes the one before left to the kernel put on disk and PostgreSQL's
        checkpoint taken, so that none pays for another's deferred writes (the
        baseline's unpack and pg_restore leave about a gigabyte to the writeback)."""
        self.psql("CHECKPOINT")
        os.sync()

    def sh(self, script):
        """A shell script in the PostgreSQL container, as the postgres user's peer."""
        out = self.db_container.exec_run(["sh", "-c", script])
        if out.exit_code:
            raise SystemExit(f"{script!r} failed: {out.output.decode(errors='replace')}")

    # --- data ----------------------------------------------------------------

    def fill(self, filestore_mb, database_mb):
        fs = self.env_dir / "filestore"
        st = fs.stat()
        rng = random.Random(42)
        words = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 10)))
                 for _ in range(3000)]
        corpus = " ".join(rng.choices(words, k=800_000)).encode()  # ~5 MB of prose-like text
        total = 0
        for kind in ("text", "random"):
            written = 0
            while written < filestore_mb * MB / 2:
                size = int(math.exp(rng.uniform(math.log(2048), math.log(8 * MB))))
                if kind == "random":
                    data = os.urandom(size)
                else:
                    start = rng.randrange(len(corpus))
                    data = (corpus[start:] + corpus * (size // len(corpus) + 1))[:size]
                name = uuid.UUID(int=rng.getrandbits(128)).hex
                path = fs / "odoo" / name[:2] / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
                written += size
            total += written
        for root, dirs, files in os.walk(fs):  # the ERP's user owns its filestore
            for name in dirs + files:
                os.chown(os.path.join(root, name), st.st_uid, st.st_gid)
        self.psql("CREATE TABLE bench_rows (id bigint PRIMARY KEY, ref text, amount numeric(12,2),"
                  " created timestamptz, note text)")
        start, batch = 1, 200_000 if database_mb >= 100 else 20_000
        while int(self.psql("SELECT pg_database_size('odoo')")) < database_mb * MB:
            self.psql(f"INSERT INTO bench_rows SELECT g, md5(g::text), (random() * 10000)::numeric"
                      f"(12,2), now() - g * interval '1 minute', repeat(md5((g % 1000)::text), 3)"
                      f" || ' ' || md5(random()::text) FROM generate_series({start}, "
                      f"{start + batch - 1}) g")
            start += batch
        self.psql("VACUUM ANALYZE bench_rows")
        self.filestore_bytes = total
        self.database_bytes = int(self.psql("SELECT pg_database_size('odoo')"))
        return total, self.database_bytes

    # --- Berth -------------------------------------------------------------------

    def _sampled(self, run):
        """run() under RSS sampling of the agent: (result, seconds, rss growth MB)."""
        machine_cpu.mark()
        before = self.agent_ps.memory_info().rss
        peak, stop = [before], threading.Event()

        def sample():
            while not stop.is_set():
                peak[0] = max(peak[0], self.agent_ps.memory_info().rss)
                stop.wait(0.02)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        started = time.perf_counter()
        try:
            result = run()
        finally:
            took = time.perf_counter() - started
            machine_cpu.took()
            stop.set()
            sampler.join()
        return result, took, (peak[0] - before) / MB

    def berth_backup(self):
        self.settle()

        def run():
            backup = self._ops("POST", f"/environments/{self.env_id}/backups",
                               json={"comment": "benchmark"})
            done = self._wait(lambda: self._backup_done(backup["id"]), 1800, "the backup",
                              every=WAIT_POLL)
            return {**done, "task_id": backup["task_id"]}

        backup, _, rss = self._sampled(run)
        if backup["status"] != "completed":
            raise SystemExit(f"the backup failed: {backup.get('error_message')}")
        return backup, self._task_seconds(backup["task_id"]), rss

    def forget_objects(self):
        """The project's filestore objects forgotten by the control plane (its packs
        marked removed in its SQLite), so that the next backup uploads the whole
        filestore, as a project's first does: each round compares a full backup."""
        with self._db() as db:
            db.execute("UPDATE filestore_pack SET deleted_at = CURRENT_TIMESTAMP "
                       "WHERE deleted_at IS NULL")

    def change_one_percent(self):
        """New random files of 1 % of the filestore's bytes, as the ERP writes them."""
        fs, rng = self.env_dir / "filestore", random.Random(7)
        st, written = fs.stat(), 0
        while written < self.filestore_bytes / 100:
            name = uuid.UUID(int=rng.getrandbits(128)).hex
            path = fs / "odoo" / name[:2] / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(os.urandom(min(MB, int(self.filestore_bytes / 100) - written + 1)))
            os.chown(path, st.st_uid, st.st_gid)
            written += path.stat().st_size
        return written

    def filestore_part(self, backup):
        """(seconds from the filestore's start to its objects and map uploaded, as the
        task log has them; the manifest's filestore) of a completed backup."""
        from deploy_time import _ts

        with self._db() as db:
            manifest, = db.execute("SELECT manifest FROM backup WHERE id = ?",
                                   (uuid.UUID(backup["id"]).hex,)).fetchone()
            rows = db.execute("SELECT message, created_at FROM task_log_line WHERE "
                              "deployment_id = ? ORDER BY seq",
                              (uuid.UUID(backup["task_id"]).hex,)).fetchall()
        start = next(_ts(at) for m, at in rows if "the filestore's new objects" in m)
        end = next(_ts(at) for m, at in rows if " new objects in " in m)
        return end - start, json.loads(manifest)["filestore"]

    def _task_seconds(self, task_id):
        """From the task's creation to its end, as the control plane recorded them."""
        from deploy_time import _ts

        with self._db() as db:
            created, finished = db.execute(
                "SELECT created_at, completed_at FROM deployment WHERE id = ?",
                (uuid.UUID(task_id).hex,)).fetchone()
        return _ts(finished) - _ts(created)

    def _backup_done(self, backup_id):
        for b in self._ops("GET", f"/environments/{self.env_id}/backups",
                           params={"page_size": 100})["items"]:
            if b["id"] == backup_id and b["status"] in ("completed", "failed", "cancelled"):
                return b
        return None

    def berth_restore(self, backup_id):
        self.settle()

        def run():
            task = self._ops("POST", f"/environments/{self.env_id}/restore",
                             json={"backup_id": backup_id})
            return task["id"], self._wait(lambda: self._task_done(task["id"]), 1800,
                                          "the restore", every=WAIT_POLL)

        (task_id, task), _, rss = self._sampled(run)
        if task["status"] != "completed":
            raise SystemExit(f"the restore failed: {task.get('error_message')}")
        return task_id, self._task_seconds(task_id), rss, self._restore_span(task_id)

    def berth_drill(self, backup_id):
        """A restore drill of the backup: the drill as listed (status, time to restore)."""
        self.settle()
        drill = self._ops("POST", f"/environments/{self.env_id}/drills",
                          json={"backup_id": backup_id})
        self._wait(lambda: self._task_done(drill["id"]), 1800, "the drill", every=WAIT_POLL)
        listed = self.read(f"/environments/{self.env_id}/drills?page_size=5")["items"]
        return next(d for d in listed if d["id"] == drill["id"])

    def _task_done(self, task_id):
        t = self.read(f"/deployments/{task_id}")
        return t if t["status"] in ("completed", "failed", "cancelled") else None

    def _restore_span(self, task_id):
        """Seconds from the log line after the safety backup to the task's end."""
        from deploy_time import _ts

        with self._db() as db:
            rows = db.execute("SELECT message, created_at FROM task_log_line WHERE "
                              "deployment_id = ? ORDER BY seq",
                              (uuid.UUID(task_id).hex,)).fetchall()
            finished = db.execute("SELECT completed_at FROM deployment WHERE id = ?",
                                  (uuid.UUID(task_id).hex,)).fetchone()[0]
        start = next(_ts(at) for message, at in rows if self.RESTORING in message)
        end = _ts(finished) if finished else _ts(rows[-1][1])
        return end - start

    def log_lines(self, task_id):
        """The task's log, each line with its seconds since the task was queued."""
        from deploy_time import _ts

        with self._db() as db:
            rows = db.execute(
                "SELECT l.message, l.created_at, d.created_at FROM task_log_line l JOIN "
                "deployment d ON d.id = l.deployment_id WHERE l.deployment_id = ? "
                "ORDER BY l.seq", (uuid.UUID(task_id).hex,)).fetchall()
        return [f"{_ts(at) - _ts(queued):7.2f} s  {message[:150]}" for message, at, queued in rows]

    # --- baseline ------------------------------------------------------------------

    def baseline_backup(self, out):
        self.settle()
        machine_cpu.mark()
        started = time.perf_counter()
        self.sh("pg_dump -Fc -U odoo odoo > /tmp/bench.dump")
        subprocess.run(f"tar -C {self.env_dir / 'filestore'} -cf - . | zstd -T0 -3 -q > "
                       f"{out / 'filestore.tar.zst'}", shell=True, check=True)
        took = time.perf_counter() - started
        machine_cpu.took()
        return took

    def baseline_restore(self, out):
        target = out / "restored"
        shutil.rmtree(target, ignore_errors=True)
        self.sh("dropdb -U odoo --if-exists bench_copy")
        self.settle()
        started = time.perf_counter()
        machine_cpu.mark()
        target.mkdir()
        subprocess.run(f"zstd -d -q -c {out / 'filestore.tar.zst'} | tar -C {target} "
                       f"--numeric-owner -xf -", shell=True, check=True)
        self.sh("createdb -U odoo -T template0 bench_copy && pg_restore -U odoo -d bench_copy "
                "--no-owner --exit-on-error /tmp/bench.dump")
        took = time.perf_counter() - started
        machine_cpu.took()
        shutil.rmtree(target, ignore_errors=True)
        self.sh("dropdb -U odoo bench_copy")
        return took


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--small", action="store_true",
                        help="a quick run: 100 MB filestore, 20 MB database")
    parser.add_argument("--filestore-mb", type=int)
    parser.add_argument("--database-mb", type=int)
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--steps", action="store_true",
                        help="where Berth's time goes: the median gap before each task-log line")
    args = parser.parse_args()
    fs_mb = args.filestore_mb or (100 if args.small else 1024)
    db_mb = args.database_mb or (20 if args.small else 200)

    def say(text):
        if not args.json:
            print(text, file=sys.stderr, flush=True)

    tmp = Path(tempfile.mkdtemp(prefix="berth-backup-bench-"))
    bench = BackupBench(tmp)
    out = tmp / "baseline"
    out.mkdir()
    times = {k: [] for k in ("berth_backup", "base_backup", "berth_restore",
                             "berth_restore_task", "base_restore")}
    rss = {"backup": [], "restore": []}
    cpu = {k: [] for k in ("berth_backup", "base_backup", "berth_restore_task", "base_restore")}
    groups = {k: [] for k in cpu}
    tasks, steps, last_restore = [], None, None
    try:
        bench.start()
        say(f"environment {bench.env_id} deployed; filling it")
        fs_bytes, db_bytes = bench.fill(fs_mb, db_mb)
        say(f"filestore {fs_bytes / MB:.0f} MB, database {db_bytes / MB:.0f} MB")
        for n in range(args.rounds):
            berth_first = n % 2 == 0
            for step in (("berth", "base") if berth_first else ("base", "berth")):
                if step == "berth":
                    bench.forget_objects()
                    backup, took, grew = bench.berth_backup()
                    times["berth_backup"].append(took)
                    cpu["berth_backup"].append(machine_cpu.spans[-1])
                    groups["berth_backup"].append(machine_cpu.groups[-1])
                    tasks.append(backup["task_id"])
                    rss["backup"].append(grew)
                else:
                    times["base_backup"].append(bench.baseline_backup(out))
                    cpu["base_backup"].append(machine_cpu.spans[-1])
                    groups["base_backup"].append(machine_cpu.groups[-1])
            for step in (("berth", "base") if berth_first else ("base", "berth")):
                if step == "berth":
                    task_id, took, grew, span = bench.berth_restore(backup["id"])
                    tasks.append(task_id)
                    times["berth_restore_task"].append(took)
                    cpu["berth_restore_task"].append(machine_cpu.spans[-1])
                    groups["berth_restore_task"].append(machine_cpu.groups[-1])
                    times["berth_restore"].append(span)
                    rss["restore"].append(grew)
                else:
                    times["base_restore"].append(bench.baseline_restore(out))
                    cpu["base_restore"].append(machine_cpu.spans[-1])
                    groups["base_restore"].append(machine_cpu.groups[-1])
            say(f"round {n + 1}: " + "  ".join(f"{k} {v[-1]:.1f}s" for k, v in times.items())
                + f"  rss +{rss['backup'][-1]:.1f}/+{rss['restore'][-1]:.1f} MB")
        compressed = backup["compressed_size"]
        full_fs = bench.filestore_part(backup)
        changed = bench.change_one_percent()
        second, second_took, _ = bench.berth_backup()
        tasks.append(second["task_id"])
        second_fs = bench.filestore_part(second)
        say(f"second backup after a 1 % change ({changed / MB:.1f} MB of new files): "
            f"{second_took:.1f} s in all, its filestore {second_fs[0]:.2f} s")
        drill = bench.berth_drill(backup["id"])
        say(f"drill: {drill['status']}, time to restore {drill['restore_seconds']} s")
        steps = bench.steps(tasks) if args.steps else None
        last_restore = bench.log_lines(task_id) if args.steps else None
    finally:
        bench.close()
        shutil.rmtree(tmp, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in times.items()}
    data_mb = (fs_bytes + db_bytes) / MB
    ratios = {"backup": med["berth_backup"] / med["base_backup"],
              "restore": med["berth_restore"] / med["base_restore"]}
    incremental = {"changed_bytes": changed, "full_filestore_seconds": full_fs[0],
                   "second_filestore_seconds": second_fs[0], "second_backup_seconds": second_took,
                   "full_uploaded_bytes": full_fs[1]["uploaded_bytes"],
                   "second_uploaded_bytes": second_fs[1]["uploaded_bytes"]}
    ratios["second_time"] = second_fs[0] / full_fs[0]
    ratios["second_bytes"] = second_fs[1]["uploaded_bytes"] / full_fs[1]["uploaded_bytes"]
    rss_peak = {k: max(v) for k, v in rss.items()}
    passed = {"backup": ratios["backup"] <= TARGET_RATIO,
              "restore": ratios["restore"] <= TARGET_RATIO,
              "rss": max(rss_peak.values()) < TARGET_RSS_MB,
              "drill": drill["status"] == "passed",
              "second_time": ratios["second_time"] <= TARGET_SECOND_TIME,
              "second_bytes": ratios["second_bytes"] <= TARGET_SECOND_BYTES}
    report = {"rounds": args.rounds, "filestore_bytes": fs_bytes, "database_bytes": db_bytes,
              "compressed_bytes": compressed, "median_seconds": med,
              "samples": {k: [round(s, 2) for s in v] for k, v in times.items()},
              "machine_cpu_seconds": {k: statistics.median(v) for k, v in cpu.items()},
              "ratios": ratios, "rss_growth_mb": rss_peak, "pass": passed,
              "incremental": incremental,
              "drill": {k: drill[k] for k in ("status", "restore_seconds", "tables", "rows",
                                               "attachments", "error_message")},
              **({"steps": steps} if steps else {})}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"filestore {fs_bytes / MB:.0f} MB + database {db_bytes / MB:.0f} MB "
              f"({compressed / MB:.0f} MB stored), median of {args.rounds} rounds")
        rows = (("backup  berth", "berth_backup"), ("backup  tar|zstd + pg_dump", "base_backup"),
                ("restore berth (after its safety backup)", "berth_restore"),
                ("restore berth, whole task", "berth_restore_task"),
                ("restore zstd -d|tar + pg_restore", "base_restore"))
        for label, key in rows:
            print(f"{label:42} {med[key]:7.1f} s  {data_mb / med[key]:6.1f} MB/s   "
                  f"(rounds: {' '.join(f'{s:.1f}' for s in times[key])})")
        c = {k: statistics.median(v) for k, v in cpu.items()}
        print(f"machine CPU (all processes), median: backup berth {c['berth_backup']:.1f} s, "
              f"baseline {c['base_backup']:.1f} s; restore berth {c['berth_restore_task']:.1f} s "
              f"for the whole task (its safety backup included), baseline "
              f"{c['base_restore']:.1f} s")
        for what in ("backup", "restore"):
            print(f"{what:7} ratio berth/baseline {ratios[what]:.2f} (target <= {TARGET_RATIO}) "
                  f"{'PASS' if passed[what] else 'FAIL'}")
        print(f"second backup after a 1 % change ({changed / MB:.1f} MB of new files): its "
              f"filestore {second_fs[0]:.2f} s against a full backup's {full_fs[0]:.2f} s, ratio "
              f"{ratios['second_time']:.3f} (target <= {TARGET_SECOND_TIME}) "
              f"{'PASS' if passed['second_time'] else 'FAIL'}; uploaded "
              f"{second_fs[1]['uploaded_bytes'] / MB:.1f} MB against "
              f"{full_fs[1]['uploaded_bytes'] / MB:.1f} MB, ratio {ratios['second_bytes']:.3f} "
              f"(target <= {TARGET_SECOND_BYTES}) {'PASS' if passed['second_bytes'] else 'FAIL'};"
              f" the whole backup {second_took:.1f} s (its database dumped in full)")
        print(f"restore drill of the last backup: {drill['status']}, time to restore "
              f"{drill['restore_seconds']} s (into a throwaway copy, its ERP answering), "
              f"{drill['tables']} tables, {drill['rows']} rows "
              f"{'PASS' if passed['drill'] else 'FAIL: ' + str(drill['error_message'])}")
        print(f"agent RSS growth: backup +{rss_peak['backup']:.1f} MB, restore "
              f"+{rss_peak['restore']:.1f} MB (target < {TARGET_RSS_MB:g} MB) "
              f"{'PASS' if passed['rss'] else 'FAIL'}")
        if steps:
            print("berth steps (median gap before each task-log line):")
            for step, gap in steps.items():
                print(f"  {gap:6.2f} s  {step}")
            print("machine CPU by processes, median seconds:")
            for key, spans in groups.items():
                names = sorted({g for span in spans for g in span})
                print(f"  {key:20} " + ", ".join(
                    f"{g} {statistics.median(span.get(g, 0) for span in spans):.1f}"
                    for g in names))
            print("the last restore's task log:")
            for line in last_restore:
                print(f"  {line}")
    sys.exit(0 if all(passed.values()) else 1)


if __name__ == "__main__":
    main()
