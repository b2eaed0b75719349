"""Benchmark: automation rules at scale.

10,000 rules over 1,000 projects (schedules, pushes and events, ten a project), in a
real database, measured through the scheduler's own job and the push endpoint:

- idle tick: the `automation` job's turn (`triggers.run`) when nothing is due;
  target < 20 ms (median of 50 turns);
- busy tick: the turn that fires 100 due schedules (each a run, its event, a backup
  task and the agent's command); target < 1 s;
- push matching: a signed push (through the app's HTTP handling) to a project with
  50 git_push rules, none matching the branch, against the same push to a project
  with none, taken alternately, side by side; the extra median cost, target < 5 ms.

Prints the figures and PASS, exit 0, or FAIL, exit 1.

    python benchmarks/automation.py [--database sqlite|postgres] [--projects 1000]

PostgreSQL: the empty database at CP_BENCH_POSTGRES_URL (the environment, never
argv), else a throwaway cluster as the tests start one.
"""

import argparse
import datetime as dt
import hashlib
import hmac
import json
import os
import statistics
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

IDLE_MS, BUSY_S, PUSH_MS = 20.0, 1.0, 5.0


def setup(args):
    from control_plane.app import create_app
    from control_plane.infra import migrate

    settings = {"DATA_DIR": tempfile.mkdtemp(prefix="berth-bench-automation-"),
                "SECRET_KEY": "bench"}
    if args.database == "postgres":
        url = os.environ.get("CP_BENCH_POSTGRES_URL")
        if not url:
            from tests.support.services import Postgres

            url = Postgres().start().create_database("berth_bench")
        settings["DATABASE_URL"] = url
    app = create_app(settings)
    migrate.upgrade(app.extensions["berth"].db)
    return app


def populate(projects, per_project):
    """Projects with a running environment each, and their rules: schedules not due
    (a year away), push rules and event rules. Returns (projects, environments)."""
    from control_plane.infra import clock
    from control_plane.infra.db import database
    from control_plane.models import AutomationRule, Environment, Organization, Project, Server

    now = clock.now()
    org = Organization.create(name="bench", server_quota=10)
    server = Server.create(organization=org, name="s", provider="p", cpu_cores=64,
                           ram_mb=1 << 20, disk_gb=1000, agent_version="1")
    made, envs = [], []
    with database.atomic():
        for i in range(projects):
            p = Project.create(organization=org, name=f"p{i}", server=server,
                               default_branch="main",
                               git_repo_url=f"https://github.com/acme/erp{i}.git")
            e = Environment.create(project=p, server=server, name="prod", status="running",
                                   branch="main")
            made.append(p)
            envs.append(e)
    rows = []
    for p, e in zip(made, envs, strict=True):
        for j in range(per_project):
            kind = ("schedule", "git_push", "event")[j % 3]
            trigger = {"schedule": {"type": "schedule", "cron": "0 3 1 1 *", "timezone": "UTC"},
                       "git_push": {"type": "git_push", "branch": f"feature/x{j}-*"},
                       "event": {"type": "event", "event": "backup.failed",
                                 "environment_id": str(e.id)}}[kind]
            rows.append({"id": uuid.uuid4(), "created_at": now, "organization": org.id,
                         "project": p.id, "name": f"r{j}", "enabled": True,
                         "trigger": trigger, "trigger_type": kind,
                         "action": {"type": "backup", "environment_id": str(e.id)},
                         "watched_environment": str(e.id) if kind == "event" else None,
                         "next_run_at": now + dt.timedelta(days=365) if kind == "schedule"
                         else None})
    with database.atomic():
        for i in range(0, len(rows), 500):
            AutomationRule.insert_many(rows[i:i + 500]).execute()
    return made, envs


