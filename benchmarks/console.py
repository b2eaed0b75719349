"""The web console at fleet size: 1,000 environments over 100 servers with 7 days of
metric history (SQLite, the default), a signed-in user, the pages rendered by the
real app in process (session lookup, CSRF token, services, templates).

Printed: p50/p95 of the environment page (server-side render), of the data behind
its 7-day charts (the JSON the page's charts fetch) and of the project page with
its 10 environments. Targets: the environment page under 100 ms at p95, a 7-day
chart query under 50 ms. The third target of the console's issue, what writing
history adds to the gateway's CPU per heartbeat at 5,000 agents, is measured by
benchmarks/metric_history.py (its gateway part), run from here unless
--skip-gateway.

    python benchmarks/console.py [--requests 300] [--skip-gateway]
                                 [--agents 5000] [--rounds 4] [--seconds 60]
                                 [--database postgres|sqlite]
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

PAGE_TARGET_MS, CHART_TARGET_MS = 100, 50
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


def pages(args):
    from control_plane.infra import clock
    from control_plane.infra.db import database
    from control_plane.models import Deployment, Environment, Organization, TaskLogLine
    from control_plane.services.accounts import orgs, sessions

    with tempfile.TemporaryDirectory() as data_dir:
        app, placed, _ = metric_history._world(data_dir, metric_history.SERVERS,
                                                metric_history.ENVS_PER_SERVER)
        now = int(time.time()) // 60 * 60
        clock.set_source(lambda: dt.datetime.fromtimestamp(now, dt.UTC).replace(tzinfo=None))
        t0 = time.perf_counter()
        metric_history._minutes(placed, now - 2880 * 60, 2880)  # 48 hours of minutes
        metric_history._hours(placed, (now // 3600 - 7 * 24) * 3600, 5 * 24)  # days 3-7
        seeded = time.perf_counter() - t0
        # Each environment with a week of deployments (one a day), each with a log.
        envs = [uuid.UUID(e) for v in placed.values() for e in v]
        with database.atomic():
            for env_id in envs:
                project = Environment.get_by_id(env_id).project_id
                for day in range(7):
                    d = Deployment.create(environment=env_id, project=project, kind="deploy",
                                          status="success", version=day + 1, trigger="manual",
                                          git_branch="main", git_commit="a" * 40)
                    TaskLogLine.insert_many([{"deployment": d.id, "seq": n,
                                              "message": f"step {n} of the deployment"}
                                             for n in range(40)]).execute()
        org = Organization.select().first()
        user = orgs.create_user(org.id, "bench", "bench@example.com",
                                ("project.environments.deploy",))
        sessions.set_password(user.id, PASSWORD)
        client = app.test_client()
        r = client.post("/sign-in", data={"email": user.email, "password": PASSWORD},
                        headers={"Origin": "http://localhost"})
        assert r.status_code == 303, r.status_code
        page = client.get(f"/environments/{envs[0]}").get_data(as_text=True)
        assert re.search(r'id="task-log"', page) and "step 39 of the deployment" in page
        print(f"{len(envs)} environments over {len(placed)} servers, 7 days of history "
              f"(seeded in {seeded:.0f} s), 7 deployments each, SQLite")
        results = {}
        projects = {str(Environment.get_by_id(e).project_id) for e in envs}
        for name, paths in (
                ("environment page", [f"/environments/{e}" for e in envs]),
                ("7-day chart data", [f"/environments/{e}/history.json?range=7d" for e in envs]),
                ("24-hour chart data", [f"/environments/{e}/history.json?range=24h"
                                        for e in envs]),
                ("project page (10 environments)", [f"/projects/{p}" for p in projects])):
            p50, p95 = _measure(client, paths, args.requests)
            results[name] = p95
            print(f"  {name:32s} p50 {p50:6.1f} ms  p95 {p95:6.1f} ms")
        clock.set_source(None)
    page_ok = results["environment page"] < PAGE_TARGET_MS
    chart_ok = results["7-day chart data"] < CHART_TARGET_MS
    print(f"environment page p95 {results['environment page']:.1f} ms (target < "
          f"{PAGE_TARGET_MS} ms) {'PASS' if page_ok else 'FAIL'}")
    print(f"7-day chart query p95 {results['7-day chart data']:.1f} ms (target < "
          f"{CHART_TARGET_MS} ms) {'PASS' if chart_ok else 'FAIL'}")
    return page_ok and chart_ok


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--skip-gateway", action="store_true")
    parser.add_argument("--agents", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=4, help="rounds each way")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--flush", type=float, default=60)
    parser.add_argument("--database", choices=("postgres", "sqlite"), default="postgres")
    args = parser.parse_args()
    ok = pages(args)
    if not args.skip_gateway:
        ok = metric_history.gateway(args) and ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
