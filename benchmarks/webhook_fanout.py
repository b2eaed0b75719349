"""Benchmark: outgoing webhook fan-out and delivery end to end.

Events are written to the outbox the way the services write them
(`record_event`, committed in batches); the real scheduler loop (`jobs()`, in a
thread, as in `berth serve`) fans each of them out to every webhook (one per
receiver: the HTTPS test receiver, trusted CA, WEBHOOK_ALLOW_PRIVATE, several of
them on their own ports in one process of their own) and delivers. Two phases,
1,000 events each:

- burst: all at once (50 per transaction): deliveries per second, first commit to
  last receipt;
- steady: 200 events per second: end-to-end lag (event committed -> received).

`first_ms`: from the first commit to the first receipt (the delivery loop may be
between its turns, CP_WEBHOOK_POLL_SECONDS apart, when the events come).

A delivery is one (webhook, event) pair: the receivers report each request with
their port and its `webhook-id`, and each phase checks that every delivery arrived
exactly once (lost: expected and never received; duplicates: received more than
once), that the process made exactly one attempt per delivery (the
`berth_webhook_delivery_attempts` counter) and that every delivery row ended
`delivered`. Target: at least 1,000 deliveries/s in the burst. Prints the figures
and PASS, exit 0, or FAIL, exit 1.

    python benchmarks/webhook_fanout.py [--events 1000] [--webhooks 4] [--rate 200]
                                        [--target 1000] [--database sqlite|postgres]

PostgreSQL: the empty database at CP_BENCH_POSTGRES_URL (the environment, never
argv: it may carry a password), else a throwaway cluster as the tests start one.
"""

import argparse
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time

from control_plane.agent_link import Plain

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TARGET = 1000  # deliveries per second
BATCH = 50


def receiver_process(conn, count):
    """`count` real HTTPS test receivers in their own process: they answer 200 and
    record receipts."""
    from tests.support.webhook_receiver import Receiver, _ca

    ca, ca_path = _ca()
    receivers = [Receiver(ca) for _ in range(count)]
    conn.send(([r.url for r in receivers], ca_path))
    while True:
        msg = conn.recv()
        if msg == "count":
            conn.send(sum(len(r.requests) for r in receivers))
        elif msg == "take":
            got = [(r.port, q.headers["webhook-id"], q.time)
                   for r in receivers for q in r.requests]
            for r in receivers:
                r.reset()
            conn.send(got)
        else:
            for r in receivers:
                r.close()
            return


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def produce(org, project, n, rate):
    """n events, committed BATCH at a time (paced to `rate` events/s if given):
    {event_id: commit time}."""
    from control_plane import events
    from control_plane.infra.db import database

    created, started = {}, time.time()
    for i in range(0, n, BATCH):
        if rate:
            delay = started + i / rate - time.time()
            if delay > 0:
                time.sleep(delay)
        with database.atomic():
            ids = [str(events.record_event(org.id, project.id, events.Name.DEPLOY_COMPLETED, {
                "environment_id": "bench", "project_id": str(project.id), "task_id": str(j),
                "status": "completed", "duration_seconds": 1}).event_id)
                for j in range(i, min(n, i + BATCH))]
        now = time.time()
        created.update(dict.fromkeys(ids, now))
    return created


def attempts_made():
    from control_plane.infra.observability import WEBHOOK_ATTEMPTS

    return sum(m.value for metric in WEBHOOK_ATTEMPTS.collect() for m in metric.samples
               if m.name.endswith("_total"))


