"""The web console at fleet size: 1,000 environments over 100 servers, a signed-in
user, the pages rendered by the real app in process (session lookup, CSRF token,
services, templates), on SQLite and on PostgreSQL (--pages-on).

Printed per database: p50/p95 of the overview (the first page: what needs
attention, every project's environments, every server's figures, the latest
activity), of the environment page beside it, of the project page with its 10
environments and, on SQLite with 7 days of metric history, of the data behind the
7-day and 24-hour charts. The fleet has trouble to show: 1 environment in 20
failed, 1 backup in 10 failed. Targets: the overview under 150 ms at p95 on both
databases, the environment page under 100 ms, a 7-day chart query under 50 ms.
What writing history adds to the gateway's CPU per heartbeat at 5,000 agents is
measured by benchmarks/metric_history.py (its gateway part), run from here unless
--skip-gateway.

    python benchmarks/console.py [--requests 300] [--pages-on both|sqlite|postgres]
                                 [--skip-gateway] [--agents 5000] [--rounds 4]
                                 [--seconds 60] [--database postgres|sqlite]
"""

import argparse
import datetime as dt
import re
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import metric_history  # noqa: E402

PAGE_TARGET_MS, CHART_TARGET_MS, OVERVIEW_TARGET_MS = 100, 50, 150
PASSWORD = "benchmark password"


def _measure(client, paths, requests):
    latencies = []
    for i in range(requests):
        path = paths[i * 7 % len(paths)]
        t0 = time.perf_counter()
        r = client.get(path)
        latencies.append((time.perf_counter() - t0) * 1000)
        assert r.status_code == 200, (path, r.status_code, r.get_data(as_text=True)[:300])
    latencies.sort()
    return statistics.median(latencies), latencies[int(len(latencies) * 0.95) - 1]


def pages(args, database_url=None):
    """The pages' latencies on one database (SQLite when no `database_url`); whether
    each target was met."""
    from control_plane.infra import clock
    from control_plane.infra.db import database
    from control_plane.models import (
        AuditEvent,
        Backup,
        Deployment,
        Environment,
        Organization,
        TaskLogLine,
    )
    from control_plane.services.accounts import orgs, sessions

    label = "PostgreSQL" if database_url else "SQLite"
    with tempfile.TemporaryDirectory() as data_dir:
        app, placed, _ = metric_history._world(data_dir, metric_history.SERVERS,
                                                metric_history.ENVS_PER_SERVER, database_url)
        now = int(time.time()) // 60 * 60
        clock.set_source(lambda: dt.datetime.fromtimestamp(now, dt.UTC).replace(tzinfo=None))
        t0 = time.perf_counter()
        if database_url:  # the last hour: the overview reads the newest minute only
            metric_history._minutes(placed, now - 60 * 60, 60)
            history = "the last hour of history"
        else:
            metric_history._minutes(placed, now - 2880 * 60, 2880)  # 48 hours of minutes
            metric_history._hours(placed, (now // 3600 - 7 * 24) * 3600, 5 * 24)  # days 3-7
            history = "7 days of history"
        seeded = time.perf_counter() - t0
        # Each environment with a week of deployments (one a day), each with a log, and
        # a week of backups; 1 in 20 failed, 1 backup in 10 failed.
        envs = [uuid.UUID(e) for v in placed.values() for e in v]
        org = Organization.select().first()
        with database.atomic():
            for n, env_id in enumerate(envs):
                project = Environment.get_by_id(env_id).project_id
                for day in range(7):
                    d = Deployment.create(environment=env_id, project=project, kind="deploy",
                                          status="success", version=day + 1, trigger="manual",
                                          git_branch="main", git_commit="a" * 40)
                    TaskLogLine.insert_many([{"deployment": d.id, "seq": i,
                                              "message": f"step {i} of the deployment"}
                                             for i in range(40)]).execute()
                Backup.insert_many([{"environment": env_id, "status": "failed"
                                     if (n + day) % 10 == 0 else "completed",
                                     "created_at": clock.now() - dt.timedelta(days=7 - day)}
                                    for day in range(7)]).execute()
                if n % 20 == 0:
                    Environment.update(status="failed").where(Environment.id == env_id).execute()
            AuditEvent.insert_many([{"organization": org.id, "actor_type": "user",
                                     "actor_name": "bench@example.com",
                                     "action": "environment.deploy",
                                     "target_type": "environment", "target_id": str(e)}
                                    for e in envs]).execute()
        user = orgs.create_user(org.id, "bench", "bench@example.com",
                                ("project.environments.deploy",))
        sessions.set_password(user.id, PASSWORD)
        client = app.test_client()
        r = client.post("/sign-in", data={"email": user.email, "password": PASSWORD},
                        headers={"Origin": "http://localhost"})
        assert r.status_code == 303, r.status_code
        page = client.get(f"/environments/{envs[0]}").get_data(as_text=True)
        assert re.search(r'id="task-log"', page) and "step 39 of the deployment" in page
        page = client.get("/").get_data(as_text=True)
        assert page.count('class="critical"') >= 50, "the failed environments"
        size = len(page.encode())
        print(f"{label}: {len(envs)} environments over {len(placed)} servers, {history} "
              f"(seeded in {seeded:.0f} s), 7 deployments and backups each; the overview "
              f"is {size / 1024:.0f} KiB of HTML")
        results = {}
        projects = {str(Environment.get_by_id(e).project_id) for e in envs}
        measured = [("overview", ["/"]),
                    ("environment page", [f"/environments/{e}" for e in envs]),
                    ("project page (10 environments)", [f"/projects/{p}" for p in projects])]
        if not database_url:
            measured += [
                ("7-day chart data", [f"/environments/{e}/history.json?range=7d" for e in envs]),
                ("24-hour chart data", [f"/environments/{e}/history.json?range=24h"
                                        for e in envs])]
        for name, paths in measured:
            p50, p95 = _measure(client, paths, args.requests)
            results[name] = p95
            print(f"  {name:32s} p50 {p50:6.1f} ms  p95 {p95:6.1f} ms")
        clock.set_source(None)
        app.extensions["berth"].db.close()
    checks = [("overview", OVERVIEW_TARGET_MS), ("environment page", PAGE_TARGET_MS)]
    if not database_url:
        checks.append(("7-day chart data", CHART_TARGET_MS))
    ok = True
    for name, target in checks:
        met = results[name] < target
        ok = ok and met
        print(f"{label} {name} p95 {results[name]:.1f} ms (target < {target} ms) "
              f"{'PASS' if met else 'FAIL'}")
    return ok


def all_pages(args):
    ok = True
    if args.pages_on in ("both", "sqlite"):
        ok = pages(args) and ok
    if args.pages_on in ("both", "postgres"):
        from benchmarks.projects_list import start_postgres

        pg, url = start_postgres()
        try:
            ok = pages(args, url) and ok
        finally:
            pg.stop()
    return ok


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--pages-on", choices=("both", "sqlite", "postgres"), default="both")
    parser.add_argument("--skip-gateway", action="store_true")
    parser.add_argument("--agents", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=4, help="rounds each way")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--flush", type=float, default=60)
    parser.add_argument("--database", choices=("postgres", "sqlite"), default="postgres")
    args = parser.parse_args()
    ok = all_pages(args)
    if not args.skip_gateway:
        ok = metric_history.gateway(args) and ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