def idle_tick(settings):
    from control_plane.services.automation import triggers

    times = []
    for _ in range(50):
        start = time.perf_counter()
        triggers.run(settings)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def busy_tick(settings, envs):
    """100 schedule rules of 100 environments made due now; one turn fires them."""
    from control_plane.infra import clock
    from control_plane.models import AutomationRule, AutomationRun
    from control_plane.services.automation import triggers

    due = [r.id for e in envs[:100] for r in AutomationRule.select(AutomationRule.id).where(
        AutomationRule.watched_environment.is_null(), AutomationRule.trigger_type == "schedule",
        AutomationRule.project == e.project_id).limit(1)]
    AutomationRule.update(next_run_at=clock.now() - dt.timedelta(minutes=1)).where(
        AutomationRule.id.in_(due)).execute()
    start = time.perf_counter()
    _, fired, _ = triggers.run(settings)
    took = time.perf_counter() - start
    started = AutomationRun.select().where(AutomationRun.task.is_null(False)).count()
    return took, len(fired), started


def push_cost(app, projects):
    """Median push handling time with 50 rules (none matching) and with none."""
    from control_plane.models import AutomationRule
    from control_plane.services.automation import rules
    from control_plane.services.projects import git_push

    busy, bare = projects[-1], projects[-2]
    AutomationRule.delete().where(AutomationRule.project.in_([busy.id, bare.id])).execute()
    env = str(busy.environments[0].id)
    for j in range(50):
        rules.create_rule(busy, name=f"push {j}", trigger={"type": "git_push",
                                                            "branch": f"release/{j}-*"},
                          action={"type": "backup", "environment_id": env})
    secrets = {p.id: git_push.issue_secret(p.id, public_url="https://b.test")["secret"]
               for p in (busy, bare)}
    client = app.test_client()

    def push(project):
        body = json.dumps({"ref": "refs/heads/feature/login", "after": "a" * 40,
                           "repository": {"full_name": f"acme/{project.name.replace('p', 'erp')}"},
                           "commits": []}).encode()
        sig = hmac.new(secrets[project.id].encode(), body, hashlib.sha256).hexdigest()
        start = time.perf_counter()
        r = client.post(f"/api/v1/webhooks/github?project_id={project.id}", data=body,
                        headers={"Content-Type": "application/json", "X-GitHub-Event": "push",
                                 "X-GitHub-Delivery": str(uuid.uuid4()),
                                 "X-Hub-Signature-256": f"sha256={sig}"},
                        environ_base={"REMOTE_ADDR": f"10.0.{len(times[project.id]) % 250}.1"})
        took = time.perf_counter() - start
        assert r.status_code == 200, r.json
        assert r.json["automation_runs"] == [], r.json
        return took

    times = {busy.id: [], bare.id: []}
    for project in (busy, bare) * 5:  # warm-up
        push(project)
    times = {busy.id: [], bare.id: []}
    for _ in range(100):
        for project in (busy, bare):
            times[project.id].append(push(project))
    with_rules, without = (statistics.median(times[p.id]) * 1000 for p in (busy, bare))
    return with_rules, without


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--projects", type=int, default=1000)
    parser.add_argument("--rules-per-project", type=int, default=10)
    args = parser.parse_args()
    app = setup(args)
    settings = app.extensions["berth"].settings
    start = time.perf_counter()
    projects, envs = populate(args.projects, args.rules_per_project)
    print(f"{args.projects * args.rules_per_project:,} rules over {args.projects:,} projects "
          f"({args.database}), made in {time.perf_counter() - start:.1f} s", flush=True)

    idle = idle_tick(settings)
    busy, fired, started = busy_tick(settings, envs)
    with_rules, without = push_cost(app, projects)
    extra = with_rules - without
    checks = [
        (f"idle tick: {idle:.2f} ms (target < {IDLE_MS:.0f} ms)", idle < IDLE_MS),
        (f"tick firing {fired} schedules ({started} tasks started): {busy * 1000:.0f} ms "
         f"(target < {BUSY_S * 1000:.0f} ms)", busy < BUSY_S and fired == 100 == started),
        (f"push with 50 rules: {with_rules:.2f} ms, without: {without:.2f} ms, matching "
         f"costs {extra:.2f} ms (target < {PUSH_MS:.0f} ms)", extra < PUSH_MS),
    ]
    for text, ok in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {text}")
    ok = all(ok for _, ok in checks)
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