def phase(name, conn, org, project, ports, n, rate):
    """One phase: {column: figure}. A delivery is (receiver port, event id)."""
    from control_plane.models import WebhookDelivery

    conn.send("take")
    conn.recv()
    attempts_before = attempts_made()
    created = produce(org, project, n, rate)
    expected = {(port, eid) for port in ports for eid in created}
    deadline = time.time() + 120
    while time.time() < deadline:
        conn.send("count")
        if conn.recv() >= len(expected):
            break
        time.sleep(0.05)
    time.sleep(0.2)  # a duplicate sent late still shows
    conn.send("take")
    got = conn.recv()
    received = {}
    for port, eid, at in got:
        received.setdefault((port, eid), at)
    lost = expected - set(received)
    dupes = len(got) - len(received)
    lags = [at - created[eid] for (port, eid), at in received.items() if eid in created]
    span = max(received.values()) - min(created.values()) if received else float("nan")
    deadline = time.time() + 30  # the last outcomes are being recorded
    while (pending := WebhookDelivery.select().where(
            WebhookDelivery.status != "delivered").count()) and time.time() < deadline:
        time.sleep(0.05)
    return {"phase": name, "deliveries": len(expected), "received": len(received),
            "lost": len(lost), "duplicates": dupes,
            "attempts": int(attempts_made() - attempts_before), "not_delivered_rows": pending,
            "deliveries_per_s": len(received) / span if span else float("nan"),
            "lag_p50_ms": statistics.median(lags) * 1000 if lags else float("nan"),
            "lag_p99_ms": percentile(lags, 99) * 1000 if lags else float("nan"),
            "first_ms": (min(received.values()) - min(created.values())) * 1000
            if received else float("nan")}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--webhooks", type=int, default=4,
                        help="webhooks subscribed to every event, one receiver each")
    parser.add_argument("--rate", type=int, default=200, help="steady phase, events/s")
    parser.add_argument("--target", type=float, default=TARGET,
                        help="burst deliveries/s needed to pass")
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite")
    args = parser.parse_args()

    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=receiver_process, args=(child, args.webhooks), daemon=True)
    proc.start()
    receiver_urls, ca_path = parent.recv()

    from control_plane import events, scheduler
    from control_plane.app import create_app
    from control_plane.infra import migrate, secretbox
    from control_plane.models import Project, Webhook
    from control_plane.services.accounts import orgs
    from control_plane.services.webhooks import subscriptions

    data_dir = tempfile.mkdtemp(prefix="berth-bench-webhooks-")
    settings = {"DATA_DIR": data_dir, "SECRET_KEY": "bench", "WEBHOOK_ALLOW_PRIVATE": True,
                "WEBHOOK_CA_BUNDLE": ca_path}
    pg = None
    if args.database == "postgres":
        url = os.environ.get("CP_BENCH_POSTGRES_URL")
        if not url:
            from tests.support.services import Postgres

            pg = Postgres().start()
            url = pg.create_database("berth_bench")
        settings["DATABASE_URL"] = url
    app = create_app(settings)
    migrate.upgrade(app.extensions["berth"].db)
    settings = app.extensions["berth"].settings
    org = orgs.create_org(f"bench-{os.getpid()}")
    project = Project.create(organization=org, name="bench", default_branch="main")
    for url in receiver_urls:
        Webhook.create(organization=org, url=url + "/hook",
                       events=[events.Name.DEPLOY_COMPLETED.value],
                       secret_encrypted=secretbox.seal(subscriptions.new_secret(),
                                                       subscriptions.SECRET_PURPOSE))
    ports = [int(url.rsplit(":", 1)[1]) for url in receiver_urls]
    sched = scheduler.Scheduler(scheduler.jobs(Plain(settings))).start_in_thread()
    try:
        rows = [phase("burst", parent, org, project, ports, args.events, None),
                phase(f"steady {args.rate}/s", parent, org, project, ports, args.events,
                      args.rate)]
    finally:
        sched.stop()
        parent.send("stop")
        proc.join(10)
        shutil.rmtree(data_dir, ignore_errors=True)
        if pg is not None:
            pg.stop()
    cols = ["phase", "deliveries", "received", "lost", "duplicates", "attempts",
            "not_delivered_rows", "deliveries_per_s", "lag_p50_ms", "lag_p99_ms", "first_ms"]
    print(f"{args.events} events x {args.webhooks} webhook(s), "
          f"{args.database}")
    print(" | ".join(f"{c:>10}" for c in cols))
    for row in rows:
        print(" | ".join(f"{row[c]:>10.1f}" if isinstance(row[c], float) else f"{row[c]:>10}"
                         for c in cols))
    rate = rows[0]["deliveries_per_s"]
    exact = all(r["lost"] == 0 and r["duplicates"] == 0 and r["not_delivered_rows"] == 0
                and r["attempts"] == r["deliveries"] for r in rows)
    ok = rate >= args.target and exact
    print(f"{'PASS' if ok else 'FAIL'}: {rate:.0f} deliveries/s in the burst "
          f"(target >= {args.target:g}), {sum(r['lost'] for r in rows)} lost, "
          f"{sum(r['duplicates'] for r in rows)} duplicated, "
          f"{sum(r['attempts'] - r['deliveries'] for r in rows)} extra attempt(s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
