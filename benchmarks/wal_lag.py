"""Benchmark: how far behind a production environment's writes its archived WAL
is in backup storage, under a steady write load.

The setup is the whole product path (benchmarks/deploy_time.py's `Bench`): the
real `berth serve` (embedded SQLite, local storage under its data directory), a
real `berth-agent run`, a `production` environment deployed through the public
API on the local test images, so its PostgreSQL archives its WAL
(archive_timeout 30 s) into the spool the agent ships from.

The load, pgbench-like, runs in the environment's database for `--minutes`: a
loop of transactions, each inserting 200 rows of about 200 bytes, each row with
its insert time and the WAL position before it (`pg_current_wal_lsn()`), then
sleeping 0.1 s (about 3 MB of WAL a second on this machine).

Every 2 s the script asks the control plane for the newest WAL file in storage
(`GET /api/v1/environments/{id}/wal-archive`, `newest_file`) and the database for
the newest row written before that file's end: the lag is the database's clock
now less that row's time. Beside it, the same for PostgreSQL's own archiver
(`pg_stat_archiver.last_archived_wal`: the file copied into the spool), so the
part the shipping adds shows. Target: the lag's p99 at most 60 s. Prints the
median, p90, p99 and max of both, PASS/FAIL; exits 1 on FAIL.

    python benchmarks/wal_lag.py [--minutes 5] [--json]
"""

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))

from deploy_time import Bench  # noqa: E402

TARGET_P99 = 60.0
SAMPLE_SECONDS = 2.0
SEGMENT = 16 * 1024 * 1024
# (now() is each transaction's start, and the loop commits: the end is fixed first.)
LOAD = ("DO $$ DECLARE until timestamptz := clock_timestamp() + interval '{seconds} seconds'; "
        "BEGIN WHILE clock_timestamp() < until LOOP "
        "INSERT INTO bench_load (at, lsn, body) SELECT clock_timestamp(), pg_current_wal_lsn(), "
        "repeat(md5(random()::text), 6) FROM generate_series(1, 200); COMMIT; "
        "PERFORM pg_sleep(0.1); END LOOP; END $$")


class LagBench(Bench):
    def start(self):
        super().start()
        env = self.api("POST", f"/projects/{self.project_id}/environments",
                       json={"name": "bench-prod", "environment_type": "production"}).json()
        self.env_ids.append(env["id"])
        self.env_id = env["id"]
        self._wait(lambda: self.read(f"/environments/{self.env_id}/status").get("status")
                   == "running", 180, "the environment to run")
        self.db = self.docker.containers.get(f"berth-{self.env_id.replace('-', '')[:12]}-db")
        with self._db() as db:
            org = db.execute("SELECT id FROM organization").fetchone()[0]
        import uuid
        user = self.served.admin("user", "create", "--org", str(uuid.UUID(org)), "--name",
                                 "bench", "--email", "bench@example.com")
        self.user_token = self.served.admin("user", "token", user["id"])["token"]
        self.psql("CREATE TABLE bench_load (id bigserial PRIMARY KEY, at timestamptz, "
                  "lsn pg_lsn, body text)")
        return self

    def psql(self, sql):
        out = self.db.exec_run(["psql", "-X", "-q", "-t", "-A", "-U", "odoo", "-d", "odoo",
                                "-v", "ON_ERROR_STOP=1", "-c", sql])
        if out.exit_code:
            raise SystemExit(f"psql failed: {out.output.decode(errors='replace')}")
        return out.output.decode().strip()

    def archive(self):
        r = requests.get(f"{self.served.url}/api/v1/environments/{self.env_id}/wal-archive",
                         headers={"Authorization": f"Bearer {self.user_token}"}, timeout=30)
        r.raise_for_status()
        return r.json()

    def lag(self, wal_file):
        """Seconds from the newest row written before `wal_file`'s end to now, by
        the database's clock (None: no row is in it yet)."""
        if not wal_file:
            return None
        log, seg = int(wal_file[8:16], 16), int(wal_file[16:24], 16)
        end = (log << 32) + (seg + 1) * SEGMENT
        out = self.psql("SELECT extract(epoch FROM clock_timestamp() - max(at)) FROM bench_load "
                        f"WHERE lsn < '{end >> 32:X}/{end & 0xFFFFFFFF:X}'")
        return float(out) if out else None


def _quantile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    seconds = int(args.minutes * 60)

    def say(text):
        if not args.json:
            print(text, file=sys.stderr, flush=True)

    bench = LagBench(Path(tempfile.mkdtemp(prefix="berth-wal-bench-")))
    samples = {"storage": [], "spool": []}
    try:
        bench.start()
        say(f"environment {bench.env_id} runs; writing for {seconds} s")
        load = threading.Thread(target=bench.psql, args=(LOAD.format(seconds=seconds),),
                                daemon=True)
        load.start()
        time.sleep(5)  # the first rows
        while load.is_alive():
            archived = bench.psql("SELECT coalesce(last_archived_wal, '') FROM pg_stat_archiver")
            stored = bench.lag(bench.archive()["newest_file"])
            spooled = bench.lag(archived[:24] if len(archived) >= 24 else None)
            for name, value in (("storage", stored), ("spool", spooled)):
                if value is not None:
                    samples[name].append(value)
            if stored is not None and len(samples["storage"]) % 15 == 1:
                say(f"lag to storage {stored:.1f} s, to the spool {spooled or 0:.1f} s")
            time.sleep(SAMPLE_SECONDS)
        rows = int(bench.psql("SELECT count(*) FROM bench_load"))
        wal_mb = float(bench.psql("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0') "
                                  "/ 1048576"))
        shown = bench.archive()
    finally:
        bench.close()
    if not samples["storage"]:
        raise SystemExit("no WAL file reached storage")
    figures = {name: {"median": statistics.median(v), "p90": _quantile(v, 0.9),
                      "p99": _quantile(v, 0.99), "max": max(v), "samples": len(v)}
               for name, v in samples.items() if v}
    ok = figures["storage"]["p99"] <= TARGET_P99
    result = {"minutes": args.minutes, "rows": rows, "wal_written_mb": round(wal_mb),
              "files_stored": shown["files"], "lag_seconds": figures,
              "target_p99": TARGET_P99, "pass": ok}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{rows} rows, {wal_mb:.0f} MB of WAL written in {args.minutes:g} min; "
              f"{shown['files']} WAL files in storage")
        for name, f in figures.items():
            print(f"  lag to the {name:7}: median {f['median']:5.1f} s  p90 {f['p90']:5.1f} s  "
                  f"p99 {f['p99']:5.1f} s  max {f['max']:5.1f} s  ({f['samples']} samples)")
        print(f"WAL archive lag p99 {figures['storage']['p99']:.1f} s "
              f"(target <= {TARGET_P99:.0f} s): {'PASS' if ok else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
